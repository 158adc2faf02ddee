// Event counts per benchmark and mode (npm run bench:counts): what GPUvm (Tables 3–4) and G-KVM
// (Table VI) counted — trapped MMIO (BAR0 and BAR1 apart), TLB flushes, shadow page-table
// updates (rebuilds and PTEs written), hypercalls, doorbells — for the 14 benchmarks in pt,
// fv-naive, fv, pv and pv-batch, next to the published figures.
//
// Exact attribution: one guest boot per size set and mode runs a script (appended to the setup initramfs,
// bench/lib/initramfs.ts) that loads the driver, then runs the benchmarks one process at a time.
// After each step (driver load, each benchmark, driver unload) it prints a VUGPU-MARK record
// and blocks reading the host's acknowledgement from its second serial port (bench/lib/ack.ts).
// The server runs in this process; on a marker the host waits QUIET_MS (so that posted writes
// still in the socket have been handled), reads the VM's counters, checks that they did not move
// during a second QUIET_MS, and only then acknowledges. Every counted access therefore lies
// between two markers of the guest's sequential script: the counts are the benchmark's, exactly
// (the driver has no timers; an access while the guest is blocked would show as "not quiet").
//
// Writes bench/results/counts/cpu.json and the tables in docs/results.md (between generated-section
// markers), prints the tables.
//   node bench/counts.ts [--sizes large,default] [--modes pt,fv-naive,fv,pv,pv-batch] [--only nop:loop]
//                        [-- <more vugpu-bench args>]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Vugpu, type VmMode } from '../src/server.ts';
import { bootGuest, type GuestResult } from '../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../src/vm/manifest.ts';
import { chooseAccel } from '../src/vm/accel.ts';
import { vfioErrorLines, type GuestRecord } from '../src/vm/console.ts';
import { AckChannel } from './lib/ack.ts';
import { extendInitramfs } from './lib/initramfs.ts';
import {
  environment, mdSection, repoRoot, replaceSection, SUITE_MODES as MODES, SUITE_SIZES as SIZES, textTable, writeBenchResult, type Cell,
} from './lib/common.ts';
import { BENCHMARKS } from '../src/demo/records.ts';

const BENCHES: string[] = [...BENCHMARKS];
const QUIET_MS = 150;
const GUEST_TIMEOUT_MS = 900_000;
const SCRIPT_PATH = '/opt/vugpu-bench/counts.sh';

/** Published figures (seeds/000 G-KVM Table VI; seeds/002 GPUvm Tables 3 and 4). */
const GKVM_MMIO: Record<string, { withoutMap: number; withMap: number }> = {
  madd: { withoutMap: 266986, withMap: 1588 },
  mmul: { withoutMap: 266985, withMap: 1587 },
  loop: { withoutMap: 257911, withMap: 709 },
  backprop: { withoutMap: 258956, withMap: 987 },
  lud: { withoutMap: 259095, withMap: 1090 },
  bfs: { withoutMap: 259935, withMap: 1071 },
  hotspot: { withoutMap: 258020, withMap: 730 },
};
const GPUVM_ORDER = ['nop', 'loop', 'madd', 'mmul', 'fmadd', 'fmmul', 'cpy', 'pincpy', 'backprop', 'bfs', 'hotspot', 'lud', 'srad', 'srad2'];
const row = (v: number[]) => Object.fromEntries(GPUVM_ORDER.map((b, i) => [b, v[i]!]));
const GPUVM_SHADOW = {
  fvNaive: row([30, 30, 34, 34, 34, 34, 26, 28, 40, 42, 34, 30, 52, 40]),
  fvOptimized: row([7, 7, 7, 7, 7, 7, 6, 6, 7, 7, 7, 7, 7, 7]),
};
const GPUVM_HYPERCALLS = {
  pvNaive: row([1230, 1230, 1420, 1420, 1420, 1420, 2010, 34784, 1628, 1993, 1169, 1429, 1985, 2681]),
  pvMulticall: row([93, 93, 97, 97, 97, 97, 81, 218, 117, 117, 97, 89, 149, 107]),
};

