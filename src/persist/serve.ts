// `vugpu serve --state-dir DIR`: a server that survives its own death and can be replaced under
// running guests (docs/architecture.md "Surviving a restart"). It composes:
//   - an fd holder outside the process: the fd keeper (keeper.ts, started on demand) or, under
//     systemd, the service's fd store (fdstore.ts). Every fd that makes up a VM's device is
//     deposited when it is created and removed when it is closed (FdDepot);
//   - the request journal (journal.ts) in a memfd the holder keeps: requests are consumed from
//     the socket only after their reply is out;
//   - the checkpoint (checkpoint.ts) in another memfd the holder keeps, written synchronously
//     before replies that change state the guest relies on and coalesced otherwise;
//   - adoption: started again after a crash (same arguments), or as an upgrade's successor, it
//     takes the fds back, restores every component (state.ts restoreAll) and carries on serving
//     the connected QEMUs without a new handshake; channels whose work died fail with
//     ENGINE_LOST;
//   - live upgrade (SIGUSR2 or `vugpu upgrade`): start a successor, stop reading, let GPU work
//     drain, write the last checkpoint, hand over through the keeper, exit. The pause is logged.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { logger } from '../log.ts';
import { native } from '../native.ts';
import { Vugpu, type VugpuOptions } from '../server.ts';
import type { ServerPersistence } from '../device-model/server.ts';
import { Command, RegionIndex } from '../device-model/protocol.ts';
import { dmaFdName, irqFdName } from '../device-model/persist.ts';
import {
  DOORBELL, MMU_FAULT_STATUS, PFIFO_ERR_PENDING, PFIFO_FENCE_PENDING, PFIFO_INTR, PMC_INTR, PRAMIN_WINDOW, PRAMIN_WINDOW_SIZE,
} from '../gpu/spec.ts';
import { WAIT_ACQUIRE, WAIT_NONE, type ChannelState } from '../gpu/channel.ts';
import { CheckpointError, Checkpointer, CheckpointStore, decodeCheckpoint, encodeCheckpoint } from './checkpoint.ts';
import { Journal, JournalError, JOURNAL_SLOTS, monoMs, type RequestId } from './journal.ts';
import { KeeperClient, KeeperRefused, type Attached } from './keeper-client.ts';
import { SystemdFdStore } from './fdstore.ts';
import {
  checkpointVms, discard, endpointState, fdNames, prebuild, prebuiltFits, resumeAll, restoreAll, saveAll, VRAM_FD, type Prebuilt,
} from './state.ts';
import { StateError } from './plain.ts';

export const CHECKPOINT_FD = 'checkpoint';
/** A standby is (re)started at most this often. */
const STANDBY_EVERY_MS = 5000;
/** ... and this long after an adoption. */
const STANDBY_AFTER_ADOPT_MS = 2000;

/**
 * Run the device-model, aggregator, engine and checkpoint code once on a throwaway server (its
 * own temporary sockets, 32 MiB of VRAM, the native engine, logs off) while this successor or
 * standby waits for its turn. In a fresh Node process that code is parsed and compiled when it
 * first runs, and on a loaded 2-core host that was half of an upgrade's pause (docs/results.md,
 * "Surviving a restart"). A warm-up that fails costs only its time.
 */
/**
 * A full garbage collection now, before this process is handed the VMs: start-up, the warm-up
 * and the ahead-build leave V8 an incremental mark-compact due, which otherwise runs inside the
 * guests' pause (measured: steps of 10–40 ms during a 4-VM handover on the 2-core host).
 */
function settleHeap(): void {
  try {
    v8.setFlagsFromString('--expose-gc');
    (runInNewContext('gc') as () => void)();
  } catch {
    // an optimisation only
  }
}

function warmUp(opts: VugpuOptions): void {
  const t0 = performance.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-warm-'));
  const level = logger.level;
  logger.level = 'silent';
  let v: Vugpu | undefined;
  try {
    const vms = opts.vms.slice(0, 4).map((vm, i) => ({
      ...vm, name: `warm${i}`, socket: path.join(dir, `${i}.sock`), slice: vm.mode === 'pt' ? undefined : 4 << 20,
    }));
    const o: VugpuOptions = { vms, vramSize: 32 << 20, engine: 'native', channels: opts.channels, watchdogMs: opts.watchdogMs, policy: opts.policy, policyConfig: opts.policyConfig };
    v = new Vugpu(o);
    const state = decodeCheckpoint(encodeCheckpoint(1, { vugpu: saveAll(v) })).sections.vugpu;
    // ... and the adoption itself: restore that state into a second throwaway server.
    const vram = fs.openSync(`/proc/self/fd/${v.engine.vramFd}`, 'r+');
    v.close();
    v = undefined;
    v = restoreAll(state, new Map([[VRAM_FD, vram]]), o).vugpu;
  } catch (err) {
    logger.level = level;
    logger.debug({ err: (err as Error).message }, 'warm-up stopped early');
    logger.level = 'silent';
  } finally {
    try {
      v?.close();
    } catch {
      // only a warm-up
    }
    logger.level = level;
    fs.rmSync(dir, { recursive: true, force: true });
  }
  logger.info({ ms: Math.round(performance.now() - t0) }, 'warmed up the adoption path');
}
export const JOURNAL_FD = 'journal';

