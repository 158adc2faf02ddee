// The aggregator's checkpoint section (docs/architecture.md "State"): per vGPU its register view,
// VRAM slice, virtual channels (virtual → physical map, enable, queued doorbells), shadow
// address spaces (shadow PD and table roots in host-reserved VRAM, the dirty flags lazy
// shadowing needs, PV ownership), PV state, its MEM_ALLOC allocator, counters and interrupt
// counters; and for the aggregator the physical channel pool, the merged runlist, the
// host-reserved and slice allocators, the scheduler policy's state, the submission on the
// device and the completions not yet handed to the scheduler. Shadow tables and slice contents
// are VRAM: they survive in the VRAM memfd and are not copied.
//
// Not state: the bus resolver and the VMs' guest memory (the DMA tables: device-model
// persist), timers (the stall check and the dispatcher's wait are re-armed by resume), the
// shadow MMU's scratch buffers, log budgets and observers.
import type { Aggregator, Submission } from './aggregator.ts';
import type { Vgpu, VgpuState } from './vgpu.ts';
import type { AllocatorState, RangeAllocator } from './alloc.ts';
import { newVChannel, type VChannel } from './shadow-channels.ts';
import type { ShadowSpace, Slice } from './shadow-mmu.ts';
import type { PvState } from './pv.ts';
import type { MediatedMode } from './modes.ts';
import type { PolicyStateBase } from './scheduler/index.ts';
import { isNum, need, numArray, overlay, plain, section, StateError } from '../state/plain.ts';

export const AGGREGATOR_STATE_VERSION = 1;
export const VGPU_STATE_VERSION = 1;

export interface SavedVgpu {
  version: number;
  name: string;
  mode: MediatedMode;
  index: number;
  slice: Slice;
  vchannels: number;
  weight: number;
  state: Omit<VgpuState, 'channels'> & { channels: VChannel[] };
  registers: Record<string, number>;
  interruptsSent: number[];
  shadow: { spaces: ShadowSpace[]; shadowBytes: number };
  pv: PvState | null;
  vramAlloc: AllocatorState;
  counters: Record<string, number>;
}

export interface AggregatorState {
  version: number;
  channels: number;
  hostArea: AllocatorState;
  slices: AllocatorState;
  /** Scheduler clock: origin (hrtime ns, decimal string) and its reading when saved. */
  clock: { originNs: string; nowNs: number };
  /** Physical chid → owning VM (name) and its virtual chid. */
  owner: (string | null)[];
  ownerVchid: number[];
  shadowInst: number[];
  runlistPages: [number, number];
  runlistFlip: number;
  lastRunlist: string;
  onRunlist: number[];
  open: number[];
  running: { vmId: string; pchid: number; startNs: number; checkMs: number } | null;
  completions: { vmId: string; deviceNs: number }[];
  policy: PolicyStateBase;
  vms: SavedVgpu[];
}

// ---- one vGPU ----

function numericFields(o: object): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(o)) if (typeof v === 'number') out[k] = v;
  return out;
}

export function saveVgpu(vm: Vgpu): SavedVgpu {
  return {
    version: VGPU_STATE_VERSION,
    name: vm.name,
    mode: vm.mode,
    index: vm.index,
    slice: { ...vm.slice },
    vchannels: vm.vchannels,
    weight: vm.weight,
    state: plain(vm.s),
    registers: vm.view.snapshot(),
    interruptsSent: vm.irq.sent.slice(),
    shadow: { spaces: [...vm.mmu.spaces.values()].map((sp) => plain(sp)), shadowBytes: vm.mmu.shadowBytes },
    pv: vm.pv ? { ...vm.pv.s } : null,
    vramAlloc: plain(vm.vramAlloc.s),
    counters: numericFields(vm.counters),
  };
}

function checkAllocator(a: RangeAllocator, raw: unknown, what: string): AllocatorState {
  need(raw !== null && typeof raw === 'object', `${what}: not an object`);
  const s = raw as AllocatorState;
  need(s.base === a.s.base && s.size === a.s.size && s.granule === a.s.granule,
    `${what}: covers ${s.base}+${s.size} (granule ${s.granule}), this one ${a.s.base}+${a.s.size} (granule ${a.s.granule})`);
  need(Array.isArray(s.free) && s.free.every((f) => f && isNum(f.start) && isNum(f.size)), `${what}: free list`);
  need(s.used !== null && typeof s.used === 'object' && Object.values(s.used).every(isNum) && isNum(s.inUse), `${what}: allocations`);
  return s;
}

