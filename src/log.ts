// Process-wide logger: lifecycle events and errors only, never per register access.
// Level from VUGPU_LOG (trace|debug|info|warn|error|fatal|silent), default 'info'; JSON lines to stderr.
import pino from 'pino';

export const logger = pino(
  { level: process.env.VUGPU_LOG ?? 'info', base: { pid: process.pid } },
  pino.destination({ fd: 2, sync: true }),
);

export type Logger = typeof logger;