export interface PersistOptions {
  /** Directory for the keeper's socket and log (created 0700). */
  stateDir: string;
  /** The keeper's socket (default <stateDir>/keeper.sock). */
  keeperSocket?: string;
  /** Longest a coalesced checkpoint waits, ms (default 20). */
  intervalMs?: number;
  /** This process is an upgrade's successor (env VUGPU_SUCCESSOR=1). */
  successor?: boolean;
  /** Use systemd's fd store (default: when NOTIFY_SOCKET is set). */
  systemd?: boolean;
  /** Command line that starts a successor (default: this process's). */
  argv?: string[];
  /** Keep a standby server process (same command line) waiting in the keeper: when this one
   * dies the standby takes over at once, so a crash costs a restore, not a process start. */
  standby?: boolean;
}

/** Where fds are deposited. */
interface FdHolder {
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

/** Why a start failed in a way the operator must fix; exit status 2, nothing is lost. */
export class AdoptError extends Error {
  override name = 'AdoptError';
}

type Durability = 0 | 1 | 2; // nothing, coalesced, before the reply
const NONE: Durability = 0;
const LATER: Durability = 1;
const NOW: Durability = 2;

/** BAR0 registers whose writes may be coalesced: losing the last few only brings back an
 * acknowledged interrupt bit or a doorbell the journal's channel bits cover, or is diagnostic.
 * Every other register write changes state the guest relies on once the write returns. */
function bar0Durability(offset: number): Durability {
  if (offset >= PRAMIN_WINDOW && offset < PRAMIN_WINDOW + PRAMIN_WINDOW_SIZE) return NONE; // VRAM itself
  if (offset === DOORBELL || offset === PFIFO_INTR || offset === PMC_INTR || offset === MMU_FAULT_STATUS) return LATER;
  if (offset >= PFIFO_FENCE_PENDING && offset < PFIFO_FENCE_PENDING + 16) return LATER;
  if (offset >= PFIFO_ERR_PENDING && offset < PFIFO_ERR_PENDING + 16) return LATER;
  if (offset >= 0x00a000 && offset < 0x00a100) return LATER; // PDIAG
  return NOW;
}

/** What a handled request needs from the checkpoint (docs/architecture.md has the table). */
export function durability(command: number, region: number, offset: number, errno: number): Durability {
  switch (command) {
    case Command.REGION_READ:
    case Command.DEVICE_GET_INFO:
    case Command.DEVICE_GET_REGION_INFO:
    case Command.DEVICE_GET_IRQ_INFO:
      return NONE;
    case Command.REGION_WRITE:
      if (errno !== 0) return LATER;
      if (region === RegionIndex.CONFIG) return NOW;
      if (region === 0) return bar0Durability(offset);
      if (region === 1) return NONE; // BAR1 is VRAM (fv-naive traps it)
      return LATER;
    case Command.VERSION:
    case Command.DMA_MAP:
    case Command.DMA_UNMAP:
    case Command.DEVICE_SET_IRQS:
    case Command.DEVICE_RESET:
    case Command.REGION_WRITE_MULTI:
      return errno === 0 ? NOW : LATER;
    default:
      return NONE;
  }
}

/** Nothing is going on in the channel: the checkpoint's view of it is exact. */
function channelIdle(ch: ChannelState): boolean {
  return !ch.bound || (ch.cursor === null && ch.gpGet === ch.gpPut && ch.wait === WAIT_NONE && ch.job < 0 && !ch.kicked);
}

export class RestartableServer {
  vugpu!: Vugpu;
  readonly depot: FdDepot;
  journal!: Journal;
  store!: CheckpointStore;
  checkpointer!: Checkpointer;
  readonly opts: VugpuOptions;
  readonly p: PersistOptions;
  private keeper: KeeperClient | null = null;
  private systemd: SystemdFdStore | null = null;
  /** Journal slot of each VM, by name (VMs come and go at run time; a slot stays with its name). */
  private readonly slots = new Map<string, number>();
  private readonly hooked = new Set<string>();
  private idleAtCheckpoint: number[] = [];
  /** The next checkpoint is the last one before a handover: the process is quiescent, so the
   * checkpoint is exact (the successor need not distrust channels the journal marked). */
  private finalCheckpoint = false;
  /** Monotonic ms the guests' pause began (the predecessor stopped or died), until the first
   * request after an adoption is answered: that request's wait is the pause a guest sees. */
  private pauseFrom: number | null = null;
  /** Built by prepare(), used by adopt() if the final checkpoint still fits it. */
  private prebuilt: Prebuilt | undefined;
  /** Adopted from a predecessor's final checkpoint and not written one of our own yet: the
   * first kick writes it first (a crash after a kick must not adopt "final" state). */
  private firstWritePending = false;
  /** Monotonic ms at each step of an adoption (the pause's breakdown in its log line). */
  private readonly adoptMarks: [string, number][] = [];
  private upgrading: { successor: number | null; stoppedAt: number | null; timer: NodeJS.Timeout | null } | null = null;
  private stopped = false;
  /** Resolves when the process should exit, with its status. */
  readonly exit: Promise<number>;
  private resolveExit!: (code: number) => void;
  /** How this process came to serve: 'fresh', 'restart' (after a crash) or 'upgrade'. */
  start: 'fresh' | 'restart' | 'upgrade' = 'fresh';

