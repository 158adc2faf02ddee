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
}

export interface WindowRef {
  id: number;
  address: bigint;
  release(): void;
}

export class WindowCache {
  private vramFd: number;
  private max: number;
  private entries = new Map<string, Entry>();
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
    let key = readonly ? (shared ? 's' : 'r') : 'w';
    for (const e of extents) key += `${e.offset}+${e.length},`;
    let ent = this.entries.get(key);
    if (ent) {
      this.hits++;
    } else {
      this.misses++;
      ent = { win: native.mapWindow(extents, readonly, shared), users: 0, lastUse: 0 };
      this.entries.set(key, ent);
    }
    ent.users++;
    ent.lastUse = ++this.clock;
    // Only after users++: a full cache must not evict (unmap) the window being handed out.
    this.evict();
    const e = ent;
    let released = false;
    return {
      id: e.win.id,
      address: e.win.address,
      release: () => {
        if (released) return;
        released = true;
        e.users--;
        this.evict();
      },
    };
  }

  private evict(): void {
    while (this.entries.size > this.max) {
      let victim: [string, Entry] | null = null;
      for (const kv of this.entries) if (kv[1].users === 0 && (!victim || kv[1].lastUse < victim[1].lastUse)) victim = kv;
      if (!victim) return;
      this.entries.delete(victim[0]);
      native.unmapWindow(victim[1].win.id);
    }
  }

  /** Unmap every idle window (engine close); windows in use go when released. */
  clear(): void {
    const max = this.max;
    this.max = 0;
    this.evict();
    this.max = max;
  }
}
