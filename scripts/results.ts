// The figures the documents show, from the result files: rewrites the generated sections of
// README.md (headline table), docs/guest.md (the demo's table) and docs/results.md (the index of
// current results), so a figure in the docs cannot drift from bench/results/<bench>/<device>.json.
// The sections the benchmarks write themselves (modes, fairness, scaling, counts, mediation) are
// checked against their files: each names a raw-data file that exists and the date it holds.
//   npm run results            rewrite the sections
//   npm run results -- --check exit 1, naming each stale section, when a document is not what the
//                              files give (test/docs/results.test.ts runs this)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** One result file: bench/results/<bench>/<name>.json, name = device or device-variant. */
export interface ResultFile { bench: string; name: string; rel: string; data: Record<string, any> }

export function readResults(dir = path.join(root, 'bench', 'results')): ResultFile[] {
  const out: ResultFile[] = [];
  for (const bench of fs.readdirSync(dir).sort()) {
    const bdir = path.join(dir, bench);
    if (!fs.statSync(bdir).isDirectory()) continue;
    for (const f of fs.readdirSync(bdir).sort()) {
      if (!f.endsWith('.json')) continue;
      const data = JSON.parse(fs.readFileSync(path.join(bdir, f), 'utf8')) as Record<string, any>;
      out.push({ bench, name: f.slice(0, -5), rel: `bench/results/${bench}/${f}`, data });
    }
  }
  return out;
}

const find = (rs: ResultFile[], bench: string, name: string): ResultFile => {
  const r = rs.find((x) => x.bench === bench && x.name === name);
  if (!r) throw new Error(`bench/results/${bench}/${name}.json is missing (a document's figures come from it)`);
  return r;
};

const dateOf = (r: ResultFile): string => String(r.data.stamp?.date ?? r.data.date ?? r.data.created ?? '').slice(0, 10);

/** Three significant figures, no trailing noise: 0.81, 3.69, 10.2, 251. */
function sig(x: number): string {
  if (!Number.isFinite(x)) return '—';
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : x.toFixed(2);
}
/** Milliseconds as the demo prints them: 0, 0.77, 23.4, 251. */
const ms = (us: number | undefined): string => {
  const x = (us ?? 0) / 1000;
  return x === 0 ? '0' : x < 1 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0);
};
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

// ---- the sections ----

const STAGES = ['Init', 'MemAlloc', 'DataInit', 'HtoD', 'KernConf', 'Exec', 'DtoH', 'DataRead', 'Close'];

/** docs/guest.md: the demo's table, per benchmark guest and native totals and stages. */
export function demoTable(rs: ResultFile[]): string {
  const r = find(rs, 'demo', 'cpu');
  const d = r.data;
  const rows = (d.rows as any[]).map((x) => {
    const g = x.guest, n = x.native;
    return `| ${x.bench} | ${x.size} | ${ms(g.total_us)} | ${ms(n.total_us)} | ${sig(g.total_us / n.total_us)}x | ` +
      STAGES.map((s) => `${ms(g.stages_us?.[s])} / ${ms(n.stages_us?.[s])}`).join(' | ') + ' |';
  });
  return [
    `From \`${r.rel}\` (${dateOf(r)}; ${String(d.accel).toUpperCase()} guest, mode ${d.mode}, median of ${d.repeat}). ` +
      'Times in ms; stage cells are guest / native:',
    '',
    `| bench | size | guest total | native total | ratio | ${STAGES.join(' | ')} |`,
    `|---|---|---:|---:|---:|${STAGES.map(() => '---:').join('|')}|`,
    ...rows,
  ].join('\n');
}