  private constructor(opts: VugpuOptions, p: PersistOptions) {
    this.opts = opts;
    this.p = p;
    this.depot = new FdDepot(null);
    this.exit = new Promise((r) => (this.resolveExit = r));
  }

  private get keeperSocket(): string {
    return this.p.keeperSocket ?? path.join(this.p.stateDir, 'keeper.sock');
  }

  /** Start serving: fresh, or adopting what a dead or upgraded predecessor left. Throws
   * AdoptError for what the operator must fix (exit status 2; the fds stay with the holder). */
  static async open(opts: VugpuOptions, p: PersistOptions): Promise<RestartableServer> {
    const s = new RestartableServer(opts, p);
    fs.mkdirSync(p.stateDir, { recursive: true, mode: 0o700 });
    const useSystemd = p.systemd ?? !!process.env.NOTIFY_SOCKET;
    let fds: Map<string, number>;
    let attached: Attached | null = null;
    if (useSystemd) {
      const sd = SystemdFdStore.fromEnv();
      if (!sd) throw new AdoptError('--systemd needs NOTIFY_SOCKET (run it as a Type=notify service)');
      s.systemd = sd;
      s.depot.holder = sd;
      fds = SystemdFdStore.adopted();
      sd.adoptedNames(fds.keys());
    } else {
      const k = await KeeperClient.connectOrSpawn(s.keeperSocket);
      s.keeper = k;
      // A standby names the server that started it: the keeper takes it only as that server's.
      const standbyOf = Number(process.env.VUGPU_STANDBY ?? '0');
      const standby = standbyOf > 0;
      delete process.env.VUGPU_STANDBY;
      try {
        // A successor's hello starts the handover: warm up before it, not during the pause.
        if (p.successor) warmUp(opts);
        const hello = await k.hello(p.successor ? 'successor' : standby ? 'standby' : 'server', standby ? standbyOf : undefined, p.successor === true);
        if ('waiting' in hello && standby) {
          warmUp(opts);
          settleHeap();
          logger.info({ server: hello.waiting, pid: process.pid }, 'standby: waiting to take over if the server dies');
          try {
            attached = await k.adopted(0);
          } catch {
            logger.info({ pid: process.pid }, 'standby retired');
            process.exit(0);
          }
        } else if ('waiting' in hello) {
          if (hello.prepare) await s.prepare(k);
          logger.info({ server: hello.waiting }, 'upgrade: waiting for the running server to hand over');
          attached = await k.adopted(60_000);
          s.adoptMarks.push(['told', monoMs()]);
        } else if ('keys' in hello) {
          attached = hello;
        } else {
          throw new AdoptError('the keeper took this server for a control client');
        }
      } catch (err) {
        k.close();
        if (err instanceof KeeperRefused && err.standby) {
          logger.info({ pid: process.pid, reason: err.message }, 'standby not needed; exiting');
          process.exit(0);
        }
        if (err instanceof KeeperRefused) throw new AdoptError(err.message);
        throw err;
      }
      s.depot.holder = k;
      fds = attached.keys.length > 0 ? await k.take() : new Map();
      s.adoptMarks.push(['taken', monoMs()]);
    }
    try {
      if (fds.size > 0 && fds.has(CHECKPOINT_FD) && s.hasCommit(fds.get(CHECKPOINT_FD)!)) {
        s.adopt(fds, attached);
      } else {
        if (fds.size > 0) {
          // Fds but no committed checkpoint: the previous server died while starting up,
          // before any client could have been served. Start afresh.
          logger.warn({ keys: [...fds.keys()] }, 'the fd holder has no committed checkpoint: starting afresh');
          for (const fd of fds.values()) native.close(fd);
          s.depot.holder?.remove([...fds.keys()]);
        }
        s.fresh();
      }
    } catch (err) {
      if (err instanceof CheckpointError || err instanceof StateError || err instanceof JournalError) {
        s.keeper?.close(); // EOF, not bye: the keeper keeps every fd for a build that can adopt them
        throw new AdoptError(`cannot adopt the running VMs: ${err.message}`);
      }
      throw err;
    }
    s.afterStart();
    return s;
  }

