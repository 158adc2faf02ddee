// DMA map table: the client's guest-physical (IOVA) ranges and the fds behind them.
//
// Rules (libvfio-user's dma_controller_add_region / remove_region, which QEMU is tested with):
// - an identical re-map (same address, size, file offset, protection and file) is a no-op and
//   the new fd is closed; any other overlap is EINVAL (the spec says EEXIST; libvfio-user and
//   therefore every client in practice expects EINVAL);
// - unmap must match an earlier map exactly, else ENOENT; UNMAP_ALL drops everything;
// - too many maps, too many bytes, too many distinct files, or an oversized map is ENOSPC.
// fd-backed maps are mmapped (MAP_SHARED) when accepted, which also validates the fd; QEMU
// maps all guest RAM (512 MiB+) with one fd, which is just address space. fd-less maps are
// recorded but cannot be translated (message DMA is broken in QEMU's client, see notes).
// Only regular files are accepted (memfd, tmpfs, hugetlbfs): the copy engine needs them, and a
// character device such as /dev/zero would be memory the server, not the client, pays for.
// Maps of the same file share one fd (libvfio-user's fd_cache): QEMU sends the RAM memfd with
// each of its ~70 maps, and a hostile client must not make us hold thousands of fds.
// With requireSealed (the server's default), the file must be sealed against shrinking, as
// QEMU's memory-backend-memfd is: a file the client can truncate under our mmap would turn our
// next access into SIGBUS.

import { fstatSync, readFileSync } from 'node:fs';
import { native, type Extent } from '../native.ts';
import { Errno } from './protocol.ts';

const PAGE = 4096;
/** Largest accepted map (libvfio-user caps at 8 TiB on x86-64). */
export const DMA_MAX_MAP_SIZE = 2 ** 43;
/** Addresses must stay exact as JS numbers. */
const ADDR_LIMIT = 2 ** 53;

export interface DmaMapRequest {
  addr: number;
  size: number;
  offset: number; // file offset of `addr`
  readable: boolean;
  writable: boolean;
  fd: number; // -1: no fd
}

/** What callbacks and describe() see: plain data. */
export interface DmaMappingInfo {
  addr: number;
  size: number;
  offset: number;
  readable: boolean;
  writable: boolean;
  hasFd: boolean;
}

interface Mapping extends DmaMappingInfo {
  fd: number;
  /** mmap of the pages covering [offset, offset+size); null for fd-less maps. */
  ab: ArrayBuffer | null;
  delta: number; // offset of `addr`'s byte within ab
}

export type DmaFaultKind = 'unmapped' | 'no-fd' | 'read-only' | 'write-only' | 'invalid' | 'discontiguous';

export interface DmaFault {
  kind: DmaFaultKind;
  address: number;
  message: string;
}

export type TranslateResult = { ok: true; extents: Extent[] } | { ok: false; fault: DmaFault };
export type ViewResult = { ok: true; bytes: Uint8Array } | { ok: false; fault: DmaFault };

/** Per-client bounds (see limits.ts); exceeding one is ENOSPC. */
export interface DmaLimits {
  maxMaps: number;
  maxBytes: number;
  maxFiles: number;
  /** fd-backed maps need a file sealed against shrinking (F_SEAL_SHRINK), else EPERM: a client
   * that truncates a mapped file makes our accesses to it fault (SIGBUS kills the process). */
  requireSealed: boolean;
}

export const DEFAULT_DMA_LIMITS: DmaLimits = { maxMaps: 4096, maxBytes: 2 ** 40, maxFiles: 64, requireSealed: false };

const F_SEAL_SHRINK = 2;

export interface DmaTableOptions extends Partial<DmaLimits> {
  onMapped?: (m: DmaMappingInfo) => void;
  onUnmapped?: (m: DmaMappingInfo) => void;
}

/** One open file behind one or more maps (keyed by device, inode and access mode). */
interface FileRef {
  key: string;
  fd: number;
  refs: number;
  /** Stable name of the file for a checkpoint (the fd number changes across a restart). */
  id: number;
}

/** A map as a checkpoint records it: its description and its file's id (0: no fd). */
export interface DmaMapRecord extends DmaMappingInfo {
  file: number;
}

/** The whole table as plain data (src/device-model/persist.ts); the fds are named by id. */
export interface DmaTableRecord {
  maps: DmaMapRecord[];
  nextFileId: number;
  limits: DmaLimits;
}

/** Told when the table starts or stops holding a file (an fd keeper mirrors the fds). */
export type DmaFileHook = (event: 'open' | 'close', id: number, fd: number) => void;

