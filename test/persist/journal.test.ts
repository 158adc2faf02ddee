// The request journal's successor rules (src/persist/journal.ts, transport.ts peek mode,
// endpoint.ts recover()), with a real socket pair, the TypeScript vfio-user client as QEMU and
// a real fd keeper holding the server's end of the connection. The "server" is killed at every
// step of handling a request (an exception out of the journal or the transport stands in for
// SIGKILL: the transport closes its fd, the keeper's duplicate keeps the connection up, nothing
// is consumed or sent after that point); a successor takes the fd back from the keeper, loads
// the last "checkpoint" and the journal slot, and carries on. Every case checks what QEMU would
// see: its pending request answered exactly once (or a header-only error), never a duplicate
// reply with a body, the stream in step afterwards, and the device's non-idempotent counter
// (a register that adds what is written to it) equal to what was applied exactly once.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { PciDevice } from '../../src/device-model/device.ts';
import { Endpoint, maxMessageSize } from '../../src/device-model/endpoint.ts';
import { SocketTransport, type AdoptedConnection } from '../../src/device-model/transport.ts';
import { DEFAULT_SERVER_CAPS, type ClientCapabilities } from '../../src/device-model/version.ts';
import { VfioUserClient, VfioUserError } from '../../src/device-model/client.ts';
import { Command } from '../../src/device-model/protocol.ts';
import { ConnJournal, Journal, type RequestId } from '../../src/persist/journal.ts';
import { Keeper } from '../../src/persist/keeper.ts';
import { KeeperClient } from '../../src/persist/keeper-client.ts';

const COUNTER = 0x100;
const PLAIN = 0x200;

class Killed extends Error {}

type Step = 'seen-after' | 'intent-before' | 'intent-after' | 'replied-before' | 'replied-after' | 'backlog-after'
  | 'backlog-consumed-before' | 'consumed-after';

/** A journal slot that "dies" at one step of the nth request it sees. */
class DyingJournal {
  private readonly j: ConnJournal;
  private readonly step: Step;
  private readonly nth: number;
  private seenCount = 0;
  dead = false;
  constructor(j: ConnJournal, step: Step, nth: number) {
    this.j = j;
    this.step = step;
    this.nth = nth;
  }
  private at(s: Step): void {
    if (this.seenCount === this.nth && this.step === s && !this.dead) {
      this.dead = true;
      throw new Killed(`killed at ${s}`);
    }
  }
  seen(msgId: number, command: number, size: number, flags: number, seenAt: number): void {
    this.seenCount++;
    this.j.seen(msgId, command, size, flags, seenAt);
    this.at('seen-after');
  }
  intent(): void {
    this.at('intent-before');
    this.j.intent();
    this.at('intent-after');
  }
  replied(): void {
    this.at('replied-before');
    this.j.replied();
    this.at('replied-after');
  }
  backlog(bytes: number, first: RequestId | null): void {
    this.j.backlog(bytes, first);
    this.at('backlog-after');
  }
  /** The batch has left the socket already when this is called. */
  backlogConsumed(n: number): void {
    this.at('backlog-consumed-before');
    this.j.backlogConsumed(n);
    this.at('consumed-after');
  }
  reset(): void {
    this.j.reset();
  }
}

interface Checkpoint {
  counter: number;
  plain: number;
  applied: RequestId | null;
}

/** The device: a counter register (non-idempotent writes) and a plain one. */
function makeDevice(state: { counter: number; plain: number }): PciDevice {
  return new PciDevice({
    name: 'jdev',
    pci: { vendorId: 0x1de5, deviceId: 0x7e58, classCode: 0x030200 },
    regions: {
      0: {
        size: 0x1000,
        kind: 'mem32',
        handler: {
          read: (off) => (off === COUNTER ? state.counter : off === PLAIN ? state.plain : 0),
          write: (off, _size, v) => {
            if (off === COUNTER) state.counter += Number(v);
            else if (off === PLAIN) state.plain = Number(v);
          },
        },
      },
    },
    irqs: {},
  });
}

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0).reverse()) f();
});

interface World {
  keeper: Keeper;
  kc: KeeperClient;
  client: VfioUserClient;
  journal: Journal;
  ckpt: Checkpoint;
  caps: ClientCapabilities | null;
}