function loadAllocator(a: RangeAllocator, s: AllocatorState): void {
  a.s.free = plain(s.free);
  a.s.used = plain(s.used);
  a.s.inUse = s.inUse;
}

function checkSpace(raw: unknown, what: string): ShadowSpace {
  need(raw !== null && typeof raw === 'object', `${what}: not an object`);
  const sp = raw as ShadowSpace;
  need(typeof sp.key === 'string' && isNum(sp.target) && isNum(sp.addr) && isNum(sp.pd) && isNum(sp.refs) &&
    typeof sp.dirty === 'boolean' && typeof sp.pv === 'boolean' && sp.tables !== null && typeof sp.tables === 'object', `${what}: malformed`);
  for (const t of Object.values(sp.tables)) need(t && typeof t.large === 'boolean' && isNum(t.addr), `${what}: a table is malformed`);
  need(sp.allocs === undefined || (Array.isArray(sp.allocs) && sp.allocs.every(isNum)), `${what}: allocs`);
  need(sp.freed === undefined || typeof sp.freed === 'boolean', `${what}: freed`);
  return plain(sp);
}

/** Check a saved vGPU against the one the restarted server attached (same name, mode, slice,
 * channels); returns what restoreVgpu loads. Throws a StateError, changing nothing. */
function checkVgpu(vm: Vgpu, raw: unknown) {
  const s = section<SavedVgpu>(`vgpu ${vm.name}`, raw, VGPU_STATE_VERSION);
  const what = `vgpu ${vm.name} state`;
  need(s.name === vm.name && s.mode === vm.mode, `${what}: saved as ${String(s.name)} (${String(s.mode)}), attached as ${vm.mode}`);
  need(s.index === vm.index && s.slice?.base === vm.slice.base && s.slice?.size === vm.slice.size,
    `${what}: bus index ${s.index} slice ${s.slice?.base}+${s.slice?.size}, attached with ${vm.index} ${vm.slice.base}+${vm.slice.size}`);
  need(s.vchannels === vm.vchannels, `${what}: ${s.vchannels} virtual channels, attached with ${vm.vchannels}`);
  need(isNum(s.weight) && s.weight > 0, `${what}: weight`);
  const st = s.state;
  need(st && Array.isArray(st.channels) && st.channels.length === vm.vchannels, `${what}: channels`);
  const channels = st.channels.map((c, i) => overlay(newVChannel(), c, `${what}: channel ${i}`));
  const runlist = numArray(st.runlist, `${what}: runlist`);
  const queue = numArray(st.queue, `${what}: queue`);
  need([...runlist, ...queue].every((v) => Number.isInteger(v) && v >= 0 && v < vm.vchannels), `${what}: virtual chid out of range`);
  need(typeof st.pfifoEnabled === 'boolean' && isNum(st.timeHi) && isNum(st.held), `${what}: state`);
  need(st.scrubPending === undefined || typeof st.scrubPending === 'boolean', `${what}: scrubPending`);
  need(s.registers !== null && typeof s.registers === 'object' && Object.values(s.registers).every(isNum), `${what}: registers`);
  const sent = numArray(s.interruptsSent, `${what}: interruptsSent`, vm.irq.sent.length);
  need(s.shadow && Array.isArray(s.shadow.spaces) && isNum(s.shadow.shadowBytes), `${what}: shadow`);
  const spaces = s.shadow.spaces.map((sp, i) => checkSpace(sp, `${what}: shadow space ${i}`));
  need((s.pv === null) === (vm.pv === null), `${what}: PV state does not match the mode`);
  need(s.pv === null || (isNum(s.pv.area) && isNum(s.pv.slots)), `${what}: pv`);
  const alloc = checkAllocator(vm.vramAlloc, s.vramAlloc, `${what}: VRAM allocator`);
  need(s.counters !== null && typeof s.counters === 'object', `${what}: counters`);
  return { s, channels, runlist, queue, sent, spaces, alloc };
}

