// llama.cpp (node-llama-cpp's prebuilt Vulkan build, unmodified) generating greedily: the
// application the guest Vulkan driver is proven with. Standalone (no project imports): the same
// file runs on the host, in the native twin's process and in a guest.
//
//   node llama-run.ts --modules DIR --model FILE [--gpu vulkan|cpu] [--tokens N] [--prompt TEXT]
//                     [--ctx N] [--repeat N] [--record]
// DIR holds node_modules/node-llama-cpp (scripts/llama-deps.sh). Prints one JSON line:
// { tokens: [...ids], promptTokens, promptTps, genTps, device, runs: [...] }; with --record as a
// guest console record (`VUGPU-LLAMA {...}`, src/vm/console.ts).
// Environment: GGML_VK_VISIBLE_DEVICES etc. pass through to ggml-vulkan.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

function usage(msg: string): never {
  process.stderr.write(`llama-run: ${msg}\n`);
  process.exit(2);
}

const opt: Record<string, string> = { gpu: 'vulkan', tokens: '16', prompt: 'The quick brown fox jumps over the lazy dog', ctx: '256', repeat: '1' };
const argv = process.argv.slice(2);
const record = argv.includes('--record');
if (record) argv.splice(argv.indexOf('--record'), 1);
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i]!;
  if (!/^--(modules|model|gpu|tokens|prompt|ctx|repeat)$/.test(k)) usage(`unknown argument ${k}`);
  if (argv[i + 1] === undefined) usage(`${k} needs a value`);
  opt[k.slice(2)] = argv[i + 1]!;
}
if (!opt.modules || !opt.model) usage('--modules and --model are required');
if (opt.gpu !== 'vulkan' && opt.gpu !== 'cpu') usage(`--gpu is vulkan or cpu, not ${opt.gpu}`);
for (const k of ['tokens', 'ctx', 'repeat']) if (!/^[1-9]\d*$/.test(opt[k]!)) usage(`--${k} must be a positive integer`);

const entry = path.join(opt.modules, 'node_modules/node-llama-cpp/dist/index.js');
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href).catch((e: Error) =>
  usage(`cannot load node-llama-cpp from ${opt.modules}: ${e.message}`),
);
const llama = await getLlama({
  gpu: opt.gpu === 'vulkan' ? 'vulkan' : false,
  build: 'never',
  usePrebuiltBinaries: true,
  progressLogs: false,
  logLevel: process.env.LLAMA_RUN_VERBOSE ? LlamaLogLevel.debug : LlamaLogLevel.error,
});
const device = opt.gpu === 'vulkan' ? (await llama.getGpuDeviceNames()).join(', ') : 'cpu';
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: opt.gpu === 'vulkan' ? 'max' : 0 });
const nTokens = Number(opt.tokens);
const runs: { promptMs: number; genMs: number; tokens: number[] }[] = [];
for (let r = 0; r < Number(opt.repeat); r++) {
  const context = await model.createContext({ contextSize: Number(opt.ctx), batchSize: Number(opt.ctx) });
  const seq = context.getSequence();
  const input = model.tokenize(opt.prompt);
  const out: number[] = [];
  const t0 = performance.now();
  let t1 = 0;
  for await (const t of seq.evaluate(input, { temperature: 0 })) {
    if (out.length === 0) t1 = performance.now();
    out.push(t);
    if (out.length >= nTokens) break;
  }
  const t2 = performance.now();
  runs.push({ promptMs: t1 - t0, genMs: t2 - t1, tokens: out });
  await context.dispose();
}
const last = runs[runs.length - 1]!;
const promptTokens = model.tokenize(opt.prompt).length;
const med = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
process.stdout.write(
  `${record ? 'VUGPU-LLAMA ' : ''}${JSON.stringify({
    device,
    tokens: last.tokens,
    same: runs.every((r) => r.tokens.join() === last.tokens.join()),
    promptTokens,
    // the first token comes out of the prompt's evaluation; the rest are generation
    promptTps: promptTokens / (med(runs.map((r) => r.promptMs)) / 1000),
    genTps: (nTokens - 1) / (med(runs.map((r) => r.genMs)) / 1000),
    runs: runs.map((r) => ({ promptMs: +r.promptMs.toFixed(2), genMs: +r.genMs.toFixed(2) })),
  })}\n`,
);
await model.dispose();
await llama.dispose();
