// FIFO: submissions run in global arrival order across VMs. No weights, no fairness: a VM with
// long kernels gets device time in proportion to its kernel length (the baseline the other
// policies are measured against).
import { PolicyBase } from './base.ts';
import type { Pick, PolicyStateBase, VmCommonState, VmId } from './types.ts';

export interface FifoConfig {
  activeGraceNs?: number;
}

export interface FifoState extends PolicyStateBase<VmCommonState> {
  policy: 'fifo';
  /** One entry per pending doorbell, oldest first. */
  arrivals: VmId[];
}

export class FifoPolicy extends PolicyBase<VmCommonState, FifoState> {
  readonly name = 'fifo';

  constructor(config: FifoConfig = {}) {
    super({
      policy: 'fifo',
      activeGraceNs: config.activeGraceNs ?? 100e6,
      vms: {},
      running: null,
      runningSinceNs: 0,
      runningRemoved: false,
      arrivals: [],
    });
  }

  protected newVm(common: VmCommonState): VmCommonState {
    return common;
  }

  protected override enqueued(vm: VmId): void {
    this.s.arrivals.push(vm);
  }

  protected override onRemoved(vm: VmId): void {
    this.s.arrivals = this.s.arrivals.filter((id) => id !== vm);
  }

  protected decide(): Pick {
    return this.s.arrivals.shift() ?? null;
  }

  protected completed(): void {}

  protected catchUp(): void {}
}
