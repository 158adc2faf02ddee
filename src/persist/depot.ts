// The fd depot: every fd that makes up a VM's device (listening and connected sockets, DMA
// files, IRQ eventfds, the VRAM memfd, the journal and checkpoint memfds) is deposited with an
// fd holder outside the process — the fd keeper (keeper.ts) or systemd's fd store (fdstore.ts)
// — while it is open, so that a successor can take them all back (docs/architecture.md
// "Surviving a restart").

/** The fd names of the restart layer's own memfds (the components name theirs: `vram`,
 * `dma:…`, `irq:…`, `listen:…`, `conn:…`). */
export const CHECKPOINT_FD = 'checkpoint';
export const JOURNAL_FD = 'journal';

/** Where fds are deposited. */
export interface FdHolder {
  put(key: string, fd: number): boolean;
  remove(keys: string[]): void;
}

/** The fds this process has deposited (its own fd numbers), mirrored to the holder. */
export class FdDepot {
  readonly held = new Map<string, number>();
  holder: FdHolder | null;
  /** Keys dropped here whose holder copy must outlive the committed checkpoint naming them. */
  private readonly retiring = new Set<string>();

  constructor(holder: FdHolder | null) {
    this.holder = holder;
  }

  put(key: string, fd: number): void {
    this.retiring.delete(key);
    this.held.set(key, fd);
    this.holder?.put(key, fd);
  }

  remove(key: string): void {
    if (!this.held.delete(key)) return;
    this.holder?.remove([key]);
  }

  /**
   * A guest dropped the file behind key (a DMA unmap, an eventfd replaced): this process forgets
   * its fd now (it is closed next), but the holder keeps its copy until commitRetired() — after
   * a checkpoint without it is committed. Until then the committed checkpoint may still name
   * it, and a successor started from that checkpoint must find it.
   */
  retire(key: string): void {
    if (!this.held.delete(key)) return;
    this.retiring.add(key);
  }

  /** A checkpoint was committed: drop the holder's copies of the keys retired before it. */
  commitRetired(): void {
    if (this.retiring.size === 0) return;
    this.holder?.remove([...this.retiring]);
    this.retiring.clear();
  }

  /** After a new keeper came up: deposit everything again. */
  redeposit(): void {
    for (const [k, fd] of this.held) this.holder?.put(k, fd);
  }
}