/** README: the headline results, each a median with its spread (a best-of says so). */
export function headlineTable(rs: ResultFile[]): string {
  const rows: string[] = [];
  const link = (r: ResultFile, anchor: string) => `[${r.bench}/${r.name}](${r.rel}) · [docs](docs/results.md#${anchor})`;

  const demo = find(rs, 'demo', 'cpu');
  const ratios = (demo.data.rows as any[]).map((x) => x.guest.total_us / x.native.total_us);
  rows.push(`| Guest suite in a TCG guest against the same suite natively (${ratios.length} benchmarks, \`npm run demo\`) | ` +
    `median ${sig(median(ratios))}× slower (${sig(Math.min(...ratios))}–${sig(Math.max(...ratios))}×) | [${demo.bench}/${demo.name}](${demo.rel}) · [docs](docs/guest.md#5-demo-srcdemo-npm-run-demo) |`);

  const ev = find(rs, 'engine-vulkan', 'h200');
  const g = (ev.data.gemm as any[]).find((x) => x.n === 8192);
  if (g?.cublas) {
    const med = g.cublas.withTransfersMedianMs / g.vram.medianMs;
    const best = g.cublas.withTransfersMs / g.vram.bestMs;
    rows.push(`| GEMM 8192³ with transfers on an H200, vugpu's engine against cuBLAS | median ${sig(med)}× cuBLAS's speed ` +
      `(best of ${g.vram.samples}: ${sig(best)}×) | ${link(ev, 'gemm-with-transfers-on-a-gpu-the-ceiling-and-what-the-virtual-launch-adds-benchvulkan-gemm-floorc-node-benchlaunch-pathts')} |`);
  }

  const pr = find(rs, 'programs', 'h200');
  const fv = pr.data.nop?.fv;
  if (fv) {
    rows.push(`| NOP program launch → fence on an H200 in \`fv\` mode (${fv.program.n} launches) | p50 ${sig(fv.program.p50Us)} µs ` +
      `(p99 ${sig(fv.program.p99Us)} µs; built-in NOP p50 ${sig(fv.builtin.p50Us)} µs) | [${pr.bench}/${pr.name}](${pr.rel}) · [docs](docs/programs.md) |`);
  }

  const fair = find(rs, 'fairness', 'cpu');
  const runs = (fair.data.runs as any[]).filter((x) => String(x.label).startsWith('fair'));
  if (runs.length) {
    const u = runs.map((x) => x.medianUnfairness * 100);
    const mx = runs.map((x) => x.maxUnfairness * 100);
    rows.push(`| Two VMs sharing the device, 1 ms against 100 ms kernels, \`fair\` policy (${runs.length} rounds) | ` +
      `median unfairness ${u.map((x) => `${x.toFixed(1)} %`).join(', ')} (worst window ${Math.max(...mx).toFixed(0)} %) | ${link(fair, 'fair-sharing-1-ms-vs-100-ms-kernels-npm-run-benchfairness')} |`);
  }

  const rst = find(rs, 'restart', 'cpu');
  const one = rst.data.sizes?.['1'];
  if (one?.upgrade && one?.crash) {
    const p = (k: string) => one[k].guestPauseMs;
    rows.push(`| A guest's pause while the server restarts (1 VM, ${p('upgrade').n} events each) | upgrade p50 ${sig(p('upgrade').p50)} ms ` +
      `(p90 ${sig(p('upgrade').p90)}); crash p50 ${sig(p('crash').p50)} ms (p90 ${sig(p('crash').p90)}) | ${link(rst, 'surviving-a-restart-npm-run-benchrestart')} |`);
  }

  // The interleaved pair of batched runs (each with its native side in the same rounds).
  const lls = ['h200-batched-a', 'h200-batched-b'].map((n) => rs.find((r) => r.bench === 'llama' && r.name === n));
  const lts = lls.map((r) => r?.data.oneTenant?.['135m']);
  if (lls.every(Boolean) && lts.every((t) => t?.ratio?.gen)) {
    const range = (xs: number[]) => (Math.min(...xs) === Math.max(...xs) ? sig(xs[0]!) : `${sig(Math.min(...xs))}–${sig(Math.max(...xs))}`);
    rows.push(`| llama.cpp 135m q8_0 through vugpu's Vulkan driver on an H200 (native twin, one tenant, two runs of ${lts[0].rounds} rounds) | ` +
      `generation ${range(lts.map((t) => t.ratio.gen.median))}× native (${range(lts.map((t) => t.vugpu.genTps))} against ` +
      `${range(lts.map((t) => t.native.genTps))} tokens/s); prompt ${range(lts.map((t) => t.ratio.prompt.median))}× | ` +
      `${link(lls[0]!, 'batched-launches-on-the-h200-issue-32')} |`);
  }

  return ['| What | Result | Measured in |', '|---|---|---|', ...rows].join('\n');
}

