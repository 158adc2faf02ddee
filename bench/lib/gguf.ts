// A GGUF v3 writer for llama-architecture models with seeded random weights.
//
// No model reaches these machines (no model hub, and neither npm nor Debian ships GGUF weights),
// so the llama.cpp checks make their own. The text such a model writes is nonsense; what is
// compared is token ids, which a greedy run makes deterministic for a given model and prompt.
// Format: ggml's docs/gguf.md. Only what llama.cpp reads for a llama model is written.
//
//   node bench/lib/gguf.ts --shape tiny --type q8_0 --seed 1 --out tiny.gguf
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface LlamaShape {
  embd: number;
  layers: number;
  heads: number;
  kvHeads: number;
  ffn: number;
  vocab: number;
  context: number;
}

/** tiny: for TCG guests and CI; 135m and 1b: the shapes of real small models, for GPU hosts. */
export const SHAPES: Record<string, LlamaShape> = {
  tiny: { embd: 64, layers: 2, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, context: 256 },
  '135m': { embd: 576, layers: 30, heads: 9, kvHeads: 3, ffn: 1536, vocab: 49152, context: 2048 },
  '1b': { embd: 2048, layers: 16, heads: 32, kvHeads: 8, ffn: 8192, vocab: 32000, context: 2048 },
};

export type WeightType = 'f32' | 'f16' | 'q8_0';
const GGML_TYPE = { f32: 0, f16: 1, q8_0: 8 } as const;
const ALIGN = 32;

// GGUF metadata value types.
const T_U32 = 4;
const T_I32 = 5;
const T_F32 = 6;
const T_STRING = 8;
const T_ARRAY = 9;

/** splitmix32 → a uniform stream; weights are sums of uniforms (Irwin–Hall ≈ normal). */
class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  u32(): number {
    this.s = (this.s + 0x9e3779b9) >>> 0;
    let z = this.s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  }
  /** ≈ N(0, 1) */
  normal(): number {
    let x = 0;
    for (let i = 0; i < 4; i++) x += this.u32() / 0x1_0000_0000;
    return (x - 2) * Math.sqrt(3);
  }
}

class Out {
  private chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    this.push(b);
  }
  i32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v | 0);
    this.push(b);
  }
  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  pad(align: number): void {
    const n = (align - (this.length % align)) % align;
    if (n) this.push(Buffer.alloc(n));
  }
  buffer(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

type Scalar = 'u32' | 'i32' | 'f32' | 'string';
/** A metadata value: one scalar, or an array of them (`kind[]`). */
type Meta = [string, Scalar, number | string] | [string, `${Scalar}[]`, (number | string)[]];

/** Each scalar kind: its GGUF type code and how one value is written. */
const SCALARS: Record<Scalar, [number, (o: Out, v: number | string) => void]> = {
  u32: [T_U32, (o, v) => o.u32(v as number)],
  i32: [T_I32, (o, v) => o.i32(v as number)],
  f32: [T_F32, (o, v) => o.f32(v as number)],
  string: [T_STRING, (o, v) => o.str(v as string)],
};

function writeMeta(o: Out, [key, kind, value]: Meta): void {
  o.str(key);
  const array = kind.endsWith('[]');
  const [type, write] = SCALARS[(array ? kind.slice(0, -2) : kind) as Scalar];
  if (!array) {
    o.u32(type);
    write(o, value as number | string);
    return;
  }
  const values = value as (number | string)[];
  o.u32(T_ARRAY);
  o.u32(type);
  o.u64(values.length);
  for (const v of values) write(o, v);
}

/** IEEE half from a float (round to nearest even), for F16 tensors and Q8_0 block scales. */
export function toHalf(v: number): number {
  const f = new Float32Array([v]);
  const x = new Uint32Array(f.buffer)[0]!;
  const sign = (x >>> 16) & 0x8000;
  let exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (exp << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function encode(values: Float32Array, type: WeightType): Buffer {
  if (type === 'f32') return Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  if (type === 'f16') {
    const b = Buffer.alloc(values.length * 2);
    for (let i = 0; i < values.length; i++) b.writeUInt16LE(toHalf(values[i]!), i * 2);
    return b;
  }
  // Q8_0: blocks of 32 values, an f16 scale then 32 int8.
  const blocks = values.length / 32;
  const b = Buffer.alloc(blocks * 34);
  for (let k = 0; k < blocks; k++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(values[k * 32 + i]!));
    const dh = toHalf(amax / 127);
    const d = halfToFloat(dh);
    b.writeUInt16LE(dh, k * 34);
    for (let i = 0; i < 32; i++) {
      const q = d ? Math.round(values[k * 32 + i]! / d) : 0;
      b.writeInt8(Math.max(-127, Math.min(127, q)), k * 34 + 2 + i);
    }
  }
  return b;
}

interface Tensor {
  name: string;
  dims: number[]; // ne0 (innermost) first
  type: WeightType;
  data: Buffer;
}

/** The vocabulary: <unk>, <s>, </s>, the 256 byte tokens (any text tokenizes), then fillers. */
function vocabulary(n: number): { tokens: string[]; scores: number[]; types: number[] } {
  if (n < 259 + 1) throw new Error(`vocabulary of ${n} tokens: at least 260 needed`);
  const tokens = ['<unk>', '<s>', '</s>'];
  const types = [2, 3, 3];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6);
  }
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; tokens.length < n; i++) {
    let s = '';
    let k = i;
    do {
      s += letters[k % 26];
      k = Math.floor(k / 26);
    } while (k > 0);
    tokens.push(`\u2581${s}`);
    types.push(1);
  }
  const scores = tokens.map((_, i) => (i < 259 ? 0 : -i));
  return { tokens, scores, types };
}

