// The vugpu process: one engine (the "physical" GPU), one vfio-user socket per VM, and per VM a
// vGPU in the mode it attached with. This file only composes the layers; each layer lives in
// its own directory (docs/architecture.md).
import fs from 'node:fs';
import path from 'node:path';
import { Server, type ServerPersistence } from './device-model/server.ts';
import type { PciDevice } from './device-model/device.ts';
import { jobPool } from './gpu/jobs.ts';
import { Engine } from './gpu/engine.ts';
import { VulkanBackend } from './gpu/vulkan.ts';
import type { ProgramBackend } from './gpu/programs.ts';
import { PassthroughVgpu } from './aggregator/passthrough.ts';
// Mediated modes (aggregator): one Aggregator shares the engine among the VMs.
import { Aggregator } from './aggregator/aggregator.ts';
import { createPolicy } from './aggregator/scheduler/index.ts';
import { MediatedVgpu } from './aggregator/mediated.ts';
import { MetricsRegistry, startMetricsServer, type MetricsServer } from './aggregator/metrics.ts';
import { logger } from './log.ts';
// Tracing (--trace FILE): opt-in record of trapped accesses and events (src/trace).
import { Tracer } from './trace/recorder.ts';
import { registerNames } from './trace/names.ts';

export type VmMode = 'pt' | 'fv-naive' | 'fv' | 'pv' | 'pv-batch';
export const VM_MODES: readonly VmMode[] = ['pt', 'fv-naive', 'fv', 'pv', 'pv-batch'];

/** Which backend runs what (hw-spec §6): `native` — built-ins on the native pool, no guest
 * programs; `vulkan` — programs and the built-ins (as SPIR-V) on the Vulkan device; `auto` —
 * built-ins native, programs on the first suitable Vulkan device if there is one. */
export type EngineBackend = 'auto' | 'native' | 'vulkan';
export const ENGINE_BACKENDS: readonly EngineBackend[] = ['auto', 'native', 'vulkan'];

export interface VmConfig {
  name: string;
  socket: string;
  mode: VmMode;
  /** VRAM slice in bytes (mediated modes). */
  slice?: number;
  weight?: number;
}

export interface VugpuOptions {
  vms: VmConfig[];
  vramSize?: number;
  channels?: number;
  watchdogMs?: number;
  policy?: string;
  /** Policy parameters (scheduler/registry.ts), e.g. { yieldNs } for band. */
  policyConfig?: object;
  metricsPort?: number;
  /** Address of the metrics server (default 127.0.0.1). */
  metricsHost?: string;
  /** Trace file: record trapped MMIO and vGPU events (src/trace). */
  trace?: string;
  /** Accept DMA fds that are not sealed against shrinking (memory-backend-file guests). A
   * client that truncates such a file can crash the server: trusted clients only. */
  allowUnsealedDma?: boolean;
  /** Restartable serving (src/persist/serve.ts): sockets deposited with the fd keeper,
   * journalled reads, checkpoint hooks. */
  persistence?: ServerPersistence;
  /** Engine backend (default auto). */
  engine?: EngineBackend;
  /** Vulkan device to use (substring of its name); default: the first suitable one. */
  vulkanDevice?: string;
  /** Completion polling in µs (EngineOptions.completionPollUs); default: the device's. */
  completionPollUs?: number;
  /** A guest program's timeslice on a device that cannot switch it out, ms (EngineOptions). */
  timesliceMs?: number;
  /** Switch contexts in the engine on any program device (EngineOptions.timesliceAlways). */
  timesliceAlways?: boolean;
}

/**
 * A restart's adoption plan (src/persist/state.ts makes it from a checkpoint and the adopted
 * fds): what the constructor takes over instead of creating. The state itself is loaded into
 * the constructed objects afterwards (restoreInto).
 */
export interface VugpuAdopt {
  /** The VRAM memfd (its contents are the VRAM, shadow tables included). */
  vramFd: number;
  /** Each mediated VM's bus index and slice base. */
  vms: Record<string, { index: number; base: number }>;
  /** Serve a VM's device on an adopted socket instead of listening anew (the fd keeper's part). */
  listen?: (vm: VmConfig, device: PciDevice, server: Server) => void;
  /** Built ahead of an upgrade's handover, while the predecessor still serves: no socket and
   * no metrics port yet (its predecessor holds them); attach() does both after the restore. */
  prebuild?: boolean;
}

