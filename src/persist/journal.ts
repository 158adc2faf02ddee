// The request journal: a small memfd (held by the keeper, mapped shared by the server) that
// records, per vfio-user connection, where the request at the head of the socket stands:
// seen (being handled), reply intended (side effects done, reply about to go out), replied
// (or, for a posted write, done). A request is consumed from the socket only after that
// (transport.ts reads with MSG_PEEK), so a successor finds the request the dead server was on
// still queued and this slot tells it what to do (../shared/notes/restart.md):
//   replied            → consume it without replying (QEMU has its reply; a second reply with
//                        a body would leave QEMU's stream out of step: the device would die)
//   intent             → a header-only ERROR reply (harmless if QEMU already had the reply)
//   seen               → handle it again (its effects are not in the checkpoint), or, if the
//                        checkpoint already holds them, reply as the handler would have
//   anything else      → a fresh request
// Replied requests are consumed in batches (the reply's tail stays short: a reply wakes the
// client on the server's CPU, which must go idle at once): the slot also records how many bytes
// of replied requests still precede its request in the socket (the backlog) and the first of
// them; a successor that finds that request at the head discards the backlog without replying.
// If the batch was consumed just before a kill, the head is a later request and nothing is
// discarded (message ids differ within a batch).
// Plus one byte per physical channel: set when the engine may have started work on the channel
// since the last checkpoint (restore.ts fails such channels with ENGINE_LOST).
// Stores into a MAP_SHARED memfd mapping survive SIGKILL (they are in the page cache).
import { native } from '../native.ts';

export const JOURNAL_MAGIC = 'VUGPUJNL';
export const JOURNAL_VERSION = 2; // 2: the backlog fields (1 is read as backlog 0)
export const JOURNAL_SLOTS = 256;
export const JOURNAL_CHANNELS = 128;
const CHAN_AT = 64;
const SLOTS_AT = 256;
const SLOT_SIZE = 64;
export const JOURNAL_BYTES = 20480;

export const SLOT_IDLE = 0;
export const SLOT_SEEN = 1;
export const SLOT_INTENT = 2;
export const SLOT_REPLIED = 3;

export type SlotStateName = 'idle' | 'seen' | 'intent' | 'replied';
const NAMES: SlotStateName[] = ['idle', 'seen', 'intent', 'replied'];

/** The head request as a journal slot (or a checkpoint) identifies it. */
export interface RequestId {
  msgId: number;
  command: number;
  size: number;
  flags: number;
}

export interface SlotView extends RequestId {
  state: SlotStateName;
  /** Monotonic ms when the request was first seen. */
  seenAt: number;
  /** Requests consumed on this connection so far. */
  consumed: number;
  /** Bytes of replied requests still in the socket ahead of this slot's request (0: none). */
  backlogBytes: number;
  /** The first of them (valid while backlogBytes > 0). */
  backlogFirst: RequestId;
}

export function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export class JournalError extends Error {
  override name = 'JournalError';
}

export class Journal {
  readonly fd: number;
  private readonly buf: ArrayBuffer;
  private readonly dv: DataView;
  /** One byte per physical channel (1 = may have run since the last checkpoint). */
  readonly channelActive: Uint8Array;
  private readonly slots: ConnJournal[] = [];

  private constructor(fd: number) {
    this.fd = fd;
    this.buf = native.mmap(fd, JOURNAL_BYTES, 0);
    this.dv = new DataView(this.buf);
    this.channelActive = new Uint8Array(this.buf, CHAN_AT, JOURNAL_CHANNELS);
  }

  /** A fresh journal in a new memfd. */
  static create(): Journal {
    const fd = native.memfdCreate('vugpu-journal', JOURNAL_BYTES);
    if (fd < 0) throw new Error(`memfd_create(vugpu-journal) failed: errno ${-fd}`);
    const j = new Journal(fd);
    const magic = new TextEncoder().encode(JOURNAL_MAGIC);
    new Uint8Array(j.buf, 0, 8).set(magic);
    j.dv.setUint32(8, JOURNAL_VERSION, true);
    j.dv.setUint32(12, JOURNAL_SLOTS, true);
    j.dv.setUint32(16, JOURNAL_CHANNELS, true);
    return j;
  }

  /** Map an adopted journal memfd (the Journal owns the fd). Throws JournalError if it is not
   * one this build reads. */
  static adopt(fd: number): Journal {
    const j = new Journal(fd);
    const magic = new TextDecoder().decode(new Uint8Array(j.buf, 0, 8));
    if (magic !== JOURNAL_MAGIC) throw new JournalError('the journal memfd does not hold a vugpu journal');
    const v = j.dv.getUint32(8, true);
    if (v !== JOURNAL_VERSION && v !== 1) throw new JournalError(`journal layout version ${v}; this build reads 1 and ${JOURNAL_VERSION}`);
    // Version 1 wrote zeros where the backlog goes (no backlog); from now on it may have one.
    if (v !== JOURNAL_VERSION) j.dv.setUint32(8, JOURNAL_VERSION, true);
    return j;
  }

