// `vugpu serve`: its options (one row each: flag --key and config-file key `key`), and their
// conversion into VugpuOptions with every cross-check that can be made before anything starts
// (pt alone, unique names and sockets, slices that fit the VRAM, options that need others).
// A new serve option is one row in SERVE_OPTIONS plus its line in serveSettings().
import { dirname } from 'node:path';
import type { EngineBackend, VmConfig, VmMode, VugpuOptions } from '../server.ts';
import { POLICY_SHARES, policyNames } from '../aggregator/scheduler/index.ts';
import { RangeAllocator } from '../aggregator/alloc.ts';
import {
  UsageError, boolKind, enumKind, formatSize, get, getList, intKind, mergeConfigFile, numberKind,
  parseArgv, parseVmSpec, pathKind, sizeKind, socketKind, stringKind, type OptionDef, type VmKinds,
} from './config.ts';

const MIB = 1 << 20;

// The names server.ts defines, repeated so that checking a command line does not load the engine
// (a test keeps them equal).
export const VM_MODES: readonly VmMode[] = ['pt', 'fv-naive', 'fv', 'pv', 'pv-batch'];
export const ENGINE_BACKENDS: readonly EngineBackend[] = ['auto', 'native', 'vulkan'];

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export const kinds = {
  mode: enumKind(VM_MODES),
  mediatedMode: enumKind(VM_MODES.filter((m) => m !== 'pt')),
  vram: sizeKind({ min: 32 * MIB, max: 256 * 2 ** 30, example: '512M or 1G' }),
  slice: sizeKind({ min: MIB, max: 128 * 2 ** 30, pow2: true, example: '128M or 1G' }),
  channels: intKind(1, 128),
  watchdogMs: intKind(1, 3_600_000, 'a number of milliseconds'),
  policy: enumKind(policyNames),
  bandYieldUs: intKind(1, 1_000_000, 'a number of microseconds'),
  port: intKind(0, 65535, 'a TCP port'),
  host: stringKind('an IP address or host name', /^[A-Za-z0-9.:_-]+$/),
  engine: enumKind(ENGINE_BACKENDS),
  weight: numberKind(0, 1_000_000),
  logLevel: enumKind(LOG_LEVELS),
  logFormat: enumKind(LOG_FORMATS),
};

export const VM_KINDS: VmKinds = { mode: kinds.mode, slice: kinds.slice, weight: kinds.weight };

