// KVM or TCG for the guests we boot. KVM only when the host probe says a stock kernel runs there.
import { probeKvm, type KvmProbe } from '../kvm-ioctl/probe.ts';

export type Accel = 'kvm' | 'tcg';

export interface AccelChoice {
  accel: Accel;
  reason: string;
  probe: KvmProbe | null;
}

let cached: AccelChoice | null = null;

/** requested: 'auto' (default; env VUGPU_ACCEL overrides) probes the host once per process. */
export function chooseAccel(requested: Accel | 'auto' = 'auto'): AccelChoice {
  const want = requested === 'auto' ? (process.env.VUGPU_ACCEL as Accel | 'auto' | undefined) ?? 'auto' : requested;
  if (want === 'tcg') return { accel: 'tcg', reason: 'requested', probe: null };
  if (cached && want === 'auto') return cached;
  const probe = probeKvm();
  if (want === 'kvm') {
    if (!probe.usable) throw new Error(`KVM requested but not usable: ${probe.reason}`);
    return { accel: 'kvm', reason: 'requested', probe };
  }
  cached = probe.usable
    ? { accel: 'kvm', reason: probe.reason, probe }
    : { accel: 'tcg', reason: `KVM not usable: ${probe.reason}`, probe };
  return cached;
}

/** QEMU options for an accelerator: TCG emulates the newest CPU model; KVM passes the host's. */
export function accelArgs(accel: Accel): string[] {
  return accel === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', 'tcg', '-cpu', 'max'];
}
