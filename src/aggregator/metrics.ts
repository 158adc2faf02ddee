// Per-VM metrics: plain counter objects bumped on hot paths, rendered on demand as Prometheus
// text exposition (format 0.0.4) or JSON, and served over HTTP (/metrics, /metrics.json).
//
// A VM's metrics object has a fixed shape of plain numeric fields created up front, so
// `m.mmioReads++` on the MMIO path is a property increment: no allocation, no lookup by name.
// All formatting work happens only when someone scrapes.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { logger } from '../log.ts';

/** The numeric fields of a VM's metrics. */
export interface VmCounters {
  /** Trapped BAR0 reads and writes handled for this VM. */
  mmioReads: number;
  mmioWrites: number;
  /** Guest TLB flushes intercepted. */
  tlbFlushes: number;
  /** Shadow page-table (re)builds. */
  shadowRebuilds: number;
  /** Shadow PTEs written. */
  shadowPtesWritten: number;
  /** PV hypercalls served. */
  hypercalls: number;
  /** Doorbells rung (scheduling points). */
  doorbells: number;
  /** Device time charged to the VM, ns. */
  deviceNs: number;
  /** VRAM currently allocated to the VM, bytes (a gauge). */
  vramInUseBytes: number;
  /** MMU faults raised to the VM. */
  faults: number;
  /** Channel errors raised to the VM. */
  channelErrors: number;
}

export type CounterName = keyof VmCounters;

export interface VmMetrics extends VmCounters {
  readonly vm: string;
  /** Virtualization mode label (pt, fv-naive, fv-opt, pv, …). */
  mode: string;
}

interface MetricDef {
  field: CounterName;
  /** Exposition name without the vugpu_ prefix (counters end in _total). */
  name: string;
  type: 'counter' | 'gauge';
  help: string;
  /** Multiply the field by this for exposition (ns → seconds: Prometheus wants base units). */
  scale: number;
}

/** One row per metric: the table drives both exposition formats. */
export const METRICS: readonly MetricDef[] = Object.freeze([
  { field: 'mmioReads', name: 'mmio_reads_total', type: 'counter', help: 'Trapped BAR0 MMIO reads.', scale: 1 },
  { field: 'mmioWrites', name: 'mmio_writes_total', type: 'counter', help: 'Trapped BAR0 MMIO writes.', scale: 1 },
  { field: 'tlbFlushes', name: 'tlb_flushes_total', type: 'counter', help: 'Guest TLB flushes intercepted.', scale: 1 },
  { field: 'shadowRebuilds', name: 'shadow_rebuilds_total', type: 'counter', help: 'Shadow page-table rebuilds.', scale: 1 },
  { field: 'shadowPtesWritten', name: 'shadow_ptes_written_total', type: 'counter', help: 'Shadow PTEs written.', scale: 1 },
  { field: 'hypercalls', name: 'hypercalls_total', type: 'counter', help: 'Para-virtual hypercalls served.', scale: 1 },
  { field: 'doorbells', name: 'doorbells_total', type: 'counter', help: 'Doorbells rung (scheduling points).', scale: 1 },
  { field: 'deviceNs', name: 'device_seconds_total', type: 'counter', help: 'Device time used, seconds.', scale: 1e-9 },
  { field: 'vramInUseBytes', name: 'vram_in_use_bytes', type: 'gauge', help: 'VRAM allocated to the VM, bytes.', scale: 1 },
  { field: 'faults', name: 'faults_total', type: 'counter', help: 'MMU faults raised to the VM.', scale: 1 },
  { field: 'channelErrors', name: 'channel_errors_total', type: 'counter', help: 'Channel errors raised to the VM.', scale: 1 },
]);

export const METRIC_PREFIX = 'vugpu_';

export function createVmMetrics(vm: string, mode: string): VmMetrics {
  // Every field initialised here, in one order, so all VM objects share one hidden class.
  return {
    vm,
    mode,
    mmioReads: 0,
    mmioWrites: 0,
    tlbFlushes: 0,
    shadowRebuilds: 0,
    shadowPtesWritten: 0,
    hypercalls: 0,
    doorbells: 0,
    deviceNs: 0,
    vramInUseBytes: 0,
    faults: 0,
    channelErrors: 0,
  };
}

/** Escape a label value: backslash, double quote and line feed (exposition format 0.0.4). */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === '\\' ? '\\\\' : c === '"' ? '\\"' : '\\n'));
}

/** Escape HELP text: backslash and line feed. */
export function escapeHelp(text: string): string {
  return text.replace(/[\\\n]/g, (c) => (c === '\\' ? '\\\\' : '\\n'));
}

/** A sample value in exposition syntax (Go float formatting for the special values). */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

/** Which engine backend and program device this process runs (a constant info series). */
export interface EngineInfo {
  backend: string;
  device: string;
}

export interface MetricsSnapshot {
  /** Milliseconds since the epoch when the snapshot was taken. */
  timestampMs: number;
  engine?: EngineInfo;
  vms: (VmCounters & { vm: string; mode: string })[];
  /** Extra families (addFamily), by name. */
  families?: Record<string, { labels: Record<string, string>; value: number }[]>;
}

