// Boots a test guest in QEMU (the binary named by the setup manifest) with zero or more
// vfio-user devices, captures its serial console and QEMU's stderr, and parses the guest's
// `VUGPU-*` records. Every run is bounded twice: a timer here (SIGKILL to QEMU's process group)
// and coreutils `timeout -s KILL` around QEMU, in case this process dies first.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { logger } from '../log.ts';
import { accelArgs, chooseAccel, type Accel, type AccelChoice } from './accel.ts';
import { LineSplitter, parseRecord, type CheckResult, type GuestRecord } from './console.ts';
import { loadManifest, type Manifest } from './manifest.ts';
import { isSocket } from './server-process.ts';

export interface BootOptions {
  /** vfio-user sockets; one vfio-user-pci device each. The servers must already be listening. */
  sockets?: string[];
  /** Guest program (vugpu.run=); default /test.sh in the initramfs. */
  run?: string;
  /** Its arguments (vugpu.args=, comma-joined: no spaces or commas inside one). */
  args?: string[];
  memoryMiB?: number;          // default 512 (memfd-backed, shared: vfio-user DMA needs the fds)
  cpus?: number;               // default 1
  timeoutMs?: number;          // default 180 s
  accel?: Accel | 'auto';
  /** Extra kernel command-line words. */
  append?: string[];
  /** Attach the application layer's disk (manifest.vkapp, read-only; guest/vkapp/vkapp.sh mounts it). */
  appImage?: boolean;
  /** Extra QEMU arguments. */
  qemuArgs?: string[];
  manifest?: Manifest;
  onLine?: (line: string, record: GuestRecord | null) => void;
  onStderr?: (line: string) => void;
}

export interface GuestResult {
  /** QEMU's exit status (null when killed by a signal). */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  /** kill() was called. */
  killed: boolean;
  durationMs: number;
  accel: Accel;
  qemuVersion: string;
  argv: string[];
  console: string[];
  stderr: string[];
  records: GuestRecord[];
  checks: CheckResult[];
  /** The guest program's exit status from the VUGPU-EXIT record (null if it never got there). */
  guestExit: number | null;
  /** Guest uptime (s) when init started, from VUGPU-INIT. */
  initUptime: number | null;
}

const live = new Set<GuestVm>();
process.once('exit', () => {
  for (const vm of live) vm.killNow('SIGKILL');
});

export class GuestVm {
  readonly child: ChildProcess;
  readonly argv: string[];
  readonly accel: AccelChoice;
  readonly manifest: Manifest;
  readonly console: string[] = [];
  readonly stderr: string[] = [];
  readonly records: GuestRecord[] = [];
  readonly done: Promise<GuestResult>;
  private timedOut = false;
  private killed = false;
  private exited = false;
  private readonly started = performance.now();
  private readonly waiters = new Set<{ pred: (r: GuestRecord) => boolean; resolve: (r: GuestRecord) => void }>();

