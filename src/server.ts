// The vugpu process: one engine (the "physical" GPU), one vfio-user socket per VM, and per VM a
// vGPU in the mode it attached with. This file only composes the layers; each layer lives in
// its own directory (docs/architecture.md).
import fs from 'node:fs';
import path from 'node:path';
import { Server, type ServerPersistence } from './device-model/server.ts';
import type { PciDevice } from './device-model/device.ts';
import { Engine } from './gpu/engine.ts';
import { VulkanBackend } from './gpu/vulkan.ts';
import type { ProgramBackend } from './gpu/programs.ts';
import { PassthroughVgpu } from './aggregator/passthrough.ts';
// Mediated modes (aggregator): one Aggregator shares the engine among the VMs.
import { Aggregator } from './aggregator/aggregator.ts';
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
  /** Present when some VM is mediated. */
  readonly aggregator: Aggregator | null = null;
  readonly metrics = new MetricsRegistry();
  private metricsServer: Promise<MetricsServer> | null = null;
  readonly tracer: Tracer | null = null;
  /** The device that runs guest programs, or null. */
  readonly programs: ProgramBackend | null;
  /** What it was started with (a checkpoint records the VMs). */
  readonly options: VugpuOptions;

  constructor(opts: VugpuOptions, adopt?: VugpuAdopt) {
    this.options = opts;
    if (opts.vms.length === 0) throw new Error('at least one VM socket is required');
    const backend = opts.engine ?? 'auto';
    this.programs = openProgramBackend(backend, opts.vulkanDevice);
    this.engine = new Engine({
      vramSize: opts.vramSize, channels: opts.channels, watchdogMs: opts.watchdogMs, vramFd: adopt?.vramFd,
      programs: this.programs, builtinsOnPrograms: backend === 'vulkan',
    });
    this.metrics.setEngineInfo({ backend, device: this.programs?.device ?? 'none' });
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
      if (adopt?.listen) adopt.listen(vm, vgpu.device, this.server);
      else this.server.listen(vm.socket, vgpu.device);
      this.vms.set(vm.name, vgpu);
    }
    if (opts.metricsPort !== undefined) {
      this.metricsServer = startMetricsServer(this.metrics, { port: opts.metricsPort });
      this.metricsServer.catch((err: unknown) => logger.error({ err }, 'metrics server failed to start'));
    }
    logger.info({ vms: opts.vms.map((v) => `${v.name}:${v.mode}`) }, 'vugpu serving');
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
