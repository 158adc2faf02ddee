// `vugpu k8s-device-plugin` against a kubelet STAND-IN (no kubelet runs here): kubelet.ts plays
// the kubelet's side of the device-plugin API v1beta1 from the same official api.proto, with
// its own HTTP/2 gRPC code. Real peers otherwise: the real `vugpu serve` (its CLI) with a
// control socket, the plugin as its own process (its CLI), and a real QEMU guest booted on the
// socket that Allocate handed out, running verified benchmarks. Checked: registration (one
// resource per slot size, options), GetDevicePluginOptions, the ListAndWatch stream (Healthy
// slots; Unhealthy while vugpu is down; Healthy again), GetPreferredAllocation, Allocate (VM
// created through the control API, mount + env + CDI name; refused while the slot's QEMU is
// attached; reused after; unknown device refused), the CDI spec, re-registration after a kubelet
// restart, a clean stop.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { bootGuest, runGuest } from '../../src/vm/launcher.ts';
import { loadManifest } from '../../src/vm/manifest.ts';
import { nodeBinary, startServer, type ServerProcess } from '../../src/vm/server-process.ts';
import { LineSplitter } from '../../src/vm/console.ts';
import { ControlClient } from '../../src/service/ctl.ts';
import { GrpcStatusError, KubeletStandIn, type PluginConn } from './kubelet.ts';
import { readmeBlock } from './hostsvc.ts';

const CLI = path.resolve(import.meta.dirname, '../../src/cli.ts');
const MIB = 1 << 20;
let dir = '';
let server: ServerProcess | null = null;
let plugin: ChildProcess | null = null;
const pluginOut: string[] = [];
let kubelet: KubeletStandIn | null = null;
const conns: PluginConn[] = [];

