// The vugpu process: one engine (the "physical" GPU), one vfio-user socket per VM, and per VM a
// vGPU in the mode it attached with. This file only composes the layers; each layer lives in
// its own directory (docs/architecture.md).
import fs from 'node:fs';
import path from 'node:path';
import { Server } from './device-model/server.ts';
import { Engine } from './gpu/engine.ts';
import { PassthroughVgpu } from './aggregator/passthrough.ts';
import { logger } from './log.ts';

export type VmMode = 'pt' | 'fv-naive' | 'fv' | 'pv' | 'pv-batch';
export const VM_MODES: readonly VmMode[] = ['pt', 'fv-naive', 'fv', 'pv', 'pv-batch'];

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
  metricsPort?: number;
}

export class Vugpu {
  readonly engine: Engine;
  readonly server: Server;
  readonly vms = new Map<string, PassthroughVgpu>();

  constructor(opts: VugpuOptions) {
    if (opts.vms.length === 0) throw new Error('at least one VM socket is required');
    this.engine = new Engine({ vramSize: opts.vramSize, channels: opts.channels, watchdogMs: opts.watchdogMs });
    this.server = new Server();
    const pt = opts.vms.filter((v) => v.mode === 'pt');
    if (pt.length > 0 && opts.vms.length > 1) {
      throw new Error('mode pt gives one VM the whole engine: it cannot be combined with other VMs');
    }
    for (const vm of opts.vms) {
      if (vm.mode !== 'pt') throw new Error(`mode ${vm.mode} is not available in this build`);
      fs.mkdirSync(path.dirname(vm.socket), { recursive: true });
      const vgpu = new PassthroughVgpu(vm.name, this.engine);
      this.server.listen(vm.socket, vgpu.device);
      this.vms.set(vm.name, vgpu);
    }
    logger.info({ vms: opts.vms.map((v) => `${v.name}:${v.mode}`) }, 'vugpu serving');
  }

  close(): void {
    this.server.close();
    logger.info('vugpu stopped');
  }
}
