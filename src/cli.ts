#!/usr/bin/env node
// vugpu command line: serve | demo | setup. Run with the pinned Node 24 (npm scripts do).
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENGINE_BACKENDS, VM_MODES, Vugpu, type EngineBackend, type VmConfig, type VmMode } from './server.ts';
import { logger } from './log.ts';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const USAGE = `usage:
  vugpu serve --socket PATH [--socket PATH ...] [--mode pt|fv-naive|fv|pv|pv-batch]
              [--vm name=vm0,socket=PATH,mode=fv,slice=256M,weight=1 ...]
              [--vram 1G] [--channels 64] [--watchdog-ms 10000] [--policy fifo|credit|band|weighted]
              [--band-yield-us 500]
              [--metrics-port PORT] [--trace FILE] [--allow-unsealed-dma]
              [--engine auto|native|vulkan] [--vulkan-device NAME]
  vugpu trace  summary FILE | dump FILE [--limit N]   (a --trace recording)
  vugpu demo   [--mode pt] [--json bench/results/demo.json]
  vugpu setup  install QEMU (>= 10.1 with vfio-user-pci), the guest kernel and image`;

/** "1G", "256M", "4096K", "123" → bytes. */
export function parseSize(s: string): number {
  const m = /^(\d+)([KMG]?)(i?B)?$/i.exec(s.trim());
  if (!m) throw new Error(`bad size: ${s}`);
  const mult = { '': 1, K: 1024, M: 1 << 20, G: 1 << 30 }[m[2]!.toUpperCase() as '' | 'K' | 'M' | 'G'];
  return Number(m[1]) * mult;
}

function parseVm(spec: string, index: number): VmConfig {
  const kv = new Map(spec.split(',').map((p) => p.split('=', 2) as [string, string]));
  const socket = kv.get('socket');
  if (!socket) throw new Error(`--vm ${spec}: socket= is required`);
  const mode = (kv.get('mode') ?? 'fv') as VmMode;
  if (!VM_MODES.includes(mode)) throw new Error(`--vm ${spec}: unknown mode ${mode}`);
  return {
    name: kv.get('name') ?? `vm${index}`,
    socket,
    mode,
    slice: kv.has('slice') ? parseSize(kv.get('slice')!) : undefined,
    weight: kv.has('weight') ? Number(kv.get('weight')) : undefined,
  };
}

async function serve(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      socket: { type: 'string', multiple: true },
      vm: { type: 'string', multiple: true },
      mode: { type: 'string', default: 'pt' },
      vram: { type: 'string', default: '1G' },
      channels: { type: 'string', default: '64' },
      'watchdog-ms': { type: 'string', default: '10000' },
      policy: { type: 'string', default: 'band' },
      'metrics-port': { type: 'string' },
      'allow-unsealed-dma': { type: 'boolean', default: false },
      'band-yield-us': { type: 'string' },
      trace: { type: 'string' },
      engine: { type: 'string', default: 'auto' },
      'vulkan-device': { type: 'string' },
    },
  });
  const engine = values.engine as EngineBackend;
  if (!ENGINE_BACKENDS.includes(engine)) throw new Error(`unknown --engine ${engine} (expected auto, native or vulkan)`);
  const mode = values.mode as VmMode;
  if (!VM_MODES.includes(mode)) throw new Error(`unknown mode ${mode}`);
  const vms: VmConfig[] = [];
  for (const s of values.socket ?? []) vms.push({ name: `vm${vms.length}`, socket: s, mode });
  for (const s of values.vm ?? []) vms.push(parseVm(s, vms.length));
  const vugpu = new Vugpu({
    vms,
    vramSize: parseSize(values.vram!),
    channels: Number(values.channels),
    watchdogMs: Number(values['watchdog-ms']),
    policy: values.policy,
    metricsPort: values['metrics-port'] !== undefined ? Number(values['metrics-port']) : undefined,
    allowUnsealedDma: values['allow-unsealed-dma'],
    policyConfig: values['band-yield-us'] !== undefined ? { yieldNs: Number(values['band-yield-us']) * 1000 } : undefined,
    trace: values.trace,
    engine,
    vulkanDevice: values['vulkan-device'],
  });
  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      logger.info({ signal: sig }, 'shutting down');
      vugpu.close();
      resolve();
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return serve(rest);
    case 'setup':
      return spawnSync('bash', [path.join(repoRoot, 'scripts/setup.sh'), ...rest], { stdio: 'inherit' }).status ?? 1;
    case 'trace': {
      const trace = await import('./trace/cli.ts');
      return trace.main(rest);
    }
    case 'demo': {
      const demo = await import('./demo/index.ts');
      return demo.main(rest);
    }
    default:
      process.stderr.write(`${USAGE}\n`);
      return cmd === undefined || cmd === '--help' || cmd === 'help' ? 0 : 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    logger.error({ err }, err instanceof Error ? err.message : String(err));
    process.exitCode = 1;
  },
);
