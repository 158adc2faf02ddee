// llama.cpp through the vugpu Vulkan driver across a live upgrade and across SIGKILL + restart of
// `vugpu serve --state-dir`: ONE llama.cpp process (guest/vkapp/llama-worker.ts, model loaded
// once) generates the same greedy tokens before and after each of them — in the native twin (the
// driver in a host process over vfio-user) and in an fv guest (QEMU, the kernel driver, the
// application layer), each against the tokens of llama.cpp's CPU backend.
//
// What a restart does to the VkDevice (docs/vulkan.md, "Surviving a server restart"): VRAM lives
// in the keeper's memfd, so finished work survives. A channel the restarted server cannot vouch
// for is failed with ENGINE_LOST (hw-spec §8.2) — every channel that had work in flight, and every
// channel the engine had kicked since the last checkpoint, even if that work had finished. The
// driver core tells the two apart by its fences: with every fence passed nothing was lost, the
// channel is rebound at the next submission and the application never hears of it; with work in
// flight the loss is reported once and the driver loses that VkDevice (VK_ERROR_DEVICE_LOST: its
// results are undefined). The tests force the idle case (the restart's journal marks every
// channel as kicked, as after a kill right behind the last completion) and, on the twin, kill in
// the middle of a generation: the tokens are then the same or the device is lost, never others.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { llamaModel, llamaModules, scratch } from '../../bench/lib/llama.ts';
import { KeeperClient } from '../../src/persist/keeper-client.ts';
import { vfioErrorLines } from '../../src/vm/console.ts';
import { bootGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest } from '../../src/vm/manifest.ts';
import { nodeBinary } from '../../src/vm/server-process.ts';

const repo = path.resolve(import.meta.dirname, '../..');
const WORKER = path.join(repo, 'guest/vkapp/llama-worker.ts');
const PROMPT = [1, 300, 301, 302, 303, 304];
const TOKENS = 8;
const dirs: string[] = [];
const children: ChildProcess[] = [];

interface Logged { p: ChildProcess; out: string[] }
interface Answer { tokens?: number[]; error?: string; promptMs?: number; genMs?: number; line: string }

/** A child whose stdout and stderr lines go to its `out` (and to `also`, if given). */
function spawnLogged(cmd: string, args: string[], env: Record<string, string> = {}, also?: string[]): Logged {
  const p = spawn(cmd, args, { cwd: repo, env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(p);
  const out: string[] = [];
  for (const s of [p.stdout!, p.stderr!]) {
    let partial = '';
    s.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      out.push(...lines);
      also?.push(...lines);
    });
  }
  return { p, out };
}

