// The whole server's state for a checkpoint (docs/architecture.md "State"): the composition of
// every component's own section — the engine (src/gpu/persist.ts), the aggregator and its
// vGPUs (src/aggregator/persist.ts), each VM's device and endpoint (src/device-model/persist.ts)
// — under one versioned envelope. Plain JSON; fds are never inside: they are named by stable
// keys (`vram`, `dma:<vm>:<file id>`, `irq:<vm>:<index>:<vector>`; fdNames() lists what a state
// needs) and restore receives them in a Map. The checkpoint container (where and how often
// this is written) is checkpoint.ts's business; this file only makes and loads the value.
//
// Restart = restoreAll(state, fds, options): a Vugpu is constructed adopting the VRAM memfd and
// each VM's slice (VugpuAdopt), every section is checked and loaded, and then it resumes:
// channels whose native job or program compile died with the old process fail with
// ENGINE_LOST (the guest driver reports it; no fence waits forever), the rest carry on.
import { Vugpu, type VmConfig, type VmMode, type VugpuAdopt, type VugpuOptions } from '../server.ts';
import type { Endpoint } from '../device-model/endpoint.ts';
import type { EngineRestore, EngineState } from '../gpu/persist.ts';
import type { AggregatorState } from '../aggregator/persist.ts';
import { deviceFdNames, preloadDeviceDma, type DeviceState, type EndpointState } from '../device-model/persist.ts';
import { adoptedFd, isNum, need, section, StateError, type AdoptedFds } from '../state/plain.ts';

export const VUGPU_STATE_VERSION = 1;
/** The VRAM memfd's fd name. */
export const VRAM_FD = 'vram';

export interface VugpuState {
  version: number;
  kind: 'vugpu-state';
  /** The VMs being served (their configurations, VMs added at run time included): a restart
   * is started with the same (checkpointVms). */
  vms: (VmConfig & { mode: VmMode })[];
  engine: EngineState;
  aggregator: AggregatorState | null;
  devices: Record<string, DeviceState>;
  /** The connected client's negotiated state per VM (null: no client). */
  endpoints: Record<string, EndpointState | null>;
  /** pt VMs' counters (mediated VMs' are in their vGPU section). */
  ptCounters: Record<string, Record<string, number>>;
}

function numericFields(o: object): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(o)) if (typeof v === 'number') out[k] = v;
  return out;
}

export interface SaveAllOptions {
  /** The endpoint serving a VM's client (default: the one its socket's listener accepted; an
   * endpoint over an adopted connection may live elsewhere). */
  endpoint?: (vm: VmConfig) => Endpoint | null;
}

/** The VM configurations recorded in a checkpoint (to start a restart with the same VMs). */
export function checkpointVms(raw: unknown): VmConfig[] {
  return checkState(raw).vms.map((vm) => ({ ...vm }));
}

export function saveAll(v: Vugpu, o: SaveAllOptions = {}): VugpuState {
  const devices: Record<string, DeviceState> = {};
  const endpoints: Record<string, EndpointState | null> = {};
  const ptCounters: Record<string, Record<string, number>> = {};
  // The VMs served now, run-time additions included.
  const vms = [...v.vmConfigs.values()].filter((vm) => v.vms.has(vm.name));
  for (const vm of vms) {
    devices[vm.name] = v.vms.get(vm.name)!.device.save();
    const ep = o.endpoint ? o.endpoint(vm) : v.server.listener(vm.socket)?.endpoint ?? null;
    endpoints[vm.name] = ep ? ep.save() : null;
    if (vm.mode === 'pt') ptCounters[vm.name] = numericFields(v.metrics.register(vm.name, 'pt'));
  }
  return {
    version: VUGPU_STATE_VERSION,
    kind: 'vugpu-state',
    vms: vms.map((vm) => ({ ...vm })),
    engine: v.engine.save(),
    aggregator: v.aggregator ? v.aggregator.save() : null,
    devices,
    endpoints,
    ptCounters,
  };
}