  /**
   * An upgrade's successor, before it says it is ready: take duplicates of the fds, read the
   * running server's current checkpoint and construct the server it describes (state.ts
   * prebuild), so that the pause holds only the restore of the final checkpoint into it. Any
   * failure here only costs the pause that time (the restore constructs as usual).
   */
  private async prepare(k: KeeperClient): Promise<void> {
    const t0 = performance.now();
    let fds: Map<string, number> | null = null;
    try {
      fds = await k.take();
      const ck = fds.get(CHECKPOINT_FD);
      if (ck !== undefined && this.hasCommit(ck)) {
        fds.delete(CHECKPOINT_FD);
        const store = CheckpointStore.adopt(ck);
        let payload: Uint8Array | null;
        try {
          payload = store.read(); // a torn read (the server writes meanwhile) fails its CRC
        } finally {
          store.close();
        }
        if (payload !== null) {
          this.prebuilt = prebuild(decodeCheckpoint(payload).sections.vugpu, fds, { ...this.opts, persistence: this.persistence() });
          for (const name of this.prebuilt.owned) fds.delete(name); // the prebuilt server's now
          if (this.prebuilt.errors.length > 0) logger.warn({ errors: this.prebuilt.errors }, 'upgrade: some DMA maps could not be mapped ahead; the restore maps them');
          logger.info({ ms: Math.round(performance.now() - t0) }, 'upgrade: server built ahead of the handover');
        }
      }
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'upgrade: could not build ahead of the handover; the restore constructs');
    } finally {
      if (fds) for (const fd of fds.values()) native.close(fd);
      settleHeap();
      k.ready();
    }
  }

  private hasCommit(fd: number): boolean {
    const probe = new Uint8Array(16);
    if (native.pread(fd, probe, 0) < 16) return false;
    return new DataView(probe.buffer).getUint32(12, true) !== 0xffffffff;
  }

  private persistence(): ServerPersistence {
    return {
      put: (key, fd) => this.depot.put(key, fd),
      remove: (key) => this.depot.remove(key),
      journal: (device) => {
        this.hook(device); // its DMA and IRQ fds arrive through this connection
        return this.journal.slot(this.slotOf(device));
      },
      handled: (_device, command, region, offset, errno) => {
        if (this.pauseFrom !== null) this.firstServed();
        const d = durability(command, region, offset, errno);
        if (d === NONE) return;
        const c = this.checkpointer;
        if (c === undefined) return;
        if (d === NOW) {
          c.needSync();
          c.flushIfNeeded();
        } else {
          c.dirty();
        }
      },
      clientChanged: () => {
        const c = this.checkpointer;
        if (c === undefined) return;
        c.needSync();
        c.flushIfNeeded();
      },
    };
  }

  /** The journal slot of a VM (allocated on first use). */
  private slotOf(name: string): number {
    let i = this.slots.get(name);
    if (i !== undefined) return i;
    const used = new Set(this.slots.values());
    for (i = 0; used.has(i); i++);
    if (i >= JOURNAL_SLOTS) throw new Error(`more than ${JOURNAL_SLOTS} VMs have had a journal slot`);
    this.slots.set(name, i);
    return i;
  }

