// llama.cpp natively against llama.cpp through vugpu (issue 32; npm run bench:llama), without
// QEMU: the same unmodified node-llama-cpp build (its prebuilt Vulkan backend) on the host's own
// Vulkan device, and in a host process whose only Vulkan driver is vugpu's (guest/vulkan,
// libvulkan_vugpu.so over vfio-user: the native twin of a guest's application layer) against
// `vugpu serve --engine vulkan` in fv; with --sides …,guest also in an fv QEMU guest (TCG here:
// the application layer, guest/vkapp/vkapp.sh `worker`, through the kernel driver) on a VM of its
// own of the same server (npm run bench:vulkan).
//
// Per model shape (q8_0, seeded random weights, bench/lib/gguf.ts):
//   one tenant   one native worker and one vugpu worker (one VM), each warmed up once, then
//                --rounds rounds interleaved (the order alternates): prompt tokens/s over a
//                --prompt-tokens prompt, generation tokens/s over --tokens greedy tokens; token
//                ids must be identical on every side and in every round; the guest (one llama.cpp
//                process for the whole run, its requests on the guest's second serial port)
//                takes its turn in the same rounds, on a second VM of the same server;
//   counts       then, on the same server, the guest's dispatches (the engine's
//                program_dispatches_total) and submissions (its VM's doorbells) for the prompt
//                and per generated token, and an untimed vugpu worker with the driver's dispatch
//                log (VUGPU_VK_DEBUG=2) for the same counts of the twin;
//   tenants      --tenants native workers generating at once against as many vugpu workers
//                (one fv VM each, one server), rounds interleaved: aggregate tokens/s;
//   soak         with --soak-s S, instead of the tenants phase: --tenants vugpu workers generating
//                back to back for S seconds, every stream checked against the one-tenant vugpu
//                ids, the server's RSS and open descriptors sampled every --sample-s seconds, each
//                request's longest wait for a token; --hostile adds a VM launching the endless
//                program over and over in three fifths of the time (npm run bench:soak).
// Workers are guest/vkapp/llama-worker.ts processes (model loaded once, pipelines created in the
// warm-up). The result goes to bench/results/llama/<device>.json (device: the native Vulkan
// device, lavapipe or h200) after every phase, so a run cut short still leaves what it measured.
//
//   node bench/llama.ts [--quick] [--shapes 135m,1b] [--prompt-tokens 512] [--tokens 128]
//                       [--rounds 3] [--tenants 8] [--sides native,vugpu[,guest]] [--type q8_0]
//                       [--modules DIR] [--model-dir DIR] [--native-icd FILE] [--icd FILE]
//                       [--deadline-s S] [--timeout-s S] [--ready-timeout-s S]
//                       [--flash-attention auto|on|off] [--native-features full|vugpu]
//                       [--watchdog-ms N] [--policy NAME] [--device NAME] [--out NAME] [--guest-ready-timeout-s S]
//                       [--soak-s S [--hostile] [--sample-s 10]] [--profile-serve] [--timeslice-always]
// --profile-serve: V8's profile of the one-tenant phase's server, summarised per dispatch in the
// result (oneTenant.<shape>.profile).
// --policy: serve's scheduler (default: serve's own, fair); the tenants phase is where it matters.
// --quick: the tiny shape, a 64-token prompt, 16 tokens (this 2-core host with lavapipe).
// The guest side runs the application image's model (/opt/models/tiny.gguf: shape tiny, f32,
// seed 1, the same writer), so it takes --shapes tiny --type f32, and the tenants phase leaves it
// out (one TCG guest is what this host affords). It needs `npm run setup` (QEMU, the image).
//   npm run bench:vulkan = --quick --type f32 --sides native,vugpu,guest --tenants 0 --rounds 5 --out vulkan
// From the offline bundle (bench/gpu-host-llama.sh) node-llama-cpp is its llama/ and the driver
// its twin/vulkan/; in a checkout they come from scripts/llama-deps.sh and `make -C guest/vulkan`.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startServer, type ServerProcess } from '../src/vm/server-process.ts';
import { vulkanDevices } from '../src/gpu/vulkan.ts';
import { LineSplitter } from '../src/vm/console.ts';
import { bootGuest, type GuestVm } from '../src/vm/launcher.ts';
import { loadManifest } from '../src/vm/manifest.ts';
import { environment, freePort, median, outVariant, repoRoot, resultDevice, spread, textTable, writeBenchResult } from './lib/common.ts';
import { SHAPES, type WeightType } from './lib/gguf.ts';
import { SoakRecorder } from './lib/soak.ts';
import { summarizeProfile } from './lib/cpuprofile.ts';
import { twin, twinBinary, twinModules, type Twin } from './lib/twin.ts';

const BENCH = 'llama';

function usage(msg: string): never {
  console.error(`bench:llama: ${msg}`);
  process.exit(2);
}

// ---------------------------------------------------------------- options