export const SERVE_OPTIONS: readonly OptionDef[] = [
  { key: 'config', kind: pathKind, arg: 'FILE', help: 'read options from a TOML file (flags given as well win)', flagOnly: true },
  { key: 'socket', kind: socketKind, list: true, arg: 'PATH', help: 'a VM socket in --mode (named vm0, vm1, …)' },
  { key: 'mode', kind: kinds.mode, arg: 'MODE', help: 'mode of the --socket VMs: pt, fv-naive, fv, pv or pv-batch (default pt)' },
  { key: 'vm', kind: 'vm', list: true, arg: 'SPEC', help: 'a VM: name=a,socket=PATH,mode=fv,slice=256M,weight=1' },
  { key: 'vram', kind: kinds.vram, arg: 'SIZE', help: 'engine VRAM (default 1G)' },
  { key: 'channels', kind: kinds.channels, arg: 'N', help: 'physical channels (default 64)' },
  { key: 'watchdog-ms', kind: kinds.watchdogMs, arg: 'MS', help: 'engine watchdog for one job (default 10000)' },
  { key: 'policy', kind: kinds.policy, arg: 'NAME', help: `scheduler: ${kinds.policy.form.replace(/^one of /, '')} (default fair); ${POLICY_SHARES}` },
  { key: 'band-yield-us', kind: kinds.bandYieldUs, arg: 'US', help: "BAND's yield window (default 500)" },
  { key: 'metrics-port', kind: kinds.port, arg: 'PORT', help: 'serve /metrics and /metrics.json on this TCP port (0: any free one)' },
  { key: 'metrics-host', kind: kinds.host, arg: 'ADDR', help: 'address of the metrics server (default 127.0.0.1)' },
  { key: 'control-socket', kind: socketKind, arg: 'PATH', help: 'root-only control API socket for `vugpu ctl` (e.g. /run/vugpu/control.sock)' },
  { key: 'trace', kind: pathKind, arg: 'FILE', help: 'record trapped accesses and vGPU events (src/trace)' },
  { key: 'allow-unsealed-dma', kind: boolKind, help: 'accept memory-backend-file guests (trusted guests only)' },
  { key: 'engine', kind: kinds.engine, arg: 'NAME', help: 'engine backend: auto, native or vulkan (default auto)' },
  { key: 'vulkan-device', kind: stringKind('part of a Vulkan device name'), arg: 'NAME', help: 'the Vulkan device to use (default: the first suitable one)' },
  { key: 'completion-poll-us', kind: intKind(0, 100_000, 'a number of microseconds'), arg: 'US', help: 'poll up to US µs for a GPU job to finish, and for the next GPU launch after one, instead of sleeping; spends a core while polling (default 1000 on a GPU with ≥ 4 CPUs, else 0)' },
  { key: 'timeslice-ms', kind: intKind(0, 60_000, 'a number of milliseconds'), arg: 'MS', help: "on a GPU, which cannot switch a program that never ends out for another VM's work (and between VMs that share a CPU device's way): how long a VM's program may run while another VM's work waits before it is stopped with CTXSW_TIMEOUT (default 20, and 1000 between VMs sharing a CPU device's way; 0 = never, and a neighbour then waits until the watchdog or the driver ends it)" },
  { key: 'timeslice-always', kind: boolKind, help: 'switch between all VMs in the engine (--timeslice-ms) on a CPU device too, which time-slices VMs on ways of their own itself: for testing' },
  // Surviving a crash or an upgrade (issue 9, src/persist/serve.ts).
  { key: 'state-dir', kind: pathKind, arg: 'DIR', help: "restartable: the fd keeper's socket and log live here; started again with the same options it adopts the running VMs" },
  { key: 'keeper', kind: socketKind, arg: 'SOCKET', help: "restartable: the fd keeper's socket (default DIR/keeper.sock)" },
  { key: 'checkpoint-ms', kind: intKind(1, 10_000, 'a number of milliseconds'), arg: 'MS', help: 'restartable: longest a checkpoint waits (default 20)' },
  { key: 'systemd', kind: boolKind, help: "restartable: keep the fds in systemd's fd store (default: when NOTIFY_SOCKET is set)" },
  { key: 'standby', kind: boolKind, help: 'restartable: keep a standby server process ready to take over at once if this one dies' },
  { key: 'log-level', kind: kinds.logLevel, arg: 'LEVEL', help: 'trace, debug, info, warn, error, fatal or silent (default $VUGPU_LOG or info)' },
  { key: 'log-format', kind: kinds.logFormat, arg: 'FORMAT', help: 'json, pretty, or auto: pretty on a terminal, else JSON (default auto)' },
];

export interface ServeSettings {
  options: VugpuOptions;
  /** The control API socket, if one was asked for. */
  controlSocket?: string;
  logLevel?: LogLevel;
  logFormat: LogFormat;
  configFile?: string;
  /** Restartable serving (state-dir, keeper, checkpoint-ms, systemd), when asked for. */
  persist?: { stateDir: string; keeperSocket?: string; intervalMs?: number; systemd?: boolean; standby?: boolean };
}

