// Every bad input of every vugpu subcommand is one sentence on stderr naming the flag or key and
// the form expected, with exit status 2, before anything starts (the CLI is spawned with the
// pinned Node, as a user runs it). Plus the TOML subset and the config file's merge rules.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeBinary } from '../../src/vm/server-process.ts';
import { parseToml, TomlError } from '../../src/service/toml.ts';
import { serveSettings } from '../../src/service/serve-config.ts';
import { UsageError } from '../../src/service/config.ts';
import { prettyLine } from '../../src/service/logfmt.ts';

const CLI = path.resolve(import.meta.dirname, '../../src/cli.ts');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-config-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

interface Run { code: number | null; stdout: string; stderr: string }
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(nodeBinary(), [CLI, ...args], { env: { ...process.env, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

function file(name: string, text: string): string {
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}

const sock = (n: string) => path.join(dir, `${n}.sock`);

/** [argv, the sentence must contain each of these] */
const CASES: [string[], string[]][] = [
  [['serve', '--vram', '1X', '--socket', sock('a')], ['--vram 1X', 'expected a size such as 512M or 1G']],
  [['serve', '--metrics-port', '99999', '--socket', sock('a')], ['--metrics-port 99999', 'expected a TCP port from 0 to 65535']],
  [['serve', '--metrics-port', 'http', '--socket', sock('a')], ['--metrics-port http', 'TCP port']],
  [['serve', '--vramm', '1G'], ['unknown option --vramm', 'did you mean --vram?']],
  [['serve', '--channels', '0', '--socket', sock('a')], ['--channels 0', 'an integer from 1 to 128']],
  [['serve', '--watchdog-ms', '-5', '--socket', sock('a')], ['--watchdog-ms -5', 'milliseconds']],
  [['serve', '--policy', 'rr', '--socket', sock('a')], ['--policy rr', 'one of fifo, credit, band']],
  [['serve', '--mode', 'vfio', '--socket', sock('a')], ['--mode vfio', 'one of pt, fv-naive, fv, pv or pv-batch']],
  [['serve', '--engine', 'cuda', '--socket', sock('a')], ['--engine cuda', 'one of auto, native or vulkan']],
  [['serve', '--socket'], ['--socket needs a value', 'UNIX socket path']],
  [['serve', '--socket', `/tmp/${'x'.repeat(120)}.sock`], ['--socket', 'at most 107 bytes']],
  [['serve', '--vram', '1G', '--vram', '2G', '--socket', sock('a')], ['--vram is given twice']],
  [['serve', 'now', '--socket', sock('a')], ['unexpected argument "now"']],
  [['serve'], ['nothing to serve', '--control-socket']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,slice=1X'], ['slice=1X', 'a power of two']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,slice=100M'], ['slice=100M', 'a power of two']],
  [['serve', '--vm', 'name=a,slice=64M'], ['socket is required']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,mode=pv3'], ['mode=pv3', 'one of pt, fv-naive']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,weight=0'], ['weight=0', 'a number greater than 0']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,color=red'], ['unknown VM key color']],
  [['serve', '--vm', 'name=a b,socket=/tmp/a.sock'], ['name=a b', 'letters, digits']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock', '--vm', 'name=a,socket=/tmp/b.sock'], ['a VM named a is already configured']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock', '--vm', 'name=b,socket=/tmp/a.sock'], ['socket /tmp/a.sock is already used by VM a']],
  [['serve', '--socket', '/tmp/a.sock', '--socket', '/tmp/b.sock'], ['mode pt gives one VM the whole GPU']],
  [['serve', '--vm', 'name=a,socket=/tmp/a.sock,slice=512M', '--vm', 'name=b,socket=/tmp/b.sock,slice=512M'], ["VM b's 512M VRAM slice does not fit", 'larger --vram']],
  [['serve', '--socket', '/tmp/a.sock', '--policy', 'fifo', '--band-yield-us', '500'], ['band-yield-us 500', 'policy band only']],
  [['serve', '--socket', '/tmp/a.sock', '--engine', 'native', '--vulkan-device', 'llvmpipe'], ['vulkan-device llvmpipe', 'engine auto or vulkan']],
  [['serve', '--socket', '/tmp/a.sock', '--checkpoint-ms', '20'], ['checkpoint-ms 20', 'restartable']],
  [['serve', '--socket', '/tmp/a.sock', '--completion-poll-us', '-5'], ['--completion-poll-us -5', 'microseconds']],
  [['serve', '--socket', '/tmp/a.sock', '--completion-poll-us', '200000'], ['--completion-poll-us 200000', 'microseconds']],
  [['serve', '--socket', '/tmp/a.sock', '--log-level', 'loud'], ['--log-level loud', 'one of trace, debug']],
  [['serve', '--config', '/nonexistent/vugpu.toml'], ['--config /nonexistent/vugpu.toml', 'no such file']],
  [['demo', '--pv', '3'], ['vugpu demo: --pv 3', 'one of 0, 1 or 2']],
  [['demo', '--only', 'nop,frob'], ['--only nop,frob', 'benchmarks from nop']],
  [['demo', '--repeat', 'many'], ['--repeat many', 'from 1 to 1000']],
  [['demo', '--modee', 'pt'], ['unknown option --modee', 'did you mean --mode?']],
  [['trace', 'dump', '--limit', 'x', CLI], ['--limit x', '0 or more']],
  [['trace', 'dump', '--type', 'frob', CLI], ['--type frob', 'one of mmio']],
  [['trace', 'summary'], ['FILE is missing']],
  [['trace', 'summary', '/nonexistent.trace'], ['/nonexistent.trace: no such file']],
  [['trace', 'frob'], ['unknown subcommand "frob"']],
  [['setup', '--fast'], ['vugpu setup', 'takes none']],
  [['ctl'], ['a command is missing']],
  [['ctl', 'frob'], ['unknown command "frob"']],
  [['ctl', 'add', 'c'], ['--socket PATH is required']],
  [['ctl', 'add', 'c', '--socket', '/tmp/c.sock', '--slice', '3M'], ['--slice 3M', 'a power of two']],
  [['ctl', 'add', 'c', '--socket', '/tmp/c.sock', '--mode', 'pt'], ['--mode pt', 'one of fv-naive, fv, pv or pv-batch']],
  [['ctl', 'weight', 'a', '-1'], ['unknown option -1']],
  [['ctl', 'weight', 'a', 'heavy'], ['weight heavy', 'a number greater than 0']],
  [['ctl', 'remove'], ['the VM name is missing']],
  [['ctl', 'policy', 'rr'], ['policy rr', 'one of fifo']],
  [['ctl', 'list', 'extra'], ['unexpected argument "extra"']],
  [['k8s-device-plugin', '--slots', '4x3M'], ['--slots 4x3M', 'COUNTxSIZE such as 4x256M']],
  [['k8s-device-plugin', '--slots', '4x256M', '--slots', '2x256M'], ['two entries for vgpu-256m']],
  [['k8s-device-plugin', '--health-ms', '5'], ['--health-ms 5', 'from 100 to 3600000']],
  [['k8s-device-plugin', '--domain', 'Vugpu.IO'], ['--domain Vugpu.IO', 'a DNS subdomain']],
  [['k8s-device-plugin', '--mode', 'pt'], ['--mode pt', 'one of fv-naive, fv, pv or pv-batch']],
];

/** A config file (its path is filled in) and what the sentence must contain. */
const FILES: [string, string, string[]][] = [
  ['port.toml', `socket = ["${sock('a')}"]\nmetrics-port = 99999\n`, ['line 2: metrics-port = 99999', 'expected a TCP port from 0 to 65535']],
  ['unknown.toml', `vram-size = "1G"\n`, ['line 1: unknown key vram-size', 'did you mean vram?']],
  ['type.toml', `vram = true\nsocket = ["${sock('a')}"]\n`, ['line 1: vram = true', 'a size such as']],
  ['quote.toml', `policy = band\n`, ['line 1', 'strings need quotes']],
  ['dup.toml', `vram = "1G"\nvram = "2G"\n`, ['line 2', 'vram is defined twice']],
  ['vm.toml', `[[vm]]\nname = "a"\nsocket = "${sock('a')}"\nslice = "3G"\n\n[[vm]]\nname = "b"\nsocket = "${sock('b')}"\n`, ['[[vm]] #1', 'slice = 3G', 'a power of two']],
  ['vmkey.toml', `[[vm]]\nname = "a"\nsockett = "${sock('a')}"\n`, ['unknown VM key sockett', 'did you mean socket?']],
  ['list.toml', `socket = "${sock('a')}"\n`, ['line 1: socket', 'expected a list of']],
  ['dotted.toml', `vm.name = "a"\n`, ['line 1', 'dotted keys are not supported']],
  ['table.toml', `[metrics]\nport = 9100\n`, ['line 1: unknown key metrics']],
  ['unterminated.toml', `trace = "/tmp/x\n`, ['line 1', 'unterminated string']],
];

function expectSentence(r: Run, parts: string[], what: string): void {
  const info = `${what}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
  expect(r.code, info).toBe(2);
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  expect(lines, info).toHaveLength(1); // one sentence, no stack trace, no pino line
  expect(lines[0], info).toMatch(/^vugpu [a-z0-9-]+( [a-z]+)?: .+\.$/);
  expect(lines[0]!.startsWith('{'), info).toBe(false);
  for (const p of parts) expect(lines[0], info).toContain(p);
  expect(r.stdout, info).toBe('');
}

async function inBatches<T, R>(items: T[], n: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += n) out.push(...(await Promise.all(items.slice(i, i + n).map(fn))));
  return out;
}

describe('command line: one sentence and exit 2 for every bad input', () => {
  it(`${CASES.length} bad command lines`, async () => {
    const runs = await inBatches(CASES, 4, ([args]) => cli(args));
    runs.forEach((r, i) => expectSentence(r, CASES[i]![1], `vugpu ${CASES[i]![0].join(' ')}`));
    // Nothing started: no socket was created by any of them.
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.sock'))).toEqual([]);
  }, 240_000);

  it(`${FILES.length} bad config files`, async () => {
    const runs = await inBatches(FILES, 4, ([name, text]) => cli(['serve', '--config', file(name, text)]));
    runs.forEach((r, i) => {
      const [name, , parts] = FILES[i]!;
      expectSentence(r, [path.join(dir, name), ...parts], `config ${name}`);
    });
  }, 120_000);

  it('a port in use, a live control socket, no kubelet directory: one sentence, exit 1, nothing left behind', async () => {
    const busy = net.createServer().listen(0, '127.0.0.1');
    await new Promise((r) => busy.once('listening', r));
    const port = (busy.address() as net.AddressInfo).port;
    const ctl = path.join(dir, 'live-control.sock');
    const live = net.createServer().listen(ctl);
    await new Promise((r) => live.once('listening', r));
    try {
      const [a, b] = await Promise.all([
        cli(['serve', '--socket', sock('p1'), '--metrics-port', String(port), '--engine', 'native', '--log-level', 'silent']),
        cli(['serve', '--socket', sock('p2'), '--control-socket', ctl, '--engine', 'native', '--log-level', 'silent']),
      ]);
      expect(a.code, a.stderr).toBe(1);
      expect(a.stderr.trim()).toBe(`vugpu serve: cannot start: metrics-port ${port}: the port is in use.`);
      expect(b.code, b.stderr).toBe(1);
      expect(b.stderr.trim()).toBe(`vugpu serve: cannot start: control-socket ${ctl}: another server is answering on it (stop it, or choose another path).`);
      expect(fs.existsSync(sock('p1')) || fs.existsSync(sock('p2'))).toBe(false);
      const k = await cli(['k8s-device-plugin', '--kubelet-dir', '/nonexistent/device-plugins']);
      expect(k.code, k.stderr).toBe(1);
      expect(k.stderr.trim()).toBe('vugpu k8s-device-plugin: cannot start: kubelet-dir /nonexistent/device-plugins does not exist (the kubelet\'s device-plugin directory: is this a Kubernetes node?).');
    } finally {
      busy.close();
      live.close();
    }
  }, 60_000);
});

describe('config file', () => {
  it('TOML subset: values, tables, arrays of tables, inline tables, comments', () => {
    const doc = parseToml([
      '# comment', 'vram = "1G"   # trailing', "trace = 'C:\\no\\escapes'", 'channels = 1_024', 'weight = 2.5', 'on = true',
      'socket = [', '  "/run/a.sock", # one', '  "/run/b.sock",', ']', 'vm = [ { name = "x", socket = "/x", slice = 64 } ]',
      '"quoted key" = "tab\\tand \\u00e9"', '[[pool]]', 'n = 1', '[[pool]]', 'n = 2', '[extra]', 'k = -3',
    ].join('\n'));
    expect(doc.value).toEqual({
      vram: '1G', trace: 'C:\\no\\escapes', channels: 1024, weight: 2.5, on: true, socket: ['/run/a.sock', '/run/b.sock'],
      vm: [{ name: 'x', socket: '/x', slice: 64 }], 'quoted key': 'tab\tand é', pool: [{ n: 1 }, { n: 2 }], extra: { k: -3 },
    });
    expect(doc.lines.get('pool[1].n')).toBe(16);
    expect(doc.lines.get('socket')).toBe(7);
  });

  it('TOML subset: what it refuses, with the line', () => {
    const bad: [string, number, RegExp][] = [
      ['a = 1\nb = """x"""', 2, /multi-line strings/],
      ['a = 1979-05-27', 1, /dates and times/],
      ['a = 0x10', 1, /only decimal/],
      ['a = 1 b = 2', 1, /one key = value per line/],
      ['[t]\n[t]', 2, /defined twice/],
      ['a.b = 1', 1, /dotted keys/],
      ['a = [1, 2', 1, /unterminated array/],
      ['a = { b = 1', 1, /closing \}/],
      ['a = "\\q"', 1, /unknown escape/],
      ['a = 99999999999999999999', 1, /too large/],
    ];
    for (const [text, line, re] of bad) {
      let err: unknown;
      try {
        parseToml(text);
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(TomlError);
      expect((err as TomlError).line, text).toBe(line);
      expect((err as TomlError).message, text).toMatch(re);
    }
  });

  it('flags win over the file for single values; lists add up (file first)', () => {
    const f = file('merge.toml', [
      'vram = "512M"', 'policy = "credit"', `control-socket = "${path.join(dir, 'c.sock')}"`, 'metrics-port = 9100',
      '[[vm]]', 'name = "a"', `socket = "${sock('a')}"`, 'mode = "pv-batch"', 'slice = "64M"', 'weight = 2',
    ].join('\n'));
    const s = serveSettings(['--config', f, '--policy', 'band', '--vm', `name=b,socket=${sock('b')},slice=128M`, '--log-format', 'json']);
    expect(s.options.vramSize).toBe(512 << 20);
    expect(s.options.policy).toBe('band');
    expect(s.options.metricsPort).toBe(9100);
    expect(s.controlSocket).toBe(path.join(dir, 'c.sock'));
    expect(s.options.vms).toEqual([
      { name: 'a', socket: sock('a'), mode: 'pv-batch', slice: 64 << 20, weight: 2 },
      { name: 'b', socket: sock('b'), mode: 'fv', slice: 128 << 20, weight: undefined },
    ]);
    expect(s.logFormat).toBe('json');
    // A service started empty: only the control socket.
    expect(serveSettings(['--control-socket', '/run/vugpu/control.sock']).options.vms).toEqual([]);
    // Completion polling: given, it reaches the engine's options; absent, the device decides.
    expect(serveSettings(['--control-socket', '/run/vugpu/c.sock', '--completion-poll-us', '0']).options.completionPollUs).toBe(0);
    expect(serveSettings(['--control-socket', '/run/vugpu/c.sock']).options.completionPollUs).toBeUndefined();
    expect(() => serveSettings(['--config', f, '--vm', `name=a,socket=${sock('z')}`])).toThrow(UsageError);
  });

  it('the names repeated for a light command line match server.ts', async () => {
    const server = await import('../../src/server.ts');
    const sc = await import('../../src/service/serve-config.ts');
    expect(sc.VM_MODES).toEqual(server.VM_MODES);
    expect(sc.ENGINE_BACKENDS).toEqual(server.ENGINE_BACKENDS);
  });

  it('the shipped example config is valid', () => {
    const s = serveSettings(['--config', path.resolve(import.meta.dirname, '../../qemu-configs/systemd/vugpu.toml')]);
    expect(s.controlSocket).toBe('/run/vugpu/control.sock');
  });

  it('pretty log lines for a terminal', () => {
    const line = JSON.stringify({ level: 30, time: Date.UTC(2026, 0, 1, 12, 3, 4, 512), pid: 1, part: 'control', action: 'add', vm: 'c', ms: 1.5, msg: 'control: VM c added' });
    expect(prettyLine(`${line}\n`)).toBe('12:03:04.512 INFO  [control] control: VM c added  action=add vm=c ms=1.5\n');
    expect(prettyLine('not json\n')).toBe('not json\n');
  });
});