export class DmaTable {
  private readonly maps: Mapping[] = []; // sorted by addr, non-overlapping
  private readonly files = new Map<string, FileRef>();
  private readonly fileOf = new Map<number, FileRef>(); // by fd
  private limits: DmaLimits;
  private bytes = 0;
  private nextFileId = 1;
  /** Called when a file is first held and when it is closed; errors are the hook's problem. */
  fileHook: DmaFileHook | null = null;
  private readonly onMapped?: (m: DmaMappingInfo) => void;
  private readonly onUnmapped?: (m: DmaMappingInfo) => void;

  constructor(opts: DmaTableOptions = {}) {
    this.limits = {
      maxMaps: opts.maxMaps ?? DEFAULT_DMA_LIMITS.maxMaps,
      maxBytes: opts.maxBytes ?? DEFAULT_DMA_LIMITS.maxBytes,
      maxFiles: opts.maxFiles ?? DEFAULT_DMA_LIMITS.maxFiles,
      requireSealed: opts.requireSealed ?? DEFAULT_DMA_LIMITS.requireSealed,
    };
    this.onMapped = opts.onMapped;
    this.onUnmapped = opts.onUnmapped;
  }

  get count(): number {
    return this.maps.length;
  }

  get maxMaps(): number {
    return this.limits.maxMaps;
  }

  /** Total bytes mapped (fd-backed or not). */
  get mappedBytes(): number {
    return this.bytes;
  }

  /** Distinct files (open fds) behind the maps. */
  get fileCount(): number {
    return this.files.size;
  }

  /** Change the bounds for maps added from now on (the endpoint applies its client limits). */
  setLimits(l: Partial<DmaLimits>): void {
    this.limits = { ...this.limits, ...l };
  }

  /**
   * Add a map. Returns 0 or a positive errno. On success the table owns req.fd (also when the
   * map was an identical re-map: the duplicate fd is closed). On error the caller keeps the fd.
   */
  map(req: DmaMapRequest): number {
    const { addr, size, offset } = req;
    if (size === 0 || !Number.isSafeInteger(addr) || !Number.isSafeInteger(size) || !Number.isSafeInteger(offset)) {
      return Errno.EINVAL;
    }
    if (size > DMA_MAX_MAP_SIZE) return Errno.ENOSPC;
    if (addr + size > ADDR_LIMIT) return Errno.EINVAL;
    const i = this.lowerBound(addr);
    // Candidates for overlap: the map before addr and the map at/after addr.
    const prev = i > 0 ? this.maps[i - 1] : undefined;
    const next = this.maps[i];
    if (next && next.addr === addr && next.size === size) {
      if (next.offset !== offset || next.readable !== req.readable || next.writable !== req.writable) return Errno.EINVAL;
      if (!sameFile(next.fd, req.fd)) return Errno.EINVAL;
      if (req.fd >= 0) native.close(req.fd);
      return 0;
    }
    if ((prev && prev.addr + prev.size > addr) || (next && next.addr < addr + size)) return Errno.EINVAL;
    if (this.maps.length >= this.limits.maxMaps) return Errno.ENOSPC;
    if (this.bytes + size > this.limits.maxBytes) return Errno.ENOSPC;

    let ab: ArrayBuffer | null = null;
    let delta = 0;
    let file: FileRef | null = null;
    if (req.fd >= 0) {
      const key = fileKey(req.fd);
      if (key === null) return Errno.EINVAL; // not a regular file
      if (this.limits.requireSealed) {
        const seals = native.getSeals(req.fd);
        if (seals < 0 || (seals & F_SEAL_SHRINK) === 0) return Errno.EPERM;
      }
      file = this.files.get(key) ?? null;
      if (file === null && this.files.size >= this.limits.maxFiles) return Errno.ENOSPC;
      const base = offset - (offset % PAGE);
      delta = offset - base;
      const length = Math.ceil((delta + size) / PAGE) * PAGE;
      try {
        ab = native.mmap(file?.fd ?? req.fd, length, base, !req.writable);
      } catch {
        return Errno.EINVAL; // not mappable (beyond EOF, permissions, ...)
      }
      if (file === null) {
        file = { key, fd: req.fd, refs: 0, id: this.nextFileId++ };
        this.files.set(key, file);
        this.fileOf.set(req.fd, file);
        this.fileHook?.('open', file.id, file.fd);
      } else {
        native.close(req.fd); // the file is already open: keep one fd per file
      }
      file.refs++;
    }
    const m: Mapping = {
      addr,
      size,
      offset,
      readable: req.readable,
      writable: req.writable,
      hasFd: file !== null,
      fd: file?.fd ?? -1,
      ab,
      delta,
    };
    this.maps.splice(i, 0, m);
    this.bytes += size;
    this.onMapped?.(info(m));
    return 0;
  }