/** The guest side: load the driver, run each benchmark in its own process, stop at a marker after each step. */
const GUEST_SCRIPT = `#!/bin/sh
# counts.sh PV BENCH:BENCH:... [vugpu-bench args]  (written by bench/counts.ts)
BIN=/opt/vugpu/vugpu-bench
pv=$1
benches=$(echo "$2" | tr ':' ' ')
shift 2
stty -F /dev/ttyS1 raw -echo clocal || { echo 'VUGPU-ERROR {"error":"no /dev/ttyS1 for acknowledgements"}'; exit 2; }
exec 3</dev/ttyS1
# mark STEP RC: report the step, then wait until the host has read the counters
mark() {
  echo "VUGPU-MARK {\\"step\\":\\"$1\\",\\"rc\\":$2}"
  read -r ack <&3
  [ "$ack" = "go $1" ] || { echo "VUGPU-ERROR {\\"error\\":\\"bad acknowledgement '$ack' for $1\\"}"; exit 3; }
}
fails=0
mark boot 0
insmod /opt/vugpu/vugpu.ko pv="$pv"
rc=$?
mark driver-load $rc
[ $rc = 0 ] || exit 1
for b in $benches; do
  $BIN "$b" "$@"
  rc=$?
  [ $rc = 0 ] || fails=$((fails + 1))
  mark "$b" $rc
done
rmmod vugpu
rc=$?
[ $rc = 0 ] || fails=$((fails + 1))
mark driver-unload $rc
exit $fails
`;

/** Counter fields read from the server (the VM's metrics object and the aggregator's details). */
const FIELDS = [
  'mmioReads', 'mmioWrites', 'bar1Reads', 'bar1Writes', 'tlbFlushes', 'shadowRebuilds', 'shadowPtesWritten',
  'hypercalls', 'hypercallEntries', 'doorbells', 'dispatches', 'deviceNs', 'faults', 'channelErrors', 'interrupts',
] as const;
type Field = (typeof FIELDS)[number];
type Counts = Record<Field, number | null>;

interface Step {
  step: string;
  rc: number;
  /** Counter deltas over the step (null: the mode does not count this, e.g. flushes in pt). */
  counts: Counts & { bar0: number | null; bar1: number | null };
  /** The counters did not move while the guest was blocked on the acknowledgement. */
  quiet: boolean;
  /** The benchmark's own record (its driver-side MMIO count, stage times, verification). */
  bench?: { ok: boolean; size: string; mmio: number; irqs: number; pvCalls: number; totalUs: number; error?: string };
}

interface ModeRun {
  mode: VmMode;
  pv: number;
  wallS: number;
  guestExit: number | null;
  steps: Step[];
  problems: string[];
}

function snapshot(server: Vugpu, vm: string, mode: VmMode): Counts {
  const m = server.metrics.get(vm) as unknown as Partial<Record<Field, number>> | undefined;
  if (!m) throw new Error(`no metrics for VM ${vm}`);
  const out = {} as Counts;
  for (const f of FIELDS) {
    // pt counts trapped BAR0 accesses only; BAR1 is mapped, nothing else is intercepted.
    out[f] = mode === 'pt' && f !== 'mmioReads' && f !== 'mmioWrites' ? null : m[f] ?? null;
  }
  if (mode === 'pt') {
    out.bar1Reads = 0;
    out.bar1Writes = 0;
  }
  return out;
}

function delta(a: Counts, b: Counts): Step['counts'] {
  const d = {} as Step['counts'];
  for (const f of FIELDS) d[f] = a[f] === null || b[f] === null ? null : a[f]! - b[f]!;
  d.bar1 = d.bar1Reads === null || d.bar1Writes === null ? null : d.bar1Reads + d.bar1Writes;
  d.bar0 = d.mmioReads === null || d.mmioWrites === null || d.bar1 === null ? null : d.mmioReads + d.mmioWrites - d.bar1;
  return d;
}

