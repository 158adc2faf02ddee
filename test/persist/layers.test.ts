// The restart layer is the roof, not the floor: no folder of src/ imports one that imports it
// back (scripts/import-cycles.ts), the plain-state helpers (src/state) import no component,
// and every component that survives a restart implements the one Persist interface.
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { folderCycles, folderGraph, mutualPairs } from '../../scripts/import-cycles.ts';

const src = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src');

describe('src/ folder layering', () => {
  it('has no folder-level import cycle', () => {
    expect(mutualPairs(src)).toEqual([]);
    expect(folderCycles(src).map((c) => c.edges.join('; '))).toEqual([]);
  });

  it('keeps src/state/ a leaf: it imports nothing of src/', () => {
    expect([...(folderGraph(src).get('state/')?.values() ?? [])]).toEqual([]);
  });

  it('has the restart layer above the components and the composition root, not below', () => {
    const g = folderGraph(src);
    for (const c of ['gpu/', 'aggregator/', 'device-model/']) {
      expect(g.get(c)?.has('persist/') ?? false, `${c} imports persist/`).toBe(false);
      expect(g.get(c)?.has('state/'), `${c} implements Persist from state/`).toBe(true);
    }
    expect(g.get('server.ts')?.has('persist/') ?? false).toBe(false);
  });

  // The check itself must be able to fail: a made-up tree with a cycle through a type import,
  // a re-export and a dynamic import.
  it('finds a cycle when there is one (static, type-only, re-export, dynamic)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-cycles-'));
    try {
      const put = (rel: string, text: string) => {
        fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
        fs.writeFileSync(path.join(dir, rel), text);
      };
      put('a/x.ts', "import type { Y } from '../b/y.ts';\nexport const x = 1;\n");
      put('b/y.ts', "export { z } from '../c/z.ts';\nexport type Y = number;\n");
      put('c/z.ts', "export const z = async () => import('../a/x.ts');\n");
      put('d/w.ts', "import { x } from '../a/x.ts';\nexport const w = x;\n");
      put('root.ts', "import { w } from './d/w.ts';\n");
      const cycles = folderCycles(dir);
      expect(cycles.map((c) => c.nodes)).toEqual([['a/', 'b/', 'c/']]);
      expect(mutualPairs(dir)).toEqual([]);
      put('d/v.ts', "import '../root.ts';\n");
      expect(folderCycles(dir).map((c) => c.nodes).sort()).toEqual([['a/', 'b/', 'c/'], ['d/', 'root.ts']]);
      expect(mutualPairs(dir)).toEqual(['d/ ↔ root.ts']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
