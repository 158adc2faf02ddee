// bench/vulkan-copy.c, the copy-rate probe behind docs/architecture.md's "The bus as Vulkan
// drives it" (run on the GPU host; here on lavapipe, whose one queue gives no pairs): it builds
// with the host's gcc, measures every case it lists, prints one JSON object, and refuses bad
// arguments with one line and exit 2.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
let dir: string;
let tool: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-vkcopy-'));
  tool = path.join(dir, 'vulkan-copy');
  execFileSync('gcc', ['-O2', '-Wall', '-Werror', '-o', tool, path.join(ROOT, 'bench/vulkan-copy.c'), '-lvulkan']);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Out {
  device: string;
  rounds: number;
  upBytes: number;
  downBytes: number;
  engineQueues: { compute: number; up: number; down: number };
  queues: { q: number; family: number; index: number; flags: number }[];
  cases: { name: string; bestUs: number; p50Us: number }[];
}

describe('bench/vulkan-copy.c', () => {
  it('measures every queue alone, every pair, the split upload, the floor, the pieces and the hops', () => {
    const r = spawnSync(tool, ['2', '1'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as Out;
    expect(out.device.length).toBeGreaterThan(0);
    expect([out.rounds, out.upBytes, out.downBytes]).toEqual([2, 8 << 20, 4 << 20]);
    const nq = out.queues.length;
    expect(nq).toBeGreaterThan(0);
    for (const k of ['compute', 'up', 'down'] as const) expect(out.engineQueues[k]).toBeLessThan(nq);
    const names = out.cases.map((c) => c.name);
    for (let i = 0; i < nq; i++) expect(names).toEqual(expect.arrayContaining([`up q${i}`, `down q${i}`]));
    expect(names.filter((n) => /^up q\d+ \+ down q/.test(n))).toHaveLength(nq * (nq - 1));
    // the up copy in halves on every two queues, and with the download queue's copy beside them
    // (lavapipe has one queue: none)
    const splits = names.filter((n) => /^up halves q\d+ \+ q\d+$/.test(n)).length;
    const splitsDown = names.filter((n) => /^up halves q\d+ \+ q\d+, down q\d+$/.test(n)).length;
    expect(splits).toBe((nq * (nq - 1)) / 2);
    let pairsBesideDown = 0; // pairs without the download queue
    for (let i = 0; i < nq; i++) for (let j = i + 1; j < nq; j++) if (i !== out.engineQueues.down && j !== out.engineQueues.down) pairsBesideDown++;
    expect(splitsDown).toBe(pairsBesideDown);
    expect(names.length).toBe(2 * nq + nq * (nq - 1) + splits + splitsDown + 6);
    for (const c of out.cases) {
      expect(c.bestUs, c.name).toBeGreaterThan(0);
      expect(c.p50Us, c.name).toBeGreaterThanOrEqual(c.bestUs);
    }
    expect(r.stderr).toContain(out.device);
  });

  it('refuses bad arguments with one line and exit 2', () => {
    for (const args of [['0'], ['201'], ['2', '0'], ['2', '999']]) {
      const r = spawnSync(tool, args, { encoding: 'utf8', timeout: 10_000 });
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^usage: vulkan-copy/);
    }
  });
});
