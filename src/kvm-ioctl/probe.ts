// Minimal host probe: can a stock distro guest kernel run under KVM here?
// KVM is usable when /dev/kvm opens, KVM_GET_API_VERSION answers 12, the CPU advertises
// hardware virtualization (vmx/svm) and /dev/kvm is not the PVM module (kvm_pvm: shadow-paging
// KVM whose emulator cannot run stock kernels; see /work/shared/notes/feasibility.md §3).
// Anything else: TCG.
import fs from 'node:fs';
import { native } from '../native.ts';

export interface KvmProbe {
  usable: boolean;
  /** Why KVM is or is not usable (one line, for logs and bench metadata). */
  reason: string;
  apiVersion: number | null;
  hardwareVirt: boolean;
  pvm: boolean;
}

const KVM_GET_API_VERSION = 0xae00; // _IO(KVMIO, 0x00)
const KVM_API_VERSION = 12;
const O_RDWR = 0o2;
const O_CLOEXEC = 0o2000000;

export interface ProbePaths {
  dev: string;
  cpuinfo: string;
  pvmModule: string;
}

const DEFAULT_PATHS: ProbePaths = { dev: '/dev/kvm', cpuinfo: '/proc/cpuinfo', pvmModule: '/sys/module/kvm_pvm' };

export function probeKvm(paths: ProbePaths = DEFAULT_PATHS): KvmProbe {
  const hardwareVirt = cpuHasVirt(paths.cpuinfo);
  const pvm = fs.existsSync(paths.pvmModule);
  let apiVersion: number | null = null;
  if (!fs.existsSync(paths.dev)) {
    return { usable: false, reason: `${paths.dev} does not exist`, apiVersion, hardwareVirt, pvm };
  }
  const fd = native.open(paths.dev, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return { usable: false, reason: `open ${paths.dev}: errno ${-fd}`, apiVersion, hardwareVirt, pvm };
  }
  try {
    const v = native.ioctl(fd, KVM_GET_API_VERSION, 0);
    apiVersion = v >= 0 ? v : null;
  } finally {
    native.close(fd);
  }
  if (apiVersion !== KVM_API_VERSION) {
    return { usable: false, reason: `KVM_GET_API_VERSION = ${apiVersion ?? 'error'}, want ${KVM_API_VERSION}`, apiVersion, hardwareVirt, pvm };
  }
  if (!hardwareVirt) {
    return { usable: false, reason: 'no vmx/svm in /proc/cpuinfo (nested or PVM host)', apiVersion, hardwareVirt, pvm };
  }
  if (pvm) {
    return { usable: false, reason: '/dev/kvm is kvm_pvm (stock kernels hit emulation failures)', apiVersion, hardwareVirt, pvm };
  }
  return { usable: true, reason: 'KVM API 12 with hardware virtualization', apiVersion, hardwareVirt, pvm };
}

function cpuHasVirt(cpuinfo: string): boolean {
  let text: string;
  try {
    text = fs.readFileSync(cpuinfo, 'utf8');
  } catch {
    return false;
  }
  return /^flags\s*:.*\b(vmx|svm)\b/m.test(text);
}
