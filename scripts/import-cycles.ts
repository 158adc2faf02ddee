// Folder-level import cycles in src/: each folder under src/ is one node (src/gpu, src/persist,
// ...), each file directly in src/ is its own node (the composition root and the leaves beside
// it), and an edge is any import of another node — static, re-export or dynamic, types
// included (a cycle through types is still a layer that depends on the layer above it).
// `node scripts/import-cycles.ts` prints the edges that close a cycle and exits 1 when there
// are any; test/persist/layers.test.ts keeps the count at zero.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|import\s*\(\s*['"]([^'"]+)['"]\s*\)|^\s*import\s*['"]([^'"]+)['"]/gm;

function walk(dir: string, out: string[]): string[] {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (/\.(ts|mts)$/.test(e.name) && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** The node a file of src/ belongs to: its top folder, or the file itself at the top. */
function nodeOf(src: string, file: string): string {
  const rel = path.relative(src, file).split(path.sep);
  return rel.length === 1 ? rel[0]! : `${rel[0]}/`;
}

/** Edges between nodes, each with one file import that makes it (for the message). */
export function folderGraph(src: string): Map<string, Map<string, string>> {
  const g = new Map<string, Map<string, string>>();
  for (const file of walk(src, [])) {
    const from = nodeOf(src, file);
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(IMPORT)) {
      const spec = m[1] ?? m[2] ?? m[3]!;
      if (!spec.startsWith('.')) continue;
      const target = path.resolve(path.dirname(file), spec);
      if (!target.startsWith(src + path.sep)) continue;
      const to = nodeOf(src, target);
      if (to === from) continue;
      if (!g.has(from)) g.set(from, new Map());
      const edges = g.get(from)!;
      if (!edges.has(to)) edges.set(to, `${path.relative(src, file)} imports ${spec}`);
    }
  }
  return g;
}

/** Every strongly connected group of more than one node (Tarjan), each sorted. */
export function folderCycles(src: string): { nodes: string[]; edges: string[] }[] {
  const g = folderGraph(src);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const groups: string[][] = [];
  let next = 0;
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v)?.keys() ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) groups.push(group.sort());
    }
  };
  for (const v of g.keys()) if (!index.has(v)) visit(v);
  return groups.map((nodes) => {
    const inside = new Set(nodes);
    const edges = nodes.flatMap((a) => [...(g.get(a) ?? new Map<string, string>())].filter(([b]) => inside.has(b)).map(([b, why]) => `${a} → ${b} (${why})`));
    return { nodes, edges };
  });
}

/** Pairs of nodes that import each other (the "folder cycles" counted in reviews). */
export function mutualPairs(src: string): string[] {
  const g = folderGraph(src);
  const out: string[] = [];
  for (const [a, edges] of g) for (const b of edges.keys()) if (a < b && g.get(b)?.has(a)) out.push(`${a} ↔ ${b}`);
  return out.sort();
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const src = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src');
  const pairs = mutualPairs(src);
  const cycles = folderCycles(src);
  for (const p of pairs) console.log(`mutual: ${p}`);
  for (const c of cycles) console.log(`cycle: ${c.nodes.join(', ')}\n  ${c.edges.join('\n  ')}`);
  console.log(`${pairs.length} mutual folder pairs, ${cycles.length} cycles`);
  process.exit(cycles.length > 0 ? 1 : 0);
}
