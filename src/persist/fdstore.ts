// systemd's file descriptor store as the fd keeper (a unit with Type=notify and
// FileDescriptorStoreMax=): fds are deposited with `FDSTORE=1` + `FDNAME=<key>` sd_notify
// datagrams carrying them (SCM_RIGHTS) and dropped with `FDSTOREREMOVE=1`; after a restart
// systemd hands them back as LISTEN_FDS (from fd 3) named by LISTEN_FDNAMES. FDPOLL=0: systemd
// must not drop a stored socket by itself when QEMU hangs up (we remove it when we see that).
// FDNAME allows printable ASCII except ':' (the LISTEN_FDNAMES separator), so keys are escaped.
import { native } from '../native.ts';
import { logger } from '../log.ts';

const enc = new TextEncoder();

/** `conn:vm0` → `conn%3Avm0` (reversible; FDNAME must not contain ':'). */
export function encodeFdName(key: string): string {
  return key.replace(/%/g, '%25').replace(/:/g, '%3A');
}

export function decodeFdName(name: string): string {
  return name.replace(/%3A/gi, ':').replace(/%25/g, '%');
}

/** FDNAME's rule (systemd fdname_is_valid): 1–255 printable ASCII characters, no ':'. */
export function validFdName(name: string): boolean {
  return name.length > 0 && name.length <= 255 && /^[\x21-\x7e]+$/.test(name) && !name.includes(':');
}

export class SystemdFdStore {
  readonly notifySocket: string;
  private watchdog: NodeJS.Timeout | null = null;
  /** Names stored by this process or adopted: systemd keeps every fd sent under a name, so a
   * replaced one is removed first. */
  private readonly stored = new Set<string>();

  constructor(notifySocket: string) {
    this.notifySocket = notifySocket;
  }

  /** The store of the service we run in, or null when not started by systemd with a notify socket. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): SystemdFdStore | null {
    const s = env.NOTIFY_SOCKET;
    return s ? new SystemdFdStore(s) : null;
  }

  /** Fds systemd passed us (LISTEN_PID must be ours), by key. The env variables are removed so
   * children do not take them for theirs. */
  static adopted(env: NodeJS.ProcessEnv = process.env, pid = process.pid): Map<string, number> {
    const out = new Map<string, number>();
    const n = Number(env.LISTEN_FDS ?? '0');
    if (!(Number.isInteger(n) && n > 0)) return out;
    if (env.LISTEN_PID !== undefined && env.LISTEN_PID !== '' && Number(env.LISTEN_PID) !== pid) return out;
    const names = (env.LISTEN_FDNAMES ?? '').split(':');
    for (let i = 0; i < n; i++) {
      const name = names[i] ?? '';
      const fd = 3 + i;
      const key = decodeFdName(name);
      // Close-on-exec, as all our fds are: they must not leak into the keeper or QEMU.
      if (key === '' || key === 'unknown' || key === 'stored') {
        logger.warn({ fd, name }, 'systemd passed an unnamed fd: closed');
        native.close(fd);
        continue;
      }
      out.set(key, fd);
    }
    delete env.LISTEN_FDS;
    delete env.LISTEN_PID;
    delete env.LISTEN_FDNAMES;
    return out;
  }

  /** Send one notify datagram (with fds). Returns false (and logs) if systemd did not take it. */
  notify(text: string, fds?: number[]): boolean {
    const r = native.sendDatagram(this.notifySocket, enc.encode(text), fds);
    if (r < 0) {
      logger.error({ errno: -r, notify: text.split('\n')[0] }, 'sd_notify failed');
      return false;
    }
    return true;
  }

  put(key: string, fd: number): boolean {
    const name = encodeFdName(key);
    if (!validFdName(name)) {
      logger.error({ key }, 'fd key cannot be an FDNAME');
      return false;
    }
    if (this.stored.has(name)) this.notify(`FDSTOREREMOVE=1\nFDNAME=${name}`);
    this.stored.add(name);
    return this.notify(`FDSTORE=1\nFDNAME=${name}\nFDPOLL=0`, [fd]);
  }

  remove(keys: string[]): void {
    for (const k of keys) {
      const name = encodeFdName(k);
      this.stored.delete(name);
      this.notify(`FDSTOREREMOVE=1\nFDNAME=${name}`);
    }
  }

  /** What systemd handed back is stored under these names. */
  adoptedNames(keys: Iterable<string>): void {
    for (const k of keys) this.stored.add(encodeFdName(k));
  }

  ready(status: string): void {
    this.notify(`READY=1\nSTATUS=${status}\nMAINPID=${process.pid}`);
  }

  status(status: string): void {
    this.notify(`STATUS=${status}`);
  }

  /** Keep systemd's watchdog (WatchdogSec=) fed at half its period. */
  startWatchdog(env: NodeJS.ProcessEnv = process.env): void {
    const usec = Number(env.WATCHDOG_USEC ?? '0');
    if (!(usec > 0)) return;
    if (env.WATCHDOG_PID && Number(env.WATCHDOG_PID) !== process.pid) return;
    this.watchdog = setInterval(() => this.notify('WATCHDOG=1'), Math.max(50, usec / 2000));
    this.watchdog.unref();
  }

  stopping(): void {
    if (this.watchdog) clearInterval(this.watchdog);
    this.notify('STOPPING=1');
  }
}
