// The native twin (guest/bench built for the host) for tests that drive the real server
// without a VM: built once per test file into a temporary directory, removed afterwards.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Build vugpu-bench-host in beforeAll: bin() is its path, dir() the temporary directory. */
export function useTwin(prefix: string): { bin: () => string; dir: () => string } {
  let dir = '';
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    const b = spawnSync('make', ['-s', '-C', path.join(ROOT, 'guest/bench'), 'host', `O=${dir}`], { encoding: 'utf8' });
    if (b.status !== 0) throw new Error(`building the native twin failed:\n${b.stdout}\n${b.stderr}`);
  }, 120_000);
  afterAll(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });
  return { bin: () => path.join(dir, 'vugpu-bench-host'), dir: () => dir };
}
