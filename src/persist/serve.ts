// `vugpu serve --state-dir DIR`: a server that survives its own death and can be replaced under
// running guests (docs/architecture.md "Surviving a restart"). This file composes the jobs,
// each in its own file:
//   - the fd depot (depot.ts): every fd that makes up a VM's device is deposited with an fd
//     holder outside the process — the fd keeper (keeper.ts, started on demand) or, under
//     systemd, the service's fd store (fdstore.ts) — while it is open;
//   - the request journal (journal.ts) in a memfd the holder keeps: requests are consumed from
//     the socket only after their reply is out;
//   - the checkpoint (checkpoint.ts) in another memfd the holder keeps, written synchronously
//     before replies whose effect the device declares durable and coalesced otherwise;
//   - adoption (adopt.ts): started again after a crash, or as an upgrade's successor, it takes
//     the fds back and restores every component (state.ts);
//   - live upgrade (upgrade.ts), the standby (standby.ts) and the warm-up both use (warm-up.ts).
// It reads no component's insides: each says what must be durable (PciDevice.durability),
// which of its channels are idle (Engine.idleChannels) and which fds it holds (watchFds).
import fs from 'node:fs';
import path from 'node:path';
import { logger } from '../log.ts';
import { native } from '../native.ts';
import { Vugpu, type VugpuOptions } from '../server.ts';
import type { ServerPersistence } from '../device-model/server.ts';
import { Durability } from '../state/persist.ts';
import { StateError } from '../state/plain.ts';
import { CheckpointError, Checkpointer, CheckpointStore } from './checkpoint.ts';
import { Journal, JournalError, JOURNAL_SLOTS, monoMs, type RequestId } from './journal.ts';
import { KeeperClient, KeeperRefused, type Attached } from './keeper-client.ts';
import { SystemdFdStore } from './fdstore.ts';
import { CHECKPOINT_FD, FdDepot, JOURNAL_FD } from './depot.ts';
import { adopt, buildAhead, hasCommit } from './adopt.ts';
import { LiveUpgrade } from './upgrade.ts';
import { Standbys, standBy, standbyOf } from './standby.ts';
import { settleHeap, warmUp } from './warm-up.ts';
import { saveAll, VRAM_FD, type Prebuilt } from './state.ts';

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

/** Why a start failed in a way the operator must fix; exit status 2, nothing is lost. */
export class AdoptError extends Error {
  override name = 'AdoptError';
}