/** `vugpu serve` arguments (and --config FILE) → settings; UsageError for anything wrong. */
export function serveSettings(argv: readonly string[]): ServeSettings {
  const cmd = 'serve';
  const args = parseArgv(cmd, SERVE_OPTIONS, argv);
  const configFile = get(cmd, args, 'config', pathKind);
  if (configFile !== undefined) mergeConfigFile(cmd, SERVE_OPTIONS, args, configFile);

  // Every single value first (its own sentence), then what the values mean together.
  const scalars: Record<string, unknown> = {};
  for (const d of SERVE_OPTIONS) if (!d.list && d.kind !== 'vm') scalars[d.key] = get(cmd, args, d.key, d.kind);
  const mode = get(cmd, args, 'mode', kinds.mode, 'pt') as VmMode;
  const vms: VmConfig[] = [];
  const where = new Map<VmConfig, string>();
  for (const s of args.values.get('socket') ?? []) {
    const vm: VmConfig = { name: `vm${vms.length}`, socket: socketKind.parse(s.raw) ?? badValue(cmd, s.where, socketKind.form), mode };
    vms.push(vm);
    where.set(vm, s.where);
  }
  for (const v of args.values.get('vm') ?? []) {
    const spec = parseVmSpec(cmd, v.raw, v.where, VM_KINDS);
    const vm: VmConfig = { name: spec.name ?? `vm${vms.length}`, socket: spec.socket, mode: (spec.mode ?? 'fv') as VmMode, slice: spec.slice, weight: spec.weight };
    vms.push(vm);
    where.set(vm, v.where);
  }
  const names = new Map<string, VmConfig>();
  const sockets = new Map<string, VmConfig>();
  for (const vm of vms) {
    if (names.has(vm.name)) throw new UsageError(`vugpu serve: ${where.get(vm)}: a VM named ${vm.name} is already configured (${where.get(names.get(vm.name)!)}); names must be unique.`);
    if (sockets.has(vm.socket)) throw new UsageError(`vugpu serve: ${where.get(vm)}: socket ${vm.socket} is already used by VM ${sockets.get(vm.socket)!.name}; each VM needs its own socket.`);
    names.set(vm.name, vm);
    sockets.set(vm.socket, vm);
    if (vm.mode === 'pt' && (vm.slice !== undefined || vm.weight !== undefined)) {
      throw new UsageError(`vugpu serve: ${where.get(vm)}: mode pt gives the VM the whole GPU, so slice and weight do not apply (use a mediated mode: fv-naive, fv, pv or pv-batch).`);
    }
  }
  const pt = vms.find((v) => v.mode === 'pt');
  if (pt && vms.length > 1) {
    throw new UsageError(`vugpu serve: ${where.get(pt)}: mode pt gives one VM the whole GPU, so it cannot share the server with ${vms.length > 2 ? `the other ${vms.length - 1} VMs` : 'another VM'} (use a mediated mode: fv-naive, fv, pv or pv-batch).`);
  }
  const controlSocket = get(cmd, args, 'control-socket', socketKind);
  if (controlSocket !== undefined && sockets.has(controlSocket)) {
    throw new UsageError(`vugpu serve: control-socket ${controlSocket} is also VM ${sockets.get(controlSocket)!.name}'s socket; use another path.`);
  }
  if (vms.length === 0 && controlSocket === undefined) {
    throw new UsageError('vugpu serve: nothing to serve: give --socket PATH, --vm name=…,socket=PATH or --control-socket PATH (config keys socket, [[vm]], control-socket).');
  }

  const vramSize = get(cmd, args, 'vram', kinds.vram, 1 << 30);
  checkSlicesFit(vms, vramSize, where);

  // fair by default: it is the policy that keeps every busy VM's share, also beside a VM that
  // resubmits at once (band can leave a VM with gaps between its jobs below its share).
  const policy = get(cmd, args, 'policy', kinds.policy, 'fair');
  const yieldUs = get(cmd, args, 'band-yield-us', kinds.bandYieldUs);
  if (yieldUs !== undefined && policy !== 'band') {
    throw new UsageError(`vugpu serve: band-yield-us ${yieldUs}: applies to policy band only (policy is ${policy}).`);
  }
  const engine = get(cmd, args, 'engine', kinds.engine, 'auto');
  const vulkanDevice = get(cmd, args, 'vulkan-device', stringKind());
  if (vulkanDevice !== undefined && engine === 'native') {
    throw new UsageError(`vugpu serve: vulkan-device ${vulkanDevice}: applies to engine auto or vulkan only (engine is native).`);
  }
  const metricsPort = get(cmd, args, 'metrics-port', kinds.port);
  const metricsHost = get(cmd, args, 'metrics-host', kinds.host);
  if (metricsHost !== undefined && metricsPort === undefined) {
    throw new UsageError(`vugpu serve: metrics-host ${metricsHost}: set metrics-port too (metrics are served only on a port).`);
  }
  const stateDir = get(cmd, args, 'state-dir', pathKind);
  const keeper = get(cmd, args, 'keeper', socketKind);
  const systemd = get(cmd, args, 'systemd', boolKind, false);
  const checkpointMs = get(cmd, args, 'checkpoint-ms', intKind(1, 10_000));
  const standby = get(cmd, args, 'standby', boolKind, false);
  const restartable = stateDir !== undefined || keeper !== undefined || systemd;
  if (checkpointMs !== undefined && !restartable) {
    throw new UsageError(`vugpu serve: checkpoint-ms ${checkpointMs}: applies to a restartable server only (set state-dir, keeper or systemd too).`);
  }
  return {
    persist: restartable
      ? { stateDir: stateDir ?? dirname(keeper ?? '/run/vugpu/keeper.sock'), keeperSocket: keeper, intervalMs: checkpointMs, systemd: systemd || undefined, standby: standby || undefined }
      : undefined,
    options: {
      vms,
      vramSize,
      channels: get(cmd, args, 'channels', kinds.channels, 64),
      watchdogMs: get(cmd, args, 'watchdog-ms', kinds.watchdogMs, 10_000),
      policy,
      policyConfig: yieldUs !== undefined ? { yieldNs: yieldUs * 1000 } : undefined,
      metricsPort,
      metricsHost,
      trace: get(cmd, args, 'trace', pathKind),
      allowUnsealedDma: get(cmd, args, 'allow-unsealed-dma', boolKind, false),
      engine,
      vulkanDevice,
      completionPollUs: get(cmd, args, 'completion-poll-us', intKind(0, 100_000)),
      timesliceMs: get(cmd, args, 'timeslice-ms', intKind(0, 60_000)),
      timesliceAlways: get(cmd, args, 'timeslice-always', boolKind, false) || undefined,
    },
    controlSocket,
    logLevel: get(cmd, args, 'log-level', kinds.logLevel),
    logFormat: get(cmd, args, 'log-format', kinds.logFormat, 'auto'),
    configFile,
  };
}

