// A libvirt-managed guest with a vugpu vGPU, under a REAL systemd and libvirtd (trixie's 257 and
// 11.3, booted as a container by scripts/hostsvc.sh on the project's rootfs): docs/libvirt.md's
// blocks run verbatim — vugpu.service with the libvirt drop-in, a VM added through `vugpu ctl`,
// the example domain XML (memfd shared RAM, vfio-user-pci through <qemu:commandline>) defined
// and started; the guest (QEMU run by libvirt as libvirt-qemu) runs verified benchmarks and
// powers off; started again, destroyed mid-run, started once more — all against the same vugpu
// process. Skipped (with the reason) only where the host cannot run a container at all.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { cleanLine, parseRecord, type GuestRecord } from '../../src/vm/console.ts';
import { loadManifest } from '../../src/vm/manifest.ts';
import { Container, cannotRun, ensureLayer, readmeBlock, until } from './hostsvc.ts';

const DOC = path.resolve(import.meta.dirname, '../../docs/libvirt.md');
const BENCHES = ['nop', 'madd', 'mmul', 'cpy', 'backprop', 'hotspot'];
const LOG = '/var/log/libvirt/qemu/vugpu-guest-serial.log';
const why = cannotRun();
let ct: Container | null = null;

describe.skipIf(why !== null)(`a libvirt domain with a vugpu vGPU${why ? ` (skipped: this host ${why})` : ''}`, () => {
  afterAll(async () => {
    if (ct) {
      if (process.env.VUGPU_TEST_VERBOSE) console.log((await ct.exec('journalctl', '--no-pager', '-n', '80', '-o', 'cat')).out);
      await ct.stop();
    }
  });

  test('define, start, run verified benchmarks, destroy mid-run, start again: one vugpu throughout', async () => {
    loadManifest(); // the kernel and initramfs the domain boots: `npm run setup`
    await ensureLayer();
    ct = await Container.start('libvirt');
    const c = ct;
    const block = (name: string) => c.sh(`cd /opt/vugpu && set -e\n${readmeBlock(name, DOC)}`);
    const records = (): GuestRecord[] => {
      const p = c.hostPath(LOG);
      if (!fs.existsSync(p)) return [];
      return fs.readFileSync(p, 'utf8').split('\n').map((l, i) => parseRecord(cleanLine(l), i)).filter((r): r is GuestRecord => r !== null);
    };
    const state = async () => (await c.sh('virsh domstate vugpu-guest')).trim();
    const context = async () => `${fs.existsSync(c.hostPath(LOG)) ? fs.readFileSync(c.hostPath(LOG), 'utf8').split('\n').slice(-30).join('\n') : '(no console log)'}\n--- qemu log\n${(await c.exec('sh', '-c', 'tail -n 30 /var/log/libvirt/qemu/vugpu-guest.log')).out}\n--- vugpu\n${(await c.exec('journalctl', '-u', 'vugpu', '--no-pager', '-n', '20', '-o', 'cat')).out}`;
    const expectVerifiedRun = async () => {
      await until(async () => (await state()) === 'shut off', 300_000, 'the guest to power off').catch(async (e: Error) => {
        throw new Error(`${e.message}\n${await context()}`);
      });
      const recs = records();
      const info = `${JSON.stringify(recs.map((r) => r.kind))}\n${await context()}`;
      const benches = recs.filter((r) => r.kind === 'BENCH').map((r) => r.data);
      expect(benches.map((b) => b.bench), info).toEqual(BENCHES);
      for (const b of benches) expect(b.ok === true && b.verified === true, `${JSON.stringify(b)}\n${info}`).toBe(true);
      expect(recs.find((r) => r.kind === 'EXIT')?.data.rc, info).toBe(0);
      expect(recs.filter((r) => r.kind === 'ERROR' || r.kind === 'PARSE_ERROR'), info).toEqual([]);
    };

    // 1. The service with the libvirt drop-in; a VM for the domain.
    const svc = await block('libvirt-service');
    expect(svc).toContain('VM guest0 added: fv, slice 256M');
    expect(svc).toMatch(/^srwxrwx--- 1 root libvirt-qemu .*\/run\/vugpu\/guest0\.sock$/m);
    const { MainPID } = await c.show('vugpu', 'MainPID');
    expect((await c.sh('ls -l /run/vugpu/control.sock'))).toMatch(/^srw------- 1 root libvirt-qemu/);

    // 2. Define and start: libvirt's QEMU (as libvirt-qemu) boots the guest, which runs the
    // benchmarks through the vGPU and powers off.
    const def = await block('libvirt-define');
    expect(def).toContain('Domain \'vugpu-guest\' defined');
    expect(def).toContain('Domain \'vugpu-guest\' started');
    // The user libvirt runs QEMU as (its pid file names the process).
    const qemuUser = (await c.sh('stat -c %U /proc/$(cat /run/libvirt/qemu/vugpu-guest.pid)')).trim();
    await expectVerifiedRun();
    expect(qemuUser).toBe('libvirt-qemu');
    const taint = await c.sh('grep -c "custom-argv" /var/log/libvirt/qemu/vugpu-guest.log || true');
    expect(Number(taint.trim())).toBeGreaterThan(0);

    // 3. Started again, destroyed mid-run (after the driver loaded, before the benchmarks end).
    await c.sh('virsh start vugpu-guest');
    await until(async () => records().some((r) => r.kind === 'PHASE' && r.data.phase === 'driver-loaded'), 180_000, 'the second boot to load the driver')
      .catch(async (e: Error) => { throw new Error(`${e.message}\n${await context()}`); });
    const destroyed = await block('libvirt-destroy');
    expect(destroyed).toContain('Domain \'vugpu-guest\' destroyed');
    expect(destroyed).toContain('shut off');
    expect(records().some((r) => r.kind === 'EXIT'), 'the destroy came after the guest had finished: nothing was interrupted').toBe(false);
    // vugpu saw the client go and kept the VM, idle, in the same process.
    await until(async () => /\nguest0\s+fv\s+idle\s/.test(await c.sh('vugpu ctl list')), 10_000, 'guest0 to be idle');
    expect(destroyed).toMatch(/\nguest0\s+fv\s+(idle|attached)\s+256M/);

    // 4. Start once more: a fresh guest on the same vGPU, against the same vugpu.
    await block('libvirt-start-again');
    await expectVerifiedRun();
    const after = await c.show('vugpu', 'MainPID', 'NRestarts', 'ActiveState');
    expect(after).toEqual({ MainPID, NRestarts: '0', ActiveState: 'active' });
    const vm = (JSON.parse(await c.sh('vugpu ctl list --json')) as { vms: { name: string; clients: number; counters: Record<string, number> }[] }).vms[0]!;
    expect(vm.name).toBe('guest0');
    expect(vm.clients).toBe(3); // three QEMUs, one after the other
    expect(vm.counters.faults).toBe(0);
  }, 900_000);
});
