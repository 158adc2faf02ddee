// The control API on a real Vugpu (engine native, in this process) with the TS vfio-user client
// standing in for QEMU on a VM's socket: add / list / weight / policy / drain / remove, the
// refusals (exists, socket taken, no room, attached, pt), the root-only fence (file mode and
// SO_PEERCRED, checked with a process running as nobody), /v1 versioning, and the metrics and
// log line of every control action. `vugpu ctl` is exercised through its own entry point.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Vugpu } from '../../src/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { ControlCounters, registerServiceMetrics, startControlServer, type ControlServer } from '../../src/service/control.ts';
import { ControlClient, ctlMain, request } from '../../src/service/ctl.ts';
import { nodeBinary } from '../../src/vm/server-process.ts';
import { native } from '../../src/native.ts';

const MIB = 1 << 20;
let dir: string;
let v: Vugpu;
let control: ControlServer;
let api: ControlClient;
const logLines: Record<string, unknown>[] = [];

const sock = (n: string) => path.join(dir, `${n}.sock`);

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-control-'));
  fs.chmodSync(dir, 0o755);
  v = new Vugpu({ vms: [{ name: 'a', socket: sock('a'), mode: 'fv', slice: 64 * MIB }], vramSize: 256 * MIB, engine: 'native', policy: 'band' });
  const log = pino({ level: 'info' }, { write: (l: string) => logLines.push(JSON.parse(l) as Record<string, unknown>) });
  const counters = new ControlCounters();
  registerServiceMetrics(v, counters);
  control = await startControlServer(v, { path: sock('control'), log }, counters);
  api = new ControlClient(sock('control'));
});