/** How long an upgrade's successor waits for the running server to hand over, ms. */
const HANDOVER_WAIT_MS = 60_000;

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
  /** Built by buildAhead(), used by the adoption if the final checkpoint still fits it. */
  private prebuilt: Prebuilt | undefined;
  /** Adopted from a predecessor's final checkpoint and not written one of our own yet: the
   * first kick writes it first (a crash after a kick must not adopt "final" state). */
  private firstWritePending = false;
  /** Monotonic ms at each step of an adoption (the pause's breakdown in its log line). */
  private readonly adoptMarks: [string, number][] = [];
  private readonly liveUpgrade: LiveUpgrade;
  private readonly standbys: Standbys;
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
    const s = this;
    this.liveUpgrade = new LiveUpgrade({
      get vugpu() {
        return s.vugpu;
      },
      get checkpointer() {
        return s.checkpointer;
      },
      get systemd() {
        return s.systemd;
      },
      argv: p.argv,
      keeper: () => this.keeper,
      stopped: () => this.stopped,
      finish: () => this.finish(),
      exit: (code) => this.resolveExit(code),
      checkpointStats: () => this.checkpointStats(),
    });
    this.standbys = new Standbys(p.argv, () => !this.stopped);
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
      attached = await s.attach(k);
      s.depot.holder = k;
      fds = attached.keys.length > 0 ? await k.take() : new Map();
      s.adoptMarks.push(['taken', monoMs()]);
    }
    try {
      const ck = fds.get(CHECKPOINT_FD);
      if (fds.size > 0 && ck !== undefined && hasCommit(ck)) {
        s.adopted(fds, attached);
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

  /** Say hello to the keeper as what this process is (server, upgrade's successor, standby)
   * and wait for its turn; resolves with what the keeper hands over. */
  private async attach(k: KeeperClient): Promise<Attached> {
    const p = this.p;
    // A standby names the server that started it: the keeper takes it only as that server's.
    const standsBy = standbyOf();
    try {
      // A successor's hello starts the handover: warm up before it, not during the pause.
      if (p.successor) warmUp(this.opts);
      const hello = await k.hello(p.successor ? 'successor' : standsBy ? 'standby' : 'server', standsBy || undefined, p.successor === true);
      if ('waiting' in hello && standsBy) return await standBy(k, this.opts, hello.waiting);
      if ('waiting' in hello) {
        if (hello.prepare) {
          this.prebuilt = await buildAhead(k, { ...this.opts, persistence: this.persistence() });
          settleHeap();
          k.ready();
        }
        logger.info({ server: hello.waiting }, 'upgrade: waiting for the running server to hand over');
        const attached = await k.adopted(HANDOVER_WAIT_MS);
        this.adoptMarks.push(['told', monoMs()]);
        return attached;
      }
      if ('keys' in hello) return hello;
      throw new AdoptError('the keeper took this server for a control client');
    } catch (err) {
      k.close();
      if (err instanceof KeeperRefused && err.standby) {
        logger.info({ pid: process.pid, reason: err.message }, 'standby not needed; exiting');
        process.exit(0);
      }
      if (err instanceof KeeperRefused) throw new AdoptError(err.message);
      throw err;
    }
  }

  private persistence(): ServerPersistence {
    return {
      put: (key, fd) => this.depot.put(key, fd),
      remove: (key) => this.depot.remove(key),
      journal: (device) => {
        this.hook(device); // its DMA and IRQ fds arrive through this connection
        return this.journal.slot(this.slotOf(device));
      },
      handled: (_device, d) => {
        if (this.pauseFrom !== null) this.firstServed();
        if (d === Durability.none) return;
        const c = this.checkpointer;
        if (c === undefined) return;
        if (d === Durability.now) {
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
    dev.watchFds({ put: (key, fd) => this.depot.put(key, fd), drop: (key) => this.depot.retire(key) });
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

  private adopted(fds: Map<string, number>, attached: Attached | null): void {
    const pre = this.prebuilt;
    this.prebuilt = undefined;
    const a = adopt({
      fds, attached, keeper: this.keeper, opts: this.opts, persistence: this.persistence(), depot: this.depot,
      prebuilt: pre, marks: this.adoptMarks, slots: this.slots,
      journalled: (journal, store) => {
        this.journal = journal;
        this.store = store;
      },
    });
    this.vugpu = a.vugpu;
    this.start = a.start;
    this.pauseFrom = a.pauseFrom;
    this.firstWritePending = a.fromFinal;
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
    const active = this.journal.channelActive;
    v.engine.observe({
      kicking: (chid) => {
        if (this.firstWritePending) this.checkpointer.write(true);
        active[chid] = 1;
      },
      changed: () => this.checkpointer.dirty(),
    });
    if (this.firstWritePending) {
      // The predecessor's final checkpoint is exactly this state and committed: ours can wait
      // until after the guests' first requests (or until the first kick, see above).
      this.checkpointer.dirty();
    } else if (this.checkpointer.write(true) < 0) {
      throw new Error('the first checkpoint could not be written');
    }
    if (this.keeper) {
      this.listenToKeeper(this.keeper);
      if (this.start !== 'fresh') this.standbys.afterAdoption();
      if (this.p.standby) this.standbys.start();
    }
    this.systemd?.ready(`serving ${this.opts.vms.length} VMs (${this.start})`);
    this.systemd?.startWatchdog();
    logger.info({ start: this.start, holder: this.systemd ? 'systemd' : this.keeperSocket, checkpointBytes: this.checkpointer.stats.bytes }, 'restartable serving: fds held outside the process');
  }

  private listenToKeeper(k: KeeperClient): void {
    k.events = {
      upgrade: () => this.liveUpgrade.start(),
      successorReady: (pid) => void this.liveUpgrade.handover(pid),
      successorGone: (pid) => this.liveUpgrade.abandon(`successor ${pid} went away`),
      standbyGone: () => {
        if (this.p.standby && !this.stopped) this.standbys.start();
      },
      gone: () => void this.keeperLost(),
    };
  }

  private produce(): Record<string, unknown> {
    const v = this.vugpu;
    this.idleAtCheckpoint = v.engine.idleChannels();
    const applied: Record<string, RequestId> = {};
    const accepted: Record<string, number> = {};
    for (const vm of v.vmConfigs.values()) {
      const cur = this.journal.slot(this.slotOf(vm.name)).current();
      if (cur) applied[vm.name] = cur;
      accepted[vm.name] = v.server.listener(vm.socket)?.accepted ?? 0;
    }
    return { vugpu: saveAll(v), journal: { applied }, server: { accepted, slots: Object.fromEntries(this.slots), final: this.finalCheckpoint } };
  }

  /** Start a live upgrade (SIGUSR2, `vugpu upgrade`): a successor, then the handover. */
  upgrade(): void {
    this.liveUpgrade.start();
  }

  /** The last checkpoint before a handover, written while the process is quiescent (so it is
   * exact), then stop serving; false and still serving if it could not be written. */
  private finish(): boolean {
    this.finalCheckpoint = true;
    if (this.checkpointer.write(true) < 0) {
      this.finalCheckpoint = false;
      return false;
    }
    this.checkpointer.stop();
    this.stopped = true;
    return true;
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
        this.listenToKeeper(k);
        if (this.p.standby) this.standbys.start();
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