const same = (a: Counts, b: Counts) => FIELDS.every((f) => f === 'deviceNs' || a[f] === b[f]);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runMode(manifest: Manifest, dir: string, m: { mode: VmMode; pv: number }, benches: string[], benchArgs: string[]): Promise<ModeRun> {
  const vm = `counts-${m.mode}`;
  const socket = path.join(dir, `${m.mode}.sock`);
  const server = new Vugpu({
    vramSize: 1 << 30, channels: 64, watchdogMs: 60_000, policy: 'fifo',
    vms: [{ name: vm, socket, mode: m.mode, slice: m.mode === 'pt' ? undefined : 256 << 20 }],
  });
  const ack = new AckChannel(path.join(dir, `${m.mode}.ack`));
  const problems: string[] = [];
  const steps: Step[] = [];
  const benchRecs: GuestRecord[] = [];
  let prev = snapshot(server, vm, m.mode);
  let chain = Promise.resolve();
  const t0 = performance.now();
  let result: GuestResult;
  try {
    await ack.listening();
    const g = bootGuest({
      manifest, sockets: [socket], run: '/bin/sh', args: [SCRIPT_PATH, String(m.pv), benches.join(':'), ...benchArgs],
      qemuArgs: ack.qemuArgs(), timeoutMs: GUEST_TIMEOUT_MS,
      onLine: (_l, rec) => {
        if (rec?.kind === 'BENCH') benchRecs.push(rec);
        if (rec?.kind !== 'MARK') return;
        const step = String(rec.data.step);
        const rc = Number(rec.data.rc);
        // Serialized: the guest cannot send the next marker before this one's acknowledgement.
        chain = chain.then(async () => {
          await sleep(QUIET_MS);
          const a = snapshot(server, vm, m.mode);
          await sleep(QUIET_MS);
          const b = snapshot(server, vm, m.mode);
          const quiet = same(a, b);
          if (!quiet) problems.push(`${step}: counters moved while the guest waited for its acknowledgement`);
          const s: Step = { step, rc, counts: delta(b, prev), quiet };
          const br = benchRecs.at(-1);
          if (BENCHES.includes(step) && br && br.data.bench === step) {
            const d = br.data;
            s.bench = {
              ok: d.ok === true, size: String(d.size), mmio: Number(d.mmio), irqs: Number(d.irqs), pvCalls: Number(d.pv_calls),
              totalUs: Number(d.total_us), ...(d.error ? { error: `${String(d.error)} at ${String(d.where)}` } : {}),
            };
            if (!s.bench.ok) problems.push(`${step}: benchmark failed (${s.bench.error ?? 'not verified'})`);
          } else if (BENCHES.includes(step)) {
            problems.push(`${step}: no VUGPU-BENCH record`);
          }
          steps.push(s);
          prev = b;
          process.stderr.write(`[counts] ${m.mode.padEnd(8)} ${step.padEnd(13)} mmio ${String((s.counts.mmioReads ?? 0) + (s.counts.mmioWrites ?? 0)).padStart(7)}` +
            `${quiet ? '' : '  (NOT QUIET)'}\n`);
          ack.send(`go ${step}`);
        });
      },
    });
    result = await g.done;
    await chain;
  } finally {
    ack.close();
    server.close();
  }
  for (const r of result.records) if (r.kind === 'ERROR' || r.kind === 'PARSE_ERROR') problems.push(`guest: ${JSON.stringify(r.data)}`);
  if (result.timedOut) problems.push('guest timed out');
  if (result.guestExit !== 0) problems.push(`guest script exit ${result.guestExit}`);
  problems.push(...vfioErrorLines(result.stderr).map((l) => `qemu: ${l}`));
  const missing = ['boot', 'driver-load', ...benches, 'driver-unload'].filter((s) => !steps.some((x) => x.step === s));
  if (missing.length) problems.push(`missing steps: ${missing.join(', ')}\n${result.console.slice(-25).join('\n')}`);
  return { mode: m.mode, pv: m.pv, wallS: Math.round((performance.now() - t0) / 100) / 10, guestExit: result.guestExit, steps, problems };
}

// ---- tables ----

function stepOf(runs: ModeRun[], mode: string, bench: string): Step | undefined {
  return runs.find((r) => r.mode === mode)?.steps.find((s) => s.step === bench);
}

