// `vugpu ctl …`: the control API's client (control.ts). Exit status: 0 done, 1 the server
// refused or could not be reached (one sentence on stderr), 2 a bad command line.
import http from 'node:http';
import { UsageError, formatSize, get, parseArgv, socketKind, boolKind, intKind, nameKind, convert, type OptionDef } from './config.ts';
import { kinds } from './serve-config.ts';

export const DEFAULT_CONTROL_SOCKET = '/run/vugpu/control.sock';

const COMMON: OptionDef[] = [
  { key: 'control-socket', kind: socketKind, arg: 'PATH', help: `the server's control socket (default $VUGPU_CONTROL_SOCKET or ${DEFAULT_CONTROL_SOCKET})` },
  { key: 'json', kind: boolKind, help: 'print the API answer as JSON' },
];

interface Verb {
  args: string;
  help: string;
  options: OptionDef[];
  positionals: number;
}

const VERBS: Record<string, Verb> = {
  status: { args: '', help: 'server, policy, VRAM room, VM count', options: [], positionals: 0 },
  list: { args: '', help: 'VMs with state, slice, weight, clients, counters', options: [], positionals: 0 },
  add: {
    args: 'NAME --socket PATH [--mode fv] [--slice 256M] [--weight 1]', help: 'add a mediated VM (the running ones are not touched)', positionals: 1,
    options: [
      { key: 'socket', kind: socketKind, arg: 'PATH', help: "the VM's vfio-user socket" },
      { key: 'mode', kind: kinds.mediatedMode, arg: 'MODE', help: 'fv-naive, fv, pv or pv-batch (default fv)' },
      { key: 'slice', kind: kinds.slice, arg: 'SIZE', help: 'VRAM slice (default 256M)' },
      { key: 'weight', kind: kinds.weight, arg: 'W', help: 'scheduler weight (default 1)' },
    ],
  },
  remove: {
    args: 'NAME [--force]', help: 'remove a VM (refused while its QEMU is attached, unless --force)', positionals: 1,
    options: [{ key: 'force', kind: boolKind, help: 'remove even with a QEMU attached (it loses the device)' }],
  },
  drain: {
    args: 'NAME [--wait] [--timeout S]', help: 'take no new client; remove the VM when its QEMU goes', positionals: 1,
    options: [
      { key: 'wait', kind: boolKind, help: 'return only once the VM is removed' },
      { key: 'timeout', kind: intKind(1, 86_400, 'a number of seconds'), arg: 'S', help: 'give up waiting after S seconds (default 600)' },
    ],
  },
  weight: { args: 'NAME W', help: "change a VM's scheduler weight", options: [], positionals: 2 },
  policy: {
    args: '[NAME [--band-yield-us US]]', help: 'show or change the scheduling policy', positionals: 1,
    options: [{ key: 'band-yield-us', kind: kinds.bandYieldUs, arg: 'US', help: "BAND's yield window" }],
  },
};

export const CTL_USAGE = `usage: vugpu ctl [--control-socket PATH] [--json] COMMAND …
${Object.entries(VERBS).map(([v, d]) => `  ${`${v} ${d.args}`.padEnd(62)} ${d.help}`).join('\n')}`;

export interface ApiAnswer {
  status: number;
  body: Record<string, unknown>;
}

