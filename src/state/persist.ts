// What every component that survives a restart implements, on Firecracker's pattern (its
// devices' persist.rs: each device owns the save and restore of its own State): the engine
// (src/gpu), each vGPU and the aggregator (src/aggregator), each PCI device (src/device-model).
// The restart layer (src/persist) only composes their sections and never reads their insides.
// This folder sits below every component and imports none of them, so the components can
// depend on it while the restart layer depends on them (docs/architecture.md "State").

/**
 * A component's own state, saved as plain data and restored into a freshly constructed one.
 * State: the saved section (JSON data with a version; fds never inside, named by stable keys).
 * Args: what restore needs besides the section (adopted fds). Restored: what restore learnt
 * that resume needs (work that died with the old process).
 */
export interface Persist<State, Args = void, Restored = void> {
  /** This component's state now, as plain data. */
  save(): State;
  /** Check `raw` completely, then load it; a state this build cannot use throws a StateError
   * (src/state/plain.ts) and changes nothing. Nothing runs until resume. */
  restore(raw: unknown, args: Args): Restored;
  /** Start again once every component is restored: re-arm timers, re-read work in progress,
   * fail what died with the old process. Components with nothing to restart leave it out. */
  resume?(restored: Restored): void;
}

/**
 * How soon the effect of a handled guest request must reach the checkpoint. Each device says
 * it for its own registers and requests (a register map knows which writes the guest relies on
 * once they return); the restart layer only acts on the answer.
 */
export type Durability = 0 | 1 | 2;
export const Durability = {
  /** Nothing to keep (a read, VRAM whose bytes live in the shared memfd). */
  none: 0,
  /** Coalesced: losing the last few is harmless (an acknowledged interrupt bit, a doorbell the
   * request journal covers, a diagnostic). */
  later: 1,
  /** Written before the reply: the guest relies on it once the request returns. */
  now: 2,
} as const;
