// Helpers shared by the per-component persist.ts files (src/gpu, src/aggregator,
// src/device-model): state is plain JSON data, each section carries a version number, binary
// state travels as base64, and fds never appear inside — they are named by stable keys and
// handed to restore in a Map (docs/architecture.md "State"). A leaf: imports nothing.

/** A checkpoint section this build cannot read (newer, unknown, or malformed). */
export class StateError extends Error {
  override name = 'StateError';
}

/** Fds adopted from the keeper (or systemd's fd store), by stable name. */
export type AdoptedFds = ReadonlyMap<string, number>;

/** Check a section's envelope and return it typed; throws StateError with what is wrong. */
export function section<T extends { version: number }>(what: string, raw: unknown, version: number): T {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new StateError(`${what} state: not an object`);
  const v = (raw as { version?: unknown }).version;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new StateError(`${what} state: no version number`);
  if (v > version) throw new StateError(`${what} state has version ${v}; this build reads up to ${version} (written by a newer vugpu)`);
  if (v !== version) throw new StateError(`${what} state has version ${v}, which this build does not read (it reads ${version})`);
  return raw as T;
}

/** Throw a StateError unless cond holds. */
export function need(cond: unknown, what: string): asserts cond {
  if (!cond) throw new StateError(what);
}

export function isNum(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

export function numArray(v: unknown, what: string, length?: number): number[] {
  need(Array.isArray(v) && v.every(isNum), `${what}: not an array of numbers`);
  need(length === undefined || v.length === length, `${what}: ${v.length} entries, expected ${length}`);
  return v.slice();
}

export function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/** Decode into dst (whose length must match exactly). */
export function fromBase64(s: unknown, dst: Uint8Array, what: string): void {
  need(typeof s === 'string', `${what}: not a base64 string`);
  const b = Buffer.from(s, 'base64');
  need(b.length === dst.length, `${what}: ${b.length} bytes, expected ${dst.length}`);
  dst.set(b);
}

/** A deep copy of plain data (what JSON would carry). */
export function plain<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/**
 * Overlay saved plain data on a fresh default object, key by key: only keys the default has
 * are taken (state of a field this build dropped is ignored), a key the save lacks keeps its
 * default (a field this build added), and a saved value must have the default's type. Objects
 * recurse; arrays and null-defaulted fields are taken whole.
 */
export function overlay<T extends object>(fresh: T, saved: unknown, what: string): T {
  need(saved !== null && typeof saved === 'object' && !Array.isArray(saved), `${what}: not an object`);
  const out = fresh as Record<string, unknown>;
  const src = saved as Record<string, unknown>;
  for (const k of Object.keys(out)) {
    if (!Object.hasOwn(src, k)) continue;
    const d = out[k];
    const v = src[k];
    if (d === null || v === null) {
      out[k] = v === null ? null : plain(v);
    } else if (Array.isArray(d)) {
      need(Array.isArray(v), `${what}.${k}: not an array`);
      out[k] = plain(v);
    } else if (typeof d === 'object') {
      out[k] = overlay(d as object, v, `${what}.${k}`);
    } else {
      need(typeof v === typeof d, `${what}.${k}: ${typeof v}, expected ${typeof d}`);
      out[k] = v;
    }
  }
  return fresh;
}

/** The fd named `name`, or a StateError naming it. */
export function adoptedFd(fds: AdoptedFds, name: string): number {
  const fd = fds.get(name);
  if (fd === undefined || !Number.isInteger(fd) || fd < 0) throw new StateError(`no adopted fd named ${name}`);
  return fd;
}