/** The program device for a backend choice; throws a readable error when `vulkan` cannot open. */
export function openProgramBackend(engine: EngineBackend, vulkanDevice?: string): ProgramBackend | null {
  if (engine === 'native') return null;
  try {
    return VulkanBackend.open(vulkanDevice);
  } catch (err) {
    if (engine === 'vulkan' || vulkanDevice) throw new Error(`--engine vulkan: ${(err as Error).message}`);
    logger.warn({ err: (err as Error).message }, 'no Vulkan device: guest programs are disabled (PROG_VERSION 0)');
    return null;
  }
}

export class Vugpu {
  readonly engine: Engine;
  readonly server: Server;
  readonly vms = new Map<string, PassthroughVgpu | MediatedVgpu>();
  /** Present when some VM is mediated (made by the first one: at start, or by addVm). */
  aggregator: Aggregator | null = null;
  readonly metrics = new MetricsRegistry();
  private metricsServer: Promise<MetricsServer> | null = null;
  readonly tracer: Tracer | null = null;
  /** The device that runs guest programs, or null. */
  readonly programs: ProgramBackend | null;
  /** What it was started with (a checkpoint records the VMs). */
  readonly options: VugpuOptions;

  constructor(opts: VugpuOptions, adopt?: VugpuAdopt) {
    this.options = opts;
    // No VM at all is fine: a service started empty gets its VMs through the control API.
    this.policyChoice = { name: opts.policy ?? 'fifo', config: opts.policyConfig };
    const backend = opts.engine ?? 'auto';
    this.programs = openProgramBackend(backend, opts.vulkanDevice);
    this.engine = new Engine({
      vramSize: opts.vramSize, channels: opts.channels, watchdogMs: opts.watchdogMs, vramFd: adopt?.vramFd,
      programs: this.programs, builtinsOnPrograms: backend === 'vulkan', completionPollUs: opts.completionPollUs,
      timesliceMs: opts.timesliceMs, timesliceAlways: opts.timesliceAlways,
    });
    this.metrics.setEngineInfo({ backend, device: this.programs?.device ?? 'none' });
    // Completion polling (src/gpu/jobs.ts): how often the JS thread polled, and how each poll
    // ended — by a completion or at its budget (a budget often spent is a core spent for nothing).
    this.metrics.addFamily({
      name: 'completion_polls_total', type: 'counter',
      help: 'Completion polls of the JS thread by how they ended (completed: nothing left in flight; expired: the budget ran out).',
      samples: () => [
        { labels: { end: 'completed' }, value: jobPool.pollCounts.completed },
        { labels: { end: 'expired' }, value: jobPool.pollCounts.expired },
      ],
    });
    this.metrics.addFamily({
      name: 'pool_polls_total', type: 'counter',
      help: 'Polls of a pool thread for the next job after a device task, by how they ended (job: a launch came within the budget; expired: it did not).',
      samples: () => {
        const p = jobPool.poolPollCounts;
        return [{ labels: { end: 'job' }, value: p.hits }, { labels: { end: 'expired' }, value: p.misses }];
      },
    });
    const vk = this.programs instanceof VulkanBackend ? this.programs : null;
    if (vk) {
      // Device losses (VK_ERROR_DEVICE_LOST, or a launch that found its device lost) and the
      // rebuilds after them: a GPU that keeps faulting shows here before its guests complain.
      this.metrics.addFamily({
        name: 'program_device_losses_total', type: 'counter',
        help: 'Losses of the program device (each failed its running and queued launches with ENGINE_LOST; the log line says what faulted).',
        samples: () => [{ labels: {}, value: vk.lossReport().losses }],
      });
      this.metrics.addFamily({
        name: 'program_device_rebuilds_total', type: 'counter',
        help: 'Rebuilds of the program device after a loss.',
        samples: () => [{ labels: {}, value: vk.lossReport().rebuilds }],
      });
      // Where a launch's time goes on the pool thread (per phase, all launches): what an operator
      // or bench:llama needs to tell the launch path from the device's own work.
      this.metrics.addFamily({
        name: 'program_dispatch_seconds_total', type: 'counter',
        help: 'Pool-thread time of program dispatches by phase: setup (operands, staging), record, queue_submit, wait (for the device), finish (write-back).',
        samples: () => {
          const d = vk.dispatchPhases();
          return [
            { labels: { phase: 'setup' }, value: d.setupNs / 1e9 }, { labels: { phase: 'record' }, value: d.recordNs / 1e9 },
            { labels: { phase: 'queue_submit' }, value: d.queueSubmitNs / 1e9 }, { labels: { phase: 'wait' }, value: d.waitNs / 1e9 },
            { labels: { phase: 'finish' }, value: d.finishNs / 1e9 },
          ];
        },
      });
      this.metrics.addFamily({
        name: 'program_staging_bytes_total', type: 'counter',
        help: 'Bytes the Vulkan backend copied between guest memory and device memory for launches (a GPU stages every launch).',
        samples: () => {
          const t = vk.transfers();
          return [{ labels: { direction: 'upload' }, value: t.uploadBytes }, { labels: { direction: 'download' }, value: t.downloadBytes }];
        },
      });
      this.metrics.addFamily({
        name: 'program_resident_bytes_total', type: 'counter',
        help: 'Bytes of DEVICE_CACHED bindings that launches found on the device and did not upload (resident VRAM).',
        samples: () => [{ labels: {}, value: vk.transfers().residentBytes }],
      });
      this.metrics.addFamily({
        name: 'program_vram_mirror_bytes', type: 'gauge',
        help: 'Device memory holding resident copies of VRAM (one mirror per GiB of VRAM that DEVICE_CACHED bindings touched).',
        samples: () => [{ labels: {}, value: vk.transfers().mirrorBytes }],
      });
      this.metrics.addFamily({
        name: 'program_host_imports_total', type: 'counter',
        help: 'Host ranges imported into the Vulkan device for launches (cached while their window lives; hits not counted).',
        samples: () => [{ labels: {}, value: vk.transfers().imports }],
      });
      this.metrics.addFamily({
        name: 'program_dispatches_total', type: 'counter',
        help: 'Program dispatches the Vulkan backend ran (a launch of a built-in with a plan may be several).',
        samples: () => [{ labels: {}, value: vk.dispatchPhases().dispatches }],
      });
      const batches = this.engine.cp.batchStats;
      this.metrics.addFamily({
        name: 'program_batches_total', type: 'counter',
        help: 'Batches of program launches handed to the device as one job (hw-spec §6.3.1 "Batched launches").',
        samples: () => [{ labels: {}, value: batches.batches }],
      });
      this.metrics.addFamily({
        name: 'program_batched_launches_total', type: 'counter',
        help: 'Program launches that went to the device in those batches.',
        samples: () => [{ labels: {}, value: batches.launches }],
      });
    }
    this.metrics.addFamily({
      name: 'completion_poll_budget_microseconds', type: 'gauge',
      help: 'How long the JS thread polls for a job completion, and a pool thread for the next job after a device task, before sleeping (serve --completion-poll-us).',
      samples: () => [{ labels: {}, value: this.engine.completionPollUs }],
    });
    const ctxsw = this.engine.cp.ctxsw;
    if (ctxsw) {
      this.metrics.addFamily({
        name: 'ctxsw_cuts_total', type: 'counter',
        help: "Guest programs stopped with CTXSW_TIMEOUT after their timeslice while another VM's work waited (serve --timeslice-ms; a GPU cannot switch them out, nor a CPU device between VMs that share a way).",
        samples: () => [{ labels: {}, value: ctxsw.cuts }],
      });
    }
    this.server = new Server({
      ...(opts.allowUnsealedDma ? { limits: { dmaRequireSealed: false } } : {}),
      persistence: opts.persistence,
    });
    const pt = opts.vms.filter((v) => v.mode === 'pt');
    if (pt.length > 0 && opts.vms.length > 1) {
      throw new Error('mode pt gives one VM the whole engine: it cannot be combined with other VMs');
    }
    if (opts.trace) {
      this.tracer = new Tracer({
        path: opts.trace,
        engine: { vramBytes: this.engine.vramSize, channels: this.engine.fifo.channels.length, watchdogMs: this.engine.watchdogMs, policy: opts.policy },
        vms: opts.vms.map((v) => ({ name: v.name, mode: v.mode })),
        registers: registerNames(this.engine.regs),
      });
    }
    const mediated = opts.vms.filter((v) => v.mode !== 'pt');
    if (mediated.length > 0) {
      this.aggregator = new Aggregator({
        engine: this.engine, policy: opts.policy, policyConfig: opts.policyConfig, metrics: this.metrics, adopt: adopt !== undefined,
      });
    }
    for (const vm of opts.vms) {
      fs.mkdirSync(path.dirname(vm.socket), { recursive: true });
      let vgpu: PassthroughVgpu | MediatedVgpu;
      if (vm.mode === 'pt') {
        vgpu = new PassthroughVgpu(vm.name, this.engine, this.metrics.register(vm.name, 'pt'), this.tracer ?? undefined);
      } else {
        const agg = this.aggregator!;
        const slice = vm.slice ?? defaultSlice(agg.slices.size, mediated.length);
        const at = adopt?.vms[vm.name];
        if (adopt && !at) throw new Error(`VM ${vm.name} is not in the checkpoint`);
        vgpu = new MediatedVgpu(agg, { name: vm.name, mode: vm.mode, slice, weight: vm.weight, at }, this.tracer ?? undefined);
      }
      this.vms.set(vm.name, vgpu);
      this.vmConfigs.set(vm.name, { ...vm });
    }
    if (adopt?.prebuild) return;
    this.attach(adopt?.listen);
  }

