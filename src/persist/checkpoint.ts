// The checkpoint container (docs/checkpoint.md): a memfd the fd keeper holds (or systemd's fd
// store), with a superblock and two payload slots. A checkpoint is written into the slot that
// is not current and then made current by one 4-byte store, so a process killed in the middle
// of a write leaves the previous checkpoint intact. The payload is UTF-8 JSON: a header
// {format, version, writer, time, seq} and then per-component sections (state.ts makes them).
//
// Checkpointer decides when: never per MMIO access. Changes the guest relies on once a reply
// says they are done (DMA map/unmap, IRQ set, config writes, reset, channel bind/unbind,
// runlist, MMU flushes, PV calls, …) are written synchronously before that reply goes out;
// the rest (doorbells, interrupt acknowledgements, engine progress) is coalesced into one
// write at most every `intervalMs`.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { native } from '../native.ts';
import { logger } from '../log.ts';

export const CHECKPOINT_FORMAT = 'vugpu-checkpoint';
/** The payload version this build writes and the newest it reads. */
export const CHECKPOINT_VERSION = 1;
/** The container (superblock) layout version. */
export const CONTAINER_LAYOUT = 1;
const MAGIC = 'VUGPUCKP';
const SUPER = 4096;
const NO_SLOT = 0xffffffff;
// Superblock offsets.
const O_LAYOUT = 8;
const O_ACTIVE = 12;
const O_SLOT = 16; // per slot, 32 bytes: offset f64, capacity f64, length f64, crc u32, pad
const SLOT_REC = 32;

export interface CheckpointHeader {
  format: string;
  version: number;
  writer: { build: string; node: string; pid: number };
  time: string;
  seq: number;
}

export interface Checkpoint extends CheckpointHeader {
  /** Per-component sections. */
  sections: Record<string, unknown>;
}

/** A checkpoint this build cannot use: the message is one sentence for the operator. */
export class CheckpointError extends Error {
  override name = 'CheckpointError';
}

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let buildId: string | null = null;