/** docs/results.md: every current result, who measured it and when. */
export function indexTable(rs: ResultFile[]): string {
  const rows = rs.map((r) => {
    const s = r.data.stamp ?? {};
    const commit = s.commit && s.commit !== 'unknown' ? `\`${String(s.commit).slice(0, 9)}\`${s.dirty ? ' (changes)' : ''}` :
      `unknown${s.committedIn ? ` (committed in \`${s.committedIn}\`)` : ''}`;
    return `| \`${r.bench}\` | [${r.name}](../${r.rel}) | ${dateOf(r) || '—'} | ${commit} |`;
  });
  return [
    'One current result per benchmark and device (`bench/results/<bench>/<device>.json`, a named run of the same ' +
      'benchmark as `<device>-<name>.json`, plots beside them). A file stamped after the fact (`stamp.stampedAfter`) ' +
      'records what was known: its date, and the commit that added it when the measured commit was not recorded.',
    '',
    '| Benchmark | Result | Date | Commit |',
    '|---|---|---|---|',
    ...rows,
  ].join('\n');
}

// ---- sections in files ----

const SECTION_RE = (name: string) => new RegExp(`<!-- ${name}:begin[^>]*-->[\\s\\S]*?<!-- ${name}:end -->`);

function withSection(text: string, name: string, body: string): string {
  const block = `<!-- ${name}:begin (generated by scripts/results.ts: npm run results) -->\n${body.trim()}\n<!-- ${name}:end -->`;
  const re = SECTION_RE(name);
  if (!re.test(text)) throw new Error(`no <!-- ${name}:begin --> … <!-- ${name}:end --> markers`);
  return text.replace(re, () => block);
}

export interface Doc { file: string; sections: Record<string, (rs: ResultFile[]) => string> }

export const DOCS: Doc[] = [
  { file: 'README.md', sections: { 'results-headline': headlineTable } },
  { file: 'docs/guest.md', sections: { 'results-demo': demoTable } },
  { file: 'docs/results.md', sections: { 'results-index': indexTable } },
];

/** The benchmark-written sections of docs/results.md: their raw data must exist and hold the date they quote. */
export function checkBenchSections(text: string, rs: ResultFile[]): string[] {
  const problems: string[] = [];
  for (const name of ['modes', 'fairness', 'scaling', 'counts', 'mediation']) {
    const m = SECTION_RE(name).exec(text);
    if (!m) { problems.push(`docs/results.md: the ${name} section is missing`); continue; }
    const raw = /Raw data: `(bench\/results\/[^`]+\.json)`/.exec(m[0]);
    const file = raw && rs.find((r) => r.rel === raw[1]);
    if (!file) { problems.push(`docs/results.md ${name}: its raw data ${raw ? raw[1] : '(none named)'} is not a result file`); continue; }
    const measured = /Measured (\d{4}-\d{2}-\d{2})/.exec(m[0]);
    const date = String(file.data.date ?? '').slice(0, 10);
    if (measured && date && measured[1] !== date) problems.push(`docs/results.md ${name}: says measured ${measured[1]}, ${file.rel} holds ${date}`);
  }
  return problems;
}

/** Each document as the files give it: [file, current text, generated text]. */
export function render(rs: ResultFile[], base = root): { file: string; now: string; want: string }[] {
  return DOCS.map((d) => {
    const now = fs.readFileSync(path.join(base, d.file), 'utf8');
    let want = now;
    for (const [name, f] of Object.entries(d.sections)) want = withSection(want, name, f(rs));
    return { file: d.file, now, want };
  });
}

function main(): void {
  const check = process.argv.includes('--check');
  const rs = readResults();
  const problems = checkBenchSections(fs.readFileSync(path.join(root, 'docs/results.md'), 'utf8'), rs);
  for (const { file, now, want } of render(rs)) {
    if (now === want) continue;
    if (check) problems.push(`${file}: a generated section is stale against bench/results (run npm run results)`);
    else {
      fs.writeFileSync(path.join(root, file), want);
      console.log(`rewrote ${file}`);
    }
  }
  for (const p of problems) console.error(p);
  if (problems.length) process.exit(1);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    main();
  } catch (e) {
    console.error(`results: ${(e as Error).message}.`);
    process.exit(2);
  }
}