  /** Serve every VM's device (listen, or `listen` for adopted sockets) and the metrics port.
   * The constructor does it, except for a server built ahead of a handover. */
  attach(listen?: VugpuAdopt['listen']): void {
    for (const vm of this.vmConfigs.values()) {
      const device = this.vms.get(vm.name)!.device;
      if (listen) listen(vm, device, this.server);
      else this.server.listen(vm.socket, device);
    }
    const opts = this.options;
    if (opts.metricsPort !== undefined) {
      const port = opts.metricsPort;
      this.metricsServer = startMetricsServer(this.metrics, { port, host: opts.metricsHost }).catch((err: NodeJS.ErrnoException) => {
        throw new Error(`metrics-port ${port}: ${err.code === 'EADDRINUSE' ? 'the port is in use' : err.code === 'EACCES' ? 'permission denied' : err.message}`);
      });
      this.metricsServer.catch((err: unknown) => logger.error({ err }, 'metrics server failed to start'));
    }
    logger.info({
      vms: opts.vms.map((v) => `${v.name}:${v.mode}`), engine: opts.engine ?? 'auto', programDevice: this.programs?.device ?? 'none',
      ...(this.programs instanceof VulkanBackend ? { programWarmUp: this.programs.deviceInfo.warmUp } : {}),
    }, 'vugpu serving');
  }

