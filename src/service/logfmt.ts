// A readable form of the pino JSON lines for a terminal (`serve --log-format pretty`, or auto
// when stderr is a TTY): "12:03:04.512 INFO  [control] control: VM c added vm=c mode=fv …".
// Services keep JSON (journald stores it as is; `journalctl -o cat | jq` reads it).
import { logger, setLogFormat } from '../log.ts';
import type { LogFormat, LogLevel } from './serve-config.ts';

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO ', 40: 'WARN ', 50: 'ERROR', 60: 'FATAL' };
const SKIP = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'part', 'v']);

export function prettyLine(line: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line;
  }
  const t = typeof rec.time === 'number' ? new Date(rec.time).toISOString().slice(11, 23) : '';
  const lvl = LEVELS[rec.level as number] ?? String(rec.level);
  const part = typeof rec.part === 'string' ? ` [${rec.part}]` : '';
  const fields: string[] = [];
  for (const [k, v] of Object.entries(rec)) {
    if (SKIP.has(k)) continue;
    if (k === 'err' && typeof v === 'object' && v !== null) {
      fields.push(`err=${JSON.stringify((v as { message?: string }).message ?? v)}`);
      continue;
    }
    fields.push(`${k}=${typeof v === 'string' && /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v)}`);
  }
  return `${t} ${lvl}${part} ${String(rec.msg ?? '')}${fields.length ? `  ${fields.join(' ')}` : ''}\n`;
}

/** Apply serve's log-level and log-format (before anything logs). */
export function applyLogSettings(o: { logLevel?: LogLevel; logFormat: LogFormat }, isTty = process.stderr.isTTY === true): void {
  if (o.logLevel) logger.level = o.logLevel;
  const pretty = o.logFormat === 'pretty' || (o.logFormat === 'auto' && isTty);
  setLogFormat(pretty ? prettyLine : null);
}
