// Mediated vGPUs feed the tracer (vugpu serve --trace): trapped BAR0 accesses and the
// aggregator's own events — flushes, shadow rebuilds, doorbells, hypercalls, faults — end up in
// the trace file with the VM's id.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import * as S from '../../src/gpu/spec.ts';
import { Engine } from '../../src/gpu/engine.ts';
import { Aggregator } from '../../src/aggregator/aggregator.ts';
import { MediatedVgpu } from '../../src/aggregator/mediated.ts';
import { Tracer } from '../../src/trace/recorder.ts';
import { readTrace } from '../../src/trace/reader.ts';
import { native } from '../../src/native.ts';
import { negotiatedPair, type Pair } from '../device-model/helpers.ts';

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

it('records trapped accesses and mediation events per VM', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-agg-trace-'));
  const file = path.join(dir, 't.vtrace');
  const engine = new Engine({ vramSize: 128 << 20, channels: 8 });
  const agg = new Aggregator({ engine, hostReserved: 16 << 20, quarantineMs: 0 });
  const tracer = new Tracer({ path: file, flushMs: 0, vms: [{ name: 'x', mode: 'fv' }, { name: 'p', mode: 'pv' }] });
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }), () => engine.close(), () => agg.close());
  const x = new MediatedVgpu(agg, { name: 'x', mode: 'fv', slice: 16 << 20 }, tracer);
  const p = new MediatedVgpu(agg, { name: 'p', mode: 'pv', slice: 16 << 20 }, tracer);
  const pairs: Pair[] = [await negotiatedPair(x.device), await negotiatedPair(p.device)];
  cleanup.push(async () => {
    for (const q of pairs) {
      q.client.close();
      await q.closed;
    }
  });
  const [cx, cp] = [pairs[0]!.client, pairs[1]!.client];
  // x: a channel bound to a PD at 0x30000, a flush, GP_PUT = 1, a doorbell: the device reads
  // GP_PUT, finds an entry and rebuilds the shadow before fetching it (an empty PD: it faults).
  await cx.write32(1, 0x20000 + S.USERD.GP_PUT, 1);
  await cx.write32(1, 0x10000 + S.INST.USERD_LO, 0x20000);
  await cx.write32(1, 0x10000 + S.INST.GP_BASE_HI, 1 << 16);
  await cx.write32(1, 0x10000 + S.INST.PD_LO, 0x30000);
  await cx.write32(0, S.PFIFO_CHAN, (S.CHAN_VALID | 0x10) >>> 0);
  await cx.write32(0, S.MMU_FLUSH_PDB, 0x30000 / 256);
  await cx.write32(0, S.MMU_FLUSH_TRIGGER, S.MMU_FLUSH_GO);
  await cx.write32(1, 0x40000, 0); // runlist: chid 0
  await cx.write32(0, S.PFIFO_RUNLIST_BASE, 0x40000 / 4096);
  await cx.write32(0, S.PFIFO_RUNLIST_SUBMIT, 1);
  await cx.write32(0, S.PFIFO_CHAN_STATE, S.STATE_ENABLE);
  await cx.write32(0, S.DOORBELL, 0);
  // p: an (unregistered-area) call is not answered; an unknown op on a registered area is.
  const memfd = native.memfdCreate('pv', 4096);
  await cp.dmaMap({ addr: 0x200000, size: 4096, fd: memfd });
  native.close(memfd);
  await cp.write32(0, S.PV_AREA_LO, 0x200000);
  await cp.write32(0, S.PV_AREA_SLOTS, 1);
  await cp.write32(0, S.PV_CALL, 0);
  tracer.close();
  const t = readTrace(file);
  const of = (vm: number, type: string) => t.records.filter((r) => r.vm === vm && r.type === type);
  expect(of(0, 'mmio').length).toBe(7); // BAR0 only: fv's BAR1 is mapped, never trapped
  expect(of(1, 'mmio').length).toBe(3);
  expect(of(0, 'tlbFlush').length).toBe(1);
  expect(of(0, 'shadowRebuild').length).toBe(1); // lazily, when the device fetches
  expect(of(0, 'doorbell').length).toBe(1);
  expect(of(1, 'hypercall').length).toBe(1);
  expect(of(0, 'hypercall').length + of(1, 'shadowRebuild').length).toBe(0);
});
