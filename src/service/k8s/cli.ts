// `vugpu k8s-device-plugin [options]`: runs the device plugin (plugin.ts) until SIGTERM.
import { DevicePlugin, className } from './plugin.ts';
import { ControlClient, DEFAULT_CONTROL_SOCKET } from '../ctl.ts';
import fs from 'node:fs';
import { StartError, UsageError, enumKind, get, getList, intKind, parseArgv, pathKind, socketKind, stringKind, type Kind, type OptionDef } from '../config.ts';
import { kinds } from '../serve-config.ts';
import { applyLogSettings } from '../logfmt.ts';
import { logger } from '../../log.ts';

/** `4x256M`: count x slice size. */
const slotsKind: Kind<{ count: number; vram: number }> = {
  form: 'COUNTxSIZE such as 4x256M (1 to 64 slots of a power-of-two slice from 1M)',
  parse(raw) {
    if (typeof raw !== 'string') return undefined;
    const m = /^(\d+)x(.+)$/i.exec(raw.trim());
    if (!m) return undefined;
    const count = Number(m[1]);
    const vram = kinds.slice.parse(m[2]!);
    return count >= 1 && count <= 64 && vram !== undefined ? { count, vram } : undefined;
  },
};

const domainKind = stringKind('a DNS subdomain such as vugpu.io (lower case)', /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/);

export const K8S_OPTIONS: readonly OptionDef[] = [
  { key: 'slots', kind: slotsKind, list: true, arg: 'NxSIZE', help: 'vGPU slots of one VRAM size, one resource per size (default 4x256M)' },
  { key: 'control-socket', kind: socketKind, arg: 'PATH', help: `the vugpu server's control socket (default ${DEFAULT_CONTROL_SOCKET})` },
  { key: 'kubelet-dir', kind: pathKind, arg: 'DIR', help: "the kubelet's device-plugin directory (default /var/lib/kubelet/device-plugins)" },
  { key: 'domain', kind: domainKind, arg: 'NAME', help: 'resource names are DOMAIN/vgpu-SIZE (default vugpu.io)' },
  { key: 'mode', kind: kinds.mediatedMode, arg: 'MODE', help: "the slots' VM mode: fv-naive, fv, pv or pv-batch (default fv)" },
  { key: 'socket-dir', kind: pathKind, arg: 'DIR', help: "host directory of the slots' sockets, one sub-directory each (default /run/vugpu/k8s)" },
  { key: 'container-dir', kind: pathKind, arg: 'DIR', help: 'where a pod sees them (default /var/run/vugpu)' },
  { key: 'cdi-dir', kind: pathKind, arg: 'DIR', help: 'also write a CDI spec here and answer CDI device names (e.g. /var/run/cdi)' },
  { key: 'health-ms', kind: intKind(100, 3_600_000, 'a number of milliseconds'), arg: 'MS', help: 'health check period (default 5000)' },
  { key: 'log-level', kind: kinds.logLevel, arg: 'LEVEL', help: 'trace … silent (default info)' },
  { key: 'log-format', kind: enumKind(['auto', 'json', 'pretty'] as const), arg: 'FORMAT', help: 'json, pretty or auto (default auto)' },
];

export async function main(argv: readonly string[]): Promise<number> {
  const cmd = 'k8s-device-plugin';
  const args = parseArgv(cmd, K8S_OPTIONS, argv);
  // Every value first (its own sentence), before anything is looked at or started.
  for (const d of K8S_OPTIONS) if (d.kind !== 'vm') (d.list ? getList : get)(cmd, args, d.key, d.kind);
  let slots = getList(cmd, args, 'slots', slotsKind);
  if (slots.length === 0) slots = [{ count: 4, vram: 256 << 20 }];
  const seen = new Set<string>();
  for (const s of slots) {
    const n = className(s.vram);
    if (seen.has(n)) throw new UsageError(`vugpu ${cmd}: --slots: two entries for ${n} (give each size once, e.g. --slots 4x256M --slots 2x1G).`);
    seen.add(n);
  }
  applyLogSettings({ logLevel: get(cmd, args, 'log-level', kinds.logLevel), logFormat: get(cmd, args, 'log-format', enumKind(['auto', 'json', 'pretty'] as const), 'auto') });
  const kubeletDir = get(cmd, args, 'kubelet-dir', pathKind, '/var/lib/kubelet/device-plugins');
  if (!fs.existsSync(kubeletDir)) {
    throw new StartError(`vugpu ${cmd}: cannot start: kubelet-dir ${kubeletDir} does not exist (the kubelet's device-plugin directory: is this a Kubernetes node?).`);
  }
  const plugin = new DevicePlugin({
    control: new ControlClient(get(cmd, args, 'control-socket', socketKind) ?? (process.env.VUGPU_CONTROL_SOCKET || DEFAULT_CONTROL_SOCKET)),
    kubeletDir,
    slots,
    mode: get(cmd, args, 'mode', kinds.mediatedMode, 'fv'),
    domain: get(cmd, args, 'domain', domainKind, 'vugpu.io'),
    socketDir: get(cmd, args, 'socket-dir', pathKind, '/run/vugpu/k8s'),
    containerDir: get(cmd, args, 'container-dir', pathKind, '/var/run/vugpu'),
    cdiDir: get(cmd, args, 'cdi-dir', pathKind),
    healthMs: get(cmd, args, 'health-ms', intKind(100, 3_600_000), 5000),
  });
  try {
    await plugin.start();
  } catch (err) {
    await plugin.stop();
    throw new StartError(`vugpu ${cmd}: cannot start: ${(err as Error).message}.`);
  }
  logger.info({ resources: plugin.resources.map((r) => `${r.resourceName}:${r.slots.length}`) }, 'k8s device plugin ready');
  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      logger.info({ signal: sig }, 'device plugin stopping');
      void plugin.stop().finally(resolve);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  return 0;
}
