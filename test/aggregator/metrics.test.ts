// Metrics: exposition format (checked by a small independent parser), escaping, JSON, HTTP.
import { afterEach, describe, expect, it } from 'vitest';
import {
  METRICS,
  MetricsRegistry,
  escapeLabelValue,
  formatValue,
  startMetricsServer,
} from '../../src/aggregator/metrics.ts';
import type { MetricsServer } from '../../src/aggregator/metrics.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Family {
  name: string;
  help: string;
  type: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Parse Prometheus text format 0.0.4 strictly enough to catch mistakes; throws on any error. */
function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('exposition must end with a line feed');
  const families = new Map<string, Family>();
  let current: Family | null = null;
  const lines = text.slice(0, -1).split('\n');
  for (const [i, line] of lines.entries()) {
    const where = `line ${i + 1}: ${line}`;
    if (line.startsWith('# HELP ')) {
      const rest = line.slice(7);
      const sp = rest.indexOf(' ');
      const name = rest.slice(0, sp);
      if (!NAME.test(name)) throw new Error(`bad metric name in HELP, ${where}`);
      if (families.has(name)) throw new Error(`family ${name} repeated, ${where}`);
      const help = rest.slice(sp + 1).replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c));
      current = { name, help, type: '', samples: [] };
      families.set(name, current);
    } else if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ');
      if (current?.name !== name) throw new Error(`TYPE without HELP just before it, ${where}`);
      if (!['counter', 'gauge', 'untyped', 'histogram', 'summary'].includes(type!)) throw new Error(`bad type, ${where}`);
      if (current.samples.length > 0) throw new Error(`TYPE after samples, ${where}`);
      current.type = type!;
    } else if (line.startsWith('#') || line === '') {
      continue;
    } else {
      let j = 0;
      while (j < line.length && line[j] !== '{' && line[j] !== ' ') j++;
      const name = line.slice(0, j);
      if (!NAME.test(name)) throw new Error(`bad sample name, ${where}`);
      if (current === null || current.name !== name) throw new Error(`sample outside its family, ${where}`);
      if (current.type === '') throw new Error(`sample before TYPE, ${where}`);
      const labels: Record<string, string> = {};
      if (line[j] === '{') {
        j++;
        while (line[j] !== '}') {
          const eq = line.indexOf('=', j);
          const key = line.slice(j, eq);
          if (!LABEL.test(key)) throw new Error(`bad label name ${key}, ${where}`);
          if (line[eq + 1] !== '"') throw new Error(`label value not quoted, ${where}`);
          let k = eq + 2;
          let value = '';
          for (;;) {
            const c = line[k];
            if (c === undefined) throw new Error(`unterminated label value, ${where}`);
            if (c === '"') break;
            if (c === '\\') {
              const e = line[k + 1];
              if (e === 'n') value += '\n';
              else if (e === '\\' || e === '"') value += e;
              else throw new Error(`bad escape \\${e}, ${where}`);
              k += 2;
            } else {
              value += c;
              k++;
            }
          }
          if (Object.hasOwn(labels, key)) throw new Error(`duplicate label ${key}, ${where}`);
          labels[key] = value;
          j = k + 1;
          if (line[j] === ',') j++;
          else if (line[j] !== '}') throw new Error(`expected , or }, ${where}`);
        }
        j++;
      }
      if (line[j] !== ' ') throw new Error(`expected a space before the value, ${where}`);
      const raw = line.slice(j + 1);
      const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : raw === 'NaN' ? NaN : Number(raw);
      if (raw === '' || (Number.isNaN(value) && raw !== 'NaN')) throw new Error(`bad value, ${where}`);
      if (current.type === 'counter' && !name.endsWith('_total')) throw new Error(`counter without _total, ${where}`);
      current.samples.push({ name, labels, value });
    }
  }
  return families;
}

function sampleOf(f: Map<string, Family>, name: string, vm: string): number | undefined {
  return f.get(name)?.samples.find((s) => s.labels['vm'] === vm)?.value;
}