  /** Deposit a VM's DMA files and IRQ eventfds as its device takes and drops them. */
  private hook(name: string): void {
    if (this.hooked.has(name) || this.vugpu === undefined) return;
    const dev = this.vugpu.vms.get(name)?.device;
    if (!dev) return;
    this.hooked.add(name);
    // A file the guest drops stays with the holder until a checkpoint without it is committed
    // (FdDepot.retire): a kill between the drop and that commit leaves a checkpoint that names it.
    dev.dma.fileHook = (ev, id, fd) => {
      if (ev === 'open') this.depot.put(dmaFdName(name, id), fd);
      else this.depot.retire(dmaFdName(name, id));
    };
    dev.irq.fdHook = (index, vector, fd) => {
      if (fd >= 0) this.depot.put(irqFdName(name, index, vector), fd);
      else this.depot.retire(irqFdName(name, index, vector));
    };
  }

  /** The VMs served now (run-time additions included). */
  private currentVms(): { name: string; socket: string }[] {
    const v = this.vugpu;
    const live = (v as unknown as { vmConfigs?: Map<string, { name: string; socket: string }> }).vmConfigs;
    return live ? [...live.values()] : v.options.vms;
  }

  private fresh(): void {
    this.opts.vms.forEach((vm) => this.slotOf(vm.name));
    this.journal = Journal.create();
    this.store = CheckpointStore.create();
    this.depot.put(JOURNAL_FD, this.journal.fd);
    this.depot.put(CHECKPOINT_FD, this.store.fd);
    this.vugpu = new Vugpu({ ...this.opts, persistence: this.persistence() });
    this.depot.put(VRAM_FD, this.vugpu.engine.vramFd);
    this.start = 'fresh';
  }

  private adopt(fds: Map<string, number>, attached: Attached | null): void {
    const t0 = performance.now();
    const ckFd = fds.get(CHECKPOINT_FD)!;
    const jFd = fds.get(JOURNAL_FD);
    if (jFd === undefined) throw new CheckpointError('the fd holder has a checkpoint but no request journal');
    const store = CheckpointStore.adopt(ckFd);
    const payload = store.read();
    if (payload === null) throw new CheckpointError('no checkpoint was ever committed');
    const ckpt = decodeCheckpoint(payload);
    store.lastSeq = ckpt.seq;
    const mark = (what: string) => this.adoptMarks.push([what, monoMs()]);
    mark('decoded');
    const journal = Journal.adopt(jFd);
    this.store = store;
    this.journal = journal;
    const state = ckpt.sections.vugpu;
    const applied = ((ckpt.sections.journal as { applied?: Record<string, RequestId> } | undefined)?.applied) ?? {};
    const srv = (ckpt.sections.server as { accepted?: Record<string, number>; slots?: Record<string, number>; final?: boolean } | undefined) ?? {};
    const accepted = srv.accepted ?? {};
    const vms = checkpointVms(state);
    vms.forEach((vm, i) => this.slots.set(vm.name, srv.slots?.[vm.name] ?? i));
    const want = vms.map((vm) => vm.name).sort().join(', ');
    const have = this.opts.vms.map((vm) => vm.name).sort().join(', ');
    if (want !== have) logger.warn({ checkpoint: want, commandLine: have }, 'the VMs being served differ from the command line (run-time changes): serving the checkpoint\'s');
    const used = new Set<string>([CHECKPOINT_FD, JOURNAL_FD, ...fdNames(state)]);
    const pre = this.prebuilt;
    this.prebuilt = undefined;
    let prebuilt: Vugpu | undefined;
    if (pre && prebuiltFits(pre, state)) {
      prebuilt = pre.vugpu;
      const dup = fds.get(VRAM_FD);
      if (dup !== undefined && dup !== prebuilt.engine.vramFd) native.close(dup);
      fds.set(VRAM_FD, prebuilt.engine.vramFd);
    } else if (pre) {
      logger.info('upgrade: the VMs changed since the successor was built; constructing anew');
      discard(pre.vugpu);
    }
    const { vugpu, inFlight } = restoreAll(state, fds, { ...this.opts, vms, persistence: this.persistence() }, {
      resume: false,
      prebuilt,
      mark,
      listen: (vm, device, server) => {
        const lfd = fds.get(`listen:${vm.name}`);
        if (lfd === undefined) {
          server.listen(vm.socket, device);
          return;
        }
        used.add(`listen:${vm.name}`);
        const cfd = fds.get(`conn:${vm.name}`);
        let conn;
        if (cfd !== undefined) {
          used.add(`conn:${vm.name}`);
          const slot = journal.slot(this.slotOf(vm.name)).read();
          conn = {
            fd: cfd,
            client: endpointState(state, vm.name)?.client ?? null,
            accepted: accepted[vm.name],
            adopted: { slot, applied: applied[vm.name] ?? null, arrivals: attached?.arrivals[`conn:${vm.name}`] ?? [] },
          };
        }
        server.adopt(vm.socket, device, lfd, conn);
      },
    });
    this.vugpu = vugpu;
    // Channels that may have started work after the checkpoint was written: their checkpointed
    // state may be stale, and re-running a half-done job could change its results silently.
    // (Not after a handover: the old server wrote its last checkpoint quiescent, it is exact.)
    const lost = new Set(inFlight);
    if (srv.final !== true) {
      vugpu.engine.fifo.channels.forEach((ch) => {
        if (ch.bound && journal.channelActive[ch.chid]) lost.add(ch.chid);
      });
    }
    // Everything adopted is ours now; what the state does not name is stale.
    for (const [k, fd] of fds) {
      if (used.has(k)) this.depot.held.set(k, fd);
      else {
        native.close(fd);
        this.depot.holder?.remove([k]);
      }
    }
    this.depot.held.set(VRAM_FD, vugpu.engine.vramFd);
    resumeAll(vugpu, { inFlight: [...lost] });
    mark('resumed');
    this.start = attached?.handover && attached.stoppedAt !== null ? 'upgrade' : 'restart';
    const restoreMs = performance.now() - t0;
    const now = monoMs();
    const pauseMs = attached?.stoppedAt != null ? now - attached.stoppedAt : attached?.gapSince != null ? now - attached.gapSince : null;
    const start = this.start;
    const from = attached?.stoppedAt ?? attached?.gapSince ?? null;
    // Each step's end, in ms since the pause began (the predecessor stopped or died).
    const marks = from === null ? undefined : Object.fromEntries(this.adoptMarks.map(([k, t]) => [k, Math.round((t - from) * 10) / 10]));
    const record = {
      event: start === 'upgrade' ? 'upgrade-adopted' : 'restart-adopted',
      checkpointSeq: ckpt.seq, writtenBy: ckpt.writer.build, checkpointTime: ckpt.time, prebuilt: prebuilt !== undefined,
      restoreMs: Math.round(restoreMs * 10) / 10, pauseMs: pauseMs === null ? null : Math.round(pauseMs * 10) / 10,
      lostChannels: [...lost].sort((a, b) => a - b), marks,
    };
    // Said after the guests' waiting requests had their turn: a log line to a slow reader or
    // the keeper's reply is not worth a millisecond of their pause.
    setImmediate(() => {
      logger.info(record, start === 'upgrade' ? 'live upgrade: serving the adopted VMs' : 'restarted: serving the adopted VMs');
      if (start === 'upgrade') this.keeper?.serving(pauseMs);
    });
    this.pauseFrom = attached?.stoppedAt ?? attached?.gapSince ?? null;
    this.firstWritePending = srv.final === true;
  }