/** pid has exited (gone, or a zombie nobody reaped yet). */
function exited(pid: number): boolean {
  try {
    return / Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\)/, ''));
  } catch {
    return true;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The first line of out that test accepts; throws after ms, or when `gone` says the writer died. */
async function waitFor(what: string, out: string[], test: (l: string) => boolean, ms: number, gone?: () => boolean): Promise<string> {
  const t0 = Date.now();
  for (;;) {
    const hit = out.find(test);
    if (hit) return hit;
    if (gone?.()) throw new Error(`${what}: the process ended first; last output:\n${out.slice(-20).join('\n')}`);
    if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms; last output:\n${out.slice(-20).join('\n')}`);
    await sleep(50);
  }
}

/**
 * `vugpu serve --state-dir` with one VM, started, upgraded, SIGKILLed and started again (a cold
 * restart: the same command line adopts the VM from the keeper). `log` holds every line of every
 * generation this test started (an upgrade's successor writes where its predecessor did).
 */
class Restartable {
  readonly state: string;
  readonly socket: string;
  readonly log: string[] = [];
  private readonly args: string[];

  constructor(dir: string, mode: string) {
    this.state = path.join(dir, 'state');
    fs.mkdirSync(this.state);
    this.socket = path.join(dir, 'vm.sock');
    this.args = [path.join(repo, 'src/cli.ts'), 'serve', '--state-dir', this.state, '--vm', `name=vm,socket=${this.socket},mode=${mode},slice=512M`,
      '--vram', '1G', '--watchdog-ms', '120000'];
  }

  async start(): Promise<void> {
    const s = spawnLogged(nodeBinary(), this.args, {}, this.log);
    await waitFor('server ready', s.out, (l) => l.includes('"vugpu ready"'), 60_000, () => s.p.exitCode !== null);
  }

  /** `vugpu upgrade`: a successor takes over, the guest is paused for a moment. */
  upgrade(): void {
    const up = spawnSync(nodeBinary(), [path.join(repo, 'src/cli.ts'), 'upgrade', '--state-dir', this.state], { cwd: repo, encoding: 'utf8', timeout: 120_000 });
    expect(up.status, `${up.stdout}${up.stderr}\n${this.tail()}`).toBe(0);
    expect(up.stdout).toMatch(/guests paused/);
  }

  private async keeper<T>(f: (k: KeeperClient, st: Awaited<ReturnType<KeeperClient['status']>>) => T): Promise<T> {
    const k = KeeperClient.tryConnect(path.join(this.state, 'keeper.sock'));
    if (!k) throw new Error(`no fd keeper answers\n${this.tail()}`);
    try {
      await k.hello('control');
      return f(k, await k.status());
    } finally {
      k.close();
    }
  }

  /** SIGKILL whichever process serves now; with everyChannelKicked, the journal then says the
   * engine had kicked every channel since the last checkpoint (the restart fails them all). */
  async kill(everyChannelKicked = false): Promise<void> {
    // Right after an upgrade the keeper may still name the predecessor as its server while the
    // successor already holds the fds: kill every serve process the keeper knows, so that the
    // start after it adopts instead of finding the survivor ("another vugpu serve holds …").
    // Until the keeper names a live server (an upgrade's predecessor exits as the keeper moves on).
    let pids: number[] = [];
    let keeper = 0;
    for (let i = 0; i < 200; i++) {
      const st = await this.keeper((_k, x) => x);
      keeper = st.pid;
      pids = [st.server, st.successor, st.standby].filter((p): p is number => !!p && !exited(p));
      if (st.server && !exited(st.server) && !st.successor) break;
      await sleep(50);
    }
    expect(pids.length, this.tail()).toBeGreaterThan(0);
    for (const pid of pids) try { process.kill(pid, 'SIGKILL'); } catch { /* gone meanwhile */ }
    for (let i = 0; i < 100 && !pids.every(exited); i++) await sleep(50);
    expect(pids.every(exited)).toBe(true);
    // And until the keeper has seen its server go: a start before that is refused as a second server.
    for (let i = 0; i < 200; i++) {
      const st = await this.keeper((_k, x) => x);
      if (!st.server) break;
      if (!exited(st.server)) try { process.kill(st.server, 'SIGKILL'); } catch { /* gone meanwhile */ }
      await sleep(50);
    }
    if (everyChannelKicked) markEveryChannelKicked(keeper);
  }

  /** The adoption record of the last cold restart. */
  lastAdoption(): { lostChannels: number[] } | undefined {
    for (const l of [...this.log].reverse()) {
      if (!l.includes('"restart-adopted"')) continue;
      return JSON.parse(l) as { lostChannels: number[] };
    }
    return undefined;
  }

  errorLines(): string[] {
    return this.log.filter((l) => /^\{/.test(l) && /"level":(5\d|60)/.test(l));
  }

  tail(n = 20): string {
    return this.log.slice(-n).join('\n');
  }

  async close(): Promise<void> {
    // the keeper outlives a killed server: end the server it knows, then the keeper
    try {
      await this.keeper((_k, st) => {
        for (const pid of [st.server, st.successor, st.standby, st.pid]) if (pid) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      });
    } catch {
      // no keeper
    }
  }
}

/** The journal memfd the keeper holds (docs/checkpoint.md): set every channel's "the engine may
 * have started work since the last checkpoint" byte, as a kill right behind a kick leaves it. */
function markEveryChannelKicked(keeperPid: number): void {
  for (const e of fs.readdirSync(`/proc/${keeperPid}/fd`)) {
    let target = '';
    try {
      target = fs.readlinkSync(`/proc/${keeperPid}/fd/${e}`);
    } catch {
      continue;
    }
    if (!target.includes('memfd:vugpu-journal')) continue;
    const fd = fs.openSync(`/proc/${keeperPid}/fd/${e}`, 'r+');
    try {
      const head = Buffer.alloc(20);
      fs.readSync(fd, head, 0, 20, 0);
      expect(head.subarray(0, 8).toString('latin1')).toBe('VUGPUJNL');
      const channels = head.readUInt32LE(16); // from offset 64, a byte each
      expect(channels).toBeGreaterThan(0);
      fs.writeSync(fd, Buffer.alloc(channels, 1), 0, channels, 64);
    } finally {
      fs.closeSync(fd);
    }
    return;
  }
  throw new Error(`keeper ${keeperPid} holds no journal memfd`);
}

/** The CPU backend's tokens for the prompt: the reference every generation must equal. */
async function cpuTokens(): Promise<number[]> {
  const w = spawnLogged(nodeBinary(), [WORKER, '--modules', llamaModules(), '--model', llamaModel('tiny', 'f32'), '--gpu', 'cpu', '--ctx', '256']);
  await waitFor('llama.cpp (CPU) ready', w.out, (l) => l.startsWith('{"ready"'), 120_000, () => w.p.exitCode !== null);
  w.p.stdin!.end(`${JSON.stringify({ id: 1, prompt: PROMPT, tokens: TOKENS })}\n`);
  const r = JSON.parse(await waitFor('CPU generation', w.out, (l) => l.startsWith('{"id":1,'), 120_000)) as Answer;
  expect(r.tokens, JSON.stringify(r)).toHaveLength(TOKENS);
  return r.tokens!;
}

afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('llama.cpp through the Vulkan driver (native twin) survives the server', () => {
  it('one process: the CPU tokens before, after a live upgrade, after SIGKILL + restart, after a restart that fails its idle channel; a kill mid-generation costs at most the device', async () => {
    const dir = scratch('vugpu-vk-restart-');
    dirs.push(dir);
    const icd = path.join(dir, 'icd');
    const made = spawnSync('make', ['-s', '-C', path.join(repo, 'guest/vulkan'), 'host', `O=${icd}`], { encoding: 'utf8' });
    expect(made.status, `${made.stdout}${made.stderr}`).toBe(0);
    const reference = await cpuTokens();
    const server = new Restartable(dir, 'fv');
    try {
      await server.start();
      const manifest = path.join(icd, 'vugpu_icd.json');
      const startWorker = async (what: string): Promise<Logged> => {
        const w = spawnLogged(nodeBinary(), [WORKER, '--modules', llamaModules(), '--model', llamaModel('tiny', 'f32'), '--gpu', 'vulkan', '--ctx', '256'],
          { VUGPU_SOCKET: server.socket, VK_DRIVER_FILES: manifest, VK_ICD_FILENAMES: manifest });
        await waitFor(what, w.out, (l) => l.startsWith('{"ready"'), 300_000, () => w.p.exitCode !== null);
        return w;
      };
      let id = 0;
      /** One greedy generation; an answer, or the process's end (llama.cpp may abort on a lost device). */
      const request = async (w: Logged, what: string, tokens = TOKENS): Promise<Answer> => {
        const want = ++id;
        w.p.stdin!.write(`${JSON.stringify({ id: want, prompt: PROMPT, tokens })}\n`);
        try {
          return { ...(JSON.parse(await waitFor(what, w.out, (l) => l.startsWith(`{"id":${want},`), 300_000, () => w.p.exitCode !== null || w.p.signalCode !== null)) as Answer), line: '' };
        } catch (e) {
          if (w.p.exitCode === null && w.p.signalCode === null) throw e;
          return { error: `llama.cpp ended (${w.p.exitCode ?? w.p.signalCode}): ${w.out.filter((l) => /lost|Lost|LOST/.test(l)).slice(-3).join(' | ')}`, line: w.out.slice(-10).join('\n') };
        }
      };
      const generate = async (w: Logged, what: string): Promise<number[]> => {
        const r = await request(w, what);
        expect(r.error, `${what}: ${r.line}\n${server.tail()}`).toBeUndefined();
        return r.tokens!;
      };
      const worker = await startWorker('llama.cpp ready on the vugpu device');
      const before = await generate(worker, 'the first generation');
      expect(before, 'the vugpu device and the CPU backend').toEqual(reference);

      server.upgrade();
      expect(await generate(worker, 'after the live upgrade'), 'after the live upgrade').toEqual(reference);

      await server.kill();
      await server.start();
      expect(await generate(worker, 'after SIGKILL + restart'), 'after SIGKILL + restart').toEqual(reference);

      await server.kill(true);
      await server.start();
      expect(server.lastAdoption()?.lostChannels.length, 'the restart failed the idle channel (ENGINE_LOST)').toBeGreaterThan(0);
      expect(await generate(worker, 'after a restart that failed the idle channel'), 'after a restart that failed the idle channel').toEqual(reference);
      // the driver core rebound the channel by itself (its warning on stderr), and lost nothing
      expect(worker.out.filter((l) => l.includes('recovered from ENGINE_LOST')).length, worker.out.slice(-20).join('\n')).toBeGreaterThan(0);
      expect(worker.out.filter((l) => /device lost/i.test(l)), worker.out.slice(-20).join('\n')).toEqual([]);

      // Mid-generation: the tokens of a longer generation, then the same one with a kill about
      // halfway through it. Work in flight is lost (the device with it); work that finished is
      // not, and a kill between two submissions loses nothing: never tokens other than these.
      const long = await request(worker, 'a longer generation', 4 * TOKENS);
      expect(long.error, long.line).toBeUndefined();
      const halfway = Math.max(5, ((long.promptMs ?? 0) + (long.genMs ?? 0)) / 2);
      const cut = request(worker, 'a generation cut by SIGKILL', 4 * TOKENS);
      await sleep(halfway);
      await server.kill(true);
      await server.start();
      const r = await cut;
      console.log(`SIGKILL ${Math.round(halfway)} ms into a generation, the same llama.cpp process: ${r.error ?? 'the same tokens'}`);
      if (r.error) expect(r.error, r.line).toMatch(/DeviceLost|DEVICE_LOST|device lost/i);
      else expect(r.tokens).toEqual(long.tokens);
      worker.p.stdin!.end();
      // a new process on the restarted server: the same tokens
      expect(await generate(await startWorker('a new llama.cpp process ready'), 'generation in a new process')).toEqual(reference);
      expect(server.errorLines(), server.tail()).toEqual([]);
    } finally {
      await server.close();
    }
  }, 900_000);
});

describe('llama.cpp in an fv guest survives the server', () => {
  it('one process: the CPU tokens before, after a live upgrade, after SIGKILL + restart, after a restart that fails its idle channel', async () => {
    const m = loadManifest();
    expect(m.vkapp, 'no application image: run npm run setup').toBeTruthy();
    expect(m.guestFiles).toContain('/opt/vugpu/llama-worker.ts');
    const dir = scratch('vugpu-vk-restart-guest-');
    dirs.push(dir);
    const reference = await cpuTokens();
    const server = new Restartable(dir, 'fv');
    const ctl = path.join(dir, 'ctl.sock');
    let conn: net.Socket | undefined;
    try {
      await server.start();
      // The worker's requests come on the guest's second serial port, a socket here: the test
      // says when the next generation runs.
      const vm = bootGuest({
        manifest: m, sockets: [server.socket], appImage: true, memoryMiB: 1024, timeoutMs: 840_000,
        append: ['loglevel=5'], // the kernel driver's warnings (a rebound channel) on the console
        run: '/opt/vugpu/vkapp.sh', args: ['worker', 'tiny', 'vulkan', '256'],
        qemuArgs: ['-chardev', `socket,id=vgctl,path=${ctl},server=on,wait=off`, '-serial', 'chardev:vgctl'],
      });
      const context = (): string => [...vm.console.slice(-30), '--- server', server.tail()].join('\n');
      const ready = await vm.waitFor((r) => r.kind === 'LLAMA_WORKER' || r.kind === 'ERROR');
      expect(ready.data, context()).toMatchObject({ ready: true, device: 'vugpu GPU (kmod)' });
      conn = net.connect(ctl);
      await new Promise<void>((res, rej) => conn!.once('connect', res).once('error', rej));
      let id = 0;
      const generate = async (what: string): Promise<number[]> => {
        const want = ++id;
        conn!.write(`${JSON.stringify({ id: want, prompt: PROMPT, tokens: TOKENS })}\n`);
        const r = await vm.waitFor((x) => (x.kind === 'LLAMA_WORKER' && x.data.id === want) || x.kind === 'VM_EXITED');
        expect(r.data.error, `${what}\n${context()}`).toBeUndefined();
        expect(r.kind, `${what}\n${context()}`).toBe('LLAMA_WORKER');
        return r.data.tokens as number[];
      };
      expect(await generate('the first generation'), 'the vugpu device and the CPU backend').toEqual(reference);
      server.upgrade();
      expect(await generate('after the live upgrade'), 'after the live upgrade').toEqual(reference);
      await server.kill();
      await server.start();
      expect(await generate('after SIGKILL + restart'), 'after SIGKILL + restart').toEqual(reference);
      await server.kill(true);
      await server.start();
      expect(server.lastAdoption()?.lostChannels.length, 'the restart failed the idle channel (ENGINE_LOST)').toBeGreaterThan(0);
      expect(await generate('after a restart that failed the idle channel'), 'after a restart that failed the idle channel').toEqual(reference);
      expect(vm.console.filter((l) => l.includes('recovered from ENGINE_LOST')).length, context()).toBeGreaterThan(0);
      expect(vm.console.filter((l) => /device lost/i.test(l)), context()).toEqual([]);
      conn.write('\x04'); // ^D: the worker's input ends, it exits, the guest powers off
      const res: GuestResult = await vm.done;
      expect(res.timedOut, context()).toBe(false);
      expect(res.guestExit, context()).toBe(0);
      // QEMU may print "unexpected reply" for a header-only answer to a request the dead server
      // had answered already (docs/architecture.md, "Surviving a restart")
      expect(vfioErrorLines(res.stderr).filter((l) => !/unexpected reply/.test(l)), context()).toEqual([]);
      expect(server.errorLines(), server.tail()).toEqual([]);
    } finally {
      conn?.destroy();
      await server.close();
    }
  }, 900_000);
});