async function world(): Promise<World & { srv: number }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-journal-'));
  const keeper = new Keeper({ socket: path.join(dir, 'k.sock'), scanMs: 10 });
  cleanup.push(() => {
    keeper.close('test over');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const kc = KeeperClient.tryConnect(keeper.socket)!;
  cleanup.push(() => kc.close());
  await kc.hello('server');
  const [srv, cli] = native.socketpair();
  native.setNonblock(srv, true);
  kc.put('conn:jdev', srv);
  const client = VfioUserClient.fromFd(cli, 'qemu');
  cleanup.push(() => client.close());
  const journal = Journal.create();
  cleanup.push(() => journal.close());
  return { keeper, kc, client, journal, srv, ckpt: { counter: 0, plain: 0, applied: null }, caps: null };
}

/** One server generation over `fd`. `checkpointWrites`: the handled hook snapshots the device
 * before the reply of a write (a sync checkpoint, as serve.ts does), recording the request. */
function serverGen(w: World, fd: number, opts: { journal: DyingJournal | ConnJournal; adopted?: AdoptedConnection; checkpointWrites?: boolean }) {
  const state = { counter: w.ckpt.counter, plain: w.ckpt.plain };
  const device = makeDevice(state);
  const slot = w.journal.slot(0);
  const transport = new SocketTransport(fd, {
    name: 'jdev-conn', maxMessageSize: maxMessageSize(DEFAULT_SERVER_CAPS), queueSends: true,
    journal: opts.journal, adopted: opts.adopted,
  });
  let gone = false;
  const ep = new Endpoint(device, transport, {
    adoptedClient: w.caps ?? undefined,
    onClose: () => (gone = true),
    handled: (command) => {
      if (opts.checkpointWrites === false) return;
      if (command === Command.REGION_WRITE || command === Command.VERSION) {
        w.ckpt = { counter: state.counter, plain: state.plain, applied: slot.current() };
      }
    },
  });
  ep.start();
  return { ep, state, get gone() { return gone; }, transport };
}

async function successor(w: World, adoptedExtra: Partial<AdoptedConnection> = {}) {
  const fds = await w.kc.take();
  const fd = fds.get('conn:jdev')!;
  const slot = w.journal.slot(0);
  const adopted: AdoptedConnection = { slot: slot.read(), applied: w.ckpt.applied, arrivals: [], ...adoptedExtra };
  return serverGen(w, fd, { journal: slot, adopted });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Kill at `step` while handling the 3rd write of +1 to the counter (2 writes went before). */
async function killDuringWrite(step: Step, checkpointBeforeKill = true) {
  const w = await world();
  const slot = w.journal.slot(0);
  const dying = new DyingJournal(slot, step, 4); // VERSION is the 1st request
  const gen1 = serverGen(w, w.srv, { journal: dying, checkpointWrites: true });
  await w.client.version();
  w.caps = gen1.ep.client;
  await w.client.write32(0, COUNTER, 1);
  await w.client.write32(0, COUNTER, 1);
  if (!checkpointBeforeKill) {
    // The kill lands before the handled hook's checkpoint: the checkpoint is the previous one.
    const prev = w.ckpt;
    (gen1.ep as unknown as { handledHook: unknown }).handledHook = () => {
      w.ckpt = prev;
    };
  }
  const third = w.client.write32(0, COUNTER, 1).then(() => 'ok', (e: unknown) => (e instanceof VfioUserError ? `errno ${e.errno}` : String(e)));
  for (let i = 0; i < 200 && !dying.dead; i++) await sleep(5);
  expect(dying.dead).toBe(true);
  expect(gen1.gone).toBe(true); // the dead server's fd is closed...
  await sleep(20);
  expect(w.client.isClosed).toBe(false); // ...but QEMU sees no EOF: the keeper holds the socket
  const gen2 = await successor(w);
  const outcome = await third;
  // The stream is in step: more requests work, the counter reads back.
  await w.client.write32(0, COUNTER, 1);
  const counter = await w.client.read32(0, COUNTER);
  return { outcome, counter, unexpected: w.client.unexpected, gen2, w };
}

describe('journal: a request in flight when the server dies', () => {
  it('killed after seeing it, before handling: the successor handles it (once)', async () => {
    const r = await killDuringWrite('seen-after');
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4);
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered).toEqual({ handled: 1, skipped: 0, errored: 0, synthesized: 0 });
  });

  it('killed after handling, its effects not checkpointed: handled again from the older checkpoint', async () => {
    const r = await killDuringWrite('intent-before', false);
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4);
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered.handled).toBe(1);
  });

  it('killed after handling with its effects checkpointed: the success reply is rebuilt, not re-run', async () => {
    const r = await killDuringWrite('intent-before', true);
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4); // not 5: the add ran once
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered.synthesized).toBe(1);
  });

  it('killed inside the reply window (intent recorded, reply not sent): a header-only error, effects kept', async () => {
    const r = await killDuringWrite('intent-after');
    expect(r.outcome).toBe('errno 5');
    expect(r.counter).toBe(4);
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered.errored).toBe(1);
  });

  it('killed after the reply was sent but before that was recorded: QEMU gets one extra header-only reply, which it ignores', async () => {
    const r = await killDuringWrite('replied-before');
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4);
    expect(r.unexpected.length).toBe(1);
    expect(r.unexpected[0]!.payload.length).toBe(0); // never a duplicate with a body
    expect(r.unexpected[0]!.flags & 0x20).toBe(0x20);
  });

  it('killed after the reply, before consuming the request: consumed without a second reply', async () => {
    const r = await killDuringWrite('replied-after');
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4);
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered.skipped).toBe(1);
  });

  it('killed once it joined the replied backlog (still in the socket): dropped without a reply', async () => {
    const r = await killDuringWrite('backlog-after');
    expect(r.outcome).toBe('ok');
    expect(r.counter).toBe(4);
    expect(r.unexpected).toEqual([]);
    expect(r.gen2.ep.recovered).toEqual({ handled: 0, skipped: 0, errored: 0, synthesized: 0 });
  });

  it('batches of replied requests: a kill with a backlog in the socket, or just after a batch left it, loses and repeats nothing', async () => {
    // 40 writes of +1; the backlog is consumed every 32 requests (VERSION is the 1st).
    for (const [step, nth] of [['backlog-after', 20], ['backlog-consumed-before', 32], ['consumed-after', 32], ['seen-after', 33], ['replied-after', 34]] as const) {
      const w = await world();
      const dying = new DyingJournal(w.journal.slot(0), step, nth);
      const gen1 = serverGen(w, w.srv, { journal: dying, checkpointWrites: true });
      await w.client.version();
      w.caps = gen1.ep.client;
      const outcomes: string[] = [];
      let gen2: ReturnType<typeof serverGen> | null = null;
      for (let i = 0; i < 40; i++) {
        const write = w.client.write32(0, COUNTER, 1).then(() => 'ok', (e: unknown) => String(e));
        if (dying.dead && gen2 === null) {
          await sleep(20);
          gen2 = await successor(w);
        }
        const first = await Promise.race([write, sleep(300).then(() => 'pending')]);
        if (first === 'pending') {
          expect(dying.dead, `${step}@${nth}: write ${i + 2} got no reply`).toBe(true);
          gen2 ??= await successor(w);
          outcomes.push(await write);
        } else outcomes.push(first);
      }
      expect(dying.dead, `${step}@${nth}`).toBe(true);
      expect(outcomes.every((o) => o === 'ok'), `${step}@${nth}: ${outcomes.join(',')}`).toBe(true);
      expect(await w.client.read32(0, COUNTER), `${step}@${nth}`).toBe(40);
      expect(w.client.unexpected, `${step}@${nth}`).toEqual([]);
      w.client.close();
    }
  });

  it('a read killed in its reply window gets a header-only error; one killed before handling is answered', async () => {
    for (const [step, want] of [['intent-after', 'errno 5'], ['seen-after', 'value 7']] as const) {
      const w = await world();
      const dying = new DyingJournal(w.journal.slot(0), step, 3);
      const gen1 = serverGen(w, w.srv, { journal: dying });
      await w.client.version();
      w.caps = gen1.ep.client;
      await w.client.write32(0, PLAIN, 7);
      const read = w.client.read32(0, PLAIN).then((v) => `value ${v}`, (e: VfioUserError) => `errno ${e.errno}`);
      for (let i = 0; i < 200 && !dying.dead; i++) await sleep(5);
      await successor(w);
      expect(await read).toBe(want);
      expect(await w.client.read32(0, PLAIN)).toBe(7);
      expect(w.client.unexpected).toEqual([]);
      w.client.close();
    }
  });

  it('posted writes (NO_REPLY) are applied exactly once whatever the step', async () => {
    for (const step of ['seen-after', 'replied-after', 'backlog-after'] as const) {
      const w = await world();
      const dying = new DyingJournal(w.journal.slot(0), step, 3);
      const gen1 = serverGen(w, w.srv, { journal: dying });
      await w.client.version();
      w.caps = gen1.ep.client;
      await w.client.write32(0, COUNTER, 1);
      void w.client.write32(0, COUNTER, 10, { noReply: true });
      for (let i = 0; i < 200 && !dying.dead; i++) await sleep(5);
      await successor(w);
      expect(await w.client.read32(0, COUNTER), step).toBe(11);
      w.client.close();
    }
  });

  it('a request that waited longer than QEMU does (x-msg-timeout) gets a header-only error and is not applied', async () => {
    const w = await world();
    const gen1 = serverGen(w, w.srv, { journal: w.journal.slot(0) });
    await w.client.version();
    w.caps = gen1.ep.client;
    await w.client.write32(0, COUNTER, 1);
    // The server dies between requests; a write arrives and waits (the keeper samples it).
    gen1.transport.close('killed');
    const late = w.client.write32(0, COUNTER, 100).then(() => 'ok', (e: VfioUserError) => `errno ${e.errno}`);
    await sleep(50);
    const now = Number(process.hrtime.bigint()) / 1e6;
    // The keeper samples every message queued at the head: the replied backlog the dead server
    // left (VERSION and the first write) and then the late write.
    const gen2 = await successor(w, { arrivals: [now - 6000, now - 6000, now - 6000] });
    expect(await late).toBe('errno 5');
    expect(await w.client.read32(0, COUNTER)).toBe(1);
    expect(gen2.ep.recovered.errored).toBe(1);
  });

  it('requests that arrive while no server runs wait in the socket and are answered by the successor', async () => {
    const w = await world();
    const gen1 = serverGen(w, w.srv, { journal: w.journal.slot(0) });
    await w.client.version();
    w.caps = gen1.ep.client;
    gen1.transport.close('killed');
    const writes = [1, 2, 3].map((v) => w.client.write32(0, COUNTER, v));
    await sleep(100);
    expect(w.client.isClosed).toBe(false);
    await successor(w);
    await Promise.all(writes);
    expect(await w.client.read32(0, COUNTER)).toBe(6);
    expect(w.client.unexpected).toEqual([]);
  });
});
