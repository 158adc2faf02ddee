// The standby (`serve --standby`): a second server process with the same command line waits in
// the keeper, warmed up, and takes the VMs over the moment the serving one dies — so a crash
// costs a restore, not a process start. This file has both sides: the serving process keeps one
// started (Standbys), and the standby process waits for its turn (standBy).
import { spawn, type ChildProcess } from 'node:child_process';
import { logger } from '../log.ts';
import type { VugpuOptions } from '../server.ts';
import type { Attached, KeeperClient } from './keeper-client.ts';
import { settleHeap, warmUp } from './warm-up.ts';

/** A standby is (re)started at most this often. */
const STANDBY_EVERY_MS = 5000;
/** ... and this long after an adoption. */
const STANDBY_AFTER_ADOPT_MS = 2000;
/** The environment variable that makes a server process a standby: the pid it stands by. */
const STANDBY_ENV = 'VUGPU_STANDBY';

/** Start a server process with this one's command line (or `argv`), with `env` added. */
export function spawnSelf(argv: string[] | undefined, env: Record<string, string>): ChildProcess {
  const cmd = argv ?? [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: 'inherit', env: { ...process.env, ...env } });
  child.unref();
  return child;
}

/** The serving process's side: keeps a standby started (again after it was used or died). */
export class Standbys {
  private last = 0;
  private readonly argv: string[] | undefined;
  /** False once this server stops: no standby is started any more. */
  private readonly serving: () => boolean;

  constructor(argv: string[] | undefined, serving: () => boolean) {
    this.argv = argv;
    this.serving = serving;
  }

  /** After an adoption the guests are catching up: a standby's start (a whole Node process)
   * would compete with them on a small host, so the first comes a little later. */
  afterAdoption(): void {
    this.last = performance.now() - STANDBY_EVERY_MS + STANDBY_AFTER_ADOPT_MS;
  }

  /** Start (again) the standby process, at most every STANDBY_EVERY_MS. */
  start(): void {
    const wait = Math.max(0, this.last + STANDBY_EVERY_MS - performance.now());
    setTimeout(() => {
      if (!this.serving()) return;
      this.last = performance.now();
      const child = spawnSelf(this.argv, { [STANDBY_ENV]: String(process.pid) });
      logger.info({ standby: child.pid }, 'standby server started');
    }, wait).unref();
  }
}

/** The server this process stands by (from its environment, which is cleared so that processes
 * it starts are not standbys), or 0 when it is not a standby. */
export function standbyOf(): number {
  const pid = Number(process.env[STANDBY_ENV] ?? '0');
  delete process.env[STANDBY_ENV];
  return pid > 0 ? pid : 0;
}

/** The standby process's side, once the keeper put it in line: warm up, then wait until the
 * server dies (the VMs are this process's) or the keeper retires it (exit quietly). */
export async function standBy(k: KeeperClient, opts: VugpuOptions, server: number): Promise<Attached> {
  warmUp(opts);
  settleHeap();
  logger.info({ server, pid: process.pid }, 'standby: waiting to take over if the server dies');
  try {
    return await k.adopted(0);
  } catch {
    logger.info({ pid: process.pid }, 'standby retired');
    process.exit(0);
  }
}