  constructor(opts: BootOptions) {
    this.manifest = opts.manifest ?? loadManifest();
    this.accel = chooseAccel(opts.accel ?? 'auto');
    const memoryMiB = opts.memoryMiB ?? 512;
    const timeoutMs = opts.timeoutMs ?? 180_000;
    for (const s of opts.sockets ?? []) {
      if (!isSocket(s)) throw new Error(`vfio-user socket ${s} does not exist or is not a socket (start the server first)`);
    }
    this.argv = [...this.manifest.qemu.argv, ...qemuArgs(this.manifest, this.accel.accel, memoryMiB, opts)];
    // The backstop: coreutils timeout kills QEMU even if this process is gone.
    const backstopS = Math.ceil(timeoutMs / 1000) + 15;
    this.child = spawn('timeout', ['-s', 'KILL', String(backstopS), ...this.argv], {
      env: { ...process.env, ...this.manifest.qemu.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // own process group: kill() reaches timeout and QEMU together
    });
    live.add(this);
    logger.info({ accel: this.accel.accel, sockets: opts.sockets ?? [], run: opts.run, pid: this.child.pid }, 'guest vm starting');

    const out = new LineSplitter((line) => {
      const index = this.console.length;
      this.console.push(line);
      const rec = parseRecord(line, index);
      if (rec) {
        this.records.push(rec);
        for (const w of this.waiters) {
          if (w.pred(rec)) {
            this.waiters.delete(w);
            w.resolve(rec);
          }
        }
      }
      opts.onLine?.(line, rec);
    });
    const err = new LineSplitter((line) => {
      this.stderr.push(line);
      opts.onStderr?.(line);
    });
    this.child.stdout!.setEncoding('utf8').on('data', (c: string) => out.push(c));
    this.child.stderr!.setEncoding('utf8').on('data', (c: string) => err.push(c));

    const timer = setTimeout(() => {
      this.timedOut = true;
      logger.warn({ timeoutMs, pid: this.child.pid }, 'guest vm timed out: SIGKILL');
      this.killNow('SIGKILL');
    }, timeoutMs);

    this.done = new Promise<GuestResult>((resolve) => {
      let streams = 0;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
      const finish = (): void => {
        if (!exit || streams < 2) return;
        out.flush();
        err.flush();
        resolve(this.result(exit.code, exit.signal));
      };
      this.child.stdout!.on('close', () => { streams++; finish(); });
      this.child.stderr!.on('close', () => { streams++; finish(); });
      this.child.on('error', (e) => {
        this.stderr.push(`spawn failed: ${e.message}`);
        exit = { code: null, signal: null };
        streams = 2;
        finish();
      });
      this.child.on('exit', (code, signal) => {
        clearTimeout(timer);
        this.exited = true;
        live.delete(this);
        exit = { code, signal };
        finish();
      });
    });
    this.done.then((r) => {
      for (const w of this.waiters) w.resolve({ kind: 'VM_EXITED', data: {}, line: -1 });
      this.waiters.clear();
      logger.info({ exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut, ms: Math.round(r.durationMs) }, 'guest vm exited');
    });
  }

  /** Resolves with the first record (past or future) matching pred; with kind VM_EXITED if the VM
   * exits first. */
  waitFor(pred: (r: GuestRecord) => boolean): Promise<GuestRecord> {
    const seen = this.records.find(pred);
    if (seen) return Promise.resolve(seen);
    if (this.exited) return Promise.resolve({ kind: 'VM_EXITED', data: {}, line: -1 });
    return new Promise((resolve) => this.waiters.add({ pred, resolve }));
  }

  /** Kill QEMU (and its timeout wrapper) with a signal; resolves when it has exited. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<GuestResult> {
    this.killed = true;
    this.killNow(signal);
    return this.done;
  }

  killNow(signal: NodeJS.Signals): void {
    if (this.exited || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // already gone
    }
  }

  private result(exitCode: number | null, signal: NodeJS.Signals | null): GuestResult {
    const exitRec = this.records.find((r) => r.kind === 'EXIT');
    const initRec = this.records.find((r) => r.kind === 'INIT');
    return {
      exitCode,
      signal,
      timedOut: this.timedOut,
      killed: this.killed,
      durationMs: performance.now() - this.started,
      accel: this.accel.accel,
      qemuVersion: this.manifest.qemu.version,
      argv: this.argv,
      console: this.console,
      stderr: this.stderr,
      records: this.records,
      checks: this.records.filter((r) => r.kind === 'CHECK').map((r) => r.data as CheckResult),
      guestExit: typeof exitRec?.data.rc === 'number' ? exitRec.data.rc : null,
      initUptime: typeof initRec?.data.uptime === 'number' ? initRec.data.uptime : null,
    };
  }
}

export function bootGuest(opts: BootOptions = {}): GuestVm {
  return new GuestVm(opts);
}

/** Boot, wait for poweroff (or timeout), return the result. */
export function runGuest(opts: BootOptions = {}): Promise<GuestResult> {
  return bootGuest(opts).done;
}

function qemuArgs(m: Manifest, accel: Accel, memoryMiB: number, opts: BootOptions): string[] {
  // no_timer_check: at boot the kernel counts timer ticks across a short busy-wait to decide
  // whether the IO-APIC timer works; a TCG guest on a saturated host can see too few and panic
  // ("IO-APIC + timer doesn't work!") although the timer works. Cloud images pass it for this.
  // The clocksource is left to the kernel: its watchdog falling back from the TSC under load is
  // harmless here, and `tsc=reliable` would hide a TSC that really drifts.
  const append = ['console=ttyS0', 'panic=-1', 'quiet', 'no_timer_check'];
  if (opts.run) append.push(`vugpu.run=${word(opts.run)}`);
  if (opts.args?.length) append.push(`vugpu.args=${opts.args.map((a) => word(a, true)).join(',')}`);
  append.push(...(opts.append ?? []));
  const args = [
    ...accelArgs(accel),
    '-machine', 'q35',
    '-m', `${memoryMiB}M`,
    '-smp', String(opts.cpus ?? 1),
    // Guest RAM must be a shared memfd: QEMU passes its fd with DMA_MAP only then.
    '-object', `memory-backend-memfd,id=mem,size=${memoryMiB}M,share=on`,
    '-machine', 'memory-backend=mem',
    '-nographic', '-vga', 'none', '-monitor', 'none', '-serial', 'stdio',
    '-no-reboot', '-net', 'none',
    '-kernel', m.kernel,
    '-initrd', m.initramfs,
    '-append', append.join(' '),
  ];
  for (const path of opts.sockets ?? []) {
    args.push('-device', JSON.stringify({ driver: 'vfio-user-pci', socket: { path, type: 'unix' } }));
  }
  if (opts.appImage) {
    if (!m.vkapp || !fs.existsSync(m.vkapp)) {
      throw new Error(`the application image${m.vkapp ? ` ${m.vkapp}` : ''} is not built: run \`npm run setup\` (scripts/setup.sh), or bin/vugpu-vkapp in the offline bundle`);
    }
    args.push('-drive', `file=${m.vkapp},if=virtio,format=raw,readonly=on`);
  }
  args.push(...(opts.qemuArgs ?? []));
  return args;
}

function word(s: string, inArgs = false): string {
  if (s.length === 0 || /[\s"]/.test(s) || (inArgs && s.includes(','))) {
    throw new Error(`guest command word ${JSON.stringify(s)} cannot go on the kernel command line`);
  }
  return s;
}
