// Runs `vugpu serve` (src/cli.ts) as a child process for integration tests and benchmarks:
// the server under test is the real one, in its own process, as a user would run it.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LineSplitter } from './console.ts';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface ServerOptions {
  socket: string;
  /** Extra `serve` arguments. */
  args?: string[];
  readyTimeoutMs?: number;   // default 30 s
  env?: Record<string, string>;
}

/** The pinned Node 24 (type stripping), wherever this process was started from. */
export function nodeBinary(): string {
  const pinned = path.join(repoRoot, 'node_modules/.bin/node');
  return fs.existsSync(pinned) ? pinned : process.execPath;
}

export class ServerProcess {
  readonly child: ChildProcess;
  readonly socket: string;
  readonly output: string[] = [];   // stdout and stderr lines (pino JSON on stderr)
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(opts: ServerOptions) {
    this.socket = opts.socket;
    // A stale socket file would look like readiness: remove it (the server would anyway).
    if (isSocket(opts.socket)) fs.unlinkSync(opts.socket);
    const argv = [path.join(repoRoot, 'src/cli.ts'), 'serve', '--socket', opts.socket, ...(opts.args ?? [])];
    this.child = spawn(nodeBinary(), argv, {
      cwd: repoRoot,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines = new LineSplitter((l) => this.output.push(l));
    this.child.stdout!.setEncoding('utf8').on('data', (c: string) => lines.push(c));
    this.child.stderr!.setEncoding('utf8').on('data', (c: string) => lines.push(c));
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        lines.flush();
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
      this.child.on('error', (e) => {
        this.output.push(`spawn failed: ${e.message}`);
        this.exitInfo = { code: null, signal: null };
        resolve(this.exitInfo);
      });
    });
  }

  get alive(): boolean {
    return this.exitInfo === null;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Resolves once the socket is accepting; rejects (with the server's output) if it exits or times out. */
  async ready(timeoutMs = 30_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      if (!this.alive) throw new Error(`vugpu serve exited (${JSON.stringify(this.exitInfo)}) before listening:\n${this.tail()}`);
      if (isSocket(this.socket)) {
        // bind() creates the file just before listen(): give it a moment.
        await sleep(100);
        return;
      }
      await sleep(50);
    }
    throw new Error(`vugpu serve did not create ${this.socket} within ${timeoutMs} ms:\n${this.tail()}`);
  }

  /** Resolves true once an output line at index ≥ from matches re, false after timeoutMs. */
  async waitForOutput(re: RegExp, from = 0, timeoutMs = 5000): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      for (let i = from; i < this.output.length; i++) if (re.test(this.output[i]!)) return true;
      if (performance.now() >= deadline || !this.alive) return false;
      await sleep(20);
    }
  }

  /** Last lines of the server's output, for failure messages. */
  tail(n = 40): string {
    return this.output.slice(-n).join('\n');
  }

  /** Server output lines at pino level ≥ error (50). */
  errorLines(): string[] {
    return this.output.filter((l) => {
      try {
        const rec = JSON.parse(l) as { level?: number };
        return typeof rec.level === 'number' && rec.level >= 50;
      } catch {
        return false;
      }
    });
  }

  /** SIGTERM, then SIGKILL after graceMs. */
  async stop(graceMs = 5000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (!this.alive) return this.exitInfo!;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    const info = await this.exited;
    clearTimeout(timer);
    return info;
  }
}

/**
 * Every `vugpu serve` process of one restartable server (the first, its standbys, successors,
 * cold restarts) writing into pipes read here: one ordered log of all its generations, whose
 * JSON lines are its records.
 */
export class ServerLineage {
  readonly lines: string[] = [];
  readonly procs: ChildProcess[] = [];
  private args: string[] = [];

  /** Starts one more generation: `vugpu serve` with these arguments (default: the last one's). */
  start(args = this.args): ChildProcess {
    this.args = args;
    const p = spawn(nodeBinary(), [path.join(repoRoot, 'src/cli.ts'), 'serve', ...args], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    const split = new LineSplitter((l) => this.lines.push(l));
    p.stdout!.setEncoding('utf8').on('data', (c: string) => split.push(c));
    p.stderr!.setEncoding('utf8').on('data', (c: string) => split.push(c));
    this.procs.push(p);
    return p;
  }

  /** The JSON records among the lines from index `from` on. */
  records(from = 0): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const l of this.lines.slice(from)) {
      try {
        out.push(JSON.parse(l) as Record<string, unknown>);
      } catch {
        // not a log record
      }
    }
    return out;
  }

  /** The first record from line `from` on that pred accepts; throws (with the log's tail) after ms. */
  async waitFor(pred: (r: Record<string, unknown>) => boolean, from: number, ms: number): Promise<Record<string, unknown>> {
    const end = performance.now() + ms;
    for (;;) {
      const r = this.records(from).find(pred);
      if (r) return r;
      if (performance.now() > end) throw new Error(`server log: nothing matched within ${ms} ms\n${this.tail()}`);
      await sleep(50);
    }
  }

  tail(n = 30): string {
    return this.lines.slice(-n).join('\n');
  }
}

export async function startServer(opts: ServerOptions): Promise<ServerProcess> {
  const s = new ServerProcess(opts);
  try {
    await s.ready(opts.readyTimeoutMs);
  } catch (err) {
    await s.stop(1000);
    throw err;
  }
  return s;
}

export function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
