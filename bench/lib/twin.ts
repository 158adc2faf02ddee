// The native twin of a guest's programs (guest/programs built for the host: the runtime's host
// backend, the guest's driver core over vfio-user) as benchmarks drive it: its binary, the
// modules it loads, and a running twin's console records. bench:neighbour and bench:llama's soak
// (its hostile tenant) launch the endless program through it.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { LineSplitter, parseRecord, type GuestRecord } from '../../src/vm/console.ts';
import { repoRoot } from './common.ts';

/** The twin's binary: the bundle's static one, else built here (make -C guest/programs host). */
export function twinBinary(): string {
  const bundled = path.join(repoRoot, 'twin/vugpu-programs-host');
  if (fs.existsSync(bundled)) return bundled;
  const out = path.join(repoRoot, 'build/native-twin');
  const r = spawnSync('make', ['-s', '-C', path.join(repoRoot, 'guest/programs'), 'host', `O=${out}`], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`building the twin (make -C guest/programs host) failed:\n${r.stdout}${r.stderr}`);
  return path.join(out, 'vugpu-programs-host');
}

/** The modules the twin loads, in the layout vugpu-programs expects (DIR/x.spv, DIR/builtins/),
 *  made under `tmp`. */
export function twinModules(tmp: string): string {
  const spirv = path.join(repoRoot, 'build/spirv');
  const endless = path.join(spirv, 'guest/programs/endless.spv');
  const builtins = path.join(spirv, 'native/shaders/builtins');
  if (!fs.existsSync(endless) || !fs.existsSync(path.join(builtins, 'nop.spv'))) throw new Error(`no ${endless} or ${builtins}/nop.spv: run scripts/build-spirv.sh`);
  const d = path.join(tmp, 'modules');
  fs.mkdirSync(d, { recursive: true });
  if (!fs.existsSync(path.join(d, 'endless.spv'))) fs.symlinkSync(endless, path.join(d, 'endless.spv'));
  if (!fs.existsSync(path.join(d, 'builtins'))) fs.symlinkSync(builtins, path.join(d, 'builtins'));
  return d;
}

export interface Twin {
  records: { rec: GuestRecord; t: number }[];
  lines: string[];
  closed: Promise<number | null>;
  kill(sig: NodeJS.Signals): void;
}

/** A twin on a VM's socket; its console records arrive with this host's time. */
export function twin(bin: string, socket: string, args: string[]): Twin {
  const child = spawn(bin, args, { env: { ...process.env, VUGPU_SOCKET: socket }, stdio: ['ignore', 'pipe', 'pipe'] });
  const records: Twin['records'] = [];
  const lines: string[] = [];
  const split = new LineSplitter((l) => {
    lines.push(l);
    const rec = parseRecord(l, lines.length - 1);
    if (rec) records.push({ rec, t: performance.now() });
  });
  child.stdout.setEncoding('utf8').on('data', (c: string) => split.push(c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => lines.push(...c.split('\n').filter(Boolean).map((l) => `stderr: ${l}`)));
  const closed = new Promise<number | null>((r) => child.on('close', (code) => { split.flush(); r(code); }));
  return { records, lines, closed, kill: (sig) => child.kill(sig) };
}