/** One request to the control API; rejects with a readable Error when the socket cannot be reached. */
export function request(socket: string, method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<ApiAnswer> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      socketPath: socket, method, path, timeout: timeoutMs,
      headers: data === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        try {
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> });
        } catch {
          reject(new Error(`the control socket ${socket} answered something that is not the vugpu API (${res.statusCode})`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${socket} within ${timeoutMs / 1000} s`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      const why = err.code === 'ENOENT' ? 'no such socket: is `vugpu serve --control-socket` running?'
        : err.code === 'ECONNREFUSED' ? 'nothing listens there (a stale socket: the server is gone)'
          : err.code === 'EACCES' ? 'permission denied: the control API is root-only'
            : err.message;
      reject(new Error(`cannot reach the control socket ${socket}: ${why}`));
    });
    req.end(data);
  });
}

/** A client bound to one socket (used by the Kubernetes device plugin and the tests). */
export class ControlClient {
  readonly socket: string;
  constructor(socket = process.env.VUGPU_CONTROL_SOCKET || DEFAULT_CONTROL_SOCKET) {
    this.socket = socket;
  }
  /** The body of a 2xx answer; a refusal rejects with the server's sentence (err.status set). */
  async call(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const a = await request(this.socket, method, path, body);
    if (a.status >= 200 && a.status < 300) return a.body;
    const e = a.body.error as { code?: string; message?: string } | undefined;
    throw Object.assign(new Error(e?.message ?? `the server answered ${a.status}`), { status: a.status, code: e?.code });
  }
}

/** `vugpu ctl` (argv after "ctl"); prints results and returns the exit status. */
export async function ctlMain(argv: readonly string[], out: (s: string) => unknown = (s) => process.stdout.write(s), err: (s: string) => unknown = (s) => process.stderr.write(s)): Promise<number> {
  const verbAt = argv.findIndex((a, i) => !a.startsWith('-') && !(i > 0 && argv[i - 1] === '--control-socket'));
  const verb = verbAt < 0 ? undefined : argv[verbAt]!;
  if (verb === undefined || verb === 'help' || argv.includes('--help')) {
    if (verb === undefined && !argv.includes('--help')) throw new UsageError(`vugpu ctl: a command is missing (expected one of ${Object.keys(VERBS).join(', ')}; see vugpu ctl --help).`);
    out(`${CTL_USAGE}\n`);
    return 0;
  }
  const def = VERBS[verb];
  if (!def) throw new UsageError(`vugpu ctl: unknown command ${JSON.stringify(verb)} (expected one of ${Object.keys(VERBS).join(', ')}).`);
  const cmd = `ctl ${verb}`;
  const rest = [...argv.slice(0, verbAt), ...argv.slice(verbAt + 1)];
  const args = parseArgv(cmd, [...COMMON, ...def.options], rest, { max: def.positionals, what: def.args || 'no arguments' });
  const socket = get(cmd, args, 'control-socket', socketKind) ?? (process.env.VUGPU_CONTROL_SOCKET || DEFAULT_CONTROL_SOCKET);
  const json = get(cmd, args, 'json', boolKind, false);
  const pos = args.positionals;
  const need = (i: number, what: string) => {
    if (pos[i] === undefined) throw new UsageError(`vugpu ${cmd}: ${what} is missing (usage: vugpu ctl ${verb} ${def.args}).`);
    return pos[i]!;
  };
  const vm = (i: number) => encodeURIComponent(convert(cmd, need(i, 'the VM name'), `VM name ${pos[i]}`, nameKind));

  let method = 'GET';
  let path = '/v1';
  let body: Record<string, unknown> | undefined;
  switch (verb) {
    case 'status':
      break;
    case 'list':
      path = '/v1/vms';
      break;
    case 'add': {
      const name = convert(cmd, need(0, 'the VM name'), `VM name ${pos[0]}`, nameKind);
      const sock = get(cmd, args, 'socket', socketKind);
      if (sock === undefined) throw new UsageError(`vugpu ${cmd}: --socket PATH is required (the VM's vfio-user socket, e.g. /run/vugpu/${name}.sock).`);
      [method, path] = ['POST', '/v1/vms'];
      body = { name, socket: sock, mode: get(cmd, args, 'mode', kinds.mediatedMode), slice: get(cmd, args, 'slice', kinds.slice), weight: get(cmd, args, 'weight', kinds.weight) };
      break;
    }
    case 'remove':
      [method, path] = ['DELETE', `/v1/vms/${vm(0)}${get(cmd, args, 'force', boolKind, false) ? '?force=1' : ''}`];
      break;
    case 'drain':
      [method, path] = ['POST', `/v1/vms/${vm(0)}/drain`];
      break;
    case 'weight':
      [method, path] = ['PUT', `/v1/vms/${vm(0)}/weight`];
      body = { weight: convert(cmd, need(1, 'the weight'), `weight ${pos[1]}`, kinds.weight) };
      break;
    case 'policy': {
      const yieldUs = get(cmd, args, 'band-yield-us', kinds.bandYieldUs);
      if (pos[0] === undefined) {
        if (yieldUs !== undefined) throw new UsageError(`vugpu ${cmd}: --band-yield-us needs the policy too (vugpu ctl policy band --band-yield-us ${yieldUs}).`);
        path = '/v1/policy';
      } else {
        const policy = convert(cmd, pos[0], `policy ${pos[0]}`, kinds.policy);
        [method, path] = ['PUT', '/v1/policy'];
        body = { policy, bandYieldUs: yieldUs };
      }
      break;
    }
  }

  let a: ApiAnswer;
  try {
    a = await request(socket, method, path, body);
  } catch (e) {
    err(`vugpu ctl: ${sentence((e as Error).message)}\n`);
    return 1;
  }
  if (a.status >= 300) {
    const e = a.body.error as { message?: string } | undefined;
    err(`vugpu ctl ${verb}: ${sentence(e?.message ?? `the server answered ${a.status}`)}\n`);
    return 1;
  }
  if (verb === 'drain' && a.body.state === 'draining' && get(cmd, args, 'wait', boolKind, false)) {
    const timeoutS = get(cmd, args, 'timeout', intKind(1, 86_400), 600);
    const deadline = Date.now() + timeoutS * 1000;
    out(`VM ${pos[0]} draining: waiting for its QEMU to go …\n`);
    for (;;) {
      const g = await request(socket, 'GET', `/v1/vms/${vm(0)}`).catch(() => null);
      if (g && g.status === 404) {
        a = { status: 200, body: { vm: pos[0], state: 'removed' } };
        break;
      }
      if (Date.now() > deadline) {
        err(`vugpu ctl drain: VM ${pos[0]} still has its QEMU after ${timeoutS} s (it stays draining).\n`);
        return 1;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  if (json) {
    out(`${JSON.stringify(a.body, null, 2)}\n`);
    return 0;
  }
  out(render(verb, a.body, pos));
  return 0;
}

interface VmRow {
  name: string; mode: string; state: string; sliceBytes: number; weight: number | null; clients: number; socket: string; pending: number;
  counters: Record<string, number>;
}

function render(verb: string, b: Record<string, unknown>, pos: string[]): string {
  switch (verb) {
    case 'status': {
      const vram = b.vram as Record<string, number>;
      const eng = b.engine as { backend?: string; device?: string } | null;
      const pd = b.programDevice as { losses: number; rebuilds: number; lastLoss: string } | null | undefined;
      return [
        `vugpu pid ${b.pid}, API ${b.api}, policy ${b.policy}, engine ${eng?.backend ?? '?'} (${eng?.device ?? 'none'})`,
        `VRAM ${formatSize(vram.totalBytes!)}: slices ${formatSize(vram.sliceAreaBytes!)}, free ${formatSize(vram.freeBytes!)} (largest ${formatSize(vram.largestFreeBytes!)})`,
        `VMs ${b.vms} (${b.attached} with a QEMU attached)`,
        ...(pd && pd.losses > 0 ? [`program device lost ${pd.losses} time(s), rebuilt ${pd.rebuilds}; last: ${pd.lastLoss}`] : []),
      ].join('\n') + '\n';
    }
    case 'list': {
      const vms = b.vms as VmRow[];
      if (vms.length === 0) return 'no VMs\n';
      const rows = [['NAME', 'MODE', 'STATE', 'SLICE', 'WEIGHT', 'CLIENTS', 'MMIO', 'DEVICE-S', 'SOCKET']];
      for (const v of vms) {
        const c = v.counters;
        rows.push([v.name, v.mode, v.state, formatSize(v.sliceBytes), v.weight === null ? '-' : String(v.weight), String(v.clients),
          String((c.mmioReads ?? 0) + (c.mmioWrites ?? 0)), ((c.deviceNs ?? 0) / 1e9).toFixed(3), v.socket]);
      }
      const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
      return rows.map((r) => r.map((x, i) => (i === r.length - 1 ? x : x.padEnd(w[i]!))).join('  ')).join('\n') + '\n';
    }
    case 'add': {
      const v = b.vm as VmRow;
      return `VM ${v.name} added: ${v.mode}, slice ${formatSize(v.sliceBytes)}, weight ${v.weight}, socket ${v.socket}\n`;
    }
    case 'remove':
      return `VM ${b.removed} removed${b.hadClient ? ' (its QEMU lost the device)' : ''}\n`;
    case 'drain':
      return b.state === 'removed' ? `VM ${pos[0]} removed (no QEMU was attached)\n` : `VM ${pos[0]} draining: it is removed when its QEMU goes\n`;
    case 'weight': {
      const v = b.vm as VmRow;
      return `VM ${v.name} weight ${v.weight}\n`;
    }
    case 'policy':
      return b.switched === undefined
        ? `policy ${b.policy}${b.active !== b.policy ? ` (switching from ${b.active})` : ''}; available: ${(b.policies as string[]).join(', ')}\n`
        : `policy ${b.policy}${b.switched ? '' : ' (from the end of the submission on the device)'}\n`;
  }
  return `${JSON.stringify(b)}\n`;
}

/** End a message as a sentence (no "?." doubles). */
function sentence(m: string): string {
  return /[.?!]$/.test(m) ? m : `${m}.`;
}
