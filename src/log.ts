// Process-wide logger: lifecycle events and errors only, never per register access.
// Level from VUGPU_LOG (trace|debug|info|warn|error|fatal|silent), default 'info'; JSON lines to stderr.
import pino from 'pino';

const stderr = pino.destination({ fd: 2, sync: true });
/** Rewrites each JSON line before it is written (setLogFormat: a readable form on a terminal). */
let format: ((line: string) => string) | null = null;

export const logger = pino(
  { level: process.env.VUGPU_LOG ?? 'info', base: { pid: process.pid } },
  { write: (line: string) => stderr.write(format === null ? line : format(line)) },
);

/** Install (or, with null, remove) a line formatter; the default is pino's JSON lines. */
export function setLogFormat(f: ((line: string) => string) | null): void {
  format = f;
}

export type Logger = typeof logger;

/** Token bucket for warning lines. `take()` says whether to log now; `suppressed()` hands out
 * (and resets) how many were dropped since the last line that got through. */
export class LogBudget {
  private tokens: number;
  private last = 0;
  private dropped = 0;
  private readonly burst: number;
  private readonly perMs: number;

  constructor(burst: number, perSecond: number) {
    this.burst = burst;
    this.tokens = burst;
    this.perMs = perSecond / 1000;
  }

  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + (now - this.last) * this.perMs);
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens--;
      return true;
    }
    this.dropped++;
    return false;
  }

  suppressed(): number {
    const n = this.dropped;
    this.dropped = 0;
    return n;
  }
}

/**
 * Warnings a guest can cause at will (faults, channel errors, rejected runlists): a token
 * bucket per key (a channel, a VM) so a hostile guest can neither flood the log nor use up the
 * budget of its co-tenants. The next line after a quiet spell says how many were suppressed.
 */
export class GuestWarnings {
  private readonly budgets = new Map<number | string, LogBudget>();
  private readonly log: Logger;
  private readonly burst: number;
  private readonly perSecond: number;

  constructor(log: Logger, burst = 20, perSecond = 2) {
    this.log = log;
    this.burst = burst;
    this.perSecond = perSecond;
  }

  warn(key: number | string, fields: Record<string, unknown>, msg: string): void {
    let b = this.budgets.get(key);
    if (b === undefined) {
      if (this.budgets.size >= 4096) this.budgets.clear(); // keys are chids and VM names; bound anyway
      b = new LogBudget(this.burst, this.perSecond);
      this.budgets.set(key, b);
    }
    if (!b.take()) return;
    const suppressed = b.suppressed();
    this.log.warn(suppressed > 0 ? { ...fields, suppressed } : fields, msg);
  }
}

/**
 * A child logger whose warn() goes through one token bucket: for a logger that only a guest's
 * actions make warn (a VM's vGPU). Other levels are unchanged.
 */
export function withWarnBudget(log: Logger, burst = 20, perSecond = 2): Logger {
  const child = log.child({});
  const budget = new LogBudget(burst, perSecond);
  const warn = child.warn.bind(child) as (...args: unknown[]) => void;
  const limited = (...args: unknown[]): void => {
    if (!budget.take()) return;
    const suppressed = budget.suppressed();
    if (suppressed > 0 && typeof args[0] === 'object' && args[0] !== null) args[0] = { ...(args[0] as object), suppressed };
    warn(...args);
  };
  child.warn = limited as Logger['warn'];
  return child;
}