  /** Remove the map that exactly matches [addr, addr+size). Returns 0 or ENOENT. */
  unmap(addr: number, size: number): number {
    const i = this.lowerBound(addr);
    const m = this.maps[i];
    if (!m || m.addr !== addr || m.size !== size) return Errno.ENOENT;
    this.maps.splice(i, 1);
    this.release(m);
    return 0;
  }

  /** Drop every map (UNMAP_ALL, disconnect). */
  unmapAll(): void {
    const all = this.maps.splice(0, this.maps.length);
    for (const m of all) this.release(m);
  }

  /**
   * Resolve [gpa, gpa+len) to fd extents, following adjacent maps. Fails on a gap, an fd-less
   * map, or a write to a read-only map. The extents' fds belong to the table: valid until the
   * map's onUnmapped callback.
   */
  translate(gpa: number, len: number, write: boolean): TranslateResult {
    if (!(len > 0) || !Number.isSafeInteger(gpa) || !Number.isSafeInteger(len) || gpa + len > ADDR_LIMIT) {
      return fail('invalid', gpa, `invalid DMA range ${hex(gpa)}+${len}`);
    }
    const extents: Extent[] = [];
    let at = gpa;
    const end = gpa + len;
    let i = this.indexOf(at);
    while (at < end) {
      const m = i >= 0 ? this.maps[i] : undefined;
      if (!m || m.addr > at || m.addr + m.size <= at) return fail('unmapped', at, `no DMA map covers ${hex(at)}`);
      const f = check(m, at, write);
      if (f) return { ok: false, fault: f };
      const n = Math.min(end, m.addr + m.size) - at;
      const off = m.offset + (at - m.addr);
      const last = extents[extents.length - 1];
      if (last && last.fd === m.fd && last.offset + last.length === off) {
        last.length += n;
        last.mem = last.memOffset = undefined; // two maps' mappings are not one range of memory
      } else {
        // the map's own mapping, for readers that need no system call (the engine's bus.ts)
        extents.push({ fd: m.fd, offset: off, length: n, mem: m.ab ?? undefined, memOffset: m.ab ? m.delta + (at - m.addr) : undefined });
      }
      at += n;
      i++;
    }
    return { ok: true, extents };
  }

  /** A live CPU view of [gpa, gpa+len), which must lie within one fd-backed map. The view is
   * detached (length 0) once the map goes away. */
  view(gpa: number, len: number, write = false): ViewResult {
    const i = this.indexOf(gpa);
    const m = i >= 0 ? this.maps[i] : undefined;
    if (!m || m.addr > gpa || m.addr + m.size <= gpa) return fail('unmapped', gpa, `no DMA map covers ${hex(gpa)}`);
    const f = check(m, gpa, write);
    if (f) return { ok: false, fault: f };
    if (!(len >= 0) || gpa + len > m.addr + m.size) {
      return fail('discontiguous', m.addr + m.size, `range ${hex(gpa)}+${len} leaves the map at ${hex(m.addr)}`);
    }
    return { ok: true, bytes: new Uint8Array(m.ab!, m.delta + (gpa - m.addr), len) };
  }

  /** Copy guest memory at gpa into dst (across adjacent maps). Returns null or the fault. */
  read(gpa: number, dst: Uint8Array): DmaFault | null {
    return this.copy(gpa, dst, false);
  }

  /** Copy src into guest memory at gpa (across adjacent maps). Returns null or the fault. */
  write(gpa: number, src: Uint8Array): DmaFault | null {
    return this.copy(gpa, src, true);
  }

  /** Plain, serializable description of the table. */
  describe(): DmaMappingInfo[] {
    return this.maps.map(info);
  }

  /** The table as a checkpoint holds it (fds by file id). */
  record(): DmaTableRecord {
    return {
      maps: this.maps.map((m) => ({ ...info(m), file: m.fd >= 0 ? this.fileOf.get(m.fd)!.id : 0 })),
      nextFileId: this.nextFileId,
      limits: { ...this.limits },
    };
  }

  /** The files the table holds: id and fd. */
  fileIds(): { id: number; fd: number }[] {
    return [...this.files.values()].map((f) => ({ id: f.id, fd: f.fd }));
  }