  private firstServed(): void {
    const ms = monoMs() - this.pauseFrom!;
    this.pauseFrom = null;
    logger.info({ event: 'first-served', sincePauseMs: Math.round(ms * 10) / 10 }, 'first request after the adoption answered');
  }

  /** Hooks, checkpointer, first checkpoint, signals. */
  private afterStart(): void {
    const v = this.vugpu;
    for (const name of v.vms.keys()) this.hook(name);
    this.checkpointer = new Checkpointer(this.store, {
      intervalMs: this.p.intervalMs,
      produce: () => this.produce(),
      committed: () => {
        this.firstWritePending = false;
        for (const chid of this.idleAtCheckpoint) this.journal.channelActive[chid] = 0;
        this.depot.commitRetired();
      },
    });
    // The engine may start work on a channel only through a kick (doorbell, runlist, enable,
    // PFIFO enable): mark it in the journal first, so a successor knows the checkpoint's view
    // of that channel may be stale until a checkpoint sees it idle again.
    const fifo = v.engine.fifo;
    const kick = fifo.kick;
    const active = this.journal.channelActive;
    fifo.kick = (ch) => {
      if (this.firstWritePending) this.checkpointer.write(true);
      active[ch.chid] = 1;
      kick(ch);
      this.checkpointer.dirty();
    };
    const l = v.engine.listener as unknown as Record<string, ((...a: unknown[]) => void) | undefined>;
    const wrapped: Record<string, (...a: unknown[]) => void> = {};
    for (const k of new Set([...Object.keys(l), 'channelIdle', 'fence', 'channelError', 'fault'])) {
      const f = l[k];
      wrapped[k] = (...a: unknown[]) => {
        f?.(...a);
        this.checkpointer.dirty();
      };
    }
    v.engine.listener = wrapped as unknown as typeof v.engine.listener;
    if (this.firstWritePending) {
      // The predecessor's final checkpoint is exactly this state and committed: ours can wait
      // until after the guests' first requests (or until the first kick, see above).
      this.checkpointer.dirty();
    } else if (this.checkpointer.write(true) < 0) {
      throw new Error('the first checkpoint could not be written');
    }
    if (this.keeper) {
      this.keeper.events = {
        upgrade: () => this.upgrade(),
        successorReady: (pid) => void this.handover(pid),
        successorGone: (pid) => this.abandonUpgrade(`successor ${pid} went away`),
        standbyGone: () => this.startStandby(),
        gone: () => void this.keeperLost(),
      };
      // After an adoption the guests are catching up: a standby's start (a whole Node process)
      // would compete with them on a small host, so it comes a little later.
      if (this.start !== 'fresh') this.lastStandby = performance.now() - STANDBY_EVERY_MS + STANDBY_AFTER_ADOPT_MS;
      this.startStandby();
    }
    this.systemd?.ready(`serving ${this.opts.vms.length} VMs (${this.start})`);
    this.systemd?.startWatchdog();
    logger.info({ start: this.start, holder: this.systemd ? 'systemd' : this.keeperSocket, checkpointBytes: this.checkpointer.stats.bytes }, 'restartable serving: fds held outside the process');
  }