/** Check the envelope (not the sections: each component checks its own). */
export function checkState(raw: unknown): VugpuState {
  const s = section<VugpuState>('vugpu', raw, VUGPU_STATE_VERSION);
  need(s.kind === 'vugpu-state', `not a vugpu state (kind ${String(s.kind)})`);
  need(Array.isArray(s.vms) && s.vms.every((vm) => vm && typeof vm.name === 'string' && typeof vm.mode === 'string' && typeof vm.socket === 'string'), 'vugpu state: vms');
  need(s.devices && typeof s.devices === 'object' && s.vms.every((vm) => s.devices[vm.name]), 'vugpu state: a VM without its device');
  need((s.aggregator === null) === s.vms.every((vm) => vm.mode === 'pt'), 'vugpu state: aggregator');
  return s;
}

/** Every fd name restoring `raw` needs (what the keeper must hand over). */
export function fdNames(raw: unknown): string[] {
  const s = checkState(raw);
  return [VRAM_FD, ...s.vms.flatMap((vm) => deviceFdNames(s.devices[vm.name]))];
}

/** The options a checkpoint was taken with, merged over `opts` (for a start without them) —
 * and a StateError if `opts` names other VMs, modes or sockets than the checkpoint. */
function checkOptions(s: VugpuState, opts: VugpuOptions): void {
  const want = s.vms.map((vm) => `${vm.name}:${vm.mode}:${vm.socket}`).sort().join(' ');
  const have = opts.vms.map((vm) => `${vm.name}:${vm.mode}:${vm.socket}`).sort().join(' ');
  if (want !== have) throw new StateError(`the checkpoint has VMs [${want}], this server is started with [${have}]: start it with the same VMs`);
}

/** What the Vugpu constructor adopts instead of creating. */
export function adoptPlan(raw: unknown, fds: AdoptedFds): VugpuAdopt {
  const s = checkState(raw);
  const vms: VugpuAdopt['vms'] = {};
  for (const v of s.aggregator?.vms ?? []) {
    need(v && typeof v.name === 'string' && isNum(v.index) && isNum(v.slice?.base), 'vugpu state: a vGPU without index or slice');
    vms[v.name] = { index: v.index, base: v.slice.base };
  }
  return { vramFd: adoptedFd(fds, VRAM_FD), vms };
}

/** What a restore learnt that resume needs: the engine's (work that died, suspects). */
export type Restored = EngineRestore;

/**
 * Load a state into a Vugpu constructed with its adoptPlan: the engine, every device (DMA maps
 * mmapped again from the adopted fds, eventfds adopted), the aggregator and its vGPUs. Nothing
 * runs until resumeAll(). Every section checks itself before it changes anything; a section
 * that fails leaves an error naming what is wrong (the caller closes this Vugpu and keeps the
 * fds: the keeper still holds its own copies).
 */
export function restoreInto(v: Vugpu, raw: unknown, fds: AdoptedFds, mark?: (what: string) => void): Restored {
  const s = checkState(raw);
  checkOptions(s, v.options);
  for (const vm of s.vms) deviceFdNames(s.devices[vm.name]).forEach((n) => adoptedFd(fds, n));
  const restored = v.engine.restore(s.engine);
  mark?.('engine');
  for (const vm of s.vms) v.vms.get(vm.name)!.device.restore(s.devices[vm.name], fds);
  mark?.('devices');
  if (v.aggregator) v.aggregator.restore(s.aggregator);
  mark?.('aggregator');
  for (const [name, c] of Object.entries(s.ptCounters ?? {})) {
    const m = v.metrics.register(name, 'pt') as unknown as Record<string, number>;
    for (const [k, n] of Object.entries(c)) if (typeof m[k] === 'number' && isNum(n)) m[k] = n;
  }
  return restored;
}

/** Let a restored Vugpu run: the engine first (segments re-read, acquire polls re-armed, lost
 * work failed with ENGINE_LOST, channels kicked), then the aggregator (completions, stall
 * check, the dispatcher's next decision). Returns the chids failed with ENGINE_LOST. */
export function resumeAll(v: Vugpu, r: Restored): number[] {
  const lost = v.engine.resume(r);
  v.aggregator?.resume();
  return lost;
}

/** The negotiated state of VM `name`'s client in a checkpoint, for the endpoint the keeper
 * creates over the adopted connection (restoreEndpoint). */
export function endpointState(raw: unknown, name: string): EndpointState | null {
  return checkState(raw).endpoints?.[name] ?? null;
}

