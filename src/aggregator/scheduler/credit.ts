// Credit (A3's credit_scheduler): the first VM in the run list with pending work gets the
// device; after a submission completes, a VM whose credit went negative moves to the tail.
// Credit is replenished every period in proportion to the weights (see credit-base.ts). It
// bounds short-term share but forgives large debts, so a VM with long kernels still gets more
// than its share: BAND adds the measured-utilisation band to fix that.
import { moveToTail } from './base.ts';
import { CreditPolicyBase, creditBaseState, newCreditVm } from './credit-base.ts';
import type { CreditConfig, CreditStateBase, CreditVmState } from './credit-base.ts';
import type { Pick, VmCommonState, VmId } from './types.ts';

export type CreditPolicyConfig = CreditConfig;

export interface CreditState extends CreditStateBase {
  policy: 'credit';
}

export class CreditPolicy extends CreditPolicyBase<CreditVmState, CreditState> {
  readonly name = 'credit';

  constructor(config: CreditPolicyConfig = {}) {
    super(creditBaseState('credit', config));
  }

  protected newVm(common: VmCommonState): CreditVmState {
    return newCreditVm(common);
  }

  protected decide(): Pick {
    for (const id of this.s.order) {
      if (this.s.vms[id]!.pending > 0) return id;
    }
    return null;
  }

  protected completed(vm: VmId, v: CreditVmState, deviceNs: number, now: number): void {
    this.settle(vm, v, deviceNs, now);
    if (v.credit < 0 && !this.isAlone(vm, now)) moveToTail(this.s.order, vm);
  }
}