let o: Record<string, string | boolean | undefined>;
try {
  o = parseArgs({
    options: {
      quick: { type: 'boolean', default: false }, shapes: { type: 'string' }, 'prompt-tokens': { type: 'string' },
      tokens: { type: 'string' }, rounds: { type: 'string', default: '3' }, tenants: { type: 'string', default: '8' },
      sides: { type: 'string', default: 'native,vugpu' }, type: { type: 'string', default: 'q8_0' },
      modules: { type: 'string' }, 'model-dir': { type: 'string' }, 'native-icd': { type: 'string' }, icd: { type: 'string' },
      'deadline-s': { type: 'string' }, 'timeout-s': { type: 'string', default: '600' }, 'flash-attention': { type: 'string' },
      'native-features': { type: 'string', default: 'full' },
      device: { type: 'string' }, out: { type: 'string' }, 'count-tokens': { type: 'string', default: '8' },
      'watchdog-ms': { type: 'string' }, policy: { type: 'string' }, 'ready-timeout-s': { type: 'string', default: '180' },
      'guest-ready-timeout-s': { type: 'string', default: '900' },
      'profile-serve': { type: 'boolean', default: false }, 'timeslice-always': { type: 'boolean', default: false }, 'soak-s': { type: 'string' }, hostile: { type: 'boolean', default: false }, 'sample-s': { type: 'string', default: '10' },
    },
  }).values;
} catch (e) {
  usage(`${(e as Error).message.split('\n')[0]} (see the header of bench/llama.ts)`);
}
const str = (k: string): string | undefined => o[k] as string | undefined;
const int = (k: string, def: number, min = 1): number => {
  const v = str(k);
  if (v === undefined) return def;
  if (!/^\d+$/.test(v) || Number(v) < min) usage(`--${k} takes an integer >= ${min}, not ${v}`);
  return Number(v);
};
const quick = o.quick === true;
const shapes = (str('shapes') ?? (quick ? 'tiny' : '135m,1b')).split(',').filter(Boolean);
for (const s of shapes) if (!SHAPES[s]) usage(`--shapes takes ${Object.keys(SHAPES).join(', ')} (a comma list), not ${s}`);
const wtype = str('type') as WeightType;
if (!['f32', 'f16', 'q8_0'].includes(wtype)) usage(`--type takes f32, f16 or q8_0, not ${wtype}`);
const promptTokens = int('prompt-tokens', quick ? 64 : 512);
const genTokens = int('tokens', quick ? 16 : 128, 2);
const rounds = int('rounds', 3);
const tenants = int('tenants', 8, 0);
const countTokens = int('count-tokens', 8, 1);
const timeoutMs = int('timeout-s', 600) * 1000;
// loading a model (and connecting to the server) is bounded apart from a generation: a driver that
// hangs while loading costs this much, not a whole request's timeout
const readyTimeoutMs = int('ready-timeout-s', 180) * 1000;
const deadlineS = str('deadline-s') === undefined ? Infinity : int('deadline-s', 0);
type Side = 'native' | 'vugpu' | 'guest';
const SIDES: readonly Side[] = ['native', 'vugpu', 'guest'];
const sides = str('sides')!.split(',').filter(Boolean) as Side[];
for (const s of sides) if (!SIDES.includes(s)) usage(`--sides takes native, vugpu and/or guest, not ${s}`);
const flash = str('flash-attention');
// --native-features vugpu: the native side leaves out what vugpu's driver does not advertise
// (cooperative matrices, integer dot products, bf16), so both sides run the same ggml shaders and
// must produce the same token ids; `full` (the default) is the card as users run it, where other
// shaders may round differently and greedy ids part after a while on random weights.
const nativeFeatures = str('native-features') ?? 'full';
if (nativeFeatures !== 'full' && nativeFeatures !== 'vugpu') usage(`--native-features must be full or vugpu, got '${nativeFeatures}'`);
if (flash !== undefined && !['auto', 'on', 'off'].includes(flash)) usage(`--flash-attention takes auto, on or off, not ${flash}`);
// the guest's worker loads the application image's model with the worker's own defaults
if (sides.includes('guest') && (shapes.join() !== 'tiny' || wtype !== 'f32')) {
  usage('--sides guest runs the application image\'s model: give --shapes tiny --type f32 (--quick --type f32)');
}
if (sides.includes('guest') && flash !== undefined) usage('--flash-attention does not reach the guest\'s worker: leave it out with --sides guest');
// booting a TCG guest, starting Node and loading the model in it is far slower than on the host
const guestReadyTimeoutMs = int('guest-ready-timeout-s', 900) * 1000;
for (const s of shapes) {
  if (promptTokens + genTokens > SHAPES[s]!.context) usage(`--prompt-tokens + --tokens (${promptTokens + genTokens}) exceed shape ${s}'s context of ${SHAPES[s]!.context}`);
}
const variant = outVariant(BENCH, str('out'));
const watchdogMs = str('watchdog-ms') === undefined ? undefined : int('watchdog-ms', 0);
const policy = str('policy');
if (policy !== undefined && !/^[a-z]+$/.test(policy)) usage(`--policy takes a scheduler's name (serve --help lists them), not ${policy}`);
const soakS = str('soak-s') === undefined ? 0 : int('soak-s', 10);
const sampleS = int('sample-s', 10);
const hostile = o.hostile === true;
const profileServe = o['profile-serve'] === true;
// serve's context switch on a CPU device too (lavapipe), where serve leaves it off by default
const timesliceAlways = o['timeslice-always'] === true;
if (hostile && soakS === 0) usage('--hostile runs beside a soak: give --soak-s too');
if (soakS > 0 && (tenants === 0 || !sides.includes('vugpu'))) usage('--soak-s soaks vugpu tenants: give --tenants >= 1 and vugpu among --sides');
const T0 = performance.now();
const timeLeftS = () => deadlineS - (performance.now() - T0) / 1000;

// ---------------------------------------------------------------- what runs: node-llama-cpp, the driver, models

