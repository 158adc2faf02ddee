// Host probe: can a stock distro guest kernel run under KVM here, or must guests use TCG?
//
// Facts are gathered from the host (/dev/kvm ioctls through the addon, /proc/cpuinfo flags,
// loaded vendor modules under /sys/module) and then judged by a pure function, assessKvm(), so
// the decision is testable for hosts we are not running on.
//
// KVM is usable for a stock guest when /dev/kvm opens, KVM_GET_API_VERSION answers 12, the
// CPU advertises hardware virtualization (vmx or svm) with the matching vendor module
// (kvm_intel / kvm_amd) loaded, and the capabilities QEMU relies on are there. It is *not*
// usable when /dev/kvm comes from kvm_pvm: PVM is a shadow-paging KVM for PVM-aware guest
// kernels; stock kernels die in its instruction emulator (SHLX, cmpxchg16b, xrstor, int3: seen
// booting stock Debian kernels under it) and QEMU then pauses instead of exiting.
import fs from 'node:fs';
import path from 'node:path';
import { native } from '../native.ts';

// ioctl numbers: _IO(KVMIO = 0xAE, nr).
export const KVM_GET_API_VERSION = 0xae00;
export const KVM_CHECK_EXTENSION = 0xae03;
export const KVM_API_VERSION = 12;

/** Capabilities QEMU needs for a guest with a vfio-user device (numbers from linux/kvm.h). */
export const KVM_CAPS = Object.freeze({
  userMemory: 3, // KVM_CAP_USER_MEMORY: memory slots backed by our memfd
  irqfd: 32, // KVM_CAP_IRQFD: MSI-X eventfds injected without a QEMU round trip
  ioeventfd: 36, // KVM_CAP_IOEVENTFD
});
export type KvmCapName = keyof typeof KVM_CAPS;

/** KVM_CHECK_EXTENSION results: > 0 supported (some caps return a value), 0 not, null not asked. */
export type KvmExtensions = Record<KvmCapName, number | null>;

export const KVM_VENDOR_MODULES = ['kvm_intel', 'kvm_amd', 'kvm_pvm'] as const;
export type KvmModule = (typeof KVM_VENDOR_MODULES)[number];

const O_RDWR = 0o2;

/** What the host looks like; everything assessKvm() needs. */
export interface KvmFacts {
  devicePresent: boolean;
  /** -errno when open(/dev/kvm) failed, else 0. */
  openErrno: number;
  apiVersion: number | null;
  extensions: KvmExtensions;
  /** vmx and/or svm from the CPU flags. */
  cpuVirtFlags: ('vmx' | 'svm')[];
  /** Vendor modules present under /sys/module. */
  modules: KvmModule[];
}

export interface KvmProbe extends KvmFacts {
  /** The vendor module behind /dev/kvm (kvm_pvm wins if several are listed), or null. */
  module: KvmModule | null;
  usableForStockGuest: boolean;
  /** Why KVM is or is not usable (one line, for logs and bench metadata). */
  reason: string;
  // The launcher's original fields (src/vm/accel.ts), kept as aliases.
  usable: boolean;
  hardwareVirt: boolean;
  pvm: boolean;
}

export interface ProbePaths {
  dev: string;
  cpuinfo: string;
  /** Presence of this path means kvm_pvm is loaded (kept for older callers; defaults under sysModule). */
  pvmModule?: string;
  /** Directory of loaded modules (default /sys/module). */
  sysModule?: string;
}

const DEFAULT_PATHS: ProbePaths = { dev: '/dev/kvm', cpuinfo: '/proc/cpuinfo', sysModule: '/sys/module' };

/** vmx/svm from the first `flags` line of /proc/cpuinfo text. */
export function parseCpuVirtFlags(cpuinfo: string): ('vmx' | 'svm')[] {
  const m = /^flags\s*:(.*)$/m.exec(cpuinfo);
  if (m === null) return [];
  const flags = new Set(m[1]!.trim().split(/\s+/));
  return (['vmx', 'svm'] as const).filter((f) => flags.has(f));
}

export function loadedKvmModules(paths: ProbePaths = DEFAULT_PATHS): KvmModule[] {
  const dir = paths.sysModule ?? '/sys/module';
  return KVM_VENDOR_MODULES.filter((m) =>
    m === 'kvm_pvm' && paths.pvmModule !== undefined ? fs.existsSync(paths.pvmModule) : fs.existsSync(path.join(dir, m)),
  );
}