describe('metrics registry and exposition', () => {
  it('renders every metric as a family with HELP/TYPE and one series per VM', () => {
    const reg = new MetricsRegistry();
    const a = reg.register('vm-a', 'fv-naive');
    const b = reg.register('vm-b', 'pv');
    a.mmioReads += 5;
    a.mmioWrites += 7;
    a.deviceNs += 1_500_000_000;
    a.vramInUseBytes = 64 << 20;
    b.doorbells++;
    b.hypercalls += 3;
    b.shadowPtesWritten += 512;
    const f = parseExposition(reg.renderPrometheus());
    expect(f.size).toBe(METRICS.length + 1);
    for (const def of METRICS) {
      const fam = f.get(`vugpu_${def.name}`)!;
      expect(fam.type).toBe(def.type);
      expect(fam.help.length).toBeGreaterThan(0);
      expect(fam.samples.map((s) => s.labels)).toEqual([
        { vm: 'vm-a', mode: 'fv-naive' },
        { vm: 'vm-b', mode: 'pv' },
      ]);
    }
    expect(sampleOf(f, 'vugpu_mmio_reads_total', 'vm-a')).toBe(5);
    expect(sampleOf(f, 'vugpu_mmio_writes_total', 'vm-a')).toBe(7);
    expect(sampleOf(f, 'vugpu_device_seconds_total', 'vm-a')).toBe(1.5);
    expect(sampleOf(f, 'vugpu_vram_in_use_bytes', 'vm-a')).toBe(64 << 20);
    expect(sampleOf(f, 'vugpu_doorbells_total', 'vm-b')).toBe(1);
    expect(sampleOf(f, 'vugpu_hypercalls_total', 'vm-b')).toBe(3);
    expect(sampleOf(f, 'vugpu_shadow_ptes_written_total', 'vm-b')).toBe(512);
    expect(sampleOf(f, 'vugpu_mmio_reads_total', 'vm-b')).toBe(0);
    expect(f.get('vugpu_vms')!.samples[0]!.value).toBe(2);
  });

  it('escapes label values so any VM name round-trips', () => {
    const reg = new MetricsRegistry();
    const nasty = 'a"b\\c\nd} x="y", mode="z';
    reg.register(nasty, 'mode "quoted"\\');
    reg.get(nasty)!.faults = 2;
    const text = reg.renderPrometheus();
    expect(text).toContain(`vm="a\\"b\\\\c\\nd} x=\\"y\\", mode=\\"z"`);
    const f = parseExposition(text);
    const s = f.get('vugpu_faults_total')!.samples;
    expect(s).toHaveLength(1);
    expect(s[0]!.labels).toEqual({ vm: nasty, mode: 'mode "quoted"\\' });
    expect(s[0]!.value).toBe(2);
    expect(escapeLabelValue('plain')).toBe('plain');
  });

  it('the parser used here rejects malformed exposition (so the checks above can fail)', () => {
    expect(() => parseExposition('x_total 1\n')).toThrow(/outside its family/);
    expect(() => parseExposition('# HELP x_total h\n# TYPE x_total counter\nx_total{vm="a} 1\n')).toThrow();
    expect(() => parseExposition('# HELP x h\n# TYPE x counter\nx 1\n')).toThrow(/_total/);
    expect(() => parseExposition('# HELP x h\n# TYPE x gauge\nx{vm="a\\q"} 1\n')).toThrow(/escape/);
    expect(() => parseExposition('# HELP x h\n# TYPE x gauge\nx 1')).toThrow(/line feed/);
  });

  it('formats special values and keeps counters as plain numeric fields', () => {
    expect(formatValue(NaN)).toBe('NaN');
    expect(formatValue(Infinity)).toBe('+Inf');
    expect(formatValue(-Infinity)).toBe('-Inf');
    expect(formatValue(42)).toBe('42');
    const reg = new MetricsRegistry();
    const m = reg.register('v', 'pt');
    for (const def of METRICS) expect(typeof m[def.field]).toBe('number');
    // Re-registering returns the same object (hot paths may hold it) and updates the mode.
    expect(reg.register('v', 'fv-opt')).toBe(m);
    expect(m.mode).toBe('fv-opt');
    expect(reg.unregister('v')).toBe(true);
    expect(parseExposition(reg.renderPrometheus()).get('vugpu_mmio_reads_total')!.samples).toHaveLength(0);
    expect(() => reg.register('', 'pt')).toThrow(TypeError);
  });

  it('renders JSON with every counter and the labels', () => {
    const reg = new MetricsRegistry();
    const m = reg.register('vm-a', 'pv');
    m.tlbFlushes = 9;
    m.shadowRebuilds = 4;
    const j = JSON.parse(reg.renderJson());
    expect(typeof j.timestampMs).toBe('number');
    expect(j.vms).toHaveLength(1);
    expect(j.vms[0]).toMatchObject({ vm: 'vm-a', mode: 'pv', tlbFlushes: 9, shadowRebuilds: 4, deviceNs: 0 });
    for (const def of METRICS) expect(j.vms[0]).toHaveProperty(def.field);
  });
});

describe('metrics HTTP server', () => {
  let server: MetricsServer | null = null;
  afterEach(async () => {
    await server?.close();
    server = null;
  });

  it('serves /metrics and /metrics.json on an ephemeral port', async () => {
    const reg = new MetricsRegistry();
    const m = reg.register('vm-1', 'fv-naive');
    server = await startMetricsServer(reg, { port: 0 });
    expect(server.port).toBeGreaterThan(0);
    m.mmioReads = 123;
    const base = `http://127.0.0.1:${server.port}`;
    const text = await fetch(`${base}/metrics`);
    expect(text.status).toBe(200);
    expect(text.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const f = parseExposition(await text.text());
    expect(sampleOf(f, 'vugpu_mmio_reads_total', 'vm-1')).toBe(123);
    // Live values: a bump between scrapes shows up in the next one.
    m.mmioReads++;
    const json = await fetch(`${base}/metrics.json?x=1`);
    expect(json.status).toBe(200);
    expect(json.headers.get('content-type')).toBe('application/json');
    expect((await json.json()).vms[0].mmioReads).toBe(124);
    expect((await fetch(`${base}/nope`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`, { method: 'POST', body: 'x' })).status).toBe(405);
  });

  it('reports a busy port as an error instead of crashing', async () => {
    const reg = new MetricsRegistry();
    server = await startMetricsServer(reg, { port: 0 });
    await expect(startMetricsServer(reg, { port: server.port })).rejects.toThrow(/EADDRINUSE/);
  });
});