function tables(runs: ModeRun[], benches: string[]) {
  const c = (mode: string, b: string, f: keyof Step['counts']): Cell => stepOf(runs, mode, b)?.counts[f] ?? null;
  const mmio = (mode: string, b: string): Cell => {
    const s = stepOf(runs, mode, b);
    return s ? (s.counts.mmioReads ?? 0) + (s.counts.mmioWrites ?? 0) : null;
  };
  const steps = ['driver-load', ...benches, 'driver-unload'];
  const mmioTable = {
    head: ['benchmark', 'pt BAR0', 'fv-naive BAR0', 'fv-naive BAR1', 'fv-naive total', 'G-KVM w/o map', 'fv BAR0', 'G-KVM w/ map', 'pv BAR0', 'pv-batch BAR0'],
    rows: steps.map((b): Cell[] => [
      b, c('pt', b, 'bar0'), c('fv-naive', b, 'bar0'), c('fv-naive', b, 'bar1'), mmio('fv-naive', b), GKVM_MMIO[b]?.withoutMap,
      c('fv', b, 'bar0'), GKVM_MMIO[b]?.withMap, c('pv', b, 'bar0'), c('pv-batch', b, 'bar0'),
    ]),
  };
  const shadowTable = {
    head: ['benchmark', 'fv-naive flushes', 'fv-naive rebuilds', 'fv-naive PTEs', 'GPUvm FV naive', 'fv flushes', 'fv rebuilds', 'fv PTEs', 'GPUvm FV opt.'],
    rows: steps.map((b): Cell[] => [
      b, c('fv-naive', b, 'tlbFlushes'), c('fv-naive', b, 'shadowRebuilds'), c('fv-naive', b, 'shadowPtesWritten'), GPUVM_SHADOW.fvNaive[b],
      c('fv', b, 'tlbFlushes'), c('fv', b, 'shadowRebuilds'), c('fv', b, 'shadowPtesWritten'), GPUVM_SHADOW.fvOptimized[b],
    ]),
  };
  const hcTable = {
    head: ['benchmark', 'pv calls', 'pv entries', 'pv PTEs', 'GPUvm PV naive', 'pv-batch calls', 'pv-batch entries', 'pv-batch PTEs', 'GPUvm multicall'],
    rows: steps.map((b): Cell[] => [
      b, c('pv', b, 'hypercalls'), c('pv', b, 'hypercallEntries'), c('pv', b, 'shadowPtesWritten'), GPUVM_HYPERCALLS.pvNaive[b],
      c('pv-batch', b, 'hypercalls'), c('pv-batch', b, 'hypercallEntries'), c('pv-batch', b, 'shadowPtesWritten'), GPUVM_HYPERCALLS.pvMulticall[b],
    ]),
  };
  const modes = runs.map((r) => r.mode);
  const dbTable = {
    head: ['benchmark', ...modes.map((m) => `${m} doorbells`), ...modes.filter((m) => m !== 'pt').map((m) => `${m} flushes`)],
    rows: steps.map((b): Cell[] => [b, ...modes.map((m) => (m === 'pt' ? null : c(m, b, 'doorbells'))),
      ...modes.filter((m) => m !== 'pt').map((m) => c(m, b, 'tlbFlushes'))]),
  };
  const full = {
    head: ['benchmark', 'mode', 'BAR0', 'BAR1', 'flushes', 'rebuilds', 'PTEs', 'hypercalls', 'entries', 'doorbells', 'guest mmio', 'published'],
    rows: steps.flatMap((b) => runs.map((r): Cell[] => {
      const s = r.steps.find((x) => x.step === b);
      const k = s?.counts;
      const pub = r.mode === 'fv-naive' ? [GKVM_MMIO[b] && `MMIO ${GKVM_MMIO[b]!.withoutMap}`, GPUVM_SHADOW.fvNaive[b] !== undefined && `shadow ${GPUVM_SHADOW.fvNaive[b]}`]
        : r.mode === 'fv' ? [GKVM_MMIO[b] && `MMIO ${GKVM_MMIO[b]!.withMap}`, GPUVM_SHADOW.fvOptimized[b] !== undefined && `shadow ${GPUVM_SHADOW.fvOptimized[b]}`]
          : r.mode === 'pv' ? [GPUVM_HYPERCALLS.pvNaive[b] !== undefined && `hcalls ${GPUVM_HYPERCALLS.pvNaive[b]}`]
            : r.mode === 'pv-batch' ? [GPUVM_HYPERCALLS.pvMulticall[b] !== undefined && `hcalls ${GPUVM_HYPERCALLS.pvMulticall[b]}`] : [];
      return [b, r.mode, k?.bar0, k?.bar1, k?.tlbFlushes, k?.shadowRebuilds, k?.shadowPtesWritten, k?.hypercalls, k?.hypercallEntries,
        k?.doorbells, s?.bench?.mmio, pub.filter(Boolean).join(', ') || null];
    })),
  };
  return { mmioTable, shadowTable, hcTable, dbTable, full };
}

interface SizeRun {
  sizes: string;
  benchArgs: string[];
  wallS: number;
  modes: ModeRun[];
}

