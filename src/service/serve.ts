// What `vugpu serve` adds around a Vugpu to run as a service: the start-up is checked to the
// end (metrics port bound, control socket listening) before systemd hears READY=1; the
// watchdog is fed from the event loop (a stuck loop stops the pings and systemd restarts us);
// start-up failures are one sentence (StartError: exit 1), never a stack trace.
import util from 'node:util';
import type { Vugpu } from '../server.ts';
import { logger } from '../log.ts';
import { SystemdFdStore } from '../persist/fdstore.ts';
import { StartError } from './config.ts';
import { ControlCounters, registerServiceMetrics, startControlServer, type ControlServer } from './control.ts';

/** "listen on /x failed: errno 13" → "listen on /x failed: permission denied (EACCES)". */
export function readable(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  return msg.replace(/errno (\d+)/g, (_m, n: string) => {
    try {
      return `${util.getSystemErrorMessage(-Number(n)).toLowerCase()} (${util.getSystemErrorName(-Number(n))})`;
    } catch {
      return `errno ${n}`;
    }
  });
}

export interface Service {
  control: ControlServer | null;
  /** Tell systemd we are stopping and close the control socket (the caller closes the Vugpu). */
  stop(): Promise<void>;
}

export interface ServiceOptions {
  controlSocket?: string;
  /** Send READY=1 and feed the watchdog (false when another part, e.g. the restartable
   * server, talks to systemd). Default: when NOTIFY_SOCKET is set. */
  notify?: boolean;
  /** Take the control socket over from a live predecessor (a live upgrade's successor). */
  takeOver?: boolean;
}

/** Finish starting `v` as a service; on failure close nothing but throw StartError. */
export async function startService(v: Vugpu, o: ServiceOptions): Promise<Service> {
  try {
    await v.started();
  } catch (err) {
    throw new StartError(`vugpu serve: cannot start: ${readable(err)}.`);
  }
  const counters = new ControlCounters();
  registerServiceMetrics(v, counters);
  let control: ControlServer | null = null;
  if (o.controlSocket !== undefined) {
    try {
      control = await startControlServer(v, { path: o.controlSocket, takeOver: o.takeOver }, counters);
    } catch (err) {
      throw new StartError(`vugpu serve: cannot start: ${readable(err)}.`);
    }
  }
  const sd = o.notify === false ? null : SystemdFdStore.fromEnv();
  const n = v.vmConfigs.size;
  sd?.ready(`serving ${n} VM${n === 1 ? '' : 's'}${control ? `, control ${control.path}` : ''}`);
  sd?.startWatchdog();
  logger.info({ vms: n, control: control?.path ?? null, systemd: sd !== null }, 'vugpu ready');
  return {
    control,
    async stop() {
      sd?.stopping();
      await control?.close();
    },
  };
}
