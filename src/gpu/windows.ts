// Host windows for compute buffers. A fresh mmap per launch costs a minor page fault on every
// page the kernel touches (a sizeable share of a GEMM's time), so windows made only of VRAM extents — which
// live as long as the engine — are cached and reused when a later launch resolves to exactly the
// same extents. Translation still happens at every launch; the cache is keyed by its result, so
// a changed page table simply misses. Windows over system memory are never cached: the bus
// resolver's fds can be unmapped (DMA unmap) and the device must not keep them alive.
import { native, type Extent, type MapWindow } from '../native.ts';
import type { ReadOnlyWindows } from './programs.ts';

interface Entry {
  win: MapWindow;
  users: number;
  lastUse: number;
  key: string;
  /** A window of one VRAM extent: its mode, offset and length (the numeric index). */
  mode: string;
  offset: number;
  length: number;
}

export interface WindowRef {
  id: number;
  address: bigint;
  release(): void;
}

/** A handed-out reference to a cached window: released once. */
class CachedRef implements WindowRef {
  readonly id: number;
  readonly address: bigint;
  private released = false;
  private readonly cache: WindowCache;
  private readonly entry: Entry;
  constructor(cache: WindowCache, entry: Entry) {
    this.cache = cache;
    this.entry = entry;
    this.id = entry.win.id;
    this.address = entry.win.address;
  }
  release(): void {
    if (this.released) return;
    this.released = true;
    this.entry.users--;
    this.cache.trim();
  }
}

export class WindowCache {
  private vramFd: number;
  private max: number;
  private entries = new Map<string, Entry>();
  /** Windows of one VRAM extent by mode, offset and length: an application's bindings are such
   * windows, and building a string key per binding and launch cost more than the lookup
   * (docs/results.md, "Batched launches on the H200": a lighter launch path). */
  private single = new Map<string, Map<number, Map<number, Entry>>>();
  private clock = 0;
  hits = 0;
  misses = 0;

  // An application binds many buffers in turn: llama.cpp several hundred tensors per token. A cache
  // smaller than that working set maps (and on a GPU imports, pinning pages) at every launch.
  constructor(vramFd: number, max = 1024) {
    this.vramFd = vramFd;
    this.max = max;
  }

  /** How READ_ONLY windows are mapped for the engine's program device (ProgramBackend). */
  readOnly: ReadOnlyWindows = 'private';

  /** Map (or reuse) a window over `extents`; throws like native.mapWindow. */
  acquire(extents: Extent[], readonly: boolean): WindowRef {
    const fresh = readonly && this.readOnly === 'fresh';
    if (this.max === 0 || fresh || !extents.every((e) => e.fd === this.vramFd)) {
      // Mapped for this launch only: a staging device copies it rather than pinning its pages.
      const w = native.mapWindow(extents, readonly, false, true);
      return { id: w.id, address: w.address, release: () => native.unmapWindow(w.id) };
    }
    const shared = readonly && this.readOnly === 'shared';
    const mode = readonly ? (shared ? 's' : 'r') : 'w';
    let ent: Entry | undefined;
    if (extents.length === 1) ent = this.single.get(mode)?.get(extents[0]!.offset)?.get(extents[0]!.length);
    else ent = this.entries.get(keyOf(mode, extents));
    if (ent) {
      this.hits++;
    } else {
      this.misses++;
      const key = keyOf(mode, extents);
      const one = extents.length === 1;
      ent = { win: native.mapWindow(extents, readonly, shared), users: 0, lastUse: 0, key, mode: one ? mode : '',
        offset: one ? extents[0]!.offset : -1, length: one ? extents[0]!.length : -1 };
      this.entries.set(key, ent);
      if (one) {
        let byMode = this.single.get(mode);
        if (!byMode) this.single.set(mode, (byMode = new Map()));
        let byOffset = byMode.get(ent.offset);
        if (!byOffset) byMode.set(ent.offset, (byOffset = new Map()));
        byOffset.set(ent.length, ent);
      }
    }
    ent.users++;
    ent.lastUse = ++this.clock;
    // Only after users++: a full cache must not evict (unmap) the window being handed out.
    this.trim();
    return new CachedRef(this, ent);
  }

  /** Unmap the least recently used idle windows beyond the cache's size. */
  trim(): void {
    while (this.entries.size > this.max) {
      let victim: Entry | null = null;
      for (const e of this.entries.values()) if (e.users === 0 && (!victim || e.lastUse < victim.lastUse)) victim = e;
      if (!victim) return;
      this.entries.delete(victim.key);
      if (victim.offset >= 0) {
        const byOffset = this.single.get(victim.mode)?.get(victim.offset);
        byOffset?.delete(victim.length);
        if (byOffset?.size === 0) this.single.get(victim.mode)!.delete(victim.offset);
      }
      native.unmapWindow(victim.win.id);
    }
  }

  /** Unmap every idle window (engine close); windows in use go when released. */
  clear(): void {
    const max = this.max;
    this.max = 0;
    this.trim();
    this.max = max;
  }
}

function keyOf(mode: string, extents: Extent[]): string {
  let key = mode;
  for (const e of extents) key += `${e.offset}+${e.length},`;
  return key;
}