/** package version + git commit of this tree (what wrote a checkpoint). */
export function writerBuild(): string {
  if (buildId !== null) return buildId;
  let version = '0';
  try {
    version = (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    // keep 0
  }
  let commit = 'unknown';
  try {
    const head = readFileSync(path.join(repoRoot, '.git/HEAD'), 'utf8').trim();
    commit = head.startsWith('ref: ') ? readFileSync(path.join(repoRoot, '.git', head.slice(5)), 'utf8').trim() : head;
    commit = commit.slice(0, 12);
  } catch {
    // not a git checkout
  }
  buildId = `${version}+${commit}`;
  return buildId;
}

export function crc32(b: Uint8Array): number {
  // zlib's CRC-32 is this one (IEEE, reflected, ~0 in and out): native, and no cold JS loop over
  // the checkpoint in a restarting process's pause.
  return zlibCrc32(b) >>> 0;
}

/** The memfd and its two slots. */
export class CheckpointStore {
  readonly fd: number;
  private size: number;
  private buf: ArrayBuffer;
  private dv: DataView;
  private u8: Uint8Array;
  private seq = 0;

  private constructor(fd: number, size: number) {
    this.fd = fd;
    this.size = size;
    this.buf = native.mmap(fd, size, 0);
    this.dv = new DataView(this.buf);
    this.u8 = new Uint8Array(this.buf);
  }

  /** A new, empty store in a fresh memfd. */
  static create(initialSlot = 256 * 1024): CheckpointStore {
    const size = SUPER + 2 * initialSlot;
    const fd = native.memfdCreate('vugpu-checkpoint', size);
    if (fd < 0) throw new Error(`memfd_create(vugpu-checkpoint) failed: errno ${-fd}`);
    const s = new CheckpointStore(fd, size);
    s.u8.set(new TextEncoder().encode(MAGIC), 0);
    s.dv.setUint32(O_LAYOUT, CONTAINER_LAYOUT, true);
    for (let i = 0; i < 2; i++) {
      s.setSlot(i, SUPER + i * initialSlot, initialSlot, 0, 0);
    }
    s.dv.setUint32(O_ACTIVE, NO_SLOT, true);
    return s;
  }

  /** Map an adopted memfd (the store owns the fd). Throws CheckpointError for one this build
   * cannot read; the fd is left open then (the caller keeps it for an older build). */
  static adopt(fd: number): CheckpointStore {
    const head = new Uint8Array(SUPER);
    const n = native.pread(fd, head, 0);
    if (n < 0) throw new CheckpointError(`the checkpoint fd is unusable (errno ${-n})`);
    if (n < SUPER || new TextDecoder().decode(head.subarray(0, 8)) !== MAGIC) {
      throw new CheckpointError('the checkpoint memfd does not hold a vugpu checkpoint container');
    }
    const layout = new DataView(head.buffer).getUint32(O_LAYOUT, true);
    if (layout !== CONTAINER_LAYOUT) {
      throw new CheckpointError(`the checkpoint container has layout ${layout}; this build reads layout ${CONTAINER_LAYOUT} (written by a ${layout > CONTAINER_LAYOUT ? 'newer' : 'different'} vugpu)`);
    }
    let end = SUPER;
    const hv = new DataView(head.buffer);
    for (let i = 0; i < 2; i++) end = Math.max(end, hv.getFloat64(O_SLOT + i * SLOT_REC, true) + hv.getFloat64(O_SLOT + i * SLOT_REC + 8, true));
    return new CheckpointStore(fd, end);
  }

  private slotRec(i: number): { off: number; cap: number; len: number; crc: number } {
    const a = O_SLOT + i * SLOT_REC;
    return { off: this.dv.getFloat64(a, true), cap: this.dv.getFloat64(a + 8, true), len: this.dv.getFloat64(a + 16, true), crc: this.dv.getUint32(a + 24, true) };
  }

  private setSlot(i: number, off: number, cap: number, len: number, crc: number): void {
    const a = O_SLOT + i * SLOT_REC;
    this.dv.setFloat64(a, off, true);
    this.dv.setFloat64(a + 8, cap, true);
    this.dv.setFloat64(a + 16, len, true);
    this.dv.setUint32(a + 24, crc, true);
  }

  get active(): number {
    return this.dv.getUint32(O_ACTIVE, true);
  }

  /** Bytes of the memfd (the superblock and both slots). */
  get bytes(): number {
    return this.size;
  }

  /** Write a payload into the inactive slot and make it current. */
  write(payload: Uint8Array): void {
    const cur = this.active;
    const i = cur === 0 ? 1 : 0;
    let { off, cap } = this.slotRec(i);
    if (payload.length > cap) {
      // Grow at the end of the file; the current slot stays where it is until it is replaced.
      cap = Math.ceil((payload.length * 1.5) / 4096) * 4096;
      off = this.size;
      this.resize(off + cap);
    }
    this.u8.set(payload, off);
    this.setSlot(i, off, cap, payload.length, crc32(payload));
    this.dv.setUint32(O_ACTIVE, i, true); // the commit
  }

  /** The current payload (a copy), or null if none was ever committed. Throws CheckpointError
   * if it does not check out. */
  read(): Uint8Array | null {
    const cur = this.active;
    if (cur === NO_SLOT) return null;
    if (cur > 1) throw new CheckpointError(`the checkpoint superblock names slot ${cur}`);
    const { off, len, crc } = this.slotRec(cur);
    if (!(off >= SUPER && len >= 0 && off + len <= this.size)) throw new CheckpointError('the checkpoint superblock is corrupt');
    const payload = this.u8.slice(off, off + len);
    if (crc32(payload) !== crc) throw new CheckpointError('the checkpoint payload fails its checksum');
    return payload;
  }

  nextSeq(): number {
    return ++this.seq;
  }

  set lastSeq(n: number) {
    this.seq = Math.max(this.seq, n);
  }

  private resize(size: number): void {
    const r = native.ftruncate(this.fd, size);
    if (r < 0) throw new Error(`ftruncate(checkpoint, ${size}) failed: errno ${-r}`);
    native.munmap(this.buf);
    this.buf = native.mmap(this.fd, size, 0);
    this.dv = new DataView(this.buf);
    this.u8 = new Uint8Array(this.buf);
    this.size = size;
  }

  close(): void {
    native.munmap(this.buf);
    native.close(this.fd);
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** Encode a checkpoint (header first, so a reader can refuse a newer version cheaply). */
export function encodeCheckpoint(seq: number, sections: Record<string, unknown>, time = new Date()): Uint8Array {
  const c: Checkpoint = {
    format: CHECKPOINT_FORMAT,
    version: CHECKPOINT_VERSION,
    writer: { build: writerBuild(), node: process.version, pid: process.pid },
    time: time.toISOString(),
    seq,
    sections,
  };
  return enc.encode(JSON.stringify(c));
}

/** Decode and check a payload; throws CheckpointError with one sentence saying what is wrong. */
export function decodeCheckpoint(payload: Uint8Array): Checkpoint {
  let v: unknown;
  try {
    v = JSON.parse(dec.decode(payload));
  } catch {
    throw new CheckpointError('the checkpoint payload is not valid UTF-8 JSON');
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new CheckpointError('the checkpoint payload is not a JSON object');
  const c = v as Partial<Checkpoint>;
  if (c.format !== CHECKPOINT_FORMAT) throw new CheckpointError(`the checkpoint has format ${JSON.stringify(c.format)}, not ${CHECKPOINT_FORMAT}`);
  if (typeof c.version !== 'number' || !Number.isInteger(c.version)) throw new CheckpointError('the checkpoint has no version number');
  const by = typeof c.writer?.build === 'string' ? ` by vugpu ${c.writer.build}` : '';
  if (c.version > CHECKPOINT_VERSION) {
    throw new CheckpointError(`the checkpoint was written${by} in format version ${c.version}; this build (${writerBuild()}) reads versions up to ${CHECKPOINT_VERSION}: run that build (or a newer one) against this state`);
  }
  if (c.version < 1) throw new CheckpointError(`the checkpoint has version ${c.version}, which no vugpu writes`);
  if (c.sections === null || typeof c.sections !== 'object' || Array.isArray(c.sections)) throw new CheckpointError('the checkpoint has no sections');
  if (typeof c.seq !== 'number') throw new CheckpointError('the checkpoint has no sequence number');
  return c as Checkpoint;
}

export interface CheckpointerOptions {
  /** Longest a coalesced (asynchronous) change waits to be written, ms (default 20). */
  intervalMs?: number;
  /** Makes the sections (called for every write). */
  produce: () => Record<string, unknown>;
  /** After a checkpoint is committed (e.g. clear the journal's channel bits). */
  committed?: (seq: number) => void;
}

/** When to write: synchronously before a reply that needs it, else coalesced. */
export class Checkpointer {
  readonly store: CheckpointStore;
  private readonly produce: () => Record<string, unknown>;
  private readonly committed?: (seq: number) => void;
  private readonly intervalMs: number;
  private timer: NodeJS.Timeout | null = null;
  private syncPending = false;
  private dirtySince = 0;
  private stopped = false;
  /** Writes done, their total time, the last payload size. */
  readonly stats = { writes: 0, syncWrites: 0, totalMs: 0, maxMs: 0, bytes: 0, failures: 0 };

  constructor(store: CheckpointStore, opts: CheckpointerOptions) {
    this.store = store;
    this.produce = opts.produce;
    this.committed = opts.committed;
    this.intervalMs = opts.intervalMs ?? 20;
  }

  /** Something changed that may wait a little (coalesced). */
  dirty(): void {
    if (this.stopped || this.timer !== null) return;
    this.dirtySince = performance.now();
    this.timer = setTimeout(() => {
      this.timer = null;
      this.write(false);
    }, this.intervalMs);
  }

  /** Something changed that must be durable before the current reply goes out. */
  needSync(): void {
    this.syncPending = true;
  }

  /** Before a reply: write now if needSync() was called since the last write. */
  flushIfNeeded(): void {
    if (this.syncPending) this.write(true);
  }

  /** Write now (a handover, a test). Returns the sequence number written, or -1. */
  write(sync = true): number {
    if (this.stopped) return -1;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.syncPending = false;
    const t0 = performance.now();
    let seq = -1;
    try {
      seq = this.store.nextSeq();
      const payload = encodeCheckpoint(seq, this.produce());
      this.store.write(payload);
      this.stats.bytes = payload.length;
    } catch (err) {
      this.stats.failures++;
      logger.error({ err }, 'checkpoint write failed; the previous checkpoint stays current');
      return -1;
    }
    const ms = performance.now() - t0;
    this.stats.writes++;
    if (sync) this.stats.syncWrites++;
    this.stats.totalMs += ms;
    if (ms > this.stats.maxMs) this.stats.maxMs = ms;
    this.committed?.(seq);
    return seq;
  }

  /** No more writes (a handover wrote the last one; the process is about to exit). */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  get pendingForMs(): number {
    return this.timer === null ? 0 : performance.now() - this.dirtySince;
  }
}
