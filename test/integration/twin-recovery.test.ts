// The native twin rides through a server crash as a guest's kernel driver does (issue 34): a
// client of the host backend launches NOPs back to back (`vugpu-bench b2b --keep-going`, each
// launch synchronized) while `vugpu serve --state-dir` is SIGKILLed and started again with the
// same command line, several times. Each crash may cost the client the launch in flight (it
// reports ENGINE_LOST once), nothing more: the same context must carry on after every restart,
// and the client must end with its result line. The QEMU counterpart is restart.test.ts.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { KeeperClient } from '../../src/persist/keeper-client.ts';
import { nodeBinary } from '../../src/vm/server-process.ts';
import { useTwin } from '../guest/twin.ts';

const repo = path.resolve(import.meta.dirname, '../..');
const KILLS = 10;
const twin = useTwin('vugpu-twin-recovery-');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Proc {
  p: ChildProcess;
  out: string[];
  closed: Promise<number | null>;
}

function start(cmd: string, args: string[], env: Record<string, string> = {}): Proc {
  const p = spawn(cmd, args, { cwd: repo, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out: string[] = [];
  let partial = '';
  const onData = (d: Buffer) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop() ?? '';
    out.push(...lines);
  };
  p.stdout!.on('data', onData);
  p.stderr!.on('data', onData);
  const closed = new Promise<number | null>((resolve) => p.on('close', (code) => resolve(code)));
  return { p, out, closed };
}

/** Resolve once `test` holds for the output, or throw after ms (with the output's tail). */
async function until(what: string, proc: Proc, test: (out: string[]) => boolean, ms: number): Promise<void> {
  const t0 = Date.now();
  while (!test(proc.out)) {
    const gone = proc.p.exitCode !== null || proc.p.signalCode !== null;
    if (gone || Date.now() - t0 > ms) {
      throw new Error(`${what}: ${gone ? 'the process ended' : `not within ${ms} ms`}; last output:\n${proc.out.slice(-15).join('\n')}`);
    }
    await sleep(25);
  }
}

const progress = (out: string[]): number => {
  for (let i = out.length - 1; i >= 0; i--) {
    const m = /^VUGPU-PHASE (\{.*"phase":"b2b".*\})$/.exec(out[i]!);
    if (m) return (JSON.parse(m[1]!) as { done: number }).done;
  }
  return -1;
};

const records = (out: string[], kind: string): Record<string, unknown>[] =>
  out.filter((l) => l.startsWith(`${kind} `)).map((l) => JSON.parse(l.slice(kind.length + 1)) as Record<string, unknown>);

/** End the fd keeper of a state directory if one still answers (it outlives a killed server). */
async function stopKeeper(socket: string): Promise<void> {
  let pid = 0;
  try {
    pid = (await KeeperClient.statusAt(socket))?.pid ?? 0;
  } catch {
    // gone meanwhile
  }
  if (pid > 0) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

const procs: Proc[] = [];
afterAll(() => {
  for (const x of procs) if (x.p.exitCode === null && x.p.signalCode === null) x.p.kill('SIGKILL');
});

describe('native twin: a server crash costs at most the launch in flight', () => {
  for (const mode of ['pt', 'fv'] as const) {
    it(`${mode}: ${KILLS} SIGKILLs of serve --state-dir under back-to-back launches`, async () => {
      const dir = fs.mkdtempSync(path.join(twin.dir(), `${mode}-`));
      const socket = path.join(dir, 'vm.sock');
      const serveArgs = [
        path.join(repo, 'src/cli.ts'), 'serve', '--state-dir', dir,
        '--vm', `name=vm,socket=${socket},mode=${mode}${mode === 'pt' ? '' : ',slice=128M'}`,
        '--vram', '512M', '--engine', 'native', '--watchdog-ms', '20000',
      ];
      const servers: Proc[] = [];
      const serve = async (): Promise<Proc> => {
        const s = start(nodeBinary(), serveArgs);
        servers.push(s);
        procs.push(s);
        await until('server ready', s, (o) => o.some((l) => l.includes('"vugpu ready"')), 60_000);
        return s;
      };
      let server = await serve();
      const client = start(twin.bin(), ['b2b', '--keep-going', '--launches', '100000000'], { VUGPU_SOCKET: socket });
      procs.push(client);
      try {
        await until('client running', client, (o) => progress(o) > 0, 30_000);
        for (let k = 0; k < KILLS; k++) {
          await sleep(300 + Math.floor(Math.random() * 1200)); // somewhere in the launch stream
          server.p.kill('SIGKILL');
          await server.closed;
          const before = progress(client.out);
          server = await serve();
          // the client must move again on the restarted server, well past where it stood
          await until(`client moving after restart ${k + 1}`, client, (o) => progress(o) > before + 200, 30_000);
        }
      } finally {
        client.p.kill('SIGTERM');
        await Promise.race([client.closed, sleep(20_000)]);
        // a clean stop takes the fd keeper with it; one still answering after that is ended here
        server.p.kill('SIGTERM');
        await Promise.race([server.closed, sleep(10_000)]);
        server.p.kill('SIGKILL');
        await stopKeeper(path.join(dir, 'keeper.sock'));
      }
      const errors = records(client.out, 'VUGPU-B2B-ERROR');
      const result = records(client.out, 'VUGPU-B2B');
      const why = `client output (tail):\n${client.out.filter((l) => !l.startsWith('VUGPU-PHASE')).slice(-20).join('\n')}`;
      // what the restarts put the client's vfio-user stream through (refused accesses, stale replies)
      const notes = client.out.filter((l) => /^vugpu-host: (dropped|BAR0 .* refused)/.test(l));
      console.info(`${mode}: ${KILLS} kills, ${errors.length} launches lost, ${notes.length} refused accesses / stale replies${notes.length ? `:\n  ${notes.slice(0, 10).join('\n  ')}` : ''}`);
      expect(result, why).toHaveLength(1);
      const r = result[0]!;
      // every launch that failed was one in flight at a crash, reported as ENGINE_LOST
      expect(errors.length, why).toBeLessThanOrEqual(KILLS);
      for (const e of errors) expect(String(e.detail), why).toContain('ENGINE_LOST');
      expect(r.failed, why).toBe(errors.length);
      expect(r.contexts, why).toBe(1); // the same context carried on after every crash
      expect(r.ok, why).toBe(true);
      expect(Number(r.launches), why).toBeGreaterThan(KILLS * 200);
    }, 180_000);
  }
});