  private produce(): Record<string, unknown> {
    const v = this.vugpu;
    this.idleAtCheckpoint = [];
    for (const ch of v.engine.fifo.channels) if (channelIdle(ch)) this.idleAtCheckpoint.push(ch.chid);
    const applied: Record<string, RequestId> = {};
    const accepted: Record<string, number> = {};
    for (const vm of this.currentVms()) {
      const cur = this.journal.slot(this.slotOf(vm.name)).current();
      if (cur) applied[vm.name] = cur;
      accepted[vm.name] = v.server.listener(vm.socket)?.accepted ?? 0;
    }
    return { vugpu: saveAll(v), journal: { applied }, server: { accepted, slots: Object.fromEntries(this.slots), final: this.finalCheckpoint } };
  }

  // ---- live upgrade ----

  /** Start a successor (same command line); the handover follows when it is ready. */
  upgrade(): void {
    if (this.upgrading || this.stopped) return;
    if (this.systemd) {
      // Under systemd the service manager starts the successor: checkpoint, and exit with a
      // status the unit restarts on (RestartForceExitStatus=75); the fd store keeps the rest.
      this.suspendAll();
      const stoppedAt = monoMs();
      void this.drain().then(() => {
        this.checkpointer.write(true);
        this.checkpointer.stop();
        logger.info({ stoppedAt }, 'upgrade under systemd: checkpoint written, exiting for a restart');
        this.resolveExit(75);
      });
      return;
    }
    const child = this.spawnSelf({ VUGPU_SUCCESSOR: '1' });
    const timer = setTimeout(() => this.abandonUpgrade('the successor did not come up within 60 s'), 60_000);
    timer.unref();
    this.upgrading = { successor: child.pid ?? null, stoppedAt: null, timer };
    child.once('exit', (code, signal) => {
      if (this.upgrading && this.upgrading.stoppedAt === null) this.abandonUpgrade(`the successor exited (${code ?? signal}) before the handover`);
    });
    logger.info({ successor: child.pid }, 'live upgrade: successor started');
  }

