// Adoption: a server started again after a crash (same arguments), or as an upgrade's
// successor, takes the fds back from the holder, restores every component from the committed
// checkpoint (state.ts restoreAll) and carries on serving the connected QEMUs without a new
// handshake; channels whose work died, or may have started after the checkpoint, fail with
// ENGINE_LOST (docs/architecture.md "Surviving a restart"). An upgrade's successor may build its
// server ahead, while the predecessor still serves (buildAhead), so that the pause holds only
// the restore of the final checkpoint.
import { logger } from '../log.ts';
import { native } from '../native.ts';
import type { VugpuOptions, Vugpu } from '../server.ts';
import type { ServerPersistence } from '../device-model/server.ts';
import { CheckpointError, CheckpointStore, decodeCheckpoint } from './checkpoint.ts';
import { Journal, monoMs, type RequestId } from './journal.ts';
import type { Attached, KeeperClient } from './keeper-client.ts';
import { CHECKPOINT_FD, JOURNAL_FD, type FdDepot } from './depot.ts';
import { checkpointVms, discard, endpointState, fdNames, prebuild, prebuiltFits, resumeAll, restoreAll, VRAM_FD, type Prebuilt } from './state.ts';

/** The checkpoint memfd has a committed checkpoint (its header's sequence word is set). */
export function hasCommit(fd: number): boolean {
  const probe = new Uint8Array(16);
  if (native.pread(fd, probe, 0) < 16) return false;
  return new DataView(probe.buffer).getUint32(12, true) !== 0xffffffff;
}

/**
 * An upgrade's successor, before it says it is ready: take duplicates of the fds, read the
 * running server's current checkpoint and construct the server it describes (state.ts
 * prebuild). Any failure here only costs the pause that time (the restore then constructs as
 * usual): it is logged and undefined returned.
 */
export async function buildAhead(k: KeeperClient, opts: VugpuOptions): Promise<Prebuilt | undefined> {
  const t0 = performance.now();
  let fds: Map<string, number> | null = null;
  try {
    fds = await k.take();
    const ck = fds.get(CHECKPOINT_FD);
    if (ck === undefined || !hasCommit(ck)) return undefined;
    fds.delete(CHECKPOINT_FD);
    const store = CheckpointStore.adopt(ck);
    let payload: Uint8Array | null;
    try {
      payload = store.read(); // a torn read (the server writes meanwhile) fails its CRC
    } finally {
      store.close();
    }
    if (payload === null) return undefined;
    const pre = prebuild(decodeCheckpoint(payload).sections.vugpu, fds, opts);
    for (const name of pre.owned) fds.delete(name); // the prebuilt server's now
    if (pre.errors.length > 0) logger.warn({ errors: pre.errors }, 'upgrade: some DMA maps could not be mapped ahead; the restore maps them');
    logger.info({ ms: Math.round(performance.now() - t0) }, 'upgrade: server built ahead of the handover');
    return pre;
  } catch (err) {
    logger.warn({ err: (err as Error).message }, 'upgrade: could not build ahead of the handover; the restore constructs');
    return undefined;
  } finally {
    if (fds) for (const fd of fds.values()) native.close(fd);
  }
}

export interface AdoptInput {
  /** Every fd the holder handed over, by name. */
  fds: Map<string, number>;
  /** The keeper's account of the handover (null under systemd). */
  attached: Attached | null;
  keeper: KeeperClient | null;
  opts: VugpuOptions;
  persistence: ServerPersistence;
  depot: FdDepot;
  /** Built ahead by buildAhead(): used if the final checkpoint still fits it, else discarded. */
  prebuilt?: Prebuilt;
  /** Monotonic ms at each step so far (the pause's breakdown); adopt adds its own. */
  marks: [string, number][];
  /** Journal slot per VM: filled from the checkpoint. */
  slots: Map<string, number>;
  /** The journal and checkpoint store are adopted: `persistence` reads through them from here
   * on (the adopted sockets are wrapped during the restore). */
  journalled(journal: Journal, store: CheckpointStore): void;
}

export interface Adoption {
  vugpu: Vugpu;
  start: 'restart' | 'upgrade';
  /** Monotonic ms the guests' pause began (the predecessor stopped or died), if known. */
  pauseFrom: number | null;
  /** Adopted from a predecessor's final checkpoint (exact and committed): this server's own
   * first checkpoint may wait until after the guests' first requests or the first kick. */
  fromFinal: boolean;
}

