// The figures the documents show come from bench/results: README's headline table, docs/guest.md's
// demo table and docs/results.md's index are what scripts/results.ts makes of the files, and the
// benchmark-written sections of docs/results.md name result files that exist and hold their dates.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkBenchSections, headlineTable, readResults, render } from '../../scripts/results.ts';

const root = path.resolve(import.meta.dirname, '../..');

describe('docs against bench/results', () => {
  it('every generated section is what npm run results makes of the files', () => {
    for (const { file, now, want } of render(readResults())) expect(now, `${file} is stale: run npm run results`).toBe(want);
  });

  it('the benchmark-written sections of docs/results.md name their result files and dates', async () => {
    const fs = await import('node:fs');
    expect(checkBenchSections(fs.readFileSync(path.join(root, 'docs/results.md'), 'utf8'), readResults())).toEqual([]);
  });

  it('a changed figure in a result file makes the README stale', () => {
    const rs = readResults();
    const demo = rs.find((r) => r.bench === 'demo' && r.name === 'cpu')!;
    const before = headlineTable(rs);
    demo.data.rows[0].guest.total_us *= 10; // a figure moves in the file (in memory only)
    expect(headlineTable(rs)).not.toBe(before);
    const readme = render(rs).find((d) => d.file === 'README.md')!;
    expect(readme.now).not.toBe(readme.want);
  });

  it('the check mode exits 0 on the committed tree', () => {
    const r = spawnSync(process.execPath, [path.join(root, 'scripts/results.ts'), '--check'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