export function writeLlamaGguf(shape: LlamaShape, type: WeightType, seed: number): Buffer {
  const { embd, layers, heads, kvHeads, ffn, vocab, context } = shape;
  const headDim = embd / heads;
  if (!Number.isInteger(headDim) || heads % kvHeads !== 0) throw new Error('heads must divide the embedding and be a multiple of kv heads');
  const kvDim = headDim * kvHeads;
  if (type === 'q8_0' && [embd, ffn].some((d) => d % 32 !== 0)) throw new Error('q8_0 needs rows that are multiples of 32');
  const rng = new Rng(seed);
  const tensors: Tensor[] = [];
  const matrix = (name: string, cols: number, rows: number): void => {
    const v = new Float32Array(cols * rows);
    const scale = 1 / Math.sqrt(cols);
    for (let i = 0; i < v.length; i++) v[i] = rng.normal() * scale;
    tensors.push({ name, dims: [cols, rows], type, data: encode(v, type) });
  };
  const norm = (name: string): void => {
    const v = new Float32Array(embd);
    for (let i = 0; i < embd; i++) v[i] = 1 + 0.1 * rng.normal();
    tensors.push({ name, dims: [embd], type: 'f32', data: encode(v, 'f32') });
  };
  matrix('token_embd.weight', embd, vocab);
  for (let l = 0; l < layers; l++) {
    norm(`blk.${l}.attn_norm.weight`);
    matrix(`blk.${l}.attn_q.weight`, embd, embd);
    matrix(`blk.${l}.attn_k.weight`, embd, kvDim);
    matrix(`blk.${l}.attn_v.weight`, embd, kvDim);
    matrix(`blk.${l}.attn_output.weight`, embd, embd);
    norm(`blk.${l}.ffn_norm.weight`);
    matrix(`blk.${l}.ffn_gate.weight`, embd, ffn);
    matrix(`blk.${l}.ffn_up.weight`, embd, ffn);
    matrix(`blk.${l}.ffn_down.weight`, ffn, embd);
  }
  norm('output_norm.weight');
  matrix('output.weight', embd, vocab);

  const v = vocabulary(vocab);
  const meta: Meta[] = [
    ['general.architecture', 'string', 'llama'],
    ['general.name', 'string', `vugpu-random-${embd}x${layers}-seed${seed}`],
    ['general.alignment', 'u32', ALIGN],
    ['general.file_type', 'u32', type === 'f32' ? 0 : type === 'f16' ? 1 : 7],
    ['llama.context_length', 'u32', context],
    ['llama.embedding_length', 'u32', embd],
    ['llama.block_count', 'u32', layers],
    ['llama.feed_forward_length', 'u32', ffn],
    ['llama.attention.head_count', 'u32', heads],
    ['llama.attention.head_count_kv', 'u32', kvHeads],
    ['llama.rope.dimension_count', 'u32', headDim],
    ['llama.rope.freq_base', 'f32', 10000],
    ['llama.attention.layer_norm_rms_epsilon', 'f32', 1e-5],
    ['tokenizer.ggml.model', 'string', 'llama'],
    ['tokenizer.ggml.tokens', 'string[]', v.tokens],
    ['tokenizer.ggml.scores', 'f32[]', v.scores],
    ['tokenizer.ggml.token_type', 'i32[]', v.types],
    ['tokenizer.ggml.unknown_token_id', 'u32', 0],
    ['tokenizer.ggml.bos_token_id', 'u32', 1],
    ['tokenizer.ggml.eos_token_id', 'u32', 2],
  ];

  const o = new Out();
  o.push(Buffer.from('GGUF', 'ascii'));
  o.u32(3);
  o.u64(tensors.length);
  o.u64(meta.length);
  for (const m of meta) writeMeta(o, m);
  let offset = 0;
  for (const t of tensors) {
    o.str(t.name);
    o.u32(t.dims.length);
    for (const d of t.dims) o.u64(d);
    o.u32(GGML_TYPE[t.type]);
    o.u64(offset);
    offset += Math.ceil(t.data.length / ALIGN) * ALIGN;
  }
  o.pad(ALIGN);
  for (const t of tensors) {
    o.push(t.data);
    o.pad(ALIGN);
  }
  return o.buffer();
}

function usage(msg: string): never {
  process.stderr.write(`gguf: ${msg} (usage: gguf.ts --shape ${Object.keys(SHAPES).join('|')} [--type f32|f16|q8_0] [--seed N] --out FILE)\n`);
  process.exit(2);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  const args = process.argv.slice(2);
  const opt: Record<string, string> = { type: 'q8_0', seed: '1' };
  for (let i = 0; i < args.length; i += 2) {
    const k = args[i]!;
    if (!k.startsWith('--') || !['--shape', '--type', '--seed', '--out'].includes(k)) usage(`unknown argument ${k}`);
    if (args[i + 1] === undefined) usage(`${k} needs a value`);
    opt[k.slice(2)] = args[i + 1]!;
  }
  const shape = SHAPES[opt.shape ?? ''];
  if (!shape) usage(`unknown shape ${opt.shape ?? '(none)'}`);
  if (!['f32', 'f16', 'q8_0'].includes(opt.type!)) usage(`unknown type ${opt.type}`);
  if (!/^\d+$/.test(opt.seed!)) usage(`seed must be a non-negative integer, not ${opt.seed}`);
  if (!opt.out) usage('--out is required');
  try {
    fs.writeFileSync(opt.out, writeLlamaGguf(shape, opt.type as WeightType, Number(opt.seed)));
  } catch (e) {
    process.stderr.write(`gguf: cannot write ${opt.out}: ${(e as Error).message}\n`);
    process.exit(2);
  }
}