function badValue(cmd: string, where: string, form: string): never {
  throw new UsageError(`vugpu ${cmd}: ${where}: expected ${form}.`);
}

/** The aggregator's host-reserved VRAM for a VRAM size (aggregator.ts, default hostReserved). */
export function hostReserved(vram: number): number {
  return Math.max(16 * MIB, Math.floor(vram / 16 / MIB) * MIB);
}

/** Default slice of a mediated VM without slice=: an equal share, as a power of two (server.ts). */
export function defaultSlice(available: number, vms: number): number {
  return 2 ** Math.floor(Math.log2(Math.max(MIB, available / vms)));
}

/** Place the mediated VMs' slices as the aggregator will (same allocator, same order). */
function checkSlicesFit(vms: VmConfig[], vram: number, where: Map<VmConfig, string>): void {
  const mediated = vms.filter((v) => v.mode !== 'pt');
  if (mediated.length === 0) return;
  const reserved = hostReserved(vram);
  if (reserved >= vram) throw new UsageError(`vugpu serve: vram ${formatSize(vram)}: too small for mediated VMs (the host keeps ${formatSize(reserved)}).`);
  const slices = new RangeAllocator(reserved, vram - reserved, MIB);
  for (const vm of mediated) {
    const size = vm.slice ?? defaultSlice(slices.size, mediated.length);
    if (slices.alloc(size, MIB) === null) {
      throw new UsageError(`vugpu serve: ${where.get(vm)}: VM ${vm.name}'s ${formatSize(size)} VRAM slice does not fit (vram ${formatSize(vram)} less the host's ${formatSize(reserved)} leaves ${formatSize(slices.largestFree)} free after the VMs before it): use smaller slices or a larger --vram.`);
    }
  }
}
