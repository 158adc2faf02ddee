// KVM host probe: the real probe on this host, checked against /proc/cpuinfo and /sys/module
// (not hard-coded), and the pure judgement on the fact sets of other kinds of hosts.
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  KVM_API_VERSION,
  assessKvm,
  kvmModule,
  parseCpuVirtFlags,
  probeKvm,
} from '../src/kvm-ioctl/probe.ts';
import type { KvmFacts } from '../src/kvm-ioctl/probe.ts';

const cpuinfo = fs.readFileSync('/proc/cpuinfo', 'utf8');
const hostVirt = /^flags\s*:.*\b(vmx|svm)\b/m.test(cpuinfo);
const hostModules = ['kvm_intel', 'kvm_amd', 'kvm_pvm'].filter((m) => fs.existsSync(`/sys/module/${m}`));

describe('probeKvm on this host', () => {
  const p = probeKvm();

  it('returns a self-consistent object', () => {
    expect(p.devicePresent).toBe(fs.existsSync('/dev/kvm'));
    expect(p.hardwareVirt).toBe(p.cpuVirtFlags.length > 0);
    expect(p.hardwareVirt).toBe(hostVirt);
    expect([...p.modules].sort()).toEqual([...hostModules].sort());
    expect(p.module).toBe(kvmModule(p.modules));
    expect(p.pvm).toBe(p.modules.includes('kvm_pvm'));
    expect(p.usable).toBe(p.usableForStockGuest);
    expect(p.reason.length).toBeGreaterThan(10);
    expect(assessKvm(p)).toEqual({ usableForStockGuest: p.usableForStockGuest, reason: p.reason });
    expect(JSON.parse(JSON.stringify(p))).toEqual(p);
    if (p.devicePresent && p.openErrno === 0) {
      // A real KVM answered the ioctls.
      expect(p.apiVersion).toBe(KVM_API_VERSION);
      for (const v of Object.values(p.extensions)) expect(v).toBeGreaterThanOrEqual(0);
      expect(p.extensions.userMemory).toBeGreaterThan(0);
    }
  });

  it('agrees with /proc/cpuinfo and /sys/module about stock guests', () => {
    if (!hostVirt || hostModules.includes('kvm_pvm') || !fs.existsSync('/dev/kvm')) {
      expect(p.usableForStockGuest).toBe(false);
    }
    if (!hostVirt) expect(p.reason).toMatch(/vmx\/svm/);
    if (hostModules.includes('kvm_pvm')) expect(p.reason).toMatch(/kvm_pvm|PVM/);
    if (p.usableForStockGuest) {
      expect(hostVirt).toBe(true);
      expect(p.module === 'kvm_intel' || p.module === 'kvm_amd').toBe(true);
    }
    console.log(`KVM probe: usableForStockGuest=${p.usableForStockGuest} module=${p.module} flags=[${p.cpuVirtFlags}] api=${p.apiVersion} caps=${JSON.stringify(p.extensions)}\n  reason: ${p.reason}`);
  });

  it('keeps the launcher fields when called with explicit paths', () => {
    const q = probeKvm({ dev: '/nonexistent/kvm', cpuinfo: '/proc/cpuinfo', pvmModule: '/nonexistent/kvm_pvm' });
    expect(q.devicePresent).toBe(false);
    expect(q.usable).toBe(false);
    expect(q.pvm).toBe(false);
    expect(q.apiVersion).toBeNull();
    expect(q.reason).toMatch(/\/dev\/kvm does not exist/);
  });
});

describe('assessKvm (other hosts)', () => {
  const good: KvmFacts = {
    devicePresent: true,
    openErrno: 0,
    apiVersion: 12,
    extensions: { userMemory: 1, irqfd: 1, ioeventfd: 1 },
    cpuVirtFlags: ['vmx'],
    modules: ['kvm_intel'],
  };

  it('a VMX host with kvm_intel, or an SVM host with kvm_amd, runs stock guests', () => {
    expect(assessKvm(good)).toMatchObject({ usableForStockGuest: true });
    expect(assessKvm(good).reason).toMatch(/kvm_intel with vmx/);
    const amd = assessKvm({ ...good, cpuVirtFlags: ['svm'], modules: ['kvm_amd'] });
    expect(amd.usableForStockGuest).toBe(true);
    expect(amd.reason).toMatch(/kvm_amd with svm/);
  });

  it('a PVM host (kvm_pvm, no vmx/svm) does not, and says why', () => {
    const r = assessKvm({ ...good, cpuVirtFlags: [], modules: ['kvm_pvm'] });
    expect(r.usableForStockGuest).toBe(false);
    expect(r.reason).toMatch(/kvm_pvm/);
    expect(r.reason).toMatch(/vmx\/svm/);
    // kvm_pvm is what answers even on a VMX-capable CPU with kvm_intel also present.
    const mixed = assessKvm({ ...good, modules: ['kvm_intel', 'kvm_pvm'] });
    expect(mixed.usableForStockGuest).toBe(false);
    expect(mixed.reason).toMatch(/PVM/);
  });

  it('rejects every other missing piece', () => {
    const cases: [Partial<KvmFacts>, RegExp][] = [
      [{ devicePresent: false }, /does not exist/],
      [{ openErrno: -13 }, /errno 13/],
      [{ apiVersion: 11 }, /API_VERSION = 11/],
      [{ apiVersion: null }, /API_VERSION = error/],
      [{ cpuVirtFlags: [] }, /no vmx\/svm/],
      [{ modules: [] }, /no matching kvm_intel\/kvm_amd/],
      [{ modules: ['kvm_amd'] }, /no matching/],
      [{ extensions: { userMemory: 1, irqfd: 0, ioeventfd: 1 } }, /missing KVM capabilities: irqfd/],
      [{ extensions: { userMemory: null, irqfd: 1, ioeventfd: 0 } }, /userMemory, ioeventfd/],
    ];
    for (const [change, reason] of cases) {
      const r = assessKvm({ ...good, ...change });
      expect(r.usableForStockGuest).toBe(false);
      expect(r.reason).toMatch(reason);
    }
  });

  it('parses the cpuinfo flags line', () => {
    expect(parseCpuVirtFlags('processor : 0\nflags\t\t: fpu vme de vmx sse2\n')).toEqual(['vmx']);
    expect(parseCpuVirtFlags('flags : fpu svm lm\n')).toEqual(['svm']);
    expect(parseCpuVirtFlags('flags : fpu vmxx svm_lock\n')).toEqual([]);
    expect(parseCpuVirtFlags('vmx flags : ept vpid\nflags : fpu\n')).toEqual([]);
    expect(parseCpuVirtFlags('')).toEqual([]);
    expect(parseCpuVirtFlags(cpuinfo).length > 0).toBe(hostVirt);
  });
});