/** The server's own section of a checkpoint (serve.ts writes it beside `vugpu`). */
interface ServerSection {
  accepted?: Record<string, number>;
  slots?: Record<string, number>;
  final?: boolean;
}

/** Take over the VMs a dead or upgraded predecessor served. Throws CheckpointError, StateError
 * or JournalError for a checkpoint this build cannot use (the holder keeps every fd). */
export function adopt(a: AdoptInput): Adoption {
  const { fds, attached } = a;
  const t0 = performance.now();
  const ckFd = fds.get(CHECKPOINT_FD)!;
  const jFd = fds.get(JOURNAL_FD);
  if (jFd === undefined) throw new CheckpointError('the fd holder has a checkpoint but no request journal');
  const store = CheckpointStore.adopt(ckFd);
  const payload = store.read();
  if (payload === null) throw new CheckpointError('no checkpoint was ever committed');
  const ckpt = decodeCheckpoint(payload);
  store.lastSeq = ckpt.seq;
  const mark = (what: string) => a.marks.push([what, monoMs()]);
  mark('decoded');
  const journal = Journal.adopt(jFd);
  a.journalled(journal, store);
  const state = ckpt.sections.vugpu;
  const applied = ((ckpt.sections.journal as { applied?: Record<string, RequestId> } | undefined)?.applied) ?? {};
  const srv = (ckpt.sections.server as ServerSection | undefined) ?? {};
  const accepted = srv.accepted ?? {};
  const vms = checkpointVms(state);
  vms.forEach((vm, i) => a.slots.set(vm.name, srv.slots?.[vm.name] ?? i));
  const want = vms.map((vm) => vm.name).sort().join(', ');
  const have = a.opts.vms.map((vm) => vm.name).sort().join(', ');
  if (want !== have) logger.warn({ checkpoint: want, commandLine: have }, 'the VMs being served differ from the command line (run-time changes): serving the checkpoint\'s');
  const used = new Set<string>([CHECKPOINT_FD, JOURNAL_FD, ...fdNames(state)]);
  const pre = a.prebuilt;
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
  const restored = restoreAll(state, fds, { ...a.opts, vms, persistence: a.persistence }, {
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
        const slot = journal.slot(a.slots.get(vm.name)!).read();
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
  const vugpu = restored.vugpu;
  // Channels that may have started work after the checkpoint was written (the journal marked
  // them at a kick): their checkpointed state may be stale. Not after a handover: the old
  // server wrote its last checkpoint quiescent, it is exact.
  if (srv.final !== true) {
    const suspect: number[] = [];
    journal.channelActive.forEach((on, chid) => on && suspect.push(chid));
    restored.suspect = suspect;
  }
  // Everything adopted is ours now; what the state does not name is stale.
  for (const [k, fd] of fds) {
    if (used.has(k)) a.depot.held.set(k, fd);
    else {
      native.close(fd);
      a.depot.holder?.remove([k]);
    }
  }
  a.depot.held.set(VRAM_FD, vugpu.engine.vramFd);
  const lost = resumeAll(vugpu, restored);
  mark('resumed');
  const start = attached?.handover && attached.stoppedAt !== null ? 'upgrade' : 'restart';
  const restoreMs = performance.now() - t0;
  const now = monoMs();
  const from = attached?.stoppedAt ?? attached?.gapSince ?? null;
  const pauseMs = from === null ? null : now - from;
  // Each step's end, in ms since the pause began (the predecessor stopped or died).
  const marks = from === null ? undefined : Object.fromEntries(a.marks.map(([k, t]) => [k, Math.round((t - from) * 10) / 10]));
  const record = {
    event: start === 'upgrade' ? 'upgrade-adopted' : 'restart-adopted',
    checkpointSeq: ckpt.seq, writtenBy: ckpt.writer.build, checkpointTime: ckpt.time, prebuilt: prebuilt !== undefined,
    restoreMs: Math.round(restoreMs * 10) / 10, pauseMs: pauseMs === null ? null : Math.round(pauseMs * 10) / 10,
    lostChannels: lost, marks,
  };
  // Said after the guests' waiting requests had their turn: a log line to a slow reader or
  // the keeper's reply is not worth a millisecond of their pause.
  setImmediate(() => {
    logger.info(record, start === 'upgrade' ? 'live upgrade: serving the adopted VMs' : 'restarted: serving the adopted VMs');
    if (start === 'upgrade') a.keeper?.serving(pauseMs);
  });
  return { vugpu, start, pauseFrom: from, fromFinal: srv.final === true };
}
