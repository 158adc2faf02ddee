import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { GuestWarnings, withWarnBudget } from '../src/log.ts';

function capture(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}

describe('guest-caused warnings are rate limited', () => {
  it('GuestWarnings keeps a budget per key and reports what it suppressed', () => {
    const { log, lines } = capture();
    const w = new GuestWarnings(log, 3, 0.001);
    for (let i = 0; i < 100; i++) w.warn(7, { chid: 7, i }, 'gpu channel error');
    expect(lines.length).toBe(3);
    // A different channel (another VM's) still gets its own burst.
    w.warn(9, { chid: 9 }, 'gpu channel error');
    expect(lines.length).toBe(4);
    expect(lines[3]!.chid).toBe(9);
  });

  it('withWarnBudget limits warn() only', () => {
    const { log, lines } = capture();
    const vmLog = withWarnBudget(log, 2, 0.001);
    for (let i = 0; i < 50; i++) vmLog.warn({ i }, 'guest runlist rejected');
    vmLog.info('attached');
    vmLog.error('lifecycle error');
    expect(lines.map((l) => l.msg)).toEqual(['guest runlist rejected', 'guest runlist rejected', 'attached', 'lifecycle error']);
  });
});
