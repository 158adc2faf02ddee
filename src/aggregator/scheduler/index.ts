// Scheduling policies for the non-preemptive device (see types.ts for the contract).
export type { Pick, PolicyStateBase, SchedulerPolicy, VmCommonState, VmId, VmOptions, WaitUntil } from './types.ts';
export { isWait } from './types.ts';
export { POLICY_SHARES, createPolicy, isPolicyName, policyNames, restorePolicy } from './registry.ts';
export type { PolicyConfigs, PolicyName } from './registry.ts';
export { Dispatcher } from './dispatcher.ts';
export { monotonicNowNs, nodeHost } from './dispatcher.ts';
export type { DispatcherHost } from './dispatcher.ts';
export { FifoPolicy } from './fifo.ts';
export { CreditPolicy } from './credit.ts';
export { BandPolicy } from './band.ts';
export { WeightedPolicy } from './weighted.ts';
export { FairPolicy } from './fair.ts';