/**
 * Drop a Vugpu whose restore failed without touching device state: Vugpu.close() would reset
 * and detach the VMs, which scrubs their slices in the shared VRAM memfd. Only this process's
 * mappings, fds and listeners go (the keeper keeps its copies of the fds: the old build can
 * still adopt them).
 */
export function discard(v: Vugpu): void {
  for (const m of v.vms.values()) {
    m.device.dma.unmapAll(); // our duplicates of the DMA fds, and their mappings
    m.device.irq.closeAll();
  }
  v.server.close();
  v.engine.close(); // channels dropped in memory, VRAM unmapped; its contents stay
  v.programs?.close();
  v.tracer?.close();
}

export interface RestoreAllOptions {
  /** Serve each VM's device on an adopted socket (the keeper's adoption) instead of listening. */
  listen?: VugpuAdopt['listen'];
  /** Resume at once (default true); false: call resumeAll(vugpu, restored) later. */
  resume?: boolean;
  /** A Vugpu constructed ahead (prebuild: the same VMs, slices and VRAM, checked by
   * prebuiltFits): the restore loads into it and attaches it instead of constructing one. */
  prebuilt?: Vugpu;
  /** Called after each restore step with its name (the pause's breakdown in the log). */
  mark?: (what: string) => void;
}

/** A Vugpu constructed ahead of a handover, and what it was constructed for. */
export interface Prebuilt {
  vugpu: Vugpu;
  fit: string;
  /** The fds (by name) the prebuilt server owns now: the VRAM memfd and its DMA files. */
  owned: string[];
  /** Devices whose DMA maps could not be preloaded (restored in the pause instead). */
  errors: string[];
}

/** What construction depends on: the VMs (names, modes, sockets, slices, weights), each vGPU's
 * bus index and slice base, the VRAM size. */
function fitKey(s: VugpuState): string {
  return JSON.stringify([s.vms, (s.aggregator?.vms ?? []).map((v) => [v.name, v.index, v.slice?.base]), s.engine?.vramSize]);
}

/** Construct, ahead of a handover, the Vugpu that restoring `raw` will need (the engine, every
 * vGPU and device, not yet serving): construction is most of a restore's time, and a successor
 * does it while its predecessor still serves. `raw` is the predecessor's current checkpoint;
 * the final one must still fit it (prebuiltFits), else the caller discards it. */
export function prebuild(raw: unknown, fds: AdoptedFds, opts: VugpuOptions): Prebuilt {
  const s = checkState(raw);
  const vugpu = new Vugpu({ ...opts, vms: checkpointVms(s) }, { ...adoptPlan(s, fds), prebuild: true });
  const owned = [VRAM_FD];
  const errors: string[] = [];
  // The guests' memory too: restoreDevice keeps each DMA map whose record did not change. A
  // device whose maps cannot be preloaded is left empty (preloadDeviceDma changes nothing on
  // error) and is mapped in the pause as before.
  for (const vm of s.vms) {
    try {
      owned.push(...preloadDeviceDma(vugpu.vms.get(vm.name)!.device, s.devices[vm.name], fds));
    } catch (err) {
      errors.push(`${vm.name}: ${(err as Error).message}`);
    }
  }
  return { vugpu, fit: fitKey(s), owned, errors };
}

export function prebuiltFits(p: Prebuilt, raw: unknown): boolean {
  return fitKey(checkState(raw)) === p.fit;
}

/**
 * Restart from a checkpoint: construct a Vugpu with `opts` (the same arguments as the process
 * that wrote `state`) adopting the fds, load the state, and resume. Throws a StateError (or an
 * Error naming the section) for a checkpoint this build cannot use; nothing is left running.
 */
export function restoreAll(raw: unknown, fds: AdoptedFds, opts: VugpuOptions, o: RestoreAllOptions = {}): { vugpu: Vugpu } & Restored {
  const s = checkState(raw);
  checkOptions(s, opts);
  const plan = adoptPlan(s, fds);
  const vugpu = o.prebuilt ?? new Vugpu(opts, { ...plan, listen: o.listen });
  let r: Restored;
  try {
    r = restoreInto(vugpu, s, fds, o.mark);
    if (o.prebuilt) vugpu.attach(o.listen);
    o.mark?.('attach');
  } catch (err) {
    discard(vugpu);
    throw err;
  }
  if (o.resume !== false) resumeAll(vugpu, r);
  return { vugpu, ...r };
}