function loadVgpu(vm: Vgpu, c: ReturnType<typeof checkVgpu>): void {
  const { s } = c;
  vm.weight = s.weight;
  // In place: shadow-channels.ts and the register closures hold these objects.
  c.channels.forEach((vc, i) => Object.assign(vm.s.channels[i]!, vc));
  vm.s.runlist = c.runlist;
  vm.s.queue = c.queue;
  vm.s.pfifoEnabled = s.state.pfifoEnabled;
  vm.s.timeHi = s.state.timeHi;
  vm.s.held = s.state.held;
  vm.s.scrubPending = s.state.scrubPending === true; // absent before scrubs ran in steps
  vm.view.regs.restore(s.registers);
  c.sent.forEach((n, i) => (vm.irq.sent[i] = n));
  vm.mmu.restore(c.spaces, s.shadow.shadowBytes);
  if (vm.pv && s.pv) Object.assign(vm.pv.s, { area: s.pv.area, slots: s.pv.slots });
  loadAllocator(vm.vramAlloc, c.alloc);
  const counters = vm.counters as unknown as Record<string, number>;
  for (const [k, v] of Object.entries(s.counters)) if (typeof counters[k] === 'number' && isNum(v)) counters[k] = v;
}

/** Load one vGPU's saved state into the vGPU a restarted server attached for it. */
export function restoreVgpu(vm: Vgpu, raw: unknown): void {
  loadVgpu(vm, checkVgpu(vm, raw));
}

// ---- the aggregator ----

export function saveAggregator(agg: Aggregator): AggregatorState {
  const r = agg.running;
  return {
    version: AGGREGATOR_STATE_VERSION,
    channels: agg.channels,
    hostArea: plain(agg.hostArea.s),
    slices: plain(agg.slices.s),
    clock: { originNs: String(agg.t0), nowNs: agg.now() },
    owner: agg.owner.map((vm) => vm?.name ?? null),
    ownerVchid: Array.from(agg.ownerVchid),
    shadowInst: agg.shadowInst.slice(),
    runlistPages: [agg.runlistPages[0], agg.runlistPages[1]],
    runlistFlip: agg.runlistFlip,
    lastRunlist: agg.lastRunlist,
    onRunlist: Array.from(agg.onRunlist),
    open: Array.from(agg.open),
    running: r && !r.done ? { vmId: r.vmId, pchid: r.pchid, startNs: r.startNs, checkMs: r.checkMs } : null,
    completions: agg.completions.map((c) => ({ ...c })),
    policy: agg.policy.state(),
    vms: agg.list().map((vm) => vm.save()), // each vGPU saves its own
  };
}

/**
 * Load a saved state into an aggregator constructed with `adopt` whose VMs were attached again
 * with their saved bus index and slice (AttachOptions.at), over an engine that adopted the same
 * VRAM memfd. Everything is checked before anything changes. Nothing runs until
 * resumeAggregator().
 */
