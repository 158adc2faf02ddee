// vugpu as a systemd service, under a REAL systemd (257, trixie) booted as a container on the
// project's rootfs (scripts/hostsvc.sh; no host systemd needed): the README's install lines and
// control commands run verbatim; Type=notify readiness; a real QEMU guest (on the host, through
// /proc/<init>/root) runs verified benchmarks against the service; the hardening is in force
// (no capabilities, NoNewPrivs, seccomp, read-only system); a SIGKILL is restarted
// (Restart=on-failure); a hung process is caught by the watchdog and restarted; the journal has
// the JSON log; stop is clean. Skipped (with the reason) only where the host cannot run a
// container at all (not root, no cgroup2); a missing setup or package layer fails.
import fs from 'node:fs';
import { afterAll, describe, expect, test } from 'vitest';
import { runGuest } from '../../src/vm/launcher.ts';
import { loadManifest } from '../../src/vm/manifest.ts';
import { vfioErrorLines } from '../../src/vm/console.ts';
import { Container, cannotRun, ensureLayer, readmeBlock, until } from './hostsvc.ts';

const why = cannotRun();
let ct: Container | null = null;

describe.skipIf(why !== null)(`vugpu under a real systemd${why ? ` (skipped: this host ${why})` : ''}`, () => {
  afterAll(async () => {
    if (ct) {
      // What happened, for a failure's post-mortem.
      const j = await ct.exec('journalctl', '-u', 'vugpu', '--no-pager', '-n', '40', '-o', 'short-monotonic');
      if (process.env.VUGPU_TEST_VERBOSE) console.log(j.out);
      await ct.stop();
    }
  });

  test('install from the README, control it, serve a guest, survive SIGKILL and a hang, stop cleanly', async () => {
    const manifest = loadManifest();
    await ensureLayer();
    ct = await Container.start('systemd');
    const c = ct;

    // The README's install lines, verbatim (in the checkout, which is /opt/vugpu inside).
    await c.sh(`cd /opt/vugpu && set -e\n${readmeBlock('systemd-install')}`);
    // Type=notify: `systemctl start` returned after READY=1, so it is active now, with our status.
    let p = await c.show('vugpu', 'ActiveState', 'SubState', 'Type', 'StatusText', 'MainPID', 'WatchdogUSec', 'NRestarts', 'FileDescriptorStoreMax');
    expect(p).toMatchObject({
      ActiveState: 'active', SubState: 'running', Type: 'notify', WatchdogUSec: '10s', NRestarts: '0', FileDescriptorStoreMax: '4096',
      StatusText: 'serving 0 VMs, control /run/vugpu/control.sock',
    });
    const pid1 = Number(p.MainPID);

    // Hardening in force: no capabilities, no new privileges, a seccomp filter, / read-only.
    const status = fs.readFileSync(c.hostPath(`/proc/${pid1}/status`), 'utf8');
    expect(status).toMatch(/^CapBnd:\s+0000000000000000$/m);
    expect(status).toMatch(/^CapEff:\s+0000000000000000$/m);
    expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(status).toMatch(/^Seccomp:\s+2$/m);
    const mounts = await c.sh(`cat /proc/${pid1}/mountinfo`);
    expect(mounts).toMatch(/^\S+ \S+ \S+ \S+ \/ ro[, ]/m);
    const security = await c.sh('systemd-analyze security vugpu --no-pager | tail -1');
    const exposure = Number(/exposure level for vugpu\.service: ([\d.]+)/.exec(security)?.[1]);
    expect(exposure, security).toBeLessThan(3);
    // Mesa's shader cache: the service's own cache directory (not the setup cache), in its env.
    expect((await c.sh('stat -c %F /var/cache/vugpu-shaders')).trim()).toBe('directory');
    expect(fs.readFileSync(c.hostPath(`/proc/${pid1}/environ`), 'utf8').split('\0')).toContain('MESA_SHADER_CACHE_DIR=/var/cache/vugpu-shaders');

    // The README's control lines, verbatim (the VM they add is drained at the end of them).
    const ctl = await c.sh(`set -e\n${readmeBlock('ctl')}`);
    expect(ctl).toContain('VM vm0 added: fv, slice 256M, weight 1, socket /run/vugpu/vm0.sock');
    expect(ctl).toMatch(/\nvm0\s+fv\s+idle\s+256M\s+1\s+0\s/);
    expect(ctl).toContain('policy credit');
    expect(ctl).toContain('VM vm0 removed (no QEMU was attached)');

    // A guest on the host, through the container's /run/vugpu: verified benchmarks.
    await c.sh('vugpu ctl add g --socket /run/vugpu/g.sock --slice 128M');
    const sock = c.hostPath('/run/vugpu/g.sock');
    expect(fs.statSync(sock).mode & 0o777).toBe(0o700); // UMask=0077: root only without the libvirt drop-in
    const g = await runGuest({ manifest, sockets: [sock], run: '/bin/sh', args: ['/opt/vugpu/bench-suite.sh', '--only', 'nop:madd:cpy'], timeoutMs: 300_000 });
    const info = `${g.console.slice(-30).join('\n')}\n${g.stderr.join('\n')}`;
    const benches = g.records.filter((r) => r.kind === 'BENCH').map((r) => r.data);
    expect(benches.map((b) => b.bench), info).toEqual(['nop', 'madd', 'cpy']);
    expect(benches.every((b) => b.ok === true && b.verified === true), info).toBe(true);
    expect(g.guestExit, info).toBe(0);
    expect(vfioErrorLines(g.stderr), info).toEqual([]);
    const list = JSON.parse(await c.sh('vugpu ctl list --json')) as { vms: { name: string; clients: number; counters: Record<string, number> }[] };
    expect(list.vms[0]).toMatchObject({ name: 'g', clients: 1 });
    expect(list.vms[0]!.counters.doorbells).toBeGreaterThan(0);

    // SIGKILL: Restart=on-failure brings it back (a new process, the configured state).
    let seen: Record<string, string> = {};
    const restarted = (old: number, n: number) => async () => {
      seen = await c.show('vugpu', 'ActiveState', 'SubState', 'MainPID', 'NRestarts', 'Result');
      return seen.ActiveState === 'active' && Number(seen.MainPID) !== old && seen.NRestarts === String(n);
    };
    const journalTail = async () => `${JSON.stringify(seen)}\n${(await c.exec('journalctl', '-u', 'vugpu', '--no-pager', '-n', '30', '-o', 'cat')).out}`;
    await c.sh(`kill -9 ${pid1}`);
    await until(restarted(pid1, 1), 60_000, 'the restart after SIGKILL').catch(async (e: Error) => {
      throw new Error(`${e.message}\n${await journalTail()}`);
    });
    expect(await c.sh('vugpu ctl status')).toMatch(/^vugpu pid \d+, API v1, policy fair/);
    p = await c.show('vugpu', 'MainPID');
    const pid2 = Number(p.MainPID);

    // A hang (SIGSTOP stands in for a stuck event loop): no pings for the shipped WatchdogSec
    // (10 s), so systemd kills it (SIGABRT) and restarts it.
    await c.sh(`kill -STOP ${pid2}`);
    await until(restarted(pid2, 2), 60_000, 'the restart after the watchdog timeout').catch(async (e: Error) => {
      throw new Error(`${e.message}\n${await journalTail()}`);
    });
    const journal = await c.sh('journalctl -u vugpu --no-pager -o cat');
    expect(journal).toMatch(/vugpu\.service: Main process exited, code=killed, status=9\/KILL/);
    expect(journal).toContain('vugpu.service: Watchdog timeout (limit 10s)!');
    expect(journal).toMatch(new RegExp(`Killing process ${pid2} \\(\\S+\\) with signal SIGABRT`));
    expect(journal).toMatch(/vugpu\.service: Failed with result 'watchdog'/);
    // Logs: JSON lines in the journal, one "vugpu ready" per start (3 starts), systemd noticed.
    const ready = journal.split('\n').filter((l) => l.startsWith('{') && l.includes('"msg":"vugpu ready"')).map((l) => JSON.parse(l) as { systemd: boolean });
    expect(ready).toHaveLength(3);
    expect(ready.every((r) => r.systemd)).toBe(true);

    // Stop: clean exit, the runtime directory goes.
    await c.sh('systemctl stop vugpu');
    p = await c.show('vugpu', 'ActiveState', 'Result', 'ExecMainStatus');
    expect(p).toMatchObject({ ActiveState: 'inactive', Result: 'success', ExecMainStatus: '0' });
    expect((await c.exec('test', '-e', '/run/vugpu')).code).toBe(1);
  }, 900_000);
});