/** node-llama-cpp with its Vulkan prebuilt: --modules, the bundle's llama/, or scripts/llama-deps.sh. */
function modulesDir(): string {
  const m = str('modules') ?? (fs.existsSync(path.join(repoRoot, 'llama/node_modules/node-llama-cpp')) ? path.join(repoRoot, 'llama') : undefined);
  if (m) {
    if (!fs.existsSync(path.join(m, 'node_modules/node-llama-cpp/package.json'))) usage(`--modules ${m} holds no node_modules/node-llama-cpp`);
    return m;
  }
  const r = spawnSync('bash', [path.join(repoRoot, 'scripts/llama-deps.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) usage('scripts/llama-deps.sh could not install node-llama-cpp (give --modules DIR)');
  return r.stdout.trim();
}

/** The vugpu driver's manifest: --icd, the bundle's twin/vulkan/, or built here (build/llama-icd). */
function vugpuIcd(): string {
  const given = str('icd') ?? (fs.existsSync(path.join(repoRoot, 'twin/vulkan/vugpu_icd.json')) ? path.join(repoRoot, 'twin/vulkan/vugpu_icd.json') : undefined);
  if (given) {
    if (!fs.existsSync(given)) usage(`--icd ${given} does not exist`);
    return path.resolve(given);
  }
  const out = path.join(repoRoot, 'build/llama-icd');
  const r = spawnSync('make', ['-s', '-C', path.join(repoRoot, 'guest/vulkan'), 'host', `O=${out}`], { encoding: 'utf8' });
  if (r.status !== 0) usage(`building the vugpu Vulkan driver (make -C guest/vulkan host) failed:\n${r.stdout}${r.stderr}`);
  return path.join(out, 'vugpu_icd.json');
}

/** The host's own Vulkan driver for the native side: --native-icd, VK_DRIVER_FILES (the bundle
 *  sets the NVIDIA one), else Debian's lavapipe. */
function nativeIcd(): string {
  const given = str('native-icd') ?? process.env.VK_DRIVER_FILES ?? process.env.VK_ICD_FILENAMES;
  if (given) return given;
  const dir = '/usr/share/vulkan/icd.d';
  const f = fs.existsSync(dir) ? fs.readdirSync(dir).find((n) => n.startsWith('lvp_icd')) : undefined;
  if (!f) usage('no host Vulkan driver: give --native-icd FILE (or VK_DRIVER_FILES), or install mesa-vulkan-drivers for lavapipe');
  return path.join(dir, f);
}

/** The model for a shape: generated once (seed 1) into --model-dir (default $VUGPU_CACHE/models),
 *  each in a process of its own, all at once: the larger shapes' minutes of writing overlap the
 *  smaller shapes' measurements instead of preceding them. */
function modelFile(shape: string): Promise<string> {
  const dir = str('model-dir') ?? path.join(process.env.VUGPU_CACHE ?? '/var/cache/vugpu', 'models');
  const file = path.join(dir, `${shape}-${wtype}-seed1.gguf`);
  if (fs.existsSync(file)) return Promise.resolve(file);
  fs.mkdirSync(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  const t = performance.now();
  const child = spawn(process.execPath, [path.join(repoRoot, 'bench/lib/gguf.ts'), '--shape', shape, '--type', wtype, '--seed', '1', '--out', tmp],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(child);
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => child.on('close', (code) => {
    children.delete(child);
    if (code !== 0) return reject(new Error(`writing the ${shape} model failed (exit ${code}): ${err.trim()}`));
    fs.renameSync(tmp, file);
    log(`model ${shape} ${wtype}: ${(fs.statSync(file).size / 2 ** 20).toFixed(1)} MiB in ${((performance.now() - t) / 1000).toFixed(1)} s → ${file}`);
    resolve(file);
  }));
}

/** A fixed prompt of token ids (ids 0–2 are unknown/BOS/EOS in the writer's vocabulary). */
function promptIds(n: number, vocab: number): number[] {
  const ids: number[] = [];
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    ids.push(3 + ((x >>> 8) % (vocab - 3)));
  }
  return ids;
}

function log(msg: string): void {
  console.log(`[llama ${((performance.now() - T0) / 1000).toFixed(0).padStart(4)} s] ${msg}`);
}

// ---------------------------------------------------------------- workers

interface Gen { tokens: number[]; promptMs: number; genMs: number; maxGapMs?: number }

const children = new Set<ChildProcess>();

/** One llama.cpp process that generates on request: on the host, or in a guest. */
interface LlamaWorker {
  readonly name: string;
  readonly device: string;
  ready(): Promise<void>;
  run(prompt: number[], tokens: number, marked?: boolean): Promise<Gen>;
  close(): Promise<void>;
}

class Worker implements LlamaWorker {
  readonly child: ChildProcess;
  readonly stderr: string[] = [];
  device = '';
  private readonly waiting = new Map<number, { resolve(g: Gen): void; reject(e: Error): void }>();
  private readonly marks = new Map<number, () => void>();
  private readyWait: { resolve(): void; reject(e: Error): void } | null = null;
  private nextId = 1;
  private dead: Error | null = null;
  /** Lines of the driver's dispatch log seen so far (VUGPU_VK_DEBUG=2). */
  dispatchLines = 0;
  readonly logsDispatches: boolean;

  readonly name: string;

  constructor(name: string, modules: string, model: string, env: Record<string, string>, ctx: number) {
    this.name = name;
    this.logsDispatches = env.VUGPU_VK_DEBUG === '2';
    const args = [path.join(repoRoot, 'guest/vkapp/llama-worker.ts'), '--modules', modules, '--model', model, '--ctx', String(ctx), '--batch', '512'];
    if (flash) args.push('--flash-attention', flash);
    this.child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    children.add(this.child);
    const out = new LineSplitter((l) => this.onLine(l));
    const err = new LineSplitter((l) => {
      // (not anchored: another thread's partial line may precede the mark)
      const m = /LLAMA-WORKER-DONE (\d+)$/.exec(l);
      if (m) {
        this.marks.get(Number(m[1]))?.();
        return;
      }
      if (/^vugpu-vulkan: dispatch \d+x\d+x\d+ entry/.test(l)) this.dispatchLines++;
      else if (this.stderr.length < 400) this.stderr.push(l);
    });
    this.child.stdout!.setEncoding('utf8').on('data', (c: string) => out.push(c));
    this.child.stderr!.setEncoding('utf8').on('data', (c: string) => err.push(c));
    this.child.on('close', (code, sig) => {
      children.delete(this.child);
      this.dead = new Error(`${this.name}: the worker exited (${code ?? sig})\n${this.stderr.slice(-30).join('\n')}`);
      this.readyWait?.reject(this.dead);
      for (const w of this.waiting.values()) w.reject(this.dead);
      this.waiting.clear();
      for (const m of this.marks.values()) m();
    });
  }

  private onLine(l: string): void {
    let msg: { ready?: boolean; device?: string; id?: number; error?: string } & Partial<Gen>;
    try {
      msg = JSON.parse(l);
    } catch {
      if (this.stderr.length < 400) this.stderr.push(`stdout: ${l}`);
      return;
    }
    if (msg.ready) {
      this.device = msg.device ?? '';
      this.readyWait?.resolve();
    } else if (msg.id === undefined) {
      this.readyWait?.reject(new Error(`${this.name}: ${msg.error}\n${this.stderr.slice(-30).join('\n')}`));
    } else {
      const w = this.waiting.get(msg.id);
      this.waiting.delete(msg.id);
      if (!w) return;
      if (msg.error) w.reject(new Error(`${this.name}: ${msg.error}\n${this.stderr.slice(-30).join('\n')}`));
      else w.resolve({ tokens: msg.tokens!, promptMs: msg.promptMs!, genMs: msg.genMs!, maxGapMs: msg.maxGapMs });
    }
  }

  ready(): Promise<void> {
    if (this.device) return Promise.resolve();
    return withTimeout(new Promise((resolve, reject) => {
      if (this.dead) reject(this.dead);
      this.readyWait = { resolve, reject };
    }), readyTimeoutMs, `${this.name}: not ready`);
  }

  /** One greedy generation; with `marked`, resolves after the worker's stderr mark for it too. */
  run(prompt: number[], tokens: number, marked = false): Promise<Gen> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    const gen = new Promise<Gen>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    const mark = marked ? new Promise<void>((resolve) => this.marks.set(id, resolve)) : Promise.resolve();
    this.child.stdin!.write(`${JSON.stringify({ id, prompt, tokens })}\n`);
    return withTimeout(Promise.all([gen, mark]).then(([g]) => g), timeoutMs, `${this.name}: request ${id}`);
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const closed = new Promise((r) => this.child.once('close', r));
    this.child.stdin!.end();
    const t = setTimeout(() => this.child.kill('SIGKILL'), 15_000);
    await closed;
    clearTimeout(t);
  }
}

const VKAPP = '/opt/vugpu/vkapp.sh';

/**
 * guest/vkapp/llama-worker.ts in an fv guest (vkapp.sh `worker`): the model loaded once, requests
 * on the guest's second serial port (a socket here), answers as VUGPU-LLAMA_WORKER console
 * records. Its times are the guest's own clock around the generation, as on the host.
 */
class GuestWorker implements LlamaWorker {
  readonly name: string;
  device = '';
  readonly vm: GuestVm;
  private readonly ctl: string;
  private conn: net.Socket | null = null;
  private nextId = 1;

  constructor(name: string, socket: string, ctx: number, dir: string) {
    this.name = name;
    this.ctl = path.join(dir, `${name}-ctl.sock`);
    this.vm = bootGuest({
      manifest: loadManifest(), sockets: [socket], appImage: true, memoryMiB: 1024,
      // the guest lives for the whole phase; the bench's own timeouts bound each step in it
      timeoutMs: Number.isFinite(deadlineS) ? Math.max(60, timeLeftS()) * 1000 : 4 * 3600_000,
      run: VKAPP, args: ['worker', 'tiny', 'vulkan', String(ctx)],
      qemuArgs: ['-chardev', `socket,id=vgctl,path=${this.ctl},server=on,wait=off`, '-serial', 'chardev:vgctl'],
    });
  }

  private context(): string {
    return this.vm.console.filter((l) => !/^\s*$/.test(l)).slice(-30).join('\n');
  }

  async ready(): Promise<void> {
    if (this.device) return;
    const rec = await withTimeout(this.vm.waitFor((r) => r.kind === 'LLAMA_WORKER' || r.kind === 'ERROR'),
      guestReadyTimeoutMs, `${this.name}: not ready`).catch((e: Error) => {
      e.message += `\n${this.context()}`;
      throw e;
    });
    if (rec.kind !== 'LLAMA_WORKER' || rec.data.ready !== true) throw new Error(`${this.name}: ${JSON.stringify(rec.data)}\n${this.context()}`);
    const conn = net.connect(this.ctl);
    await new Promise<void>((resolve, reject) => conn.once('connect', resolve).once('error', reject));
    this.conn = conn;
    this.device = String(rec.data.device ?? '');
  }

  async run(prompt: number[], tokens: number): Promise<Gen> {
    if (!this.conn) throw new Error(`${this.name}: not ready`);
    const id = this.nextId++;
    this.conn.write(`${JSON.stringify({ id, prompt, tokens })}\n`);
    const r = await withTimeout(this.vm.waitFor((x) => (x.kind === 'LLAMA_WORKER' && x.data.id === id) || x.kind === 'VM_EXITED'),
      timeoutMs, `${this.name}: request ${id}`);
    if (r.kind !== 'LLAMA_WORKER') throw new Error(`${this.name}: the guest exited\n${this.context()}`);
    if (r.data.error) throw new Error(`${this.name}: ${String(r.data.error)}\n${this.context()}`);
    return { tokens: r.data.tokens as number[], promptMs: r.data.promptMs as number, genMs: r.data.genMs as number };
  }

  async close(): Promise<void> {
    // ^D on the request port: the worker's input ends, it exits, the guest powers off
    this.conn?.end('\x04');
    const t = setTimeout(() => this.vm.killNow('SIGKILL'), 60_000);
    await this.vm.done;
    clearTimeout(t);
    this.conn?.destroy();
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms / 1000} s`)), ms); }),
  ]);
}

// ---------------------------------------------------------------- the server

let metricsPort = 0;

/** The server's name of VM i of serve(): the --socket VM is vm0 (serve's default), the rest t<i>. */
const vmName = (i: number): string => (i === 0 ? 'vm0' : `t${i}`);

async function serve(dir: string, vms: number, sliceMiB: number, env?: Record<string, string>): Promise<{ server: ServerProcess; sockets: string[] }> {
  const sockets = Array.from({ length: vms }, (_, i) => path.join(dir, `t${i}.sock`));
  metricsPort = await freePort();
  // Every VM takes the default slice, an equal power-of-two share of what the host leaves (it keeps
  // a sixteenth): nine eighths of the slices make that share exactly sliceMiB.
  const vram = Math.ceil((vms * sliceMiB * 9) / 8);
  const args = ['--engine', 'vulkan', '--vram', `${vram}M`, '--metrics-port', String(metricsPort), '--mode', 'fv'];
  if (watchdogMs !== undefined) args.push('--watchdog-ms', String(watchdogMs));
  if (policy !== undefined) args.push('--policy', policy);
  if (timesliceAlways) args.push('--timeslice-always');
  for (let i = 1; i < vms; i++) args.push('--vm', `name=${vmName(i)},socket=${sockets[i]},mode=fv`);
  const server = await startServer({ socket: sockets[0]!, args, readyTimeoutMs: 60_000, ...(env ? { env } : {}) });
  // VUGPU_BENCH_SERVER_LOG=FILE: the server's output is appended there when the bench exits
  // (diagnosis on a GPU host, where only files come back).
  const logTo = process.env.VUGPU_BENCH_SERVER_LOG;
  if (logTo) process.on('exit', () => fs.appendFileSync(logTo, server.output.join('')));
  const end = performance.now() + 30_000;
  while (!sockets.every((s) => fs.existsSync(s))) {
    if (performance.now() > end || !server.alive) throw new Error(`not every VM socket appeared\n${server.tail()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { server, sockets };
}

/** Per-VM counters from the server's /metrics.json: doorbells (submissions rung) and the
 *  scheduler's dispatches (submissions handed to the engine). */
async function vmCounters(): Promise<Map<string, { doorbells: number; dispatches: number }>> {
  const r = await fetch(`http://127.0.0.1:${metricsPort}/metrics.json`);
  const j = (await r.json()) as { vms: { vm: string; doorbells?: number; dispatches?: number }[] };
  return new Map(j.vms.map((v) => [v.vm, { doorbells: v.doorbells ?? NaN, dispatches: v.dispatches ?? NaN }]));
}

// ---------------------------------------------------------------- phases

const tps = (n: number, ms: number) => (ms > 0 ? n / (ms / 1000) : NaN);
const r3 = (x: number) => (Number.isFinite(x) ? +x.toFixed(3) : null);
const sliceFor = (shape: string): number => ({ tiny: 256, '135m': 1024, '1b': 4096 })[shape] ?? 4096;
const ctxFor = (): number => 2 ** Math.ceil(Math.log2(promptTokens + genTokens));

/** A round of one side: tokens/s by the worker's own clock (a guest's clock for the guest), and
 *  the request's time on this host's clock (the worker's I/O included: for the guest, its serial
 *  port and console), which checks a guest clock that would run slow or fast. */
interface SideRound { promptTps: number; genTps: number; promptMs: number; genMs: number; requestMs: number }

function summarize(rs: SideRound[]) {
  return {
    promptTps: r3(median(rs.map((r) => r.promptTps))), genTps: r3(median(rs.map((r) => r.genTps))),
    workerMs: r3(median(rs.map((r) => r.promptMs + r.genMs))), requestMs: r3(median(rs.map((r) => r.requestMs))),
    rounds: rs.map((r) => ({ promptTps: r3(r.promptTps), genTps: r3(r.genTps), workerMs: r3(r.promptMs + r.genMs), requestMs: r3(r.requestMs) })),
  };
}

async function oneTenant(shape: string, model: string, modules: string, icd: string, native: string, tmp: string,
  countsInto: Record<string, unknown>, guestCountsInto: Record<string, unknown>) {
  const vocab = SHAPES[shape]!.vocab;
  const prompt = promptIds(promptTokens, vocab);
  const res: Record<string, unknown> = { shape, promptTokens, genTokens, rounds };
  const workers: LlamaWorker[] = [];
  let srv: ServerProcess | undefined;
  // the VMs of the one server: the twin's first, then the guest's
  const vms: Partial<Record<Side, { socket: string; name: string }>> = {};
  try {
    const w: Partial<Record<Side, LlamaWorker>> = {};
    const onServer = SIDES.filter((k) => k !== 'native' && sides.includes(k));
    if (onServer.length) {
      const s = await serve(tmp, onServer.length, sliceFor(shape), profileServe ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-interval=100 --cpu-prof-dir=${profDir(tmp)}` } : undefined);
      srv = s.server;
      onServer.forEach((k, i) => (vms[k] = { socket: s.sockets[i]!, name: vmName(i) }));
    }
    // in SIDES order, so the rounds go native, twin, guest (and back)
    for (const k of SIDES.filter((x) => sides.includes(x))) {
      if (k === 'native') w.native = new Worker('native', modules, model, nativeEnv(native), ctxFor());
      else if (k === 'vugpu') w.vugpu = new Worker('vugpu', modules, model, twinEnv(icd, vms.vugpu!.socket), ctxFor());
      else {
        const g = new GuestWorker('guest', vms.guest!.socket, ctxFor(), tmp);
        res.guestEnvironment = environment(g.vm.manifest, g.vm.accel);
        w.guest = g;
      }
      workers.push(w[k]!);
    }
    // A side that fails is dropped (its error kept): the other sides' numbers still count.
    const sideErrors: Record<string, string> = {};
    const drop = async (k: string, e: unknown) => {
      sideErrors[k] = (await serverDied(e as Error, k === 'native' ? undefined : srv)).message.slice(0, 4000);
      log(`${shape} ${k}: failed, dropped: ${sideErrors[k]!.split('\n')[0]}`);
      delete w[k as Side];
    };
    res.sideErrors = sideErrors;
    const ready = await Promise.allSettled(Object.values(w).map((x) => x!.ready()));
    for (const [i, k] of Object.keys(w).entries()) if (ready[i]!.status === 'rejected') await drop(k, (ready[i] as PromiseRejectedResult).reason);
    res.devices = Object.fromEntries(Object.entries(w).map(([k, x]) => [k, x!.device]));
    if (w.guest) log(`${shape} guest: ready (${res.devices && (res.devices as Record<string, string>).guest})`);
    // warm-up: pipeline creation and first-use allocations happen here
    const ref: Record<string, number[]> = {};
    for (const [k, x] of Object.entries(w)) {
      const t = performance.now();
      try {
        ref[k] = (await x!.run(prompt, genTokens)).tokens;
        log(`${shape} ${k}: warm-up ${((performance.now() - t) / 1000).toFixed(1)} s`);
      } catch (e) {
        await drop(k, e);
      }
    }
    if (Object.keys(w).length === 0) throw new Error(Object.entries(sideErrors).map(([k, e]) => `${k}: ${e}`).join('\n'));
    const per: Record<Side, SideRound[]> = { native: [], vugpu: [], guest: [] };
    const jsCost = { ns: 0, dispatches: 0 };
    let same = true;
    for (let r = 0; r < rounds; r++) {
      const order = Object.keys(w) as Side[];
      if (r % 2) order.reverse();
      for (const k of order) {
        try {
          // the twin's rounds: what the server's JS thread spent per dispatch (the limit where
          // the device is fast: docs/results.md, "Batched launches on the H200")
          const js0 = k === 'vugpu' && srv ? await jsThread(srv) : null;
          const t = performance.now();
          const g = await w[k]!.run(prompt, genTokens);
          const requestMs = performance.now() - t;
          if (js0 && srv && Number.isFinite(js0.ns)) {
            const js1 = await jsThread(srv);
            jsCost.ns += js1.ns - js0.ns;
            jsCost.dispatches += js1.dispatches - js0.dispatches;
          }
          if (g.tokens.join() !== ref[k]!.join()) same = false;
          per[k].push({ promptMs: g.promptMs, genMs: g.genMs, promptTps: tps(promptTokens, g.promptMs), genTps: tps(genTokens - 1, g.genMs), requestMs });
        } catch (e) {
          await drop(k, e);
        }
      }
    }
    log(`${shape}: ${rounds} rounds done`);
    for (const k of SIDES) if (per[k].length) res[k] = summarize(per[k]);
    if (jsCost.dispatches > 0 && res.vugpu) {
      (res.vugpu as Record<string, unknown>).jsThread = {
        what: "the server's JS thread's CPU time (schedstat) over the twin's timed rounds, per engine dispatch in them",
        usPerDispatch: +(jsCost.ns / 1000 / jsCost.dispatches).toFixed(2), dispatches: jsCost.dispatches,
      };
    }
    res.tokensRepeatable = same;
    // every side that ran every round against the first such side (native where it did)
    const full = SIDES.filter((k) => ref[k] && per[k].length === rounds);
    if (full.length > 1) {
      const base = full[0]!, b = ref[base]!;
      res.tokensIdentical = full.every((k) => ref[k]!.join() === b.join());
      const diffs: Record<string, unknown> = {};
      for (const k of full.slice(1)) {
        const v = ref[k]!;
        const i = b.findIndex((t, j) => t !== v[j]);
        if (i >= 0 || v.length !== b.length) diffs[k] = { against: base, index: i, [base]: b.slice(i, i + 8), [k]: v.slice(i, i + 8) };
      }
      if (Object.keys(diffs).length) res.firstDifference = diffs;
      const ratio = (k: Side, f: 'promptTps' | 'genTps') => spread(per.native.map((x, i) => per[k][i]![f] / x[f]));
      if (full.includes('native') && full.includes('vugpu')) res.ratio = { prompt: ratio('vugpu', 'promptTps'), gen: ratio('vugpu', 'genTps') };
      if (full.includes('native') && full.includes('guest')) res.guestRatio = { prompt: ratio('guest', 'promptTps'), gen: ratio('guest', 'genTps') };
    }
    res.tokens = ref.native ?? ref.vugpu ?? ref.guest;
    // Each side's own ids: the tenants phase checks every stream against its side's (sharing must
    // change no result, whatever the sides' shaders round).
    res.tokensBySide = ref;
    if (w.guest && !sideErrors.guest) {
      // the guest's counts from the server's counters while the other sides are idle
      log(`${shape}: guest counts…`);
      try {
        guestCountsInto[shape] = await countsOf(shape, w.guest, vms.guest!.name);
      } catch (e) {
        guestCountsInto[shape] = { error: (e as Error).message.slice(0, 4000) };
      }
      await w.guest.close();
    }
    if (w.vugpu && !sideErrors.vugpu) {
      // the counts on the same server (its programs are prepared already), the timed worker gone
      await w.vugpu.close();
      log(`${shape}: counts…`);
      try {
        countsInto[shape] = await counts(shape, model, modules, icd, vms.vugpu!);
      } catch (e) {
        countsInto[shape] = { error: (e as Error).message.slice(0, 4000) };
      }
    }
    return res;
  } catch (e) {
    throw await serverDied(e as Error, srv);
  } finally {
    await Promise.all(workers.map((x) => x.close()));
    // the server's dispatches over its whole life: what the profile's totals are divided by
    const dispatches = profileServe && srv ? await enginePath().then((p) => p.engineDispatches, () => NaN) : NaN;
    await srv?.stop();
    if (profileServe && srv) res.profile = serveProfile(tmp, res, countsInto[shape], dispatches);
  }
}

const profDir = (tmp: string) => path.join(tmp, 'serve-profile');

/** The server's main (JS) thread's CPU ns so far (/proc schedstat: run time) and the engine's
 *  dispatches so far. */
async function jsThread(srv: ServerProcess): Promise<{ ns: number; dispatches: number }> {
  const dispatches = (await enginePath()).engineDispatches;
  let ns = NaN;
  const task = `/proc/${srv.pid}/task/${srv.pid}`;
  try {
    ns = Number(fs.readFileSync(`${task}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    // a kernel without schedstat (the GPU host's): utime + stime, in clock ticks (USER_HZ 100)
    try {
      const f = fs.readFileSync(`${task}/stat`, 'utf8').split(') ')[1]!.split(' ');
      ns = (Number(f[11]) + Number(f[12])) * 1e7;
    } catch {
      // not Linux, or the server is gone: no figure
    }
  }
  return { ns, dispatches };
}
const PROFILED = ['decode', 'runMethods', 'launchProgram', 'mapBuffers', 'translate', 'readVa', 'recentProgram', 'queueDispatch', 'submitBatch',
  'packBatch', 'jobDone', 'onComplete', 'mmioWrite'];

/** --profile-serve: the one-tenant server's V8 profile, its steady seconds per dispatch. */
function serveProfile(tmp: string, res: Record<string, unknown>, counted: unknown, dispatches: number): Record<string, unknown> {
  const dir = profDir(tmp);
  const file = fs.existsSync(dir) ? fs.readdirSync(dir).find((f) => f.endsWith('.cpuprofile')) : undefined;
  if (!file) return { error: `no profile in ${dir} (the server did not exit cleanly?)` };
  const sum = summarizeProfile(path.join(dir, file), PROFILED, 'decode', 400);
  // dispatches per second in those seconds: the timed rounds' tokens/s × the engine's dispatches per token
  const perToken = (counted as { perToken?: { engine?: { engineDispatches?: number } } } | undefined)?.perToken?.engine?.engineDispatches;
  const genTps = (res.vugpu as { genTps?: number } | undefined)?.genTps;
  const perS = perToken && genTps ? perToken * genTps : NaN;
  const usPerDispatch = Number.isFinite(perS)
    ? Object.fromEntries(Object.entries(sum.steadyState.msPerSecond).filter(([k]) => k !== 'idle').map(([k, ms]) => [k, +((ms * 1000) / perS).toFixed(2)]))
    : null;
  const usPerDispatchWhole = dispatches > 0
    ? Object.fromEntries(Object.entries(sum.wholeMs).map(([k, ms]) => [k, +((ms * 1000) / dispatches).toFixed(2)]))
    : null;
  return {
    what: 'V8 CPU profile (--cpu-prof) of `vugpu serve` over the one-tenant phase: self time per function; in the steady seconds (decode inclusive >= 400 ms), inclusive ms per second of the named functions (overlapping: decode includes launchProgram, which includes mapBuffers, which includes translate) and per dispatch; wholeMs and usPerDispatchWhole: the same functions over the whole profile, per dispatch of the server\'s life (the counts worker\'s included)',
    ...sum, dispatchesPerSecond: Number.isFinite(perS) ? Math.round(perS) : null, usPerDispatch,
    dispatches: Number.isFinite(dispatches) ? dispatches : null, usPerDispatchWhole,
  };
}

/** The engine's launch-path counters from /metrics.json (program_dispatch_seconds_total by phase,
 *  program_staging_bytes_total, program_host_imports_total): where a token's time goes. */
async function enginePath(): Promise<Record<string, number>> {
  const r = await fetch(`http://127.0.0.1:${metricsPort}/metrics.json`);
  const f = ((await r.json()) as { families?: Record<string, { labels: Record<string, string>; value: number }[]> }).families ?? {};
  const out: Record<string, number> = {};
  for (const x of f.program_dispatch_seconds_total ?? []) out[`${x.labels.phase}Ms`] = x.value * 1000;
  for (const x of f.program_staging_bytes_total ?? []) out[`${x.labels.direction}MiB`] = x.value / 2 ** 20;
  out.imports = f.program_host_imports_total?.[0]?.value ?? NaN;
  out.residentMiB = (f.program_resident_bytes_total?.[0]?.value ?? NaN) / 2 ** 20;
  out.engineDispatches = f.program_dispatches_total?.[0]?.value ?? NaN;
  return out;
}

/** The twin's counts: an untimed worker with the driver's dispatch log (VUGPU_VK_DEBUG=2) on the
 *  same VM, warmed up, then countsOf. */
async function counts(shape: string, model: string, modules: string, icd: string, vm: { socket: string; name: string }) {
  const w = new Worker('vugpu-count', modules, model, { ...twinEnv(icd, vm.socket), VUGPU_VK_DEBUG: '2' }, ctxFor());
  try {
    await w.ready();
    await w.run(promptIds(promptTokens, SHAPES[shape]!.vocab), 2, true); // warm-up
    return await countsOf(shape, w, vm.name);
  } finally {
    await w.close();
  }
}

/** Dispatches and submissions for the prompt and per generated token of a warm worker alone on
 *  the server: a prompt-only request and one of 1 + countTokens tokens, differenced; with the
 *  engine's launch-path phases, staged bytes, imports and dispatches (program_dispatches_total)
 *  per token. The driver's own count of vkCmdDispatch where the worker logs it (the twin's). */
async function countsOf(shape: string, w: LlamaWorker, vm: string) {
  const prompt = promptIds(promptTokens, SHAPES[shape]!.vocab);
  const logged = w instanceof Worker && w.logsDispatches ? w : undefined;
  const measure = async (tokens: number) => {
    const d0 = logged?.dispatchLines ?? 0, c0 = (await vmCounters()).get(vm)!, e0 = await enginePath();
    await w.run(prompt, tokens, true);
    const c1 = (await vmCounters()).get(vm)!, e1 = await enginePath();
    const engine = Object.fromEntries(Object.keys(e1).map((k) => [k, e1[k]! - (e0[k] ?? 0)]));
    return { dispatches: logged ? logged.dispatchLines - d0 : NaN, doorbells: c1.doorbells - c0.doorbells, submissions: c1.dispatches - c0.dispatches, engine };
  };
  const a = await measure(1);
  const b = await measure(1 + countTokens);
  const per = (k: 'dispatches' | 'doorbells' | 'submissions') => r3((b[k] - a[k]) / countTokens);
  const enginePerToken = Object.fromEntries(Object.keys(b.engine).map((k) => [k, r3((b.engine[k]! - (a.engine[k] ?? 0)) / countTokens)]));
  return {
    shape, promptTokens, countTokens, vm,
    prompt: { ...a, dispatches: r3(a.dispatches) },
    perToken: { dispatches: per('dispatches'), doorbells: per('doorbells'), submissions: per('submissions'), engine: enginePerToken },
    note: `dispatches: ${logged ? 'vkCmdDispatch executed by the vugpu driver (VUGPU_VK_DEBUG=2 log)' : 'null (no driver log here: see engine.engineDispatches)'}; engine.engineDispatches: the engine's program_dispatches_total (a built-in launch with a plan may be several); doorbells and submissions: the VM's doorbells_total and the scheduler's submissions handed to the engine (serve /metrics.json); prompt: a prompt-only request (first token included)`,
  };
}

async function manyTenants(shape: string, model: string, modules: string, icd: string, native: string, tmp: string,
  refs: Record<string, number[]> | undefined, useSides: string[]) {
  const prompt = promptIds(promptTokens, SHAPES[shape]!.vocab);
  const res: Record<string, unknown> = { shape, tenants, promptTokens, genTokens, rounds };
  const groups: Partial<Record<'native' | 'vugpu', Worker[]>> = {};
  let srv: ServerProcess | undefined;
  try {
    if (useSides.includes('vugpu')) {
      const s = await serve(tmp, tenants, sliceFor(shape));
      srv = s.server;
      groups.vugpu = s.sockets.map((sock, i) => new Worker(`vugpu-${i}`, modules, model, twinEnv(icd, sock), ctxFor()));
    }
    if (useSides.includes('native')) groups.native = Array.from({ length: tenants }, (_, i) => new Worker(`native-${i}`, modules, model, nativeEnv(native), ctxFor()));
    const sideErrors: Record<string, string> = {};
    res.sideErrors = sideErrors;
    const drop = async (k: string, e: unknown) => {
      sideErrors[k] = (await serverDied(e as Error, k === 'vugpu' ? srv : undefined)).message.slice(0, 4000);
      log(`${shape} ${tenants} ${k}: failed, dropped: ${sideErrors[k]!.split('\n')[0]}`);
      await Promise.all(groups[k as 'native' | 'vugpu']!.map((x) => x.close()));
      delete groups[k as 'native' | 'vugpu'];
    };
    for (const [k, ws] of Object.entries(groups)) {
      const ready = await Promise.allSettled(ws!.map((x) => x.ready()));
      const bad = ready.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
      if (bad) await drop(k, bad.reason);
    }
    const runAll = async (ws: Worker[]) => {
      const t0 = performance.now();
      const gens = await Promise.all(ws.map((x) => x.run(prompt, genTokens)));
      const wallMs = performance.now() - t0;
      return { gens, wallMs };
    };
    for (const [k, ws] of Object.entries(groups)) {
      const t = performance.now();
      try {
        await runAll(ws!);
        log(`${shape} ${tenants} ${k}: warm-up ${((performance.now() - t) / 1000).toFixed(1)} s`);
      } catch (e) {
        await drop(k, e);
      }
    }
    if (Object.keys(groups).length === 0) throw new Error(Object.entries(sideErrors).map(([k, e]) => `${k}: ${e}`).join('\n'));
    const per: Record<string, { genTpsSum: number; promptTpsSum: number; wallTps: number }[]> = { native: [], vugpu: [] };
    let verified = 0, wrong = 0;
    for (let r = 0; r < rounds; r++) {
      const order = Object.keys(groups);
      if (r % 2) order.reverse();
      for (const k of order) {
        let gens: Gen[], wallMs: number;
        try {
          ({ gens, wallMs } = await runAll(groups[k as 'native' | 'vugpu']!));
        } catch (e) {
          await drop(k, e);
          continue;
        }
        const ref = refs?.[k];
        for (const g of gens) if (ref && g.tokens.join() !== ref.join()) wrong++; else verified++;
        per[k]!.push({
          genTpsSum: gens.reduce((a, g) => a + tps(genTokens - 1, g.genMs), 0),
          promptTpsSum: gens.reduce((a, g) => a + tps(promptTokens, g.promptMs), 0),
          wallTps: tps(tenants * genTokens, wallMs),
        });
      }
    }
    for (const k of ['native', 'vugpu']) {
      const rs = per[k]!;
      if (!rs.length) continue;
      res[k] = {
        genTpsSum: r3(median(rs.map((x) => x.genTpsSum))), promptTpsSum: r3(median(rs.map((x) => x.promptTpsSum))),
        wallTps: r3(median(rs.map((x) => x.wallTps))),
        rounds: rs.map((x) => ({ genTpsSum: r3(x.genTpsSum), promptTpsSum: r3(x.promptTpsSum), wallTps: r3(x.wallTps) })),
      };
    }
    if (per.native!.length === rounds && per.vugpu!.length === rounds) {
      res.ratio = {
        gen: spread(per.native!.map((x, i) => per.vugpu![i]!.genTpsSum / x.genTpsSum)),
        wall: spread(per.native!.map((x, i) => per.vugpu![i]!.wallTps / x.wallTps)),
      };
    }
    res.streams = { verified, wrong, against: refs ? 'each side\'s own one-tenant tokens' : 'nothing (no one-tenant reference)' };
    res.note = 'genTpsSum: the tenants\' generation tokens/s summed (each over its own generation); wallTps: tenants × tokens over the wall time of the round (prompts included)';
    return res;
  } catch (e) {
    throw await serverDied(e as Error, srv);
  } finally {
    await Promise.all(Object.values(groups).flat().map((x) => x.close()));
    await srv?.stop();
  }
}

/** The hostile VM's duty cycle, as fractions of the soak: launching for HOSTILE_ON, then paused
 * until HOSTILE_CYCLE has passed, over and over. */
const HOSTILE_CYCLE = 0.2;
const HOSTILE_ON = 0.12;
/** Goal 3's bound on a tenant's stall beside an endless program (the soak's longest token wait). */
const STALL_GOAL_MS = 50;

/**
 * The soak (issue 32 goal 5): --tenants vugpu workers (one fv VM each, one server) generating
 * back to back for --soak-s seconds, every stream checked against the one-tenant vugpu ids; the
 * server's RSS and open descriptors sampled every --sample-s seconds; with --hostile, one more VM
 * launching the endless program over and over (the twin, `vugpu-programs --endless`, each launch
 * on a fresh context until the device stops it) for 60 % of the time in five cycles, so the
 * tenants' token waits beside it and without it come from the same run. A tenant whose worker
 * fails stops; the others go on.
 */

async function soak(shape: string, model: string, modules: string, icd: string, tmp: string, ref: number[] | undefined,
  progress: (partial: Record<string, unknown>) => void) {
  const prompt = promptIds(promptTokens, SHAPES[shape]!.vocab);
  const s = await serve(tmp, tenants + (hostile ? 1 : 0), sliceFor(shape));
  const srv = s.server;
  const workers = s.sockets.slice(0, tenants).map((sock, i) => new Worker(`soak-${i}`, modules, model, twinEnv(icd, sock), ctxFor()));
  const baselineS = Math.max(30, soakS / 10);
  const rec = new SoakRecorder(srv.pid!, tenants, baselineS);
  let bad: Twin | null = null;
  let sampler: NodeJS.Timeout | undefined;
  const endless: Record<string, number> = {};
  let endlessRuns = 0;
  try {
    const tReady = performance.now();
    await Promise.all(workers.map((w) => w.ready()));
    log(`${shape} soak: ${tenants} tenants ready in ${((performance.now() - tReady) / 1000).toFixed(1)} s`);
    const t = performance.now();
    const warm = await Promise.all(workers.map((w) => w.run(prompt, genTokens)));
    const warmWrong = warm.filter((g) => ref && g.tokens.join() !== ref.join()).length;
    log(`${shape} soak: ${tenants} tenants warm in ${((performance.now() - t) / 1000).toFixed(1)} s${warmWrong ? `, ${warmWrong} wrong` : ''}`);
    const end = performance.now() + soakS * 1000;
    // every sample also goes to the result file: a soak cut short (a device call's limit) still
    // leaves what it measured
    const sampleAndSave = () => {
      rec.sample();
      progress({ shape, soakS, partial: true, ...rec.summary(STALL_GOAL_MS) });
    };
    sampler = setInterval(sampleAndSave, sampleS * 1000);
    // the last sample at the end, while every VM is still attached: growth compares like with like
    const last = setTimeout(() => {
      clearInterval(sampler);
      sampleAndSave();
    }, soakS * 1000);
    let hostileDone = Promise.resolve();
    if (hostile) {
      const bin = twinBinary();
      const mods = twinModules(tmp);
      const sock = s.sockets[tenants]!;
      // on for HOSTILE_ON of every HOSTILE_CYCLE: the tenants' token waits beside it and without it
      // in the same run
      hostileDone = (async () => {
        while (performance.now() < end) {
          endlessRuns++;
          rec.setHostile(true);
          bad = twin(bin, sock, ['--dir', mods, '--endless', '100000']);
          const stop = Math.min(end - performance.now() + 100, soakS * 1000 * HOSTILE_ON);
          const timer = setTimeout(() => bad?.kill('SIGKILL'), Math.max(0, stop));
          await bad.closed;
          clearTimeout(timer);
          rec.setHostile(false);
          for (const r of bad.records) {
            if (r.rec.kind === 'PHASE' && r.rec.data.phase === 'endless-start') endless.started = (endless.started ?? 0) + 1;
            if (r.rec.kind === 'CHECK' && r.rec.data.check === 'program-endless') {
              const k = String(r.rec.data.outcome ?? 'none');
              endless[k] = (endless[k] ?? 0) + 1;
            }
          }
          bad = null;
          await new Promise((r) => setTimeout(r, Math.max(0, Math.min(end - performance.now(), soakS * 1000 * (HOSTILE_CYCLE - HOSTILE_ON)))));
        }
      })();
    }
    await Promise.all(workers.map(async (w, i) => {
      while (performance.now() < end) {
        try {
          const t0 = performance.now();
          rec.gen(i, await w.run(prompt, genTokens), ref, t0);
        } catch (e) {
          rec.error(i, (await serverDied(e as Error, srv)).message);
          return;
        }
      }
    }));
    await hostileDone;
    clearTimeout(last);
    clearInterval(sampler);
    rec.close();
    const sum = rec.summary(STALL_GOAL_MS);
    log(`${shape} soak: ${sum.requests} requests, ${sum.tokens} tokens, ${sum.wrong} wrong, ${sum.errors} errors; RSS ${sum.memory.baselineRssMiB} → ${sum.memory.lastRssMiB} MiB (${sum.memory.rssGrowthPct} %), fds ${sum.memory.baselineFds} → ${sum.memory.lastFds}; longest token wait ${sum.tokenWaitMs.maxGap} ms`);
    return {
      shape, soakS, promptTokens, genTokens, baselineS, sampleS, warmWrong,
      against: ref ? 'the one-tenant vugpu ids' : 'nothing (no one-tenant reference)',
      ...(hostile ? { hostile: { twins: endlessRuns, launches: endless, onS: soakS * HOSTILE_ON, cycleS: soakS * HOSTILE_CYCLE } } : {}),
      ...sum,
      note: 'windows: per --sample-s, the requests that ended in it and the server\'s RSS and open descriptors at its end; memory growth from the first sample after the warm-up (baselineAtS) to the last; tokenWaitMs: the longest wait for one generated token per request (maxGap over all, p99 of the per-request longest), and the median time per generated token',
    };
  } catch (e) {
    throw await serverDied(e as Error, srv);
  } finally {
    clearInterval(sampler);
    (bad as Twin | null)?.kill('SIGKILL');
    await Promise.all(workers.map((x) => x.close()));
    await srv.stop();
  }
}

/** A worker's error says "device lost" also when the server under it crashed: say which. */
async function serverDied(e: Error, srv: ServerProcess | undefined): Promise<Error> {
  await new Promise((r) => setTimeout(r, 500)); // the server's exit may be reported after the worker's error
  if (srv && !srv.alive) e.message += `\n(vugpu serve had exited; its last lines:)\n${srv.tail(8)}`;
  return e;
}

function twinEnv(icd: string, socket: string): Record<string, string> {
  // vugpu's driver alone: the loader must not find the host's driver beside it
  return { VK_DRIVER_FILES: icd, VK_ICD_FILENAMES: icd, VUGPU_SOCKET: socket, GGML_VK_VISIBLE_DEVICES: '0' };
}
function nativeEnv(icd: string): Record<string, string> {
  // ggml-vulkan skips CPU-type devices (lavapipe) unless named
  const same: Record<string, string> = nativeFeatures === 'vugpu'
    ? { GGML_VK_DISABLE_COOPMAT: '1', GGML_VK_DISABLE_COOPMAT2: '1', GGML_VK_DISABLE_INTEGER_DOT_PRODUCT: '1', GGML_VK_DISABLE_BFLOAT16: '1' }
    : {};
  return { VK_DRIVER_FILES: icd, VK_ICD_FILENAMES: icd, GGML_VK_VISIBLE_DEVICES: '0', ...same };
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const modules = modulesDir();
  const icd = sides.includes('vugpu') ? vugpuIcd() : '';
  const native = nativeIcd();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-llama-'));
  const result: Record<string, unknown> = {
    complete: false,
    config: { watchdogMs: watchdogMs ?? 'serve default', policy: policy ?? 'serve default', timesliceAlways, soakS, hostile, quick, shapes, type: wtype, promptTokens, genTokens, rounds, tenants, sides, flashAttention: flash ?? 'library default', nativeFeatures, engine: 'vulkan', mode: 'fv', nativeIcd: native, node: process.version,
      loadAvgAtStart: os.loadavg().map((x) => +x.toFixed(2)) },
    oneTenant: {} as Record<string, unknown>, counts: {} as Record<string, unknown>, guestCounts: {} as Record<string, unknown>,
    tenants: {} as Record<string, unknown>, soak: {} as Record<string, unknown>,
    skipped: [] as string[], errors: [] as string[],
  };
  // the result's name: the host's Vulkan device as the server sees it (lavapipe, h200, …)
  const device = str('device') ?? resultDevice(vulkanDevices()[0]?.name);
  const save = (quiet = false) => {
    const f = writeBenchResult(BENCH, device, result, variant);
    if (!quiet) log(`wrote ${path.relative(repoRoot, f)}`);
  };
  const phase = async (name: string, minS: number, fn: () => Promise<Record<string, unknown>>, into: Record<string, unknown>, key: string) => {
    if (timeLeftS() < minS) {
      (result.skipped as string[]).push(`${name}: ${timeLeftS().toFixed(0)} s left of --deadline-s`);
      log(`skipping ${name}: out of time`);
      return undefined;
    }
    log(`${name}…`);
    try {
      const r = await fn();
      into[key] = r;
      save();
      return r;
    } catch (e) {
      const msg = `${name}: ${(e as Error).message}`;
      (result.errors as string[]).push(msg.slice(0, 4000));
      console.error(`bench:llama: ${msg}`);
      save();
      return undefined;
    }
  };
  let failed = false;
  const models = new Map(shapes.map((sh) => [sh, modelFile(sh)]));
  for (const p of models.values()) p.catch(() => {}); // awaited below, shape by shape
  for (const shape of shapes) {
    let model: string;
    try {
      model = await models.get(shape)!;
    } catch (e) {
      (result.errors as string[]).push((e as Error).message);
      failed = true;
      continue;
    }
    const one = await phase(`${shape}: one tenant`, 30, () => oneTenant(shape, model, modules, icd, native, tmp, result.counts as Record<string, unknown>,
      result.guestCounts as Record<string, unknown>), result.oneTenant as Record<string, unknown>, shape);
    if (!one || one.tokensIdentical === false || Object.keys(one.sideErrors as object).length) failed = true;
    if (soakS > 0) {
      const ref = (one?.tokensBySide as Record<string, number[]> | undefined)?.vugpu;
      const r = one?.sideErrors && 'vugpu' in (one.sideErrors as object) ? undefined : await phase(`${shape}: soak`, soakS + 60,
        () => soak(shape, model, modules, icd, tmp, ref, (partial) => {
          (result.soak as Record<string, unknown>)[shape] = partial;
          save(true);
        }), result.soak as Record<string, unknown>, shape);
      const g = r?.goals as Record<string, boolean | null> | undefined;
      if (!r || !ref || !g?.everyStreamVerified || r.warmWrong) failed = true;
    } else if (tenants > 0) {
      // a side that failed alone is not tried eight times over
      const oneFailed = Object.keys((one?.sideErrors as object | undefined) ?? {});
      // one TCG guest is what this host affords: the guest side is not multiplied
      const useSides = sides.filter((sd) => sd !== 'guest' && !oneFailed.includes(sd));
      for (const sd of oneFailed.filter((x) => x !== 'guest')) (result.skipped as string[]).push(`${shape}: ${tenants} tenants, ${sd}: it failed with one tenant`);
      const many = useSides.length === 0 ? undefined : await phase(`${shape}: ${tenants} tenants`, 60,
        () => manyTenants(shape, model, modules, icd, native, tmp, one?.tokensBySide as Record<string, number[]> | undefined, useSides), result.tenants as Record<string, unknown>, shape);
      if (!many || (many.streams as { wrong: number }).wrong > 0 || Object.keys(many.sideErrors as object).length) failed = true;
    }
  }
  result.complete = !failed && (result.skipped as string[]).length === 0 && (result.errors as string[]).length === 0;
  save();
  fs.rmSync(tmp, { recursive: true, force: true });

  type SideRes = { promptTps: number; genTps: number } | undefined;
  type Ratio = { prompt: { median: number } | null; gen: { median: number } | null } | undefined;
  type Counted = { perToken?: { dispatches: number | null; doorbells: number; submissions: number; engine?: { engineDispatches?: number } } } | undefined;
  const rows = shapes.flatMap((s) => {
    const r = (result.oneTenant as Record<string, Record<string, unknown> | undefined>)[s];
    const m = (result.tenants as Record<string, Record<string, { genTpsSum: number } | undefined>>)[s];
    return sides.map((k) => {
      const x = r?.[k] as SideRes;
      const ratio = (k === 'vugpu' ? r?.ratio : k === 'guest' ? r?.guestRatio : undefined) as Ratio;
      const c = (k === 'vugpu' ? (result.counts as Record<string, Counted>)[s] : k === 'guest' ? (result.guestCounts as Record<string, Counted>)[s] : undefined)?.perToken;
      return [s, k, x?.promptTps, ratio?.prompt?.median?.toFixed(3), x?.genTps, ratio?.gen?.median?.toFixed(3),
        r?.tokensIdentical === undefined ? '' : String(r.tokensIdentical),
        c?.dispatches ?? '', c?.engine?.engineDispatches, c?.doorbells, c?.submissions, m?.[k]?.genTpsSum];
    });
  });
  const head = ['shape', 'side', 'prompt t/s', '/native', 'gen t/s', '/native', 'same ids', 'disp/tok (driver)', 'engine disp/tok', 'doorbells/tok',
    'submissions/tok', `${tenants}× gen t/s`];
  console.log(textTable(tenants > 0 ? head : head.slice(0, -1), tenants > 0 ? rows : rows.map((x) => x.slice(0, -1))));
  return failed || !result.complete ? 1 : 0;
}

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    for (const c of children) c.kill('SIGKILL');
    process.exit(130);
  });
}
main().then((code) => process.exit(code), (e: Error) => {
  for (const c of children) c.kill('SIGKILL');
  console.error(`bench:llama: ${e.message}`);
  process.exit(1);
});
