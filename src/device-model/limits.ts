// What one client may make the server hold. A vfio-user client is untrusted (a compromised QEMU
// is as hostile as it gets) and the server process is shared by every VM, so everything a client
// can allocate through the protocol is bounded per connection:
//   - DMA maps: count (advertised as max_dma_maps, ServerCapabilities.maxDmaMaps), total bytes
//     (address space and VMAs of the mmaps), distinct files behind them (fds held), and files
//     the client cannot shrink under our mmaps (sealed);
//   - fds per message (max_msg_fds, ServerCapabilities.maxMsgFds) and the receive buffer
//     (max_data_xfer_size), see framing.ts;
//   - IRQ fds: one per declared vector, and they must be eventfds (a socket or pipe could block
//     the thread that writes to it);
//   - the shared thread: replies never wait for a client to read them; they are queued (one at
//     a time: requests wait meanwhile) and a client that leaves them unread is dropped;
//   - log lines: rejections are logged within a per-connection budget (LogBudget).

export interface ServerLimits {
  /** Total bytes of one client's DMA maps (fd-backed or not). QEMU maps guest RAM once plus
   * small ROM/BIOS windows, so this bounds guest RAM size. */
  dmaBytes: number;
  /** Distinct files (fds held) behind one client's DMA maps; maps of the same file share one
   * fd (QEMU maps one memfd in ~70 pieces). */
  dmaFiles: number;
  /** fd-backed DMA maps must be memfds sealed against shrinking (QEMU's memory-backend-memfd
   * is, by default): otherwise the client could truncate the file under our mmap and crash the
   * process with SIGBUS on the next access. Turn off for memory-backend-file guests. */
  dmaRequireSealed: boolean;
  /** A reply the client leaves unread (socket full) for this long drops the client; meanwhile
   * its requests are not handled and nothing waits on the shared thread. */
  unreadReplyMs: number;
  /** Warning lines per connection: burst, then this many per second (the rest are counted). */
  logBurst: number;
  logPerSecond: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  dmaBytes: 2 ** 40, // 1 TiB
  dmaFiles: 64,
  dmaRequireSealed: true,
  unreadReplyMs: 5000,
  logBurst: 50,
  logPerSecond: 10,
};

export { LogBudget } from '../log.ts';
