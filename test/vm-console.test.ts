// The guest console protocol parser (src/vm/console.ts) and the KVM probe's verdict on this host.
import fs from 'node:fs';
import { describe, expect, test } from 'vitest';
import { LineSplitter, parseRecord, vfioErrorLines } from '../src/vm/console.ts';
import { probeKvm } from '../src/kvm-ioctl/probe.ts';

describe('guest console records', () => {
  test('parses a record, tolerating leading noise and CRs', () => {
    const lines: string[] = [];
    const s = new LineSplitter((l) => lines.push(l));
    s.push('\x1bc\x1b[?7l\x1b[2JSeaBIOS\r\nBooting from ROM..VUGPU-CHECK {"check":"id","ok":tr');
    s.push('ue,"v":"0x1"}\r\npartial');
    s.flush();
    expect(lines).toEqual(['SeaBIOS', 'Booting from ROM..VUGPU-CHECK {"check":"id","ok":true,"v":"0x1"}', 'partial']);
    expect(parseRecord(lines[1]!, 1)).toEqual({ kind: 'CHECK', data: { check: 'id', ok: true, v: '0x1' }, line: 1 });
    expect(parseRecord('plain kernel message', 0)).toBeNull();
  });

  test('a broken record is reported, not dropped', () => {
    const rec = parseRecord('VUGPU-CHECK {"check":"x","ok":tru}', 3);
    expect(rec?.kind).toBe('PARSE_ERROR');
    expect(rec?.data.kind).toBe('CHECK');
  });

  test('vfio stderr lines: the known warning is whitelisted, others are errors', () => {
    const stderr = [
      'qemu-system-x86_64: warning: vfio vfio-user:0000:00:02.0: Could not enable error recovery for the device',
      "qemu-system-x86_64: -device {...}: vfio-user: failed to get region 1 info: Invalid argument",
      'unrelated line',
    ];
    expect(vfioErrorLines(stderr)).toEqual([stderr[1]]);
  });
});

describe('KVM probe', () => {
  test('a PVM or virtualization-less host is reported unusable (TCG)', () => {
    const p = probeKvm();
    const pvm = fs.existsSync('/sys/module/kvm_pvm');
    const virt = /^flags\s*:.*\b(vmx|svm)\b/m.test(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    expect(p.pvm).toBe(pvm);
    expect(p.hardwareVirt).toBe(virt);
    if (pvm || !virt || !fs.existsSync('/dev/kvm')) expect(p.usable).toBe(false);
    if (fs.existsSync('/dev/kvm')) expect(p.apiVersion).toBe(12);
    expect(p.reason.length).toBeGreaterThan(0);
  });
});
