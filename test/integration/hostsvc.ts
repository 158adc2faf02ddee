// A container with a real systemd (and libvirtd) for the service tests, driven through
// scripts/hostsvc.sh: the project's trixie rootfs plus a cached package layer, booted with
// systemd as PID 1 in its own namespaces on a throwaway overlay. The checkout is at /opt/vugpu
// inside; the container shares the host's network and the host reaches its files through
// /proc/<init>/root.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SCRIPT = path.resolve(import.meta.dirname, '../../scripts/hostsvc.sh');

export interface Run {
  code: number;
  out: string;
  err: string;
}

function run(args: string[], timeoutMs = 120_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile('bash', [SCRIPT, ...args], { timeout: timeoutMs, maxBuffer: 64 << 20 }, (e, out, err) => {
      resolve({ code: e ? Number((e as { code?: number }).code ?? 1) : 0, out, err });
    });
  });
}

/** Why this host cannot run the container at all (then the test says so and skips), or null. */
export function cannotRun(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (mounts and namespaces)';
  if (!fs.existsSync('/sys/fs/cgroup/unified/cgroup.procs') && !fs.existsSync('/sys/fs/cgroup/cgroup.procs')) {
    return 'needs a cgroup2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified)';
  }
  return null;
}

/** Build or reuse the cached package layer (libvirt, the addon's libraries). */
export async function ensureLayer(): Promise<void> {
  const r = await run(['layer'], 600_000);
  if (r.code !== 0) throw new Error(`scripts/hostsvc.sh layer failed (${r.code}):\n${r.out}\n${r.err}`);
}

export class Container {
  readonly dir: string;
  readonly init: number;

  private constructor(dir: string, init: number) {
    this.dir = dir;
    this.init = init;
  }

  /** Boot and wait until systemd reports running (or degraded). */
  static async start(name: string, timeoutMs = 60_000): Promise<Container> {
    const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), `vugpu-${name}-`)), 'ct');
    const r = await run(['start', dir]);
    if (r.code !== 0) throw new Error(`container start failed: ${r.err}`);
    const c = new Container(dir, Number(r.out.trim()));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await c.exec('systemctl', 'is-system-running');
      const state = s.out.trim();
      if (state === 'running' || state === 'degraded') return c;
      if (Date.now() > deadline) throw new Error(`systemd in the container is still "${state}" after ${timeoutMs} ms: ${s.err}`);
      await new Promise((res) => setTimeout(res, 250));
    }
  }

  exec(...cmd: string[]): Promise<Run> {
    return run(['exec', this.dir, ...cmd]);
  }

  /** A shell command inside; rejects when it fails. */
  async sh(script: string): Promise<string> {
    const r = await run(['exec', this.dir, 'sh', '-c', script]);
    if (r.code !== 0) throw new Error(`in the container: ${script}\n→ exit ${r.code}\n${r.out}\n${r.err}`);
    return r.out;
  }

  /** A unit's properties (systemctl show). */
  async show(unit: string, ...props: string[]): Promise<Record<string, string>> {
    const out = await this.sh(`systemctl show ${unit} ${props.map((p) => `-p ${p}`).join(' ')}`);
    return Object.fromEntries(out.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  }

  /** A path inside the container as the host sees it. */
  hostPath(p: string): string {
    return `/proc/${this.init}/root${p}`;
  }

  async stop(): Promise<void> {
    await run(['stop', this.dir]);
    fs.rmSync(path.dirname(this.dir), { recursive: true, force: true });
  }
}

/** Poll until fn resolves true. */
export async function until(fn: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The code block after `<!-- tested: NAME -->` in a markdown file, `sudo ` dropped (the tests
 * run as root): the README's copy-paste examples are what the tests run. */
export function readmeBlock(name: string, file = path.resolve(import.meta.dirname, '../../README.md')): string {
  const text = fs.readFileSync(file, 'utf8');
  const at = text.indexOf(`<!-- tested: ${name} -->`);
  if (at < 0) throw new Error(`${file} has no block marked <!-- tested: ${name} -->`);
  const m = /```[a-z]*\n([\s\S]*?)```/.exec(text.slice(at));
  if (!m) throw new Error(`no code block after <!-- tested: ${name} --> in ${file}`);
  return m[1]!.replace(/^sudo /gm, '');
}