export function restoreAggregator(agg: Aggregator, raw: unknown): void {
  const s = section<AggregatorState>('aggregator', raw, AGGREGATOR_STATE_VERSION);
  const n = agg.channels;
  need(s.channels === n, `aggregator state: ${s.channels} physical channels, this engine has ${n}`);
  need(Array.isArray(s.vms), 'aggregator state: vms');
  const saved = new Set(s.vms.map((v) => v?.name));
  const live = agg.list();
  for (const vm of live) need(saved.has(vm.name), `aggregator state has no VM ${vm.name} (attached by this server)`);
  for (const name of saved) need(agg.vm(String(name)), `aggregator state has VM ${String(name)}, which this server did not attach`);
  const vms = s.vms.map((v) => {
    const vm = agg.vm(v.name)!;
    return [vm, checkVgpu(vm, v)] as const;
  });
  const hostArea = checkAllocator(agg.hostArea, s.hostArea, 'aggregator state: host-reserved allocator');
  const slices = checkAllocator(agg.slices, s.slices, 'aggregator state: slice allocator');
  for (const vm of live) {
    need(slices.used[vm.slice.base] === vm.slice.size, `aggregator state: VM ${vm.name}'s slice is not allocated`);
  }
  need(Array.isArray(s.owner) && s.owner.length === n && s.owner.every((o) => o === null || (typeof o === 'string' && saved.has(o))),
    'aggregator state: channel owners');
  const ownerVchid = numArray(s.ownerVchid, 'aggregator state: ownerVchid', n);
  const shadowInst = numArray(s.shadowInst, 'aggregator state: shadowInst', n);
  const pages = numArray(s.runlistPages, 'aggregator state: runlistPages', 2);
  const onRunlist = numArray(s.onRunlist, 'aggregator state: onRunlist', n);
  const open = numArray(s.open, 'aggregator state: open', n);
  need(isNum(s.runlistFlip) && typeof s.lastRunlist === 'string', 'aggregator state: runlist');
  need(s.clock && typeof s.clock.originNs === 'string' && /^\d+$/.test(s.clock.originNs) && isNum(s.clock.nowNs), 'aggregator state: clock');
  const r = s.running;
  need(r === null || (r && typeof r.vmId === 'string' && isNum(r.pchid) && isNum(r.startNs) && isNum(r.checkMs)), 'aggregator state: running');
  need(Array.isArray(s.completions) && s.completions.every((c) => c && typeof c.vmId === 'string' && isNum(c.deviceNs)), 'aggregator state: completions');
  need(s.policy && typeof s.policy === 'object', 'aggregator state: policy');
  if (s.policy.policy !== agg.policy.name) {
    throw new StateError(`aggregator state: scheduler policy ${String(s.policy.policy)}, this server runs ${agg.policy.name} (restart with the same --policy)`);
  }

  // Apply.
  agg.policy.load(s.policy);
  loadAllocator(agg.hostArea, hostArea);
  loadAllocator(agg.slices, slices);
  for (const [vm, c] of vms) loadVgpu(vm, c);
  agg.held.clear();
  for (let p = 0; p < n; p++) {
    const vm = s.owner[p] === null ? null : agg.vm(s.owner[p]!)!;
    agg.owner[p] = vm;
    agg.ownerVchid[p] = ownerVchid[p]!;
    if (vm) agg.held.set(vm, (agg.held.get(vm) ?? 0) + 1);
    agg.shadowInst[p] = shadowInst[p]!;
    agg.onRunlist[p] = onRunlist[p]!;
    agg.open[p] = open[p]!;
  }
  agg.runlistPages[0] = pages[0]!;
  agg.runlistPages[1] = pages[1]!;
  agg.runlistFlip = s.runlistFlip;
  agg.lastRunlist = s.lastRunlist;
  // The scheduler clock continues (same boot: hrtime is shared), never going backwards.
  const now = process.hrtime.bigint();
  const origin = BigInt(s.clock.originNs);
  agg.t0 = Number(now - origin) < s.clock.nowNs ? now - BigInt(Math.ceil(s.clock.nowNs)) : origin;
  const sub: Submission | null = r === null ? null : {
    vm: agg.vm(r.vmId) ?? null, vmId: r.vmId, pchid: r.pchid, startNs: r.startNs, done: false, timer: null, checkMs: r.checkMs,
  };
  agg.running = sub;
  agg.completions.length = 0;
  for (const c of s.completions) agg.completions.push({ vmId: c.vmId, deviceNs: c.deviceNs });
  // A slice no VM owns was quarantined by a detach: the jobs that might still have written to
  // it died with the old process, so it is scrubbed and freed now.
  const owned = new Set(live.map((vm) => vm.slice.base));
  for (const [base, size] of agg.slices.allocations()) {
    if (owned.has(base)) continue;
    agg.engine.vram.zero(base, size);
    agg.slices.free(base);
  }
}

/** Let a restored aggregator run (after resumeEngine): hand the saved completions to the
 * scheduler, re-arm the stall check of the submission on the device, and let the dispatcher
 * decide (which re-arms a policy's wait). */
export function resumeAggregator(agg: Aggregator): void {
  // A scrub the old process had not finished starts over (the slice may still hold data).
  for (const vm of agg.list()) if (vm.s.scrubPending) vm.scrub();
  for (let i = 0; i < agg.completions.length; i++) queueMicrotask(agg.completeNext);
  if (agg.running && !agg.running.done) agg.check(agg.running);
  agg.dispatcher.kick();
}
