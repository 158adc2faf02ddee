#!/usr/bin/env node
// vugpu command line: serve | ctl | demo | trace | setup. Run with the pinned Node 24 (npm scripts do).
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Vugpu, VugpuOptions } from './server.ts';
import type { PersistOptions } from './persist/serve.ts';
import { logger } from './log.ts';
// Loaded up front: only what checking a command line needs (the engine loads when serving).
import { StartError, UsageError, usageLines } from './service/config.ts';
import { SERVE_OPTIONS, serveSettings } from './service/serve-config.ts';
import { applyLogSettings } from './service/logfmt.ts';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const USAGE = `usage:
  vugpu serve [--config FILE] [options]   serve VMs over vfio-user; options (config-file keys without --):
${usageLines(SERVE_OPTIONS, '      ')}
  vugpu ctl COMMAND …                     drive a running server (vugpu ctl --help)
  vugpu k8s-device-plugin [--slots 4x256M …] [--control-socket PATH] [--kubelet-dir DIR] [--cdi-dir DIR]
                                          vGPU slots as Kubernetes extended resources (docs/scale-out.md)
  vugpu upgrade --state-dir DIR | --keeper SOCKET   (live upgrade: a new server takes over)
  vugpu keeper  --socket PATH                       (the fd keeper; serve starts it itself)
  vugpu trace  summary FILE | dump FILE [--limit N]   (a --trace recording)
  vugpu demo   [--mode pt] [--json bench/results/demo/cpu.json]
  vugpu setup  install QEMU (>= 10.1 with vfio-user-pci), the guest kernel and image
  vugpu bundle [--out FILE] [--with-qemu] [--verify]  one offline archive for GPU hosts (scripts/bundle.sh --help)`;

async function serve(argv: string[]): Promise<number> {
  // A bad flag, config key or value: one sentence and exit 2 before anything starts.
  const s = serveSettings(argv);
  applyLogSettings(s);
  if (s.persist) {
    return serveRestartable(s.options, { ...s.persist, successor: process.env.VUGPU_SUCCESSOR === '1' }, s.controlSocket);
  }
  const { Vugpu } = await import('./server.ts');
  const { readable, startService } = await import('./service/serve.ts');
  let vugpu: Vugpu;
  try {
    vugpu = new Vugpu(s.options);
  } catch (err) {
    throw new StartError(`vugpu serve: cannot start: ${readable(err)}.`);
  }
  let service;
  try {
    service = await startService(vugpu, { controlSocket: s.controlSocket });
  } catch (err) {
    vugpu.close();
    throw err;
  }
  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      logger.info({ signal: sig }, 'shutting down');
      void service.stop().finally(() => {
        vugpu.close();
        resolve();
      });
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  return 0;
}

/** serve --state-dir: the restartable server (src/persist/serve.ts). Exits 2 with one sentence
 * when it cannot adopt what a previous server left (the fds stay with the keeper). */
async function serveRestartable(options: VugpuOptions, p: PersistOptions, controlSocket?: string): Promise<number> {
  const { RestartableServer, AdoptError } = await import('./persist/serve.ts');
  delete process.env.VUGPU_SUCCESSOR; // not for the successor's own successor
  // Loaded before adopting, not after: a successor's first minutes of serving are the guests'
  // pause, and compiling these modules then cost it tens of milliseconds.
  const { startService } = await import('./service/serve.ts');
  let rs;
  try {
    rs = await RestartableServer.open(options, p);
  } catch (err) {
    if (err instanceof AdoptError) {
      logger.error({ event: 'adopt-refused' }, err.message);
      process.stderr.write(`vugpu: ${err.message}\n`);
      return exitNow(2);
    }
    throw err;
  }
  // The control API on this process's Vugpu (a successor takes the socket over).
  const service = await startService(rs.vugpu, { controlSocket, notify: false, takeOver: p.successor });
  const stop = (sig: string) => {
    logger.info({ signal: sig }, 'shutting down');
    void service.stop().finally(() => {
      rs.close();
      void exitNow(0);
    });
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGUSR2', () => rs.upgrade());
  return exitNow(await rs.exit);
}

/** Exit now (watchers and timers would keep the process alive), once the log is out. */
async function exitNow(code: number): Promise<number> {
  await new Promise((r) => setTimeout(r, 20));
  process.exit(code);
}

async function upgrade(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { 'state-dir': { type: 'string' }, keeper: { type: 'string' } } });
  const socket = values.keeper ?? (values['state-dir'] ? path.join(values['state-dir'], 'keeper.sock') : undefined);
  if (!socket) throw new Error('upgrade needs --state-dir DIR or --keeper SOCKET');
  const { KeeperClient } = await import('./persist/keeper-client.ts');
  const k = KeeperClient.tryConnect(socket);
  if (!k) {
    process.stderr.write(`vugpu: no fd keeper answers on ${socket}\n`);
    return 2;
  }
  try {
    await k.hello('control');
    const r = await k.upgrade();
    process.stdout.write(`upgraded: pid ${r.pid} serves now; guests paused ${r.pauseMs === null ? '?' : r.pauseMs.toFixed(1)} ms\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`vugpu: upgrade failed: ${(err as Error).message}\n`);
    return 1;
  } finally {
    k.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return serve(rest);
    case 'upgrade':
      return upgrade(rest);
    case 'keeper': {
      const { values } = parseArgs({ args: rest, options: { socket: { type: 'string' } } });
      if (!values.socket) throw new Error('keeper needs --socket PATH');
      const { runKeeper } = await import('./persist/keeper.ts');
      return runKeeper(values.socket);
    }
    case 'ctl': {
      const { ctlMain } = await import('./service/ctl.ts');
      return ctlMain(rest);
    }
    case 'k8s-device-plugin': {
      const k8s = await import('./service/k8s/cli.ts');
      return k8s.main(rest);
    }
    case 'setup':
      (await import('./service/commands.ts')).checkCommandLine('setup', rest);
      return spawnSync('bash', [path.join(repoRoot, 'scripts/setup.sh'), ...rest], { stdio: 'inherit' }).status ?? 1;
    case 'bundle': {
      // A bundle runs from its archive and carries no scripts/: bundles are made in a checkout.
      const script = path.join(repoRoot, 'scripts/bundle.sh');
      if (!fs.existsSync(script)) throw new StartError(`vugpu bundle runs in a vugpu checkout (no ${script} here)`);
      return spawnSync('bash', [script, ...rest], { stdio: 'inherit' }).status ?? 1;
    }
    case 'trace': {
      (await import('./service/commands.ts')).checkCommandLine('trace', rest);
      const trace = await import('./trace/cli.ts');
      return trace.main(rest);
    }
    case 'demo': {
      (await import('./service/commands.ts')).checkCommandLine('demo', rest);
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
    if (err instanceof UsageError || err instanceof StartError) {
      process.stderr.write(`${err.message}\n`);
      process.exitCode = err instanceof UsageError ? 2 : 1;
      return;
    }
    // A subcommand that parses with node:util parseArgs: its errors in the same one-sentence form.
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_')) {
      const msg = (err as Error).message;
      const opt = /'([^' ]+)/.exec(msg)?.[1] ?? '';
      const what = code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? `unknown option ${opt}`
        : code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' ? `${opt} needs a value`
          : `unexpected argument ${opt}`;
      process.stderr.write(`vugpu ${process.argv[2]}: ${what} (see vugpu --help).\n`);
      process.exitCode = 2;
      return;
    }
    // Not a user's mistake: a bug or an unexpected failure keeps its stack in the log.
    logger.error({ err }, err instanceof Error ? err.message : String(err));
    process.exitCode = 1;
  },
);
