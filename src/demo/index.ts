// The demo: the GPUvm benchmark suite in a real guest and natively, side by side.
//
//   1. start `vugpu serve` (the real server, its own process) in the requested mode;
//   2. boot a QEMU guest that loads the vugpu driver and runs guest/bench (bench-suite.sh);
//   3. build and run the native twin (the same benchmark sources for the host, a user-space
//      driver reaching a pt server over vfio-user: no VM, no TCG);
//   4. print the stage times (G-KVM Table IV) per benchmark, guest beside native, with ratios,
//      and write them as JSON (bench/results/demo/cpu.json).
//
// `vugpu demo` (src/cli.ts) calls main(); tests and scripts call runDemo().
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { logger } from '../log.ts';
import { VM_MODES, type VmMode } from '../server.ts';
import { vfioErrorLines, type CheckResult } from '../vm/console.ts';
import { runGuest, type GuestResult } from '../vm/launcher.ts';
import { loadManifest } from '../vm/manifest.ts';
import { startServer, type ServerProcess } from '../vm/server-process.ts';
import { buildNativeTwin, repoRoot, runNativeTwin } from './native-twin.ts';
import { BENCHMARKS, STAGES, byBench, representative, toBenchRecord, type BenchRecord, type DemoRow, type Stage } from './records.ts';
import { ratio, stageTable, summaryTable } from './table.ts';

export interface DemoOptions {
  /** Server mode of the guest's device (default 'pt'). The native twin always runs against pt. */
  mode?: VmMode;
  /** Benchmarks to run (default: all 14). */
  benches?: string[];
  /** Extra vugpu-bench options for both sides, e.g. ['--large'] or ['--size', '512']. */
  benchArgs?: string[];
  /** Runs per benchmark on each side; the median run (by total) is reported. Default 3. */
  repeat?: number;
  /** Driver module parameter pv in the guest (0 registers, 1/2 PV; PV needs a mediated mode). */
  pv?: 0 | 1 | 2;
  /** Also run the guest robustness checks (fault, SIGKILL mid-kernel, rmmod/insmod). */
  checks?: boolean;
  /** Run the native twin (default true). */
  native?: boolean;
  /** JSON output; default bench/results/demo/cpu.json, null for none. */
  json?: string | null;
  guestTimeoutMs?: number;     // default 900 s
  guestMemoryMiB?: number;     // default 512
  /** Progress and table output (default: stdout). */
  print?: (text: string) => void;
  /** Each guest console line (default: none). */
  onGuestLine?: (line: string) => void;
}

export type { DemoRow };

export interface DemoReport {
  created: string;
  mode: VmMode;
  pv: number;
  repeat: number;
  benchArgs: string[];
  accel: string;
  qemu: string;
  rows: DemoRow[];
  guest: {
    exit: number | null;
    durationMs: number;
    checks: CheckResult[];
    vfioErrors: string[];
    problems: string[];
  };
  native: { ran: boolean; binary: string | null; durationMs: number; problems: string[] };
  ok: boolean;
  table: { summary: string; stages: string };
}

const SUITE = '/opt/vugpu/bench-suite.sh';

function row(bench: string, guestRuns: BenchRecord[], nativeRuns: BenchRecord[]): DemoRow {
  const g = representative(guestRuns);
  const n = representative(nativeRuns);
  const stages = {} as Record<Stage, number | null>;
  for (const s of STAGES) stages[s] = g && n ? ratio(g.stages_us[s], n.stages_us[s]) : null;
  return {
    bench,
    size: g?.size ?? n?.size ?? '',
    guest: g,
    native: n,
    ok: !!g && !!n && g.ok && n.ok,
    ratio: { total: g && n ? ratio(g.total_us, n.total_us) : null, stages },
    guestRuns: guestRuns.length,
    nativeRuns: nativeRuns.length,
  };
}