function markdown(r: SizeRun, benches: string[]): string {
  const t = tables(r.modes, benches);
  return [
    `#### ${SIZES[r.sizes]?.label ?? r.sizes}${r.benchArgs.length ? ` — vugpu-bench ${r.benchArgs.join(' ')}` : ''} (${r.wallS} s)`,
    ...mdSection('Trapped MMIO accesses (G-KVM Table VI beside: every MMIO access its aggregator handled):', t.mmioTable),
    ...mdSection('TLB flushes and shadow page-table updates (GPUvm Table 3 beside: shadow page-table updates):', t.shadowTable),
    ...mdSection('Hypercalls (GPUvm Table 4 beside; entries = MAP/UNMAP entries the host applied, PTEs = shadow PTEs that changed):', t.hcTable),
    ...mdSection('Doorbells and TLB flushes per mode (pt does not intercept either):', t.dbTable),
    ...mdSection('<details><summary>Everything per benchmark and mode (guest mmio = the driver\'s own count between context creation and destruction)</summary>', t.full),
    '', '</details>',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    args: process.argv.slice(2),
    options: { modes: { type: 'string' }, only: { type: 'string' }, sizes: { type: 'string', default: 'large,default' } },
    allowPositionals: true,
  });
  const modes = values.modes ? MODES.filter((m) => values.modes!.split(',').includes(m.mode)) : MODES;
  const benches = values.only ? values.only.split(':') : BENCHES;
  for (const b of benches) if (!BENCHES.includes(b)) throw new Error(`unknown benchmark ${b}`);
  const sizes = values.sizes!.split(',');
  for (const z of sizes) if (!SIZES[z]) throw new Error(`unknown --sizes ${z} (large, default)`);
  const setup = loadManifest();
  const accel = chooseAccel();
  const env = environment(setup, accel);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-counts-'));
  const manifest: Manifest = {
    ...setup,
    initramfs: extendInitramfs(setup.initramfs, [{ path: SCRIPT_PATH, content: GUEST_SCRIPT }], path.join(dir, 'initramfs.img')),
  };
  const configs: SizeRun[] = [];
  const t0 = performance.now();
  try {
    for (const z of sizes) {
      const benchArgs = [...SIZES[z]!.args, ...positionals];
      const t1 = performance.now();
      const runs: ModeRun[] = [];
      for (const m of modes) {
        process.stderr.write(`[counts] ${z} sizes, ${m.mode}: booting a guest (${accel.accel}), driver pv=${m.pv}, ${benches.length} benchmarks\n`);
        runs.push(await runMode(manifest, dir, m, benches, benchArgs));
      }
      configs.push({ sizes: z, benchArgs, wallS: Math.round((performance.now() - t1) / 100) / 10, modes: runs });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const problems = configs.flatMap((c) => c.modes.flatMap((r) => r.problems.map((p) => `${c.sizes}/${r.mode}: ${p}`)));
  const result = {
    date: new Date().toISOString(),
    environment: env,
    method: 'one guest boot per size set and mode; the guest script stops after every step (driver load, each benchmark process, ' +
      'driver unload) until the host, which runs the server in-process, has read the VM counters and checked that they stay still; ' +
      'counts are the deltas between consecutive markers',
    wallS: Math.round((performance.now() - t0) / 100) / 10,
    configs,
    published: { gkvmTable6TrappedMmio: GKVM_MMIO, gpuvmTable3ShadowUpdates: GPUVM_SHADOW, gpuvmTable4Hypercalls: GPUVM_HYPERCALLS },
    problems,
  };
  const out = writeBenchResult('counts', 'cpu', result);

  replaceSection(path.join(repoRoot, 'docs', 'results.md'), 'counts', [
    `Measured ${result.date.slice(0, 10)} (${accel.accel.toUpperCase()}, ${setup.qemu.version.replace(/^QEMU emulator version /, 'QEMU ')}, ` +
      `guest kernel ${setup.kernelRelease}; ${result.wallS} s in all). Raw data: \`bench/results/counts/cpu.json\`.` +
      (problems.length ? ` **Problems:** ${problems.join('; ')}` : ' Every benchmark verified; every step was quiet.'),
    ...configs.map((c) => `\n${markdown(c, benches)}`),
  ].join('\n'));

  const lines = [`vugpu event counts per benchmark — ${accel.accel.toUpperCase()}, ${result.wallS} s`];
  for (const c of configs) {
    const t = tables(c.modes, benches);
    lines.push(
      '', `=== ${c.sizes} sizes (${c.benchArgs.join(' ') || 'no args'}), ${c.wallS} s`,
      '', 'trapped MMIO', textTable(t.mmioTable.head, t.mmioTable.rows),
      '', 'shadow page tables', textTable(t.shadowTable.head, t.shadowTable.rows),
      '', 'hypercalls', textTable(t.hcTable.head, t.hcTable.rows),
      '', 'doorbells / flushes', textTable(t.dbTable.head, t.dbTable.rows),
    );
  }
  lines.push('', problems.length ? `PROBLEMS:\n  ${problems.join('\n  ')}` : 'every benchmark verified; every step quiet',
    `written ${path.relative(process.cwd(), out)} and docs/results.md`);
  process.stdout.write(`${lines.join('\n')}\n`);
  if (problems.length) process.exitCode = 1;
}

main().catch((err: Error) => {
  process.stderr.write(`[counts] ${err.stack ?? err.message}\n`);
  process.exit(1);
});