  /** Start a server process with this one's command line (a successor or a standby). */
  private spawnSelf(env: Record<string, string>) {
    const argv = this.p.argv ?? [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
    const child = spawn(argv[0]!, argv.slice(1), { stdio: 'inherit', env: { ...process.env, ...env } });
    child.unref();
    return child;
  }

  private lastStandby = 0;

  /** Start (again) the standby process, at most every 5 s. */
  private startStandby(): void {
    if (!this.p.standby || this.stopped || !this.keeper) return;
    const wait = Math.max(0, this.lastStandby + STANDBY_EVERY_MS - performance.now());
    setTimeout(() => {
      if (this.stopped) return;
      this.lastStandby = performance.now();
      const child = this.spawnSelf({ VUGPU_STANDBY: String(process.pid) });
      logger.info({ standby: child.pid }, 'standby server started');
    }, wait).unref();
  }

  private suspendAll(): void {
    for (const l of this.vugpu.server.all()) l.suspend();
  }

  /** Halt the command processor and wait (bounded) until no reply is queued and no GPU job
   * runs. Queued pushbuffer work stays queued: the checkpoint has each channel's position (the
   * successor runs the rest), so a guest with a deep queue does not stretch everyone's pause.
   * A job still running at the limit dies with this process (ENGINE_LOST for its channel). */
  private async drain(limitMs = 1000): Promise<boolean> {
    const deadline = performance.now() + limitMs;
    this.vugpu.engine.cp.halt();
    for (;;) {
      const quiet = this.vugpu.server.all().every((l) => l.quiet) && this.vugpu.engine.stats().jobsInFlight === 0;
      if (quiet) return true;
      if (performance.now() > deadline) return false;
      await new Promise((r) => setTimeout(r, 1));
    }
  }

  private async handover(pid: number): Promise<void> {
    if (this.stopped) return;
    if (!this.upgrading) this.upgrading = { successor: pid, stoppedAt: null, timer: null };
    const stoppedAt = monoMs();
    this.upgrading.stoppedAt = stoppedAt;
    this.suspendAll();
    const drained = await this.drain();
    const drainedAt = monoMs();
    await this.vugpu.closeMetrics(); // the successor listens on the same port
    const metricsAt = monoMs();
    if (this.upgrading === null) return; // abandoned meanwhile
    // From here on synchronous to the exit: nothing may run after the last checkpoint (a job
    // completing, the scheduler dispatching), so that checkpoint is exactly the final state.
    this.finalCheckpoint = true;
    if (this.checkpointer.write(true) < 0) {
      this.finalCheckpoint = false;
      this.abandonUpgrade('the last checkpoint could not be written');
      return;
    }
    this.checkpointer.stop();
    this.stopped = true;
    if (this.upgrading.timer) clearTimeout(this.upgrading.timer);
    const checkpointAt = monoMs();
    this.keeper!.handover(stoppedAt);
    const r = (t: number) => Math.round((t - stoppedAt) * 10) / 10;
    logger.info({
      successor: pid, drained, handoverMs: r(monoMs()), checkpoints: this.checkpointStats(),
      marks: { drained: r(drainedAt), metricsClosed: r(metricsAt), checkpointed: r(checkpointAt) },
    }, 'live upgrade: handed over; exiting');
    process.exit(0);
  }

  private abandonUpgrade(reason: string): void {
    if (!this.upgrading || this.stopped) return;
    if (this.upgrading.timer) clearTimeout(this.upgrading.timer);
    const wasStopped = this.upgrading.stoppedAt !== null;
    this.upgrading = null;
    if (wasStopped) {
      this.vugpu.engine.cp.unhalt();
      for (const l of this.vugpu.server.all()) l.resume();
    }
    this.keeper?.resume(reason);
    logger.error({ reason }, 'live upgrade abandoned; this server carries on');
  }

  // ---- the keeper died under us ----

  private async keeperLost(): Promise<void> {
    if (this.stopped) return;
    logger.error({ socket: this.keeperSocket }, 'the fd keeper is gone: starting a new one and depositing every fd again');
    for (let attempt = 0; attempt < 20 && !this.stopped; attempt++) {
      try {
        const k = await KeeperClient.connectOrSpawn(this.keeperSocket);
        const hello = await k.hello('server');
        if (!('keys' in hello)) throw new Error('unexpected keeper answer');
        this.keeper = k;
        this.depot.holder = k;
        this.depot.redeposit();
        k.events = {
          upgrade: () => this.upgrade(),
          successorReady: (pid) => void this.handover(pid),
          successorGone: (pid) => this.abandonUpgrade(`successor ${pid} went away`),
          standbyGone: () => this.startStandby(),
          gone: () => void this.keeperLost(),
        };
        this.startStandby();
        logger.info({ keys: this.depot.held.size }, 'a new fd keeper holds every fd again');
        return;
      } catch (err) {
        logger.error({ err }, 'could not restart the fd keeper');
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  /** What checkpointing cost this process (writes, how many before a reply, mean/max ms, bytes). */
  checkpointStats(): Record<string, number> {
    const st = this.checkpointer.stats;
    return { ...st, meanMs: st.writes ? Math.round((st.totalMs / st.writes) * 1000) / 1000 : 0, totalMs: Math.round(st.totalMs), maxMs: Math.round(st.maxMs * 1000) / 1000 };
  }

  /** Clean stop: close every VM's device (QEMU sees EOF: this is a deliberate stop), tell the
   * holder to drop everything. */
  close(): void {
    if (this.stopped) {
      return;
    }
    this.stopped = true;
    if (this.checkpointer) logger.info({ checkpoints: this.checkpointStats() }, 'restartable server stopping');
    this.checkpointer?.stop();
    this.vugpu.close();
    if (this.keeper) {
      this.keeper.bye();
      this.keeper.close();
    }
    if (this.systemd) {
      this.systemd.remove([...this.depot.held.keys()]);
      this.systemd.stopping();
    }
  }
}
