// Manual guest boot: streams the console and prints a summary of the guest's records.
//   node src/vm/cli.ts [--socket PATH]... [--run /opt/vugpu/foundation-test.sh] [--timeout S]
//                      [--accel auto|kvm|tcg] [--memory MiB] [-- guest args...]
// Exit status: 0 when the guest program exited 0 and every VUGPU-CHECK passed.
import { parseArgs } from 'node:util';
import { runGuest } from './launcher.ts';
import type { Accel } from './accel.ts';

export async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      socket: { type: 'string', multiple: true },
      run: { type: 'string' },
      timeout: { type: 'string', default: '180' },
      accel: { type: 'string', default: 'auto' },
      memory: { type: 'string', default: '512' },
      quiet: { type: 'boolean', default: false },
    },
  });
  const result = await runGuest({
    sockets: values.socket ?? [],
    run: values.run,
    args: positionals,
    timeoutMs: Number(values.timeout) * 1000,
    accel: values.accel as Accel | 'auto',
    memoryMiB: Number(values.memory),
    onLine: values.quiet ? undefined : (line) => process.stdout.write(`${line}\n`),
    onStderr: (line) => process.stderr.write(`[qemu] ${line}\n`),
  });
  const failed = result.checks.filter((c) => !c.ok);
  process.stdout.write(
    `accel=${result.accel} exit=${result.exitCode ?? result.signal} guestExit=${result.guestExit} ` +
      `timedOut=${result.timedOut} checks=${result.checks.length} failed=${failed.length} ` +
      `wall=${(result.durationMs / 1000).toFixed(1)}s\n`,
  );
  return result.guestExit === 0 && failed.length === 0 && !result.timedOut ? 0 : 1;
}

if (import.meta.main) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (err: Error) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  });
}