  /** The journal of connection slot i (one per VM, in configuration order). */
  slot(i: number): ConnJournal {
    if (!(i >= 0 && i < JOURNAL_SLOTS)) throw new RangeError(`journal slot ${i} out of range`);
    return (this.slots[i] ??= new ConnJournal(this.dv, SLOTS_AT + i * SLOT_SIZE));
  }

  close(): void {
    native.munmap(this.buf);
    native.close(this.fd);
  }
}

/** One connection's slot. Each transition is a few stores into the shared mapping. */
export class ConnJournal {
  private readonly dv: DataView;
  private readonly at: number;
  /** The state word, for the addon's sendmsg (intent/replied set around the syscall). */
  readonly stateWord: Uint32Array;

  constructor(dv: DataView, at: number) {
    this.dv = dv;
    this.at = at;
    this.stateWord = new Uint32Array(dv.buffer, at, 1);
  }

  /** About to handle this request (first seen at `seenAt`, monotonic ms). */
  seen(msgId: number, command: number, size: number, flags: number, seenAt: number): void {
    const dv = this.dv;
    const a = this.at;
    dv.setUint32(a, SLOT_IDLE, true); // not a valid record while it is being rewritten
    dv.setUint16(a + 4, msgId, true);
    dv.setUint16(a + 6, command, true);
    dv.setUint32(a + 8, size, true);
    dv.setUint32(a + 12, flags, true);
    dv.setFloat64(a + 16, seenAt, true);
    dv.setUint32(a, SLOT_SEEN, true);
  }

  /** The handler's effects are done (and checkpointed where they must be); the reply goes out next. */
  intent(): void {
    this.dv.setUint32(this.at, SLOT_INTENT, true);
  }

  /** The whole reply is in the socket (or the request was a posted write, handled). */
  replied(): void {
    this.dv.setUint32(this.at, SLOT_REPLIED, true);
  }

  /** The replied request this slot is on stays in the socket, in the backlog, which now holds
   * `bytes` (the first of them recorded before the count: a kill between the stores leaves a
   * smaller backlog, whose last request the slot still shows as replied). */
  backlog(bytes: number, first: RequestId | null): void {
    const dv = this.dv;
    const a = this.at;
    if (first) {
      dv.setUint16(a + 32, first.msgId, true);
      dv.setUint16(a + 34, first.command, true);
      dv.setUint32(a + 36, first.size, true);
      dv.setUint32(a + 40, first.flags, true);
    }
    dv.setUint32(a + 28, bytes, true);
  }

  /** The backlog (n requests) left the socket. */
  backlogConsumed(n: number): void {
    this.dv.setUint32(this.at + 28, 0, true);
    this.dv.setUint32(this.at + 24, this.dv.getUint32(this.at + 24, true) + n, true);
  }

  /** A new connection on this slot: forget the old one's head request. */
  reset(): void {
    this.dv.setUint32(this.at, SLOT_IDLE, true);
    this.dv.setUint32(this.at + 24, 0, true);
    this.dv.setUint32(this.at + 28, 0, true);
  }

  read(): SlotView {
    const dv = this.dv;
    const a = this.at;
    return {
      state: NAMES[dv.getUint32(a, true)] ?? 'idle',
      msgId: dv.getUint16(a + 4, true),
      command: dv.getUint16(a + 6, true),
      size: dv.getUint32(a + 8, true),
      flags: dv.getUint32(a + 12, true),
      seenAt: dv.getFloat64(a + 16, true),
      consumed: dv.getUint32(a + 24, true),
      backlogBytes: dv.getUint32(a + 28, true),
      backlogFirst: { msgId: dv.getUint16(a + 32, true), command: dv.getUint16(a + 34, true), size: dv.getUint32(a + 36, true), flags: dv.getUint32(a + 40, true) },
    };
  }

  /** The request this slot is on, while it is not idle (what a checkpoint records). */
  current(): RequestId | null {
    const s = this.read();
    return s.state === 'idle' ? null : { msgId: s.msgId, command: s.command, size: s.size, flags: s.flags };
  }
}

export function sameRequest(a: RequestId | null | undefined, b: RequestId): boolean {
  return !!a && a.msgId === b.msgId && a.command === b.command && a.size === b.size && a.flags === b.flags;
}