function readCpuVirtFlags(cpuinfo: string): ('vmx' | 'svm')[] {
  try {
    return parseCpuVirtFlags(fs.readFileSync(cpuinfo, 'utf8'));
  } catch {
    return [];
  }
}

/** Gather the facts: opens /dev/kvm (and closes it) and asks for the API version and caps. */
export function gatherKvmFacts(paths: ProbePaths = DEFAULT_PATHS): KvmFacts {
  const facts: KvmFacts = {
    devicePresent: fs.existsSync(paths.dev),
    openErrno: 0,
    apiVersion: null,
    extensions: { userMemory: null, irqfd: null, ioeventfd: null },
    cpuVirtFlags: readCpuVirtFlags(paths.cpuinfo),
    modules: loadedKvmModules(paths),
  };
  if (!facts.devicePresent) return facts;
  const fd = native.open(paths.dev, O_RDWR);
  if (fd < 0) {
    facts.openErrno = fd;
    return facts;
  }
  try {
    const v = native.ioctl(fd, KVM_GET_API_VERSION, 0);
    facts.apiVersion = v >= 0 ? v : null;
    for (const name of Object.keys(KVM_CAPS) as KvmCapName[]) {
      const r = native.ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAPS[name]);
      facts.extensions[name] = r >= 0 ? r : null;
    }
  } finally {
    native.close(fd);
  }
  return facts;
}

/** The vendor module behind /dev/kvm: kvm_pvm if loaded (it is what answered), else the other. */
export function kvmModule(modules: readonly KvmModule[]): KvmModule | null {
  if (modules.includes('kvm_pvm')) return 'kvm_pvm';
  return modules[0] ?? null;
}

/** Judge the facts. Every reason that applies is listed, most fundamental first. */
export function assessKvm(f: KvmFacts): { usableForStockGuest: boolean; reason: string } {
  const module = kvmModule(f.modules);
  const problems: string[] = [];
  if (!f.devicePresent) problems.push('/dev/kvm does not exist');
  else if (f.openErrno < 0) problems.push(`open /dev/kvm failed: errno ${-f.openErrno}`);
  else if (f.apiVersion !== KVM_API_VERSION) {
    problems.push(`KVM_GET_API_VERSION = ${f.apiVersion ?? 'error'}, want ${KVM_API_VERSION}`);
  }
  if (module === 'kvm_pvm') {
    problems.push('/dev/kvm is kvm_pvm (PVM: shadow-paging KVM for PVM-aware guests; stock kernels hit emulation failures)');
  }
  if (f.cpuVirtFlags.length === 0) {
    problems.push('no vmx/svm in /proc/cpuinfo (no hardware virtualization: nested without VMX, or a PVM host)');
  } else if (module !== 'kvm_pvm') {
    const intel = f.cpuVirtFlags.includes('vmx') && f.modules.includes('kvm_intel');
    const amd = f.cpuVirtFlags.includes('svm') && f.modules.includes('kvm_amd');
    if (!intel && !amd) {
      problems.push(`${f.cpuVirtFlags.join('+')} present but no matching kvm_intel/kvm_amd module is loaded`);
    }
  }
  if (problems.length === 0) {
    const missing = (Object.keys(KVM_CAPS) as KvmCapName[]).filter((c) => !(f.extensions[c]! > 0));
    if (missing.length > 0) problems.push(`missing KVM capabilities: ${missing.join(', ')}`);
  }
  if (problems.length > 0) return { usableForStockGuest: false, reason: problems.join('; ') };
  return {
    usableForStockGuest: true,
    reason: `KVM API ${KVM_API_VERSION} via ${module} with ${f.cpuVirtFlags.join('+')}, user memory/irqfd/ioeventfd supported`,
  };
}

/** Probe this host (or the given paths). Never throws for an unusable host: it says why. */
export function probeKvm(paths: ProbePaths = DEFAULT_PATHS): KvmProbe {
  const facts = gatherKvmFacts(paths);
  const { usableForStockGuest, reason } = assessKvm(facts);
  const module = kvmModule(facts.modules);
  return {
    ...facts,
    module,
    usableForStockGuest,
    reason,
    usable: usableForStockGuest,
    hardwareVirt: facts.cpuVirtFlags.length > 0,
    pvm: facts.modules.includes('kvm_pvm'),
  };
}