  /** Stop serving metrics now (a live upgrade hands the port over to its successor). */
  async closeMetrics(): Promise<void> {
    const m = this.metricsServer;
    this.metricsServer = null;
    if (m) await m.then((s) => s.close(), () => {});
  }

  /** Stop serving for a handover: no socket is read and the engine starts no new work (queued
   * pushbuffer work stays queued; jobs already running finish). unpause() carries on. */
  pause(): void {
    for (const l of this.server.all()) l.suspend();
    this.engine.halt();
  }

  unpause(): void {
    this.engine.unhalt();
    for (const l of this.server.all()) l.resume();
  }

  /** No reply waits to go out and no GPU job runs: a paused server's state is final. */
  get quiet(): boolean {
    return this.server.all().every((l) => l.quiet) && this.engine.stats().jobsInFlight === 0;
  }

  /** Resolves once every listener is up (the metrics server); rejects with a readable error. */
  async started(): Promise<void> {
    await this.metricsServer;
  }

  // ---- Run-time changes (the control API, src/service/control.ts). Each touches only its own
  // VM: an added VM gets a free slice and its own socket, a removed one releases only its own.

  /** Every VM's configuration (from the start or added since), by name. */
  readonly vmConfigs = new Map<string, VmConfig>();
  private readonly draining = new Set<string>();
  /** The policy the aggregator has or will get (setPolicy before the first mediated VM). */
  private policyChoice: { name: string; config?: object };