  /**
   * Rebuild an empty table from a record (a restart): fdOf(id) gives each file's adopted fd,
   * which the table owns from then on, and every map is mmapped again. The maps were accepted
   * once, so only what an fd must be (a regular file that can be mapped) is checked again. On
   * any error the table is left empty, no fd is closed, and the error is thrown.
   */
  load(r: DmaTableRecord, fdOf: (id: number) => number): void {
    if (this.maps.length > 0 || this.files.size > 0) throw new Error('DMA table: load into a table that has maps');
    this.loadMaps(r, fdOf, null);
  }

  /**
   * load(), over maps loaded earlier from an older record of the same table: an upgrade's
   * successor maps its predecessor's DMA files while the predecessor still serves (mmapping is
   * cheap, but each mapping's ArrayBuffer adds to V8's external memory, which starts a garbage
   * collection: in the handover's pause, that was most of the restore). A map whose record is
   * unchanged keeps its mapping; the others are mapped anew or unmapped. File ids name the
   * same file in both records (the table never reuses an id), so every file takes the fd that
   * fdOf gives and the earlier duplicate is closed. On error the earlier maps stay as they were.
   */
  reload(r: DmaTableRecord, fdOf: (id: number) => number): void {
    if (this.maps.length === 0 && this.files.size === 0) {
      this.loadMaps(r, fdOf, null);
      return;
    }
    const earlier = this.maps.splice(0, this.maps.length);
    const earlierFiles = [...this.files.values()];
    const earlierBytes = this.bytes;
    const sig = (m: DmaMapRecord) => `${m.addr}:${m.size}:${m.offset}:${m.file}:${m.readable}:${m.writable}`;
    const reusable = new Map<string, Mapping>();
    for (const m of earlier) {
      const file = m.fd >= 0 ? this.fileOf.get(m.fd) : undefined;
      if (m.ab && file) reusable.set(sig({ ...m, file: file.id }), m);
    }
    this.files.clear();
    this.fileOf.clear();
    this.bytes = 0;
    const reused = new Set<Mapping>();
    try {
      this.loadMaps(r, fdOf, (rec) => {
        const m = reusable.get(sig(rec));
        if (!m || reused.has(m)) return null;
        reused.add(m);
        return m;
      });
    } catch (err) {
      this.maps.push(...earlier);
      for (const f of earlierFiles) {
        this.files.set(f.key, f);
        this.fileOf.set(f.fd, f);
      }
      this.bytes = earlierBytes;
      throw err;
    }
    for (const m of earlier) if (!reused.has(m) && m.ab) native.munmap(m.ab);
    for (const f of earlierFiles) {
      if (this.fileOf.has(f.fd)) continue; // fdOf handed the same fd again
      native.forgetFd(f.fd);
      native.close(f.fd);
    }
  }

  private loadMaps(r: DmaTableRecord, fdOf: (id: number) => number, reuse: ((rec: DmaMapRecord) => Mapping | null) | null): void {
    const byId = new Map<number, FileRef>();
    const fresh: ArrayBuffer[] = [];
    try {
      for (const m of r.maps) {
        if (!Number.isSafeInteger(m.addr) || !Number.isSafeInteger(m.size) || m.size <= 0 || !Number.isSafeInteger(m.offset)) {
          throw new Error(`DMA map record ${hex(m.addr)}+${m.size} is malformed`);
        }
        const prev = this.maps[this.maps.length - 1];
        if (prev && prev.addr + prev.size > m.addr) throw new Error(`DMA map records overlap or are unsorted at ${hex(m.addr)}`);
        let file: FileRef | null = null;
        let ab: ArrayBuffer | null = null;
        let delta = 0;
        if (m.file !== 0) {
          file = byId.get(m.file) ?? null;
          if (file === null) {
            const fd = fdOf(m.file);
            const key = fileKey(fd);
            if (key === null) throw new Error(`DMA file ${m.file}: fd ${fd} is not a regular file`);
            file = { key, fd, refs: 0, id: m.file };
            byId.set(m.file, file);
          }
          const kept = reuse?.(m) ?? null;
          if (kept) {
            ab = kept.ab;
            delta = kept.delta;
          } else {
            const base = m.offset - (m.offset % PAGE);
            delta = m.offset - base;
            ab = native.mmap(file.fd, Math.ceil((delta + m.size) / PAGE) * PAGE, base, !m.writable);
            fresh.push(ab);
          }
          file.refs++;
        }
        this.maps.push({
          addr: m.addr, size: m.size, offset: m.offset, readable: m.readable, writable: m.writable,
          hasFd: file !== null, fd: file?.fd ?? -1, ab, delta,
        });
        this.bytes += m.size;
      }
    } catch (err) {
      for (const ab of fresh) native.munmap(ab);
      this.maps.length = 0;
      this.bytes = 0;
      throw err;
    }
    for (const f of byId.values()) {
      this.files.set(f.key, f);
      this.fileOf.set(f.fd, f);
    }
    this.nextFileId = Math.max(r.nextFileId, ...[...byId.keys()].map((id) => id + 1));
    this.limits = { ...this.limits, ...r.limits };
  }

