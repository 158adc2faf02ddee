// A long-lived llama.cpp process: loads node-llama-cpp's prebuilt build and one model once, then
// runs greedy generations on request. bench:llama (bench/llama.ts) interleaves the native device
// and the vugpu driver with it round by round without paying model loading and pipeline creation
// in every measurement; the restart tests keep one llama.cpp process across server restarts with
// it, on the host and in a guest (guest/vkapp/vkapp.sh `worker`, requests on a serial port).
// Standalone (no project imports), like llama-run.ts, so the same file runs from a checkout, from
// the offline bundle and in the guest's application layer.
//
//   node llama-worker.ts --modules DIR --model FILE [--gpu vulkan|cpu] [--ctx N] [--batch N]
//                        [--flash-attention auto|on|off] [--record]
// stdin, one JSON object a line: { id, prompt: [token ids], tokens: N } → stdout, one line each:
// { id, tokens: [ids], promptMs, genMs, maxGapMs } or { id, error }. The first stdout line is
// { ready: true, device } once the model and its context are loaded (or { error } and exit 1).
// With --record every stdout line is a guest console record (`VUGPU-LLAMA_WORKER {...}`,
// src/vm/console.ts). After each answer, `LLAMA-WORKER-DONE <id>` goes to stderr: everything the
// Vulkan driver logged there for that request (VUGPU_VK_DEBUG) came before it, on the same
// descriptor. The process ends at the end of stdin.
import path from 'node:path';
import readline from 'node:readline';
import { pathToFileURL } from 'node:url';

const argv = process.argv.slice(2);
const record = argv.includes('--record');
if (record) argv.splice(argv.indexOf('--record'), 1);

function say(o: object): void {
  process.stdout.write(`${record ? 'VUGPU-LLAMA_WORKER ' : ''}${JSON.stringify(o)}\n`);
}

function fail(msg: string): never {
  say({ error: msg });
  process.exit(1);
}

const opt: Record<string, string> = { gpu: 'vulkan', ctx: '1024', batch: '512' };
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i]!;
  if (!/^--(modules|model|gpu|ctx|batch|flash-attention)$/.test(k)) fail(`unknown argument ${k}`);
  if (argv[i + 1] === undefined) fail(`${k} needs a value`);
  opt[k.slice(2)] = argv[i + 1]!;
}
if (!opt.modules || !opt.model) fail('--modules and --model are required');
if (opt.gpu !== 'vulkan' && opt.gpu !== 'cpu') fail(`--gpu is vulkan or cpu, not ${opt.gpu}`);
for (const k of ['ctx', 'batch']) if (!/^[1-9]\d*$/.test(opt[k]!)) fail(`--${k} must be a positive integer`);
const fa = opt['flash-attention'];
if (fa !== undefined && !['auto', 'on', 'off'].includes(fa)) fail(`--flash-attention is auto, on or off, not ${fa}`);

const entry = path.join(opt.modules, 'node_modules/node-llama-cpp/dist/index.js');
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href).catch((e: Error) =>
  fail(`cannot load node-llama-cpp from ${opt.modules}: ${e.message}`),
);
let llama;
let model;
let context;
let device = 'cpu';
try {
  llama = await getLlama({
    gpu: opt.gpu === 'vulkan' ? 'vulkan' : false,
    build: 'never',
    usePrebuiltBinaries: true,
    progressLogs: false,
    logLevel: process.env.LLAMA_RUN_VERBOSE ? LlamaLogLevel.debug : LlamaLogLevel.error,
  });
  if (opt.gpu === 'vulkan') device = (await llama.getGpuDeviceNames()).join(', ');
  model = await llama.loadModel({ modelPath: opt.model, gpuLayers: opt.gpu === 'vulkan' ? 'max' : 0 });
  context = await model.createContext({
    contextSize: Number(opt.ctx),
    batchSize: Number(opt.batch),
    ...(fa === undefined ? {} : { flashAttention: fa === 'auto' ? 'auto' : fa === 'on' }),
  });
} catch (e) {
  fail(`loading failed: ${(e as Error).message}`);
}
const seq = context.getSequence();
say({ ready: true, device });

interface Request { id: number; prompt: number[]; tokens: number }

async function generate(r: Request): Promise<{ tokens: number[]; promptMs: number; genMs: number; maxGapMs: number }> {
  await seq.clearHistory();
  const out: number[] = [];
  const t0 = performance.now();
  let t1 = 0;
  let last = 0;
  let maxGap = 0;
  // greedy: the same model and prompt give the same ids on every correct device
  for await (const t of seq.evaluate(r.prompt, { temperature: 0 })) {
    const now = performance.now();
    if (out.length === 0) t1 = now;
    else maxGap = Math.max(maxGap, now - last);
    last = now;
    out.push(t as number);
    if (out.length >= r.tokens) break;
  }
  const t2 = performance.now();
  // the first token comes out of the prompt's evaluation; the rest are generation. maxGapMs: the
  // longest wait for one generated token (a stall a neighbour caused shows there)
  return { tokens: out, promptMs: t1 - t0, genMs: t2 - t1, maxGapMs: maxGap };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let r: Request;
  try {
    r = JSON.parse(line) as Request;
    if (!Number.isInteger(r.id) || !Array.isArray(r.prompt) || r.prompt.length === 0 || !Number.isInteger(r.tokens) || r.tokens < 1) {
      throw new Error('a request is { id, prompt: [token ids], tokens: N >= 1 }');
    }
  } catch (e) {
    say({ id: -1, error: (e as Error).message });
    continue;
  }
  try {
    say({ id: r.id, ...(await generate(r)) });
  } catch (e) {
    say({ id: r.id, error: (e as Error).message });
  }
  process.stderr.write(`LLAMA-WORKER-DONE ${r.id}\n`);
}
await context.dispose();
await model.dispose();
await llama.dispose();