  /** Add a mediated VM beside running ones (slice default: ADD_SLICE_DEFAULT). */
  addVm(vm: VmConfig): VmConfig {
    if (this.vms.has(vm.name)) throw new VmChangeError('exists', `a VM named ${vm.name} already exists`);
    const same = [...this.vmConfigs.values()].find((v) => v.socket === vm.socket);
    if (same || this.server.listener(vm.socket)) throw new VmChangeError('conflict', `socket ${vm.socket} is already in use by VM ${same?.name ?? '(unknown)'}`);
    if (vm.mode === 'pt') throw new VmChangeError('invalid', 'mode pt gives one VM the whole GPU: it is chosen at start (vugpu serve --mode pt), not added at run time');
    const pt = [...this.vmConfigs.values()].find((v) => v.mode === 'pt');
    if (pt) throw new VmChangeError('conflict', `VM ${pt.name} has the whole GPU (mode pt): remove it before adding mediated VMs`);
    this.aggregator ??= new Aggregator({ engine: this.engine, policy: this.policyChoice.name, policyConfig: this.policyChoice.config, metrics: this.metrics });
    const slice = vm.slice ?? ADD_SLICE_DEFAULT;
    let vgpu: MediatedVgpu;
    try {
      vgpu = new MediatedVgpu(this.aggregator, { name: vm.name, mode: vm.mode, slice, weight: vm.weight }, this.tracer ?? undefined);
    } catch (err) {
      const msg = (err as Error).message;
      throw new VmChangeError(/no room/.test(msg) ? 'no-room' : 'invalid', msg);
    }
    try {
      fs.mkdirSync(path.dirname(vm.socket), { recursive: true });
      this.server.listen(vm.socket, vgpu.device);
    } catch (err) {
      vgpu.close();
      throw new VmChangeError('invalid', `cannot listen on ${vm.socket}: ${(err as Error).message}`);
    }
    const cfg = { ...vm, slice };
    this.vms.set(vm.name, vgpu);
    this.vmConfigs.set(vm.name, cfg);
    return cfg;
  }

  /** Remove a VM: refused while a QEMU is attached unless forced (that guest loses its GPU). */
  removeVm(name: string, force = false): { hadClient: boolean } {
    const vgpu = this.vms.get(name);
    const cfg = this.vmConfigs.get(name);
    if (!vgpu || !cfg) throw new VmChangeError('not-found', `there is no VM named ${name}`);
    const hadClient = (this.server.listener(cfg.socket)?.endpoint ?? null) !== null;
    if (hadClient && !force) {
      throw new VmChangeError('attached', `VM ${name} has a QEMU attached: stop that guest first, drain the VM (it is removed when the guest goes), or force it (the guest loses its GPU)`);
    }
    this.server.unlisten(cfg.socket);
    if (vgpu instanceof MediatedVgpu) vgpu.close();
    else this.metrics.unregister(name);
    this.vms.delete(name);
    this.vmConfigs.delete(name);
    this.draining.delete(name);
    return { hadClient };
  }

  /** Drain: the VM takes no new client and is removed when its QEMU goes (at once if none). */
  drainVm(name: string): 'removed' | 'draining' {
    const cfg = this.vmConfigs.get(name);
    if (!cfg) throw new VmChangeError('not-found', `there is no VM named ${name}`);
    const l = this.server.listener(cfg.socket);
    if (!l?.endpoint) {
      this.removeVm(name);
      return 'removed';
    }
    if (!this.draining.has(name)) {
      this.draining.add(name);
      const off = l.onClientGone(() => {
        off();
        if (!this.draining.has(name) || this.vmConfigs.get(name) !== cfg) return;
        this.removeVm(name);
        logger.info({ vm: name }, 'drained VM removed (its client is gone)');
      });
    }
    return 'draining';
  }

  setWeight(name: string, weight: number): void {
    const vgpu = this.vms.get(name);
    if (!vgpu) throw new VmChangeError('not-found', `there is no VM named ${name}`);
    if (!(vgpu instanceof MediatedVgpu)) throw new VmChangeError('invalid', `VM ${name} is in mode pt: it has the whole GPU, so weights do not apply`);
    this.aggregator!.setWeight(vgpu.vgpu, weight);
    this.vmConfigs.get(name)!.weight = weight;
  }