afterAll(async () => {
  await control?.close();
  v?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function ctl(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await ctlMain(['--control-socket', sock('control'), ...args], (s) => (out += s), (s) => (err += s));
  return { code, out, err };
}

function counter(action: string, result: string): number {
  const s = v.metrics.renderPrometheus();
  const m = new RegExp(`^vugpu_control_requests_total\\{action="${action}",result="${result}"\\} (\\d+)$`, 'm').exec(s);
  return m ? Number(m[1]) : 0;
}

describe('control API', () => {
  it('status and list of the VMs started with the server', async () => {
    const st = await api.call('GET', '/v1');
    expect(st.programDevice).toBeNull();  // engine native
    expect(st).toMatchObject({ api: 'v1', pid: process.pid, policy: 'band', vms: 1, attached: 0 });
    // 256M VRAM - 16M host reserve = 240M of slices, 64M taken by a.
    expect(st.vram).toEqual({ totalBytes: 256 * MIB, sliceAreaBytes: 240 * MIB, freeBytes: 176 * MIB, largestFreeBytes: 176 * MIB });
    const r = await ctl('list');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^NAME\s+MODE\s+STATE\s+SLICE\s+WEIGHT\s+CLIENTS/);
    expect(r.out).toMatch(/\na\s+fv\s+idle\s+64M\s+1\s+0\s/);
  });

  it('add, weight, policy; the refusals are one sentence each and counted', async () => {
    const before = v.vms.get('a');
    let r = await ctl('add', 'b', '--socket', sock('b'), '--mode', 'pv-batch', '--slice', '32M', '--weight', '2');
    expect(r, r.err).toMatchObject({ code: 0, out: `VM b added: pv-batch, slice 32M, weight 2, socket ${sock('b')}\n` });
    expect(fs.statSync(sock('b')).isSocket()).toBe(true);
    expect(v.vms.get('a')).toBe(before); // the running VM was not touched
    expect(v.aggregator!.policy.state().vms.b?.weight).toBe(2);

    r = await ctl('add', 'b', '--socket', sock('x'));
    expect(r).toMatchObject({ code: 1, err: 'vugpu ctl add: a VM named b already exists.\n' });
    r = await ctl('add', 'c', '--socket', sock('a'));
    expect(r).toMatchObject({ code: 1, err: `vugpu ctl add: socket ${sock('a')} is already in use by VM a.\n` });
    r = await ctl('add', 'c', '--socket', sock('c'), '--slice', '256M');
    expect(r).toMatchObject({ code: 1, err: 'vugpu ctl add: VM c: no room for a 256 MiB VRAM slice (largest free: 144 MiB).\n' });
    expect(fs.existsSync(sock('c'))).toBe(false);
    const bad = await request(sock('control'), 'POST', '/v1/vms', { name: 'c', socket: sock('c'), mode: 'pt' });
    expect(bad.status).toBe(400);
    expect((bad.body.error as { message: string }).message).toBe('mode "pt": expected one of fv-naive, fv, pv or pv-batch');
    const unknown = await request(sock('control'), 'POST', '/v1/vms', { name: 'c', socket: sock('c'), sliceMiB: 64 });
    expect((unknown.body.error as { message: string }).message).toBe('unknown field sliceMiB (did you mean slice?)');

    r = await ctl('weight', 'b', '5');
    expect(r).toMatchObject({ code: 0, out: 'VM b weight 5\n' });
    expect(v.aggregator!.policy.state().vms.b?.weight).toBe(5);
    r = await ctl('weight', 'nope', '5');
    expect(r).toMatchObject({ code: 1, err: 'vugpu ctl weight: there is no VM named nope.\n' });

    r = await ctl('policy', 'credit');
    expect(r).toMatchObject({ code: 0, out: 'policy credit\n' });
    expect(v.aggregator!.policy.name).toBe('credit');
    // The VMs and their weights moved to the new policy.
    expect(Object.fromEntries(Object.entries(v.aggregator!.policy.state().vms).map(([k, s]) => [k, s.weight]))).toEqual({ a: 1, b: 5 });
    r = await ctl('policy', 'band', '--band-yield-us', '3000');
    expect(r.code).toBe(0);
    expect(v.aggregator!.policy.name).toBe('band');
    expect((v.aggregator!.policy.state() as unknown as { yieldNs: number }).yieldNs).toBe(3_000_000);

    expect(counter('add', 'ok')).toBe(1);
    expect(counter('add', 'exists')).toBe(1);
    expect(counter('add', 'conflict')).toBe(1);
    expect(counter('add', 'no-room')).toBe(1);
    expect(counter('add', 'invalid')).toBe(1);
    expect(counter('weight', 'ok')).toBe(1);
    expect(counter('policy', 'ok')).toBe(2);
    // One log line per action, refusals included.
    const adds = logLines.filter((l) => l.action === 'add');
    expect(adds.map((l) => l.result ?? 'ok')).toEqual(['ok', 'exists', 'conflict', 'no-room', 'invalid', 'unknown-field']);
    expect(adds[0]).toMatchObject({ vm: 'b', mode: 'pv-batch', sliceMiB: 32, weight: 2, msg: 'control: VM b added' });
    expect((adds[0]!.peer as { uid: number }).uid).toBe(process.geteuid!());
  });

  it('a VM with a client attached: remove is refused, drain waits for the client to go', async () => {
    const c = VfioUserClient.connect(sock('b'));
    await c.version();
    await expect.poll(async () => (await api.call('GET', '/v1/vms/b')).vm).toMatchObject({ state: 'attached', clients: 1 });
    let r = await ctl('remove', 'b');
    expect(r.code).toBe(1);
    expect(r.err).toBe('vugpu ctl remove: VM b has a QEMU attached: stop that guest first, drain the VM (it is removed when the guest goes), or force it (the guest loses its GPU).\n');
    expect(c.isClosed).toBe(false);
    r = await ctl('drain', 'b');
    expect(r).toMatchObject({ code: 0, out: 'VM b draining: it is removed when its QEMU goes\n' });
    expect((await api.call('GET', '/v1/vms/b')).vm).toMatchObject({ state: 'draining' });
    // The client keeps working while draining.
    const info = await c.getInfo();
    expect(info.numRegions).toBeGreaterThan(0);
    const waiting = ctl('drain', 'b', '--wait', '--timeout', '30');
    await new Promise((res) => setTimeout(res, 300));
    c.close();
    r = await waiting;
    expect(r.code, r.err).toBe(0);
    expect(fs.existsSync(sock('b'))).toBe(false);
    expect(v.vms.has('b')).toBe(false);
    expect(v.metrics.get('b')).toBeUndefined();
    expect(logLines.some((l) => l.msg === 'control: VM b draining (removed when its QEMU goes)')).toBe(true);
  });

  it('force-remove cuts an attached client off; the slice comes back', async () => {
    await api.call('POST', '/v1/vms', { name: 'c', socket: sock('c'), slice: '128M' });
    const c = VfioUserClient.connect(sock('c'));
    await c.version();
    const r = await ctl('remove', 'c', '--force');
    expect(r).toMatchObject({ code: 0, out: 'VM c removed (its QEMU lost the device)\n' });
    const reason = await c.closed;
    expect(reason.kind).toBe('eof');
    // The quarantined slice is released shortly after.
    await expect.poll(async () => ((await api.call('GET', '/v1')).vram as { freeBytes: number }).freeBytes, { timeout: 5000 }).toBe(176 * MIB);
    expect(counter('remove', 'ok')).toBe(1);
    expect(counter('remove', 'attached')).toBe(1);
  });

  it('the metrics families of a service', () => {
    const text = v.metrics.renderPrometheus();
    expect(text).toContain('# TYPE vugpu_control_requests_total counter');
    expect(text).toMatch(/^vugpu_vram_bytes\{kind="slice_free"\} \d+$/m);
    expect(text).toMatch(/^vugpu_vm_attached\{vm="a",state="idle"\} 0$/m);
    // engine native: no program device, so no completion polling asked for
    expect(text).toMatch(/^vugpu_completion_poll_budget_microseconds 0$/m);
    expect(text).toMatch(/^vugpu_completion_polls_total\{end="expired"\} \d+$/m);
    // the pool threads' polls after device tasks (counted process-wide)
    expect(text).toContain('# TYPE vugpu_pool_polls_total counter');
    expect(text).toMatch(/^vugpu_pool_polls_total\{end="job"\} \d+$/m);
    expect(text).toMatch(/^vugpu_pool_polls_total\{end="expired"\} \d+$/m);
    const json = v.metrics.snapshot();
    expect(json.families?.control_requests_total?.length).toBeGreaterThan(3);
  });

  it('a service with a program device counts its losses and rebuilds (/metrics, status)', async () => {
    // engine auto: lavapipe, which comes with the project's dependencies (scripts/ensure-deps.sh):
    // without a Vulkan device there is no program device, and this test fails rather than pass idle.
    const w = new Vugpu({ vms: [], vramSize: 64 * MIB, engine: 'auto' });
    const wControl = await startControlServer(w, { path: sock('control-w'), log: pino({ level: 'silent' }) }, new ControlCounters());
    try {
      const read = (name: string) => Number(new RegExp(`^vugpu_${name} (\\d+)$`, 'm').exec(w.metrics.renderPrometheus())?.[1]);
      expect(native.vulkanDevices().length, 'a Vulkan device (lavapipe: scripts/ensure-deps.sh)').toBeGreaterThan(0);
      expect(w.programs).not.toBeNull();
      const before = [read('program_device_losses_total'), read('program_device_rebuilds_total')];
      expect(before.every(Number.isFinite)).toBe(true);
      process.env.VUGPU_TEST_HOOKS = '1';
      try {
        expect(native.vulkanSimulateLoss()).toBe(true);
      } finally {
        delete process.env.VUGPU_TEST_HOOKS;
      }
      expect([read('program_device_losses_total'), read('program_device_rebuilds_total')]).toEqual([before[0]! + 1, before[1]! + 1]);
      expect(w.programDeviceHealth()).toMatchObject({ losses: before[0]! + 1, rebuilds: before[1]! + 1, lastLoss: 'simulated by a test hook' });
      let out = '';
      expect(await ctlMain(['--control-socket', sock('control-w'), 'status'], (x) => (out += x))).toBe(0);
      expect(out).toContain(`program device lost ${before[0]! + 1} time(s), rebuilt ${before[1]! + 1}; last: simulated by a test hook\n`);
    } finally {
      await wControl.close();
      w.close();
    }
  });

  it('versioned paths, methods and bodies', async () => {
    let a = await request(sock('control'), 'GET', '/v2/vms');
    expect(a).toMatchObject({ status: 404, body: { error: { code: 'not-found' } } });
    expect((a.body.error as { message: string }).message).toMatch(/this server speaks \/v1\//);
    a = await request(sock('control'), 'PATCH', '/v1/vms/a');
    expect(a.status).toBe(405);
    a = await request(sock('control'), 'PUT', '/v1/vms/a/weight', { weight: -1 });
    expect(a).toMatchObject({ status: 400 });
    expect((a.body.error as { message: string }).message).toBe('weight -1: expected a number greater than 0 and at most 1000000');
    a = await request(sock('control'), 'POST', '/v1/vms', 'not an object');
    expect(a.status).toBe(400);
  });

  it('root-only: the socket is 0600, and SO_PEERCRED refuses other users', async () => {
    expect(fs.statSync(sock('control')).mode & 0o777).toBe(0o600);
    const script = `import('${path.resolve(import.meta.dirname, '../../src/service/ctl.ts')}').then(async (m) => { const a = await m.request(process.argv[1], 'GET', '/v1/vms').catch((e) => ({ status: 0, body: { error: { message: e.message } } })); console.log(JSON.stringify(a)); })`;
    const asNobody = () => new Promise<{ status: number; body: { error?: { message: string } } }>((resolve, reject) => {
      execFile(nodeBinary(), ['--input-type=module', '-e', script, sock('control')], { uid: 65534, gid: 65534, cwd: '/' }, (err, stdout) => {
        if (err) reject(err);
        else resolve(JSON.parse(stdout) as { status: number; body: { error?: { message: string } } });
      });
    });
    // The file mode stops it at connect().
    let a = await asNobody();
    expect(a.status).toBe(0);
    expect(a.body.error?.message).toMatch(/permission denied: the control API is root-only/);
    // With the file opened up, the peer check still refuses.
    fs.chmodSync(sock('control'), 0o666);
    try {
      a = await asNobody();
    } finally {
      fs.chmodSync(sock('control'), 0o600);
    }
    expect(a.status).toBe(403);
    expect(a.body.error?.message).toBe('the control API is root-only (your uid is 65534)');
    expect(counter('denied', 'forbidden')).toBe(1);
  });

  it('a server started with a pt VM takes no other VM', async () => {
    const pt = new Vugpu({ vms: [{ name: 'p', socket: sock('p'), mode: 'pt' }], vramSize: 64 * MIB, engine: 'native' });
    try {
      expect(() => pt.addVm({ name: 'q', socket: sock('q'), mode: 'fv' })).toThrow('VM p has the whole GPU (mode pt): remove it before adding mediated VMs');
      expect(() => pt.setWeight('p', 2)).toThrow('VM p is in mode pt');
      pt.removeVm('p');
      const q = pt.addVm({ name: 'q', socket: sock('q'), mode: 'fv', slice: 16 * MIB });
      expect(q.slice).toBe(16 * MIB);
      expect(pt.listVms().map((x) => x.name)).toEqual(['q']);
    } finally {
      pt.close();
    }
  });
});
