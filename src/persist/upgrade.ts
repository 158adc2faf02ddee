// Live upgrade, the serving side (SIGUSR2 or `vugpu upgrade`): start a successor with this
// process's command line, and when it is ready stop reading, let GPU work drain, write the last
// checkpoint, hand over through the keeper and exit (docs/architecture.md "Surviving a
// restart"). Under systemd the service manager starts the successor instead. The successor's
// side is adopt.ts.
import { logger } from '../log.ts';
import type { Vugpu } from '../server.ts';
import type { Checkpointer } from './checkpoint.ts';
import type { SystemdFdStore } from './fdstore.ts';
import { monoMs } from './journal.ts';
import type { KeeperClient } from './keeper-client.ts';
import { spawnSelf } from './standby.ts';

/** How long a successor may take to come up, ms. */
const SUCCESSOR_WAIT_MS = 60_000;
/** How long GPU work and queued replies may take to drain before the handover goes on, ms. */
const DRAIN_LIMIT_MS = 1000;
/** The exit status a systemd unit restarts on (RestartForceExitStatus=75). */
export const EXIT_FOR_UPGRADE = 75;

/** What an upgrade needs from the server it upgrades. */
export interface UpgradeHost {
  readonly vugpu: Vugpu;
  readonly checkpointer: Checkpointer;
  /** The fd keeper now (it may be replaced while serving), or null under systemd. */
  keeper(): KeeperClient | null;
  readonly systemd: SystemdFdStore | null;
  /** Command line that starts a successor (default: this process's). */
  readonly argv?: string[];
  /** This server stopped serving for good (closed or handed over). */
  stopped(): boolean;
  /** Write the last checkpoint, exact because the server is quiescent, and stop serving;
   * false (and still serving) when it could not be written. */
  finish(): boolean;
  /** End the process with `code` (systemd restarts it). */
  exit(code: number): void;
  checkpointStats(): Record<string, number>;
}

/**
 * Wait (bounded) until a paused server is quiet: no reply queued, no GPU job running. Queued
 * pushbuffer work stays queued: the checkpoint has each channel's position (the successor runs
 * the rest), so a guest with a deep queue does not stretch everyone's pause. A job still running
 * at the limit dies with this process (ENGINE_LOST for its channel).
 */
async function drain(v: Vugpu, limitMs = DRAIN_LIMIT_MS): Promise<boolean> {
  const deadline = performance.now() + limitMs;
  for (;;) {
    if (v.quiet) return true;
    if (performance.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 1));
  }
}

export class LiveUpgrade {
  private upgrading: { successor: number | null; stoppedAt: number | null; timer: NodeJS.Timeout | null } | null = null;

  private readonly h: UpgradeHost;

  constructor(h: UpgradeHost) {
    this.h = h;
  }

  /** Start a successor (same command line); the handover follows when it is ready. */
  start(): void {
    const h = this.h;
    if (this.upgrading || h.stopped()) return;
    if (h.systemd) {
      // Under systemd the service manager starts the successor: checkpoint, and exit with a
      // status the unit restarts on; the fd store keeps the rest.
      h.vugpu.pause();
      const stoppedAt = monoMs();
      void drain(h.vugpu).then(() => {
        h.checkpointer.write(true);
        h.checkpointer.stop();
        logger.info({ stoppedAt }, 'upgrade under systemd: checkpoint written, exiting for a restart');
        h.exit(EXIT_FOR_UPGRADE);
      });
      return;
    }
    const child = spawnSelf(h.argv, { VUGPU_SUCCESSOR: '1' });
    const timer = setTimeout(() => this.abandon(`the successor did not come up within ${SUCCESSOR_WAIT_MS / 1000} s`), SUCCESSOR_WAIT_MS);
    timer.unref();
    this.upgrading = { successor: child.pid ?? null, stoppedAt: null, timer };
    child.once('exit', (code, signal) => {
      if (this.upgrading && this.upgrading.stoppedAt === null) this.abandon(`the successor exited (${code ?? signal}) before the handover`);
    });
    logger.info({ successor: child.pid }, 'live upgrade: successor started');
  }

  /** The successor `pid` is ready: stop, drain, write the last checkpoint, hand over, exit. */
  async handover(pid: number): Promise<void> {
    const h = this.h;
    if (h.stopped()) return;
    if (!this.upgrading) this.upgrading = { successor: pid, stoppedAt: null, timer: null };
    const stoppedAt = monoMs();
    this.upgrading.stoppedAt = stoppedAt;
    h.vugpu.pause();
    const drained = await drain(h.vugpu);
    const drainedAt = monoMs();
    await h.vugpu.closeMetrics(); // the successor listens on the same port
    const metricsAt = monoMs();
    if (this.upgrading === null) return; // abandoned meanwhile
    // From here on synchronous to the exit: nothing may run after the last checkpoint (a job
    // completing, the scheduler dispatching), so that checkpoint is exactly the final state.
    if (!h.finish()) {
      this.abandon('the last checkpoint could not be written');
      return;
    }
    if (this.upgrading.timer) clearTimeout(this.upgrading.timer);
    const checkpointAt = monoMs();
    h.keeper()!.handover(stoppedAt);
    const r = (t: number) => Math.round((t - stoppedAt) * 10) / 10;
    logger.info({
      successor: pid, drained, handoverMs: r(monoMs()), checkpoints: h.checkpointStats(),
      marks: { drained: r(drainedAt), metricsClosed: r(metricsAt), checkpointed: r(checkpointAt) },
    }, 'live upgrade: handed over; exiting');
    process.exit(0);
  }

  /** Give the upgrade up (the successor failed or went away): this server carries on. */
  abandon(reason: string): void {
    const h = this.h;
    if (!this.upgrading || h.stopped()) return;
    if (this.upgrading.timer) clearTimeout(this.upgrading.timer);
    const wasStopped = this.upgrading.stoppedAt !== null;
    this.upgrading = null;
    if (wasStopped) h.vugpu.unpause();
    h.keeper()?.resume(reason);
    logger.error({ reason }, 'live upgrade abandoned; this server carries on');
  }
}
