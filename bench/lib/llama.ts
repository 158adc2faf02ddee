// llama.cpp runs for the guest Vulkan driver's checks and benchmark: on the host (the CPU backend
// and the host's own Vulkan device, the references), in the native twin (the vugpu ICD in a host
// process over vfio-user) and in a guest (guest/vkapp/vkapp.sh). Every run is guest/vkapp/
// llama-run.ts or llama-worker.ts, so all of them load the same model through the same unmodified
// node-llama-cpp.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from './common.ts';
import { SHAPES, writeLlamaGguf, type WeightType } from './gguf.ts';

export interface LlamaRun {
  device: string;
  tokens: number[];
  same: boolean;
  promptTokens: number;
  promptTps: number;
  genTps: number;
  runs: { promptMs: number; genMs: number }[];
}

/** node-llama-cpp with its Vulkan and CPU prebuilts (scripts/llama-deps.sh, cached). */
export function llamaModules(): string {
  return execFileSync('bash', [path.join(repoRoot, 'scripts/llama-deps.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
}

/** The model file for a shape (generated once per shape, type and seed, under the cache). */
export function llamaModel(shape: string, type: WeightType, seed = 1): string {
  const s = SHAPES[shape];
  if (!s) throw new Error(`unknown model shape ${shape}`);
  const dir = path.join(process.env.VUGPU_CACHE ?? '/var/cache/vugpu', 'models');
  const file = path.join(dir, `${shape}-${type}-seed${seed}.gguf`);
  if (!fs.existsSync(file)) {
    fs.mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, writeLlamaGguf(s, type, seed));
    fs.renameSync(tmp, file);
  }
  return file;
}

/** The host's lavapipe ICD manifest (Debian's mesa-vulkan-drivers), for host-direct runs. */
export function lavapipeIcd(): string {
  const dir = '/usr/share/vulkan/icd.d';
  const f = fs.existsSync(dir) ? fs.readdirSync(dir).find((n) => n.startsWith('lvp_icd')) : undefined;
  if (!f) throw new Error('no lavapipe ICD manifest in /usr/share/vulkan/icd.d (mesa-vulkan-drivers)');
  return path.join(dir, f);
}

export interface RunOptions {
  modules: string;
  model: string;
  gpu: 'vulkan' | 'cpu';
  tokens: number;
  repeat?: number;
  prompt?: string;
  /** Extra environment (VK_DRIVER_FILES, VUGPU_SOCKET, GGML_VK_*). */
  env?: Record<string, string>;
  timeoutMs?: number;
}

/** One llama-run.ts process on this host; rejects with its stderr when it fails. */
export function runLlama(o: RunOptions): Promise<LlamaRun> {
  const args = [
    path.join(repoRoot, 'guest/vkapp/llama-run.ts'),
    '--modules', o.modules, '--model', o.model, '--gpu', o.gpu, '--tokens', String(o.tokens),
    '--repeat', String(o.repeat ?? 1),
  ];
  if (o.prompt) args.push('--prompt', o.prompt);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 300_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = out.trim().split('\n').pop() ?? '';
      if (code === 0 && line.startsWith('{')) resolve(JSON.parse(line) as LlamaRun);
      else reject(new Error(`llama-run (${o.gpu}) failed: exit ${code ?? signal}\n${err.slice(-3000)}${out.slice(-1000)}`));
    });
  });
}

/**
 * One greedy generation by guest/vkapp/llama-worker.ts on this host, its prompt given as token
 * ids: the reference for a guest's worker (vkapp.sh `worker`) fed the same ids. Rejects with the
 * worker's output when it fails.
 */
export function workerTokens(o: { modules: string; model: string; gpu: 'vulkan' | 'cpu'; prompt: number[]; tokens: number; ctx?: number;
  env?: Record<string, string>; timeoutMs?: number }): Promise<number[]> {
  const args = [path.join(repoRoot, 'guest/vkapp/llama-worker.ts'), '--modules', o.modules, '--model', o.model, '--gpu', o.gpu, '--ctx', String(o.ctx ?? 256)];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...o.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    // the request waits in the pipe while the model loads; the end of input ends the worker
    child.stdin.end(`${JSON.stringify({ id: 1, prompt: o.prompt, tokens: o.tokens })}\n`);
    const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 300_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('{"id":1,'));
      const answer = line ? (JSON.parse(line) as { tokens?: number[]; error?: string }) : undefined;
      if (code === 0 && answer?.tokens) resolve(answer.tokens);
      else reject(new Error(`llama-worker (${o.gpu}) failed: exit ${code ?? signal}${answer?.error ? `: ${answer.error}` : ''}\n${err.slice(-3000)}${out.slice(-1000)}`));
    });
  });
}

/** A scratch directory for sockets and logs. */
export function scratch(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}