/** A metric family beyond the per-VM table (the service's: control actions, VRAM room), read
 * when scraped. `name` without the vugpu_ prefix. */
export interface ExtraFamily {
  name: string;
  type: 'counter' | 'gauge';
  help: string;
  samples(): { labels: Record<string, string>; value: number }[];
}

export class MetricsRegistry {
  private readonly vms = new Map<string, VmMetrics>();
  private engine: EngineInfo | undefined;
  private readonly extra: ExtraFamily[] = [];

  addFamily(f: ExtraFamily): void {
    if (this.extra.some((e) => e.name === f.name)) throw new Error(`metrics: family ${f.name} is already registered`);
    this.extra.push(f);
  }

  setEngineInfo(info: EngineInfo): void {
    this.engine = { ...info };
  }

  /** Create (or return the existing) metrics object of a VM. */
  register(vm: string, mode: string): VmMetrics {
    if (typeof vm !== 'string' || vm.length === 0) throw new TypeError('metrics: vm name must be a non-empty string');
    let m = this.vms.get(vm);
    if (m === undefined) {
      m = createVmMetrics(vm, mode);
      this.vms.set(vm, m);
    } else {
      m.mode = mode;
    }
    return m;
  }

  unregister(vm: string): boolean {
    return this.vms.delete(vm);
  }

  get(vm: string): VmMetrics | undefined {
    return this.vms.get(vm);
  }

  list(): VmMetrics[] {
    return [...this.vms.values()];
  }

  snapshot(): MetricsSnapshot {
    const snap: MetricsSnapshot = { timestampMs: Date.now(), engine: this.engine, vms: this.list().map((m) => ({ ...m })) };
    if (this.extra.length > 0) snap.families = Object.fromEntries(this.extra.map((f) => [f.name, f.samples()]));
    return snap;
  }

  renderJson(): string {
    return JSON.stringify(this.snapshot());
  }

  /** Prometheus text exposition: one family per metric, HELP and TYPE first, a series per VM. */
  renderPrometheus(): string {
    const vms = this.list();
    const labels = vms.map((m) => `{vm="${escapeLabelValue(m.vm)}",mode="${escapeLabelValue(m.mode)}"}`);
    const out: string[] = [
      `# HELP ${METRIC_PREFIX}vms Registered VMs.`,
      `# TYPE ${METRIC_PREFIX}vms gauge`,
      `${METRIC_PREFIX}vms ${vms.length}`,
    ];
    if (this.engine) {
      out.push(
        `# HELP ${METRIC_PREFIX}engine_info Engine backend and the device that runs guest programs.`,
        `# TYPE ${METRIC_PREFIX}engine_info gauge`,
        `${METRIC_PREFIX}engine_info{backend="${escapeLabelValue(this.engine.backend)}",device="${escapeLabelValue(this.engine.device)}"} 1`,
      );
    }
    for (const def of METRICS) {
      const name = METRIC_PREFIX + def.name;
      out.push(`# HELP ${name} ${escapeHelp(def.help)}`, `# TYPE ${name} ${def.type}`);
      for (let i = 0; i < vms.length; i++) {
        out.push(`${name}${labels[i]} ${formatValue(vms[i]![def.field] * def.scale)}`);
      }
    }
    for (const f of this.extra) {
      const name = METRIC_PREFIX + f.name;
      out.push(`# HELP ${name} ${escapeHelp(f.help)}`, `# TYPE ${name} ${f.type}`);
      for (const smp of f.samples()) {
        const l = Object.entries(smp.labels).map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(',');
        out.push(`${name}${l ? `{${l}}` : ''} ${formatValue(smp.value)}`);
      }
    }
    return out.join('\n') + '\n';
  }
}

export interface MetricsServer {
  /** The bound port (the ephemeral one when 0 was asked). */
  readonly port: number;
  readonly host: string;
  close(): Promise<void>;
}

export interface MetricsServerOptions {
  /** TCP port; 0 picks an ephemeral one. */
  port: number;
  /** Listen address (default 127.0.0.1: metrics are not for the world by default). */
  host?: string;
}

/** Serve /metrics (Prometheus text) and /metrics.json; resolves once listening. */
export function startMetricsServer(registry: MetricsRegistry, options: MetricsServerOptions): Promise<MetricsServer> {
  const host = options.host ?? '127.0.0.1';
  const server = http.createServer((req, res) => {
    try {
      const path = (req.url ?? '/').split('?', 1)[0];
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
        return;
      }
      if (path === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        res.end(req.method === 'HEAD' ? undefined : registry.renderPrometheus());
      } else if (path === '/metrics.json') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(req.method === 'HEAD' ? undefined : registry.renderJson());
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics or /metrics.json\n');
      }
    } catch (err) {
      logger.error({ err }, 'metrics: request failed');
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    }
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      server.on('error', (err) => logger.error({ err }, 'metrics: server error'));
      const port = (server.address() as AddressInfo).port;
      logger.info({ host, port }, 'metrics: listening');
      resolve({
        port,
        host,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
