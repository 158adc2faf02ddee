// A V8 CPU profile (node --cpu-prof) summarised for the launch path: self time per function, and
// for the seconds in which the server was busy launching (steady generation), each named
// function's inclusive time per second. bench:llama --profile-serve profiles `vugpu serve` with it,
// so where a dispatch's JS time goes is a result, not a one-off script.
import fs from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[]; timeDeltas: number[] }

export interface ProfileSummary {
  profileMs: number;
  idleMs: number;
  busyMs: number;
  top: { function: string; selfMs: number }[];
  steadyState: { seconds: number; rule: string; msPerSecond: Record<string, number> };
  /** Each named function's inclusive ms over the whole profile: on a host whose device, not the
   * JS thread, bounds a token (lavapipe) no second is steady, but the launch path's cost per
   * dispatch is still these totals over the server's dispatches. */
  wholeMs: Record<string, number>;
}

const r1 = (x: number) => +x.toFixed(1);

/**
 * `functions`: names whose inclusive time per steady second is reported (a sample counts under
 * every one of them on its stack, so they overlap). A second is steady when `steadyFn`'s
 * inclusive time in it is at least `steadyMinMs`.
 */
export function summarizeProfile(file: string, functions: readonly string[], steadyFn: string, steadyMinMs: number): ProfileSummary {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const label = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').pop() ?? ''}:${n.callFrame.lineNumber + 1}`;
  const want = new Set([...functions, steadyFn]);
  // per node: which of the wanted functions are on its stack (walked once per node)
  const stackOf = new Map<number, string[]>();
  const onStack = (id: number): string[] => {
    let s = stackOf.get(id);
    if (s) return s;
    const names = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const fn = byId.get(at)!.callFrame.functionName;
      if (want.has(fn)) names.add(fn);
    }
    s = [...names];
    stackOf.set(id, s);
    return s;
  };
  const self = new Map<string, number>();
  const seconds = new Map<number, Map<string, number>>();
  let t = 0;
  let idle = 0;
  const whole = new Map<string, number>();
  for (let i = 0; i < p.samples.length; i++) {
    // a sample lasts until the next one
    const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
    const n = byId.get(p.samples[i]!)!;
    const l = label(n);
    self.set(l, (self.get(l) ?? 0) + dt);
    t += (p.timeDeltas[i] ?? 0) / 1000;
    const sec = Math.floor(t / 1000);
    let m = seconds.get(sec);
    if (!m) seconds.set(sec, (m = new Map()));
    if (n.callFrame.functionName === '(idle)') {
      idle += dt;
      m.set('idle', (m.get('idle') ?? 0) + dt);
      continue;
    }
    m.set('busy', (m.get('busy') ?? 0) + dt);
    for (const f of onStack(n.id)) {
      m.set(f, (m.get(f) ?? 0) + dt);
      whole.set(f, (whole.get(f) ?? 0) + dt);
    }
  }
  const profileMs = (p.endTime - p.startTime) / 1000;
  const steady = [...seconds.values()].filter((m) => (m.get(steadyFn) ?? 0) >= steadyMinMs);
  const msPerSecond: Record<string, number> = {};
  for (const f of [...functions, 'busy', 'idle']) {
    msPerSecond[f] = steady.length ? r1(steady.reduce((a, m) => a + (m.get(f) ?? 0), 0) / steady.length) : 0;
  }
  return {
    profileMs: r1(profileMs),
    idleMs: r1(idle),
    busyMs: r1(profileMs - idle),
    top: [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 30).map(([f, ms]) => ({ function: f, selfMs: r1(ms) })),
    steadyState: { seconds: steady.length, rule: `${steadyFn} inclusive >= ${steadyMinMs} ms of the second`, msPerSecond },
    wholeMs: Object.fromEntries([...functions].map((f) => [f, r1(whole.get(f) ?? 0)])),
  };
}