  private copy(gpa: number, buf: Uint8Array, write: boolean): DmaFault | null {
    let done = 0;
    while (done < buf.length) {
      const at = gpa + done;
      const i = this.indexOf(at);
      const m = i >= 0 ? this.maps[i] : undefined;
      if (!m || m.addr > at || m.addr + m.size <= at) return fault('unmapped', at, `no DMA map covers ${hex(at)}`);
      const f = check(m, at, write);
      if (f) return f;
      const n = Math.min(buf.length - done, m.addr + m.size - at);
      const mem = new Uint8Array(m.ab!, m.delta + (at - m.addr), n);
      if (write) mem.set(buf.subarray(done, done + n));
      else buf.set(mem, done);
      done += n;
    }
    return null;
  }

  private release(m: Mapping): void {
    this.onUnmapped?.(info(m));
    if (m.ab) native.munmap(m.ab);
    this.bytes -= m.size;
    const file = m.fd >= 0 ? this.fileOf.get(m.fd) : undefined;
    if (file !== undefined && --file.refs === 0) {
      this.files.delete(file.key);
      this.fileOf.delete(file.fd);
      this.fileHook?.('close', file.id, file.fd);
      native.forgetFd(file.fd); // the copy engine may cache a mapping of this file
      native.close(file.fd);
    }
    m.ab = null;
  }

  /** First index whose addr >= a. */
  private lowerBound(a: number): number {
    let lo = 0;
    let hi = this.maps.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.maps[mid]!.addr < a) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Index of the last map whose addr <= a (-1 if none). */
  private indexOf(a: number): number {
    const i = this.lowerBound(a);
    if (i < this.maps.length && this.maps[i]!.addr === a) return i;
    return i - 1;
  }
}

function info(m: Mapping): DmaMappingInfo {
  return { addr: m.addr, size: m.size, offset: m.offset, readable: m.readable, writable: m.writable, hasFd: m.hasFd };
}

function check(m: Mapping, at: number, write: boolean): DmaFault | null {
  if (m.fd < 0) return fault('no-fd', at, `DMA map at ${hex(m.addr)} has no fd (message DMA is not supported)`);
  if (write && !m.writable) return fault('read-only', at, `DMA map at ${hex(m.addr)} is read-only`);
  if (!write && !m.readable) return fault('write-only', at, `DMA map at ${hex(m.addr)} is not readable`);
  return null;
}

function fault(kind: DmaFaultKind, address: number, message: string): DmaFault {
  return { kind, address, message };
}

function fail(kind: DmaFaultKind, address: number, message: string): { ok: false; fault: DmaFault } {
  return { ok: false, fault: fault(kind, address, message) };
}

function hex(n: number): string {
  return `0x${n.toString(16)}`;
}

const O_ACCMODE = 3;

/** Identity of a regular file as opened by fd (device, inode, access mode), or null if fd is
 * not a regular file. The access mode is part of it because a read-only fd cannot back a
 * writable map of the same file. */
function fileKey(fd: number): string | null {
  let st;
  try {
    st = fstatSync(fd, { bigint: true });
  } catch {
    return null;
  }
  if (!st.isFile()) return null;
  let mode = 'rw';
  try {
    const m = /^flags:\s*([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'latin1'));
    if (m) mode = String(Number.parseInt(m[1]!, 8) & O_ACCMODE);
  } catch {
    return `fd:${fd}`; // no /proc: do not share fds
  }
  return `${st.dev}:${st.ino}:${mode}`;
}

/** Same underlying file (libvfio-user fd_cache_is_same_file), or both absent. */
function sameFile(a: number, b: number): boolean {
  if (a < 0 || b < 0) return a < 0 && b < 0;
  try {
    const sa = fstatSync(a, { bigint: true });
    const sb = fstatSync(b, { bigint: true });
    return sa.dev === sb.dev && sa.ino === sb.ino;
  } catch {
    return false;
  }
}
