// Policies by name, chosen at run time (CLI flag / config file).
import { BandPolicy } from './band.ts';
import type { BandConfig } from './band.ts';
import { CreditPolicy } from './credit.ts';
import type { CreditPolicyConfig } from './credit.ts';
import { FairPolicy } from './fair.ts';
import type { FairConfig } from './fair.ts';
import { FifoPolicy } from './fifo.ts';
import type { FifoConfig } from './fifo.ts';
import type { PolicyStateBase, SchedulerPolicy } from './types.ts';
import { WeightedPolicy } from './weighted.ts';
import type { WeightedConfig } from './weighted.ts';

export interface PolicyConfigs {
  fifo: FifoConfig;
  credit: CreditPolicyConfig;
  band: BandConfig;
  weighted: WeightedConfig;
  fair: FairConfig;
}

export type PolicyName = keyof PolicyConfigs;

const factories: { [K in PolicyName]: (config: PolicyConfigs[K]) => SchedulerPolicy } = {
  fifo: (c) => new FifoPolicy(c),
  credit: (c) => new CreditPolicy(c),
  band: (c) => new BandPolicy(c),
  weighted: (c) => new WeightedPolicy(c),
  fair: (c) => new FairPolicy(c),
};

export const policyNames: readonly PolicyName[] = Object.freeze(Object.keys(factories) as PolicyName[]);

/**
 * What each policy promises about device-time shares (equal weights, every VM busy), for
 * `--policy`'s help. band and fair idle the device briefly for a VM between its submissions;
 * credit and weighted never do, so a VM that waits for each job before the next gets one job
 * per neighbour's job whatever its weight; fifo has none (test/aggregator/
 * scheduler-starvation.test.ts holds each policy to its line).
 */
export const POLICY_SHARES =
  'fair gives every busy VM its weight\'s share of device time; band too, less up to half the time its own gaps ' +
  'between jobs leave the device idle; credit and weighted only among VMs that ' +
  'keep work queued (a VM that waits for each job gets one per neighbour\'s job); fifo promises no share';

export function isPolicyName(name: string): name is PolicyName {
  return Object.hasOwn(factories, name);
}

/** Build a policy by name; throws an Error listing the known names for an unknown one. */
export function createPolicy<K extends PolicyName>(name: K, config?: PolicyConfigs[K]): SchedulerPolicy;
export function createPolicy(name: string, config?: object): SchedulerPolicy;
export function createPolicy(name: string, config: object = {}): SchedulerPolicy {
  if (!isPolicyName(name)) {
    throw new Error(`unknown scheduler policy "${name}" (known: ${policyNames.join(', ')})`);
  }
  return (factories[name] as (c: object) => SchedulerPolicy)(config);
}

/** Rebuild a policy from a state() snapshot (its parameters travel in the state). */
export function restorePolicy(state: PolicyStateBase): SchedulerPolicy {
  const policy = createPolicy(state.policy);
  policy.load(state);
  return policy;
}
