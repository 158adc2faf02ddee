// Long fuzzing runs of the vfio-user server (the CI test, fuzz.test.ts, runs a few seconds).
//   node [--expose-gc] test/device-model/fuzz-driver.ts [--minutes N] [--seed S]
//        [--transport socket|memory|both] [--round MESSAGES]
// (--expose-gc adds the live heap after each round, to watch for leaks.)
// Runs rounds of `--round` messages with seeds S, S+1, ... until the time is up, the server in
// this process (fd accounting through /proc/self/fd) with a second VM on another socket whose
// register reads are checked between batches. A broken invariant prints the seed of its round
// (replay: same --seed and --round, or VUGPU_FUZZ_SEED / VUGPU_FUZZ_ITERS in the test) and exits 1.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { logger } from '../../src/log.ts';
import { Server } from '../../src/device-model/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { maxMessageSize } from '../../src/device-model/endpoint.ts';
import { FuzzFailure, MemoryWire, Prng, SocketWire, countOpenFds, deviceActivity, fuzz, maxHeldFds, type FuzzStats } from './fuzz-lib.ts';
import { twoVms } from './helpers.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '1' },
    seed: { type: 'string' },
    transport: { type: 'string', default: 'both' },
    round: { type: 'string', default: '20000' },
  },
});
const minutes = Number(values.minutes);
const round = Number(values.round);
const transport = values.transport!;
let seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 0x7fffffff);
if (!(minutes > 0) || !(round > 0) || !['socket', 'memory', 'both'].includes(transport) || !Number.isInteger(seed)) {
  console.error('usage: fuzz-driver.ts [--minutes N] [--seed S] [--transport socket|memory|both] [--round MESSAGES]');
  process.exit(2);
}
if (process.env.VUGPU_LOG === undefined) logger.level = 'error';

const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-fuzz-driver-'));
const server = new Server();
const { a, b, sa, sb, la } = twoVms(server, dir, ['fuzzed', 'other']);
const vm2 = VfioUserClient.connect(sb);
await vm2.version();
const maxHeld = maxHeldFds(server);

const total = { messages: 0, replies: 0, errors: 0, drops: 0, sessions: 0, ms: 0, rounds: 0 };
const end = Date.now() + minutes * 60_000;
const fdsAtStart = countOpenFds();
console.log(`fuzzing for ${minutes} min, transport ${transport}, first seed ${seed}, ${round} messages per round`);
let exitCode = 0;
try {
  while (Date.now() < end) {
    const useMemory = transport === 'memory' || (transport === 'both' && total.rounds % 2 === 1);
    const r = new Prng(seed ^ 0x3c3c3c3c);
    const check = async (): Promise<void> => {
      deviceActivity(a, r);
      if (useMemory) return;
      const off = r.int(0x7ff0 >> 2) * 4;
      const v = r.u32();
      await vm2.write32(0, off, v);
      const got = await vm2.read32(0, off);
      if (got !== v) throw new Error(`the other VM read 0x${got.toString(16)} at 0x${off.toString(16)}, wrote 0x${v.toString(16)}`);
    };
    const stats: FuzzStats = await fuzz({
      seed,
      iterations: round,
      maxMessageSize: maxMessageSize(server.caps),
      connect: () => (useMemory ? new MemoryWire(a.device) : new SocketWire(sa)),
      idle: () => (useMemory ? Promise.resolve() : la.idle()),
      maxHeldFds: useMemory ? maxHeld - 2 : maxHeld,
      between: check,
    });
    total.rounds++;
    // The test device records every access and event (helpers.ts) for the unit tests: forget
    // them, or they are the only thing growing.
    for (const t of [a, b]) {
      t.accesses.length = 0;
      t.events.length = 0;
      t.resets.length = 0;
    }
    total.messages += stats.messages;
    total.replies += stats.replies;
    total.errors += stats.errorReplies;
    total.drops += stats.framingDrops;
    total.sessions += stats.sessions;
    total.ms += stats.ms;
    // With --expose-gc: live heap after a full GC, to tell a leak from a lazy collector.
    const gc = (globalThis as { gc?: () => void }).gc;
    let mem = '';
    if (gc) {
      gc();
      const m = process.memoryUsage();
      mem = `, heap ${(m.heapUsed / 2 ** 20).toFixed(1)} MiB, external ${(m.external / 2 ** 20).toFixed(1)} MiB, rss ${(m.rss / 2 ** 20).toFixed(0)} MiB`;
    }
    console.log(
      `round ${total.rounds} seed ${seed} ${useMemory ? 'memory' : 'socket'}: ${stats.messages} msgs, ${stats.sessions} sessions, ` +
        `${stats.framingDrops} drops, ${Math.round((stats.messages / stats.ms) * 1000)} msg/s${mem}`,
    );
    seed = (seed + 1) | 0;
  }
  if (countOpenFds() !== fdsAtStart) throw new Error(`fd leak over the run: ${fdsAtStart} → ${countOpenFds()}`);
  console.log(
    `done: ${total.rounds} rounds, ${total.messages} messages in ${total.sessions} sessions, ${total.replies} replies ` +
      `(${total.errors} errors), ${total.drops} framing drops, ${Math.round((total.messages / total.ms) * 1000)} msg/s overall; no invariant broken`,
  );
} catch (err) {
  console.error(err instanceof FuzzFailure ? err.message : err);
  console.error(`replay: node test/device-model/fuzz-driver.ts --seed ${seed} --round ${round} --transport ${transport === 'both' ? (total.rounds % 2 === 1 ? 'memory' : 'socket') : transport} --minutes 0.01`);
  exitCode = 1;
} finally {
  vm2.close();
  server.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);