function guestRecords(r: GuestResult, problems: string[]): BenchRecord[] {
  const out: BenchRecord[] = [];
  for (const rec of r.records) {
    if (rec.kind === 'PARSE_ERROR' || rec.kind === 'ERROR') problems.push(`${rec.kind}: ${JSON.stringify(rec.data)}`);
    if (rec.kind !== 'BENCH') continue;
    const b = toBenchRecord(rec.data);
    if (typeof b === 'string') problems.push(`bad record: ${b}`);
    else out.push(b);
  }
  return out;
}

/** Run the guest suite and the native twin; print and return the comparison. */
export async function runDemo(options: DemoOptions = {}): Promise<DemoReport> {
  const mode = options.mode ?? 'pt';
  if (!VM_MODES.includes(mode)) throw new Error(`unknown mode ${mode}`);
  const benches = options.benches ?? [...BENCHMARKS];
  for (const b of benches) if (!(BENCHMARKS as readonly string[]).includes(b)) throw new Error(`unknown benchmark ${b}`);
  const repeat = Math.max(1, Math.floor(options.repeat ?? 3));
  const benchArgs = options.benchArgs ?? [];
  const pv = options.pv ?? 0;
  const print = options.print ?? ((t: string) => process.stdout.write(`${t}\n`));
  const manifest = loadManifest();
  for (const f of ['/opt/vugpu/vugpu-bench', SUITE, '/opt/vugpu/vugpu.ko']) {
    if (!manifest.guestFiles.includes(f)) throw new Error(`the guest image has no ${f}: run \`npm run setup\` to rebuild it`);
  }

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-demo-'));
  const servers: ServerProcess[] = [];
  try {
    const socket = path.join(dir, 'gpu0.sock');
    print(`vugpu demo: ${benches.length} benchmarks, mode ${mode}, pv=${pv}, ${repeat} run(s) each${benchArgs.length ? `, ${benchArgs.join(' ')}` : ''}`);
    const server = await startServer({ socket, args: ['--mode', mode] });
    servers.push(server);

    // ---- guest ----
    const args = ['--pv', String(pv), '--only', benches.join(':'), '--repeat', String(repeat)];
    if (options.checks) args.push('--checks');
    if (benchArgs.length) args.push('--', ...benchArgs);
    print(`booting the guest (${manifest.qemu.version.split('(')[0]!.trim()})...`);
    const guest = await runGuest({
      manifest,
      sockets: [socket],
      run: SUITE,
      args,
      timeoutMs: options.guestTimeoutMs ?? 900_000,
      memoryMiB: options.guestMemoryMiB ?? 512,
      onLine: options.onGuestLine,
    });
    const guestProblems: string[] = [];
    if (guest.timedOut) guestProblems.push(`the guest timed out after ${Math.round(guest.durationMs / 1000)} s`);
    if (guest.guestExit === null) guestProblems.push(`the guest program did not finish (QEMU exit ${guest.exitCode ?? guest.signal})`);
    const gRecs = guestRecords(guest, guestProblems);
    print(`guest done in ${(guest.durationMs / 1000).toFixed(1)} s (${guest.accel}): ${gRecs.length} runs, exit ${guest.guestExit}`);

    // ---- native twin (pt: the engine as directly as a process can drive it) ----
    const native = { ran: false, binary: null as string | null, durationMs: 0, problems: [] as string[] };
    const nRecs: BenchRecord[] = [];
    if (options.native ?? true) {
      let nativeSocket = socket;
      if (mode !== 'pt') {
        nativeSocket = path.join(dir, 'native.sock');
        servers.push(await startServer({ socket: nativeSocket, args: ['--mode', 'pt'] }));
      }
      const t0 = performance.now();
      native.binary = buildNativeTwin();
      print('running the native twin...');
      for (const b of benches) {
        for (let i = 0; i < repeat; i++) {
          const r = await runNativeTwin(native.binary, nativeSocket, [b, ...benchArgs]);
          native.problems.push(...r.problems.map((p) => `${b}: ${p}`));
          if (r.records.length === 0) native.problems.push(`${b}: no record (exit ${r.code ?? r.signal}): ${r.output.slice(-5).join(' | ')}`);
          nRecs.push(...r.records);
        }
      }
      native.ran = true;
      native.durationMs = performance.now() - t0;
    }

    const g = byBench(gRecs);
    const n = byBench(nRecs);
    const rows = benches.map((b) => row(b, g.get(b) ?? [], n.get(b) ?? []));
    const checks = guest.checks;
    const report: DemoReport = {
      created: new Date().toISOString(),
      mode,
      pv,
      repeat,
      benchArgs,
      accel: guest.accel,
      qemu: manifest.qemu.version,
      rows,
      guest: {
        exit: guest.guestExit,
        durationMs: Math.round(guest.durationMs),
        checks,
        vfioErrors: vfioErrorLines(guest.stderr),
        problems: guestProblems,
      },
      native: { ...native, durationMs: Math.round(native.durationMs) },
      ok: false,
      table: { summary: summaryTable(rows), stages: stageTable(rows) },
    };
    report.ok = rows.every((r) => (native.ran ? r.ok : !!r.guest?.ok)) && guest.guestExit === 0 &&
      checks.every((c) => c.ok) && guestProblems.length === 0;

    print('');
    print(`Total per benchmark, guest (QEMU ${guest.accel}, vugpu driver, mode ${mode}) vs native twin (no VM), ms:`);
    print(report.table.summary);
    print('');
    print('Stage times (G-KVM Table IV), ms; ratio = guest / native:');
    print(report.table.stages);
    for (const c of checks) print(`check ${c.check}: ${c.ok ? 'ok' : 'FAILED'}${typeof c.detail === 'string' && c.detail ? ` (${c.detail})` : ''}`);
    for (const p of [...guestProblems, ...native.problems]) print(`problem: ${p}`);

    const json = options.json === undefined ? path.join(repoRoot, 'bench/results/demo/cpu.json') : options.json;
    if (json) {
      fs.mkdirSync(path.dirname(json), { recursive: true });
      // The twin's path relative to the checkout: a result file names no machine's directories.
      const saved = { ...report, native: { ...report.native, binary: report.native.binary && path.relative(repoRoot, report.native.binary) } };
      fs.writeFileSync(`${json}.tmp`, `${JSON.stringify(saved, null, 2)}\n`);
      fs.renameSync(`${json}.tmp`, json);
      print(`\nwritten: ${path.relative(process.cwd(), json) || json}`);
    }
    logger.info({ ok: report.ok, benches: benches.length, guestMs: report.guest.durationMs, nativeMs: report.native.durationMs }, 'demo finished');
    return report;
  } finally {
    for (const s of servers) await s.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const USAGE = `usage: vugpu demo [--mode pt|fv-naive|fv|pv|pv-batch] [--pv 0|1|2] [--only a,b,...]
                  [--large | --size N] [--repeat N] [--checks] [--no-native] [--json PATH | --no-json]`;

/** `vugpu demo`: exit status 0 when every benchmark verified on both sides. */
export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      mode: { type: 'string', default: 'pt' },
      pv: { type: 'string', default: '0' },
      only: { type: 'string' },
      large: { type: 'boolean', default: false },
      size: { type: 'string' },
      repeat: { type: 'string', default: '3' },
      checks: { type: 'boolean', default: false },
      'no-native': { type: 'boolean', default: false },
      json: { type: 'string' },
      'no-json': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const pv = Number(values.pv);
  if (pv !== 0 && pv !== 1 && pv !== 2) throw new Error(`--pv must be 0, 1 or 2\n${USAGE}`);
  const benchArgs: string[] = [];
  if (values.large) benchArgs.push('--large');
  if (values.size) benchArgs.push('--size', values.size);
  const report = await runDemo({
    mode: values.mode as VmMode,
    pv,
    benches: values.only ? values.only.split(',').map((s) => s.trim()).filter(Boolean) : undefined,
    benchArgs,
    repeat: Number(values.repeat),
    checks: values.checks,
    native: !values['no-native'],
    json: values['no-json'] ? null : values.json,
  });
  return report.ok ? 0 : 1;
}
