// Host CPU accounting over a measurement interval (Linux /proc): how busy the machine was, and
// how much of that was this benchmark (this process and the QEMU processes it started). On a
// shared machine the rest is other people's work, which lengthens guest doorbell gaps; a
// benchmark that depends on guest CPU timing records it next to its result.
import fs from 'node:fs';

const TICK_S = 0.01; // USER_HZ = 100 on Linux (getconf CLK_TCK)

function hostTicks(): { busy: number; total: number } {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal ...
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/** utime + stime of a process and its descendants that are still alive, in ticks. */
function treeTicks(pid: number): number {
  let t = 0;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    t += Number(f[11]) + Number(f[12]); // fields 14 and 15: utime, stime
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      for (const k of kids ? kids.split(' ') : []) t += treeTicks(Number(k));
    }
  } catch {
    // exited meanwhile
  }
  return t;
}

export interface CpuUse {
  /** Machine-wide busy fraction over the interval (0..1 of all CPUs). */
  hostBusy: number;
  /** Of all CPUs, the fraction used by this process and the given process trees. */
  ours: number;
  /** The rest: other processes. */
  others: number;
  cpus: number;
}

/** Start an interval; the returned function ends it. pids: process trees counted as ours. */
export function cpuInterval(pids: () => number[]): () => CpuUse {
  const h0 = hostTicks();
  const own0 = process.cpuUsage();
  const k0 = pids().reduce((a, p) => a + treeTicks(p), 0);
  return () => {
    const h1 = hostTicks();
    const own = process.cpuUsage(own0);
    const k1 = pids().reduce((a, p) => a + treeTicks(p), 0);
    const total = Math.max(1, h1.total - h0.total);
    const oursTicks = (own.user + own.system) / 1e6 / TICK_S + (k1 - k0);
    const hostBusy = (h1.busy - h0.busy) / total;
    const ours = Math.min(hostBusy, oursTicks / total);
    return { hostBusy, ours, others: Math.max(0, hostBusy - ours), cpus: fs.readFileSync('/proc/stat', 'utf8').match(/^cpu\d+ /gm)?.length ?? 1 };
  };
}
