// llama.cpp through the vugpu Vulkan driver across a live upgrade and across a SIGKILL + restart
// of `vugpu serve --state-dir`: one long-lived llama.cpp process (bench/lib/llama-worker.ts, the
// driver in the native twin) generates the same greedy tokens before and after `vugpu upgrade`
// (the application never sees the server change). After a SIGKILL + restart between two
// generations the same process may get VK_ERROR_DEVICE_LOST (its context comes back ENGINE_LOST
// from the runtime's recovery: the driver does not rebuild a VkDevice behind the application's
// back) — then it ends cleanly, and a new llama.cpp process on the restarted server generates the
// same tokens. No QEMU: the twin is the same driver over vfio-user.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { llamaModel, llamaModules, scratch } from '../../bench/lib/llama.ts';
import { KeeperClient } from '../../src/persist/keeper-client.ts';
import { nodeBinary } from '../../src/vm/server-process.ts';

const repo = path.resolve(import.meta.dirname, '../..');
const dir = scratch('vugpu-vk-restart-');
const children: ChildProcess[] = [];

function spawnLogged(cmd: string, args: string[], env: Record<string, string> = {}): { p: ChildProcess; out: string[] } {
  const p = spawn(cmd, args, { cwd: repo, env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(p);
  const out: string[] = [];
  for (const s of [p.stdout!, p.stderr!]) {
    let partial = '';
    s.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      out.push(...lines);
    });
  }
  return { p, out };
}

async function waitFor(what: string, out: string[], test: (l: string) => boolean, ms: number): Promise<string> {
  const t0 = Date.now();
  for (;;) {
    const hit = out.find(test);
    if (hit) return hit;
    if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms; last output:\n${out.slice(-20).join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  // the fd keeper outlives a killed server: end it
  const k = KeeperClient.tryConnect(path.join(dir, 'state', 'keeper.sock'));
  if (k) {
    try {
      await k.hello('control');
      process.kill((await k.status()).pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    } finally {
      k.close();
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('llama.cpp through the Vulkan driver survives the server', () => {
  it('same tokens before, after a live upgrade, and after SIGKILL + restart', async () => {
    const icd = path.join(dir, 'icd');
    const made = spawnSync('make', ['-s', '-C', path.join(repo, 'guest/vulkan'), 'host', `O=${icd}`], { encoding: 'utf8' });
    expect(made.status, `${made.stdout}${made.stderr}`).toBe(0);
    const state = path.join(dir, 'state');
    fs.mkdirSync(state);
    const socket = path.join(dir, 'vm.sock');
    const serveArgs = [path.join(repo, 'src/cli.ts'), 'serve', '--state-dir', state, '--vm', `name=vm,socket=${socket},mode=fv,slice=512M`,
      '--vram', '1G', '--watchdog-ms', '120000'];
    const serve = async () => {
      const s = spawnLogged(nodeBinary(), serveArgs);
      await waitFor('server ready', s.out, (l) => l.includes('"vugpu ready"'), 60_000);
      return s;
    };
    let server = await serve();
    const manifest = path.join(icd, 'vugpu_icd.json');
    const startWorker = async (what: string) => {
      const w = spawnLogged(nodeBinary(), [path.join(repo, 'bench/lib/llama-worker.ts'), '--modules', llamaModules(), '--model', llamaModel('tiny', 'f32'), '--gpu', 'vulkan', '--ctx', '256'],
        { VUGPU_SOCKET: socket, VK_DRIVER_FILES: manifest, VK_ICD_FILENAMES: manifest });
      await waitFor(what, w.out, (l) => l.startsWith('{"ready"'), 300_000);
      return w;
    };
    let id = 0;
    /** One greedy generation of 8 tokens from a fixed prompt: the worker's answer. */
    const request = async (w: { p: ChildProcess; out: string[] }, what: string): Promise<{ tokens?: number[]; error?: string; line: string }> => {
      const want = ++id;
      w.p.stdin!.write(`${JSON.stringify({ id: want, prompt: [1, 300, 301, 302, 303, 304], tokens: 8 })}\n`);
      const line = await waitFor(what, w.out, (l) => l.startsWith(`{"id":${want},`), 300_000);
      return { ...(JSON.parse(line) as { tokens?: number[]; error?: string }), line };
    };
    const worker = await startWorker('llama.cpp ready on the vugpu device');
    const generate = async (what: string): Promise<number[]> => {
      const r = await request(worker, what);
      expect(r.error, r.line).toBeUndefined();
      return r.tokens!;
    };
    const before = await generate('the first generation');
    expect(before).toHaveLength(8);

    const up = spawnSync(nodeBinary(), [path.join(repo, 'src/cli.ts'), 'upgrade', '--state-dir', state], { cwd: repo, encoding: 'utf8', timeout: 120_000 });
    expect(up.status, `${up.stdout}${up.stderr}\n${server.out.slice(-20).join('\n')}`).toBe(0);
    expect(await generate('after the live upgrade'), 'after the live upgrade').toEqual(before);

    // SIGKILL whichever process serves now (the upgrade's successor), then start it again
    const pid = Number(/pid (\d+)/.exec(up.stdout)?.[1] ?? 0);
    if (pid > 0) process.kill(pid, 'SIGKILL');
    else server.p.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 500));
    server = await serve();
    const r = await request(worker, 'generation after SIGKILL + restart');
    console.log(`after SIGKILL + restart, the same llama.cpp process: ${r.error ?? 'the same tokens'}`);
    if (r.error) expect(r.error, r.line).toMatch(/DeviceLost/);
    else expect(r.tokens).toEqual(before);
    worker.p.stdin!.end();
    // a new process on the restarted server: the same tokens
    const again = await request(await startWorker('a new llama.cpp process ready'), 'generation in a new process');
    expect(again.error, again.line).toBeUndefined();
    expect(again.tokens).toEqual(before);
  }, 900_000);
});