type Msg = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function until(fn: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n--- plugin\n${pluginOut.slice(-20).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('Kubernetes device plugin (against a kubelet stand-in)', () => {
  afterAll(async () => {
    for (const c of conns) c.close();
    if (plugin && plugin.exitCode === null) plugin.kill('SIGKILL');
    await kubelet?.stop();
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('register, list and watch, allocate a slot that a real guest then uses, health, kubelet restart', async () => {
    const manifest = loadManifest();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-k8s-'));
    const kdir = path.join(dir, 'device-plugins');
    const sockets = path.join(dir, 'vugpu-k8s');
    const cdi = path.join(dir, 'cdi');
    const ctl = path.join(dir, 'control.sock');
    fs.mkdirSync(kdir);
    // 1G: 64M host + the canary's 512M leave room for every slot (2 x 64M + 128M).
    const serverArgs = ['--mode', 'fv', '--control-socket', ctl, '--engine', 'native', '--vram', '1G'];
    server = await startServer({ socket: path.join(dir, 'canary.sock'), args: serverArgs });
    await until(() => fs.existsSync(ctl), 30_000, 'the control socket');
    kubelet = new KubeletStandIn(kdir);
    await kubelet.start();

    // The README's command line, with this test's directories (the host's are not ours to use).
    const readme = readmeBlock('k8s').trim().split(/\s+/);
    expect(readme.slice(0, 2)).toEqual(['vugpu', 'k8s-device-plugin']);
    const args = readme.slice(2);
    args[args.indexOf('--cdi-dir') + 1] = cdi;
    plugin = spawn(nodeBinary(), [CLI, 'k8s-device-plugin', ...args, '--control-socket', ctl, '--kubelet-dir', kdir,
      '--socket-dir', sockets, '--health-ms', '300'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const lines = new LineSplitter((l) => pluginOut.push(l));
    plugin.stdout!.setEncoding('utf8').on('data', (c: string) => lines.push(c));
    plugin.stderr!.setEncoding('utf8').on('data', (c: string) => lines.push(c));

    // Registration: one resource per slot size, API version, the endpoint file name, options.
    const regs = await kubelet.registered(2);
    expect(regs).toEqual([
      { version: 'v1beta1', endpoint: 'vugpu-vgpu-64m.sock', resource_name: 'vugpu.io/vgpu-64m', options: { pre_start_required: false, get_preferred_allocation_available: true } },
      { version: 'v1beta1', endpoint: 'vugpu-vgpu-128m.sock', resource_name: 'vugpu.io/vgpu-128m', options: { pre_start_required: false, get_preferred_allocation_available: true } },
    ]);
    const p64 = kubelet.plugin('vugpu-vgpu-64m.sock');
    const p128 = kubelet.plugin('vugpu-vgpu-128m.sock');
    conns.push(p64, p128);
    expect(await p64.unary('GetDevicePluginOptions', {})).toEqual({ pre_start_required: false, get_preferred_allocation_available: true });

    // ListAndWatch: the slots, healthy (vugpu answers and has room), kept open.
    const lists: Msg[][] = [];
    const watch = p64.call('ListAndWatch', {}, (m) => lists.push(m.devices as Msg[]));
    await until(() => lists.length >= 1, 10_000, 'the first device list');
    expect(lists[0]!.map((d) => [d.ID, d.health])).toEqual([['vgpu-64m-0', 'Healthy'], ['vgpu-64m-1', 'Healthy']]);
    const list128: Msg[][] = [];
    const watch128 = p128.call('ListAndWatch', {}, (m) => list128.push(m.devices as Msg[]));
    await until(() => list128.length >= 1, 10_000, 'the 128M list');
    expect(list128[0]!.map((d) => [d.ID, d.health])).toEqual([['vgpu-128m-0', 'Healthy']]);

    // GetPreferredAllocation: must-include first, then the lowest-numbered.
    const pref = await p64.unary('GetPreferredAllocation', { container_requests: [
      { available_deviceIDs: ['vgpu-64m-1', 'vgpu-64m-0'], must_include_deviceIDs: [], allocation_size: 1 },
      { available_deviceIDs: ['vgpu-64m-0', 'vgpu-64m-1'], must_include_deviceIDs: ['vgpu-64m-1'], allocation_size: 2 },
    ] });
    expect(pref.container_responses.map((r: Msg) => r.deviceIDs)).toEqual([['vgpu-64m-0'], ['vgpu-64m-1', 'vgpu-64m-0']]);

    // Allocate: the slot's VM appears in vugpu; the pod gets the directory, env and a CDI name.
    const alloc = await p64.unary('Allocate', { container_requests: [{ devices_ids: ['vgpu-64m-0'] }] });
    const hostDir = path.join(sockets, 'vgpu-64m-0');
    expect(alloc.container_responses).toEqual([{
      envs: {
        VUGPU_DEVICES: 'vgpu-64m-0', VUGPU_SOCKET: '/var/run/vugpu/gpu0/vfio-user.sock', VUGPU_SOCKETS: '/var/run/vugpu/gpu0/vfio-user.sock',
        VUGPU_VRAM_BYTES: String(64 * MIB), VUGPU_MODE: 'fv',
      },
      mounts: [{ container_path: '/var/run/vugpu/gpu0', host_path: hostDir, read_only: false }],
      devices: [],
      annotations: { 'vugpu.io/devices': 'vgpu-64m-0' },
      cdi_devices: [{ name: 'vugpu.io/vgpu=vgpu-64m-0' }],
    }]);
    const api = new ControlClient(ctl);
    const vm = (await api.call('GET', '/v1/vms/k8s-vgpu-64m-0')).vm as Msg;
    expect(vm).toMatchObject({ name: 'k8s-vgpu-64m-0', mode: 'fv', state: 'idle', sliceBytes: 64 * MIB, socket: path.join(hostDir, 'vfio-user.sock') });
    const spec = JSON.parse(fs.readFileSync(path.join(cdi, 'vugpu.io-vgpu.json'), 'utf8')) as Msg;
    expect(spec.cdiVersion).toBe('0.6.0');
    expect(spec.kind).toBe('vugpu.io/vgpu');
    expect(spec.devices.map((d: Msg) => d.name)).toEqual(['vgpu-64m-0', 'vgpu-64m-1', 'vgpu-128m-0']);
    expect(spec.devices[0].containerEdits.mounts[0]).toEqual({ hostPath: hostDir, containerPath: '/var/run/vugpu/vgpu-64m-0', options: ['rbind', 'rw'] });

    // The "pod": a QEMU on the mounted socket (the host side of the mount) runs verified work.
    const g = bootGuest({ manifest, sockets: [path.join(hostDir, 'vfio-user.sock')], run: '/bin/sh', args: ['/opt/vugpu/bench-suite.sh', '--only', 'nop:madd:cpy:madd:cpy'], timeoutMs: 300_000 });
    expect((await g.waitFor((r) => r.kind === 'PHASE' && r.data.phase === 'driver-loaded')).kind, g.console.slice(-20).join('\n')).toBe('PHASE');
    // While that QEMU is attached, a second Allocate of the device is refused.
    const busy = await p64.unary('Allocate', { container_requests: [{ devices_ids: ['vgpu-64m-0'] }] }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(GrpcStatusError);
    expect((busy as GrpcStatusError).code).toBe(9); // FAILED_PRECONDITION
    expect((busy as Error).message).toContain('still has a QEMU attached');
    const r = await g.done;
    const info = `${r.console.slice(-30).join('\n')}\n${r.stderr.join('\n')}`;
    const benches = r.records.filter((x) => x.kind === 'BENCH').map((x) => x.data);
    expect(benches.map((b) => b.bench), info).toEqual(['nop', 'madd', 'cpy', 'madd', 'cpy']);
    expect(benches.every((b) => b.ok === true && b.verified === true), info).toBe(true);
    expect(r.guestExit, info).toBe(0);
    // The pod is gone: the next Allocate of that device reuses the VM (scrubbed on disconnect).
    await until(async () => ((await api.call('GET', '/v1/vms/k8s-vgpu-64m-0')).vm as Msg).state === 'idle', 10_000, 'the slot to be idle');
    const again = await p64.unary('Allocate', { container_requests: [{ devices_ids: ['vgpu-64m-0'] }] });
    expect(again.container_responses[0].envs.VUGPU_SOCKET).toBe('/var/run/vugpu/gpu0/vfio-user.sock');
    expect(((await api.call('GET', '/v1/vms')).vms as Msg[]).map((v) => v.name)).toEqual(['vm0', 'k8s-vgpu-64m-0']);
    // Unknown devices are refused, and a refused multi-device request creates nothing.
    const unknown = await p64.unary('Allocate', { container_requests: [{ devices_ids: ['vgpu-64m-1', 'vgpu-9g-0'] }] }).catch((e: unknown) => e);
    expect((unknown as GrpcStatusError).code).toBe(3); // INVALID_ARGUMENT
    expect(((await api.call('GET', '/v1/vms')).vms as Msg[]).map((v) => v.name)).toEqual(['vm0', 'k8s-vgpu-64m-0']);

    // A second guest on the other slot class, to show a 128M slot works too.
    const a128 = await p128.unary('Allocate', { container_requests: [{ devices_ids: ['vgpu-128m-0'] }] });
    const g2 = await runGuest({ manifest, sockets: [a128.container_responses[0].mounts[0].host_path + '/vfio-user.sock'], run: '/bin/sh', args: ['/opt/vugpu/bench-suite.sh', '--only', 'nop:mmul'], timeoutMs: 300_000 });
    expect(g2.records.filter((x) => x.kind === 'BENCH').map((x) => x.data.verified), g2.console.slice(-20).join('\n')).toEqual([true, true]);

    // vugpu down: every slot Unhealthy on the stream; back up: Healthy again.
    await server.stop();
    await until(() => lists.at(-1)!.every((d) => d.health === 'Unhealthy'), 15_000, 'slots to turn Unhealthy');
    server = await startServer({ socket: path.join(dir, 'canary.sock'), args: serverArgs });
    await until(() => lists.at(-1)!.every((d) => d.health === 'Healthy'), 30_000, 'slots to turn Healthy again');

    // The kubelet restarts: it removes the plugin sockets and makes a new kubelet.sock; the
    // plugin serves again and registers again.
    watch.cancel();
    watch128.cancel();
    await kubelet.stop();
    for (const f of fs.readdirSync(kdir)) fs.rmSync(path.join(kdir, f), { force: true });
    await kubelet.start();
    await kubelet.registered(4);
    expect(kubelet.registrations.slice(2).map((x) => x.resource_name).sort()).toEqual(['vugpu.io/vgpu-128m', 'vugpu.io/vgpu-64m']);
    const p64b = kubelet.plugin('vugpu-vgpu-64m.sock');
    conns.push(p64b);
    const after: Msg[][] = [];
    p64b.call('ListAndWatch', {}, (m) => after.push(m.devices as Msg[]));
    await until(() => after.length >= 1, 10_000, 'a device list after the kubelet restart');
    expect(after[0]!.map((d) => d.ID)).toEqual(['vgpu-64m-0', 'vgpu-64m-1']);

    // Stop: the plugin leaves no socket behind.
    plugin.kill('SIGTERM');
    await new Promise((res) => plugin!.once('exit', res));
    expect(plugin.exitCode, pluginOut.slice(-20).join('\n')).toBe(0);
    expect(fs.readdirSync(kdir).sort()).toEqual(['kubelet.sock']);
    expect(pluginOut.filter((l) => l.includes('"level":50')), pluginOut.join('\n')).toEqual([]);
  }, 900_000);
});
