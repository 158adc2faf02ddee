// The native twin: guest/bench built for this host and run against a vugpu server with no VM.
// Its runtime backend is a user-space driver (the same driver core as the guest's kernel
// module) that reaches the server as a vfio-user client (guest/runtime/vg_backend_host.c).
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseRecord } from '../vm/console.ts';
import { toBenchRecord, type BenchRecord } from './records.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** Build (or bring up to date) the host binary; returns its path. Throws with make's output. */
export function buildNativeTwin(outDir = path.join(repoRoot, 'build/native-twin')): string {
  const r = spawnSync('make', ['-s', '-C', path.join(repoRoot, 'guest/bench'), 'host', `O=${outDir}`], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (r.status !== 0) {
    throw new Error(`building the native twin failed (make host):\n${r.stdout ?? ''}${r.stderr ?? ''}${r.error?.message ?? ''}`);
  }
  return path.join(outDir, 'vugpu-bench-host');
}

export interface TwinRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  records: BenchRecord[];
  /** Lines that looked like records but did not parse, and stderr. */
  problems: string[];
  output: string[];
}

/** Run the twin once (one benchmark process) against `socket`. */
export function runNativeTwin(binary: string, socket: string, args: string[], timeoutMs = 180_000,
                              env: Record<string, string> = {}): Promise<TwinRun> {
  return new Promise((resolve) => {
    const child = spawn(binary, args, {
      env: { ...process.env, ...env, VUGPU_SOCKET: socket },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output: string[] = [];
    const problems: string[] = [];
    const records: BenchRecord[] = [];
    let partial = '';
    const onOut = (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        output.push(line);
        const rec = parseRecord(line, output.length - 1);
        if (!rec) continue;
        if (rec.kind === 'PARSE_ERROR') problems.push(line);
        if (rec.kind !== 'BENCH') continue;
        const b = toBenchRecord(rec.data);
        if (typeof b === 'string') problems.push(`bad record (${b}): ${line}`);
        else records.push(b);
      }
    };
    child.stdout.setEncoding('utf8').on('data', onOut);
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      for (const l of c.split('\n')) if (l) problems.push(`stderr: ${l}`);
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => problems.push(`spawn: ${e.message}`));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (partial) onOut('\n');
      resolve({ code, signal, records, problems, output });
    });
  });
}
