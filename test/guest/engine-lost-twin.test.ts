// The guest driver core's ENGINE_LOST recovery (hw-spec §8.2) with the work it defers: the
// native twin runs `vugpu-bench recover` (a LOOP launch into a buffer whose clear, deferred at
// vgMemAlloc, rides in the same submission), and while the LOOP runs the engine fails its channel
// with ENGINE_LOST as a restart of vugpu does (src/gpu/persist.ts failLost). The context must
// report ENGINE_LOST once, rebind, clear the buffer again ahead of everything else on the fresh
// channel (class binds included: a rebound channel has no classes) and run the next LOOP exactly.
// The QEMU counterpart with a real SIGKILL is test/integration/restart.test.ts.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTwin } from './twin.ts';
import { Vugpu } from '../../src/server.ts';
import { failLost } from '../../src/gpu/persist.ts';
import { jobPool } from '../../src/gpu/jobs.ts';

const twin = useTwin('vugpu-lost-twin-');

describe('ENGINE_LOST under the native twin', () => {
  for (const [mode, pv] of [['pt', 0], ['fv', 0], ['pv-batch', 2]] as const) {
    it(`${mode}: the context reports ENGINE_LOST once, then runs again (a deferred clear in the lost work)`, async () => {
      const socket = path.join(twin.dir(), `${mode}.sock`);
      const server = new Vugpu({
        vramSize: 1 << 30, channels: 64, watchdogMs: 30_000, policy: 'fifo',
        vms: [{ name: 'vm', socket, mode, slice: mode === 'pt' ? undefined : 256 << 20 }],
      });
      try {
        const out = await new Promise<string>((resolve) => {
          const p = spawn(twin.bin(), ['recover', '--ms', '4000'], { env: { ...process.env, VUGPU_SOCKET: socket, VUGPU_PV: String(pv) } });
          let text = '';
          let fired = false;
          const onData = (d: Buffer) => {
            text += d.toString();
            if (!fired && text.includes('"phase":"recover-armed"')) {
              fired = true;
              // the LOOP is on the engine now: lose it, as a restart would. A restart's new
              // process serves nothing before the old one, and its jobs, are gone; here the old
              // job is only cancelled (the LOOP writes how far it got when it sees the cancel,
              // up to ~100 µs later, more on a loaded host), so nothing new starts until it ended.
              setTimeout(() => {
                const busy = server.engine.fifo.channels.filter((ch) => ch.bound && ch.error === 0).map((ch) => ch.chid);
                expect(busy.length).toBeGreaterThan(0);
                server.engine.cp.halt();
                failLost(server.engine, busy);
                const resume = (): void => {
                  if (jobPool.inFlight === 0) server.engine.cp.unhalt();
                  else setTimeout(resume, 1);
                };
                resume();
              }, 300);
            }
          };
          p.stdout.on('data', onData);
          p.stderr.on('data', onData);
          const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
          p.on('close', () => {
            clearTimeout(timer);
            resolve(text);
          });
        });
        const line = out.split('\n').find((l) => l.startsWith('VUGPU-CHECK '));
        expect(line, out).toBeDefined();
        const c = JSON.parse(line!.slice('VUGPU-CHECK '.length)) as Record<string, unknown>;
        expect(c, out).toMatchObject({ check: 'engine-lost-recovered', ok: true, again: 'VG_SUCCESS', copy: 'VG_SUCCESS', done: 100000 });
      } finally {
        server.close();
      }
    }, 120_000);
  }
});