  /** Change the scheduling policy; `switched` is false while a submission finishes first. */
  setPolicy(name: string, config?: object): { switched: boolean } {
    const next = createPolicy(name, config ?? {});
    this.policyChoice = { name, config };
    return { switched: this.aggregator ? this.aggregator.dispatcher.setPolicy(next) : true };
  }

  /** The policy asked for (the aggregator's, once a pending switch is done). */
  get policyName(): string {
    return this.policyChoice.name;
  }

  /** Each VM with its state and counters. */
  listVms(): VmStatus[] {
    return [...this.vmConfigs.values()].map((c) => {
      const v = this.vms.get(c.name);
      const l = this.server.listener(c.socket);
      const med = v instanceof MediatedVgpu ? v.vgpu : null;
      const m = this.metrics.get(c.name);
      return {
        name: c.name, mode: c.mode, socket: c.socket,
        state: this.draining.has(c.name) ? 'draining' : l?.endpoint ? 'attached' : 'idle',
        clients: l?.accepted ?? 0,
        sliceBytes: med ? med.slice.size : this.engine.vramSize,
        weight: med ? med.weight : null,
        pending: med && this.aggregator?.policy.hasVm(c.name) ? this.aggregator.policy.pending(c.name) : 0,
        counters: m ? { ...m } : {},
      };
    });
  }

  /** VRAM for slices: total, free and the largest free range (bytes). */
  vramStatus(): { totalBytes: number; sliceAreaBytes: number; freeBytes: number; largestFreeBytes: number } {
    const total = this.engine.vramSize;
    const a = this.aggregator?.slices;
    const pt = [...this.vmConfigs.values()].some((v) => v.mode === 'pt');
    if (!a) {
      const area = pt ? 0 : total - hostReservedBytes(total);
      return { totalBytes: total, sliceAreaBytes: area, freeBytes: area, largestFreeBytes: area };
    }
    return { totalBytes: total, sliceAreaBytes: a.size, freeBytes: a.size - a.s.inUse, largestFreeBytes: a.largestFree };
  }

  /** The program device's losses and rebuilds since start and the last loss's report; null
   * without a Vulkan program device. */
  programDeviceHealth(): { losses: number; rebuilds: number; lastLoss: string } | null {
    return this.programs instanceof VulkanBackend ? this.programs.lossReport() : null;
  }

  close(): void {
    this.server.close();
    this.aggregator?.close();
    this.engine.close();
    this.programs?.close();
    this.tracer?.close();
    this.metricsServer?.then((m) => m.close(), () => {});
    logger.info('vugpu stopped');
  }
}

/** Slice for a mediated VM without slice=: an equal share of the VRAM, as a power of two. */
function defaultSlice(available: number, vms: number): number {
  return 2 ** Math.floor(Math.log2(Math.max(1 << 20, available / vms)));
}

/** Slice of a VM added at run time without one. */
export const ADD_SLICE_DEFAULT = 256 << 20;

/** The aggregator's default host-reserved VRAM (aggregator.ts): what slices cannot use. */
function hostReservedBytes(vram: number): number {
  return Math.max(16 << 20, Math.floor(vram / 16 / (1 << 20)) * (1 << 20));
}

export interface VmStatus {
  name: string;
  mode: VmMode;
  socket: string;
  /** idle: no QEMU; attached: a QEMU is connected; draining: removed when its QEMU goes. */
  state: 'idle' | 'attached' | 'draining';
  /** Clients (QEMU connections) accepted on its socket so far. */
  clients: number;
  sliceBytes: number;
  weight: number | null;
  /** Submissions waiting in the scheduler. */
  pending: number;
  counters: Record<string, unknown>;
}

/** A run-time change the server refuses; the control API maps `code` to its status. */
export class VmChangeError extends Error {
  readonly code: 'not-found' | 'exists' | 'conflict' | 'attached' | 'no-room' | 'invalid';
  constructor(code: VmChangeError['code'], message: string) {
    super(message);
    this.name = 'VmChangeError';
    this.code = code;
  }
}
