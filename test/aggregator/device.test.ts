// Mediated vGPUs as PCI functions over real vfio-user connections (socketpairs, the device
// model's endpoint and test client): BAR1 is the VM's slice mmapped from the VRAM memfd (BAR
// remap) or trapped access by access (fv-naive); BAR0 is the vGPU's register view; interrupts
// reach only the owning VM's eventfds; a client that goes away leaves a reset, scrubbed vGPU.
import { afterEach, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import * as S from '../../src/gpu/spec.ts';
import { Engine } from '../../src/gpu/engine.ts';
import { Aggregator } from '../../src/aggregator/aggregator.ts';
import { MediatedVgpu } from '../../src/aggregator/mediated.ts';
import { IrqIndex, IrqSetFlag, RegionInfoFlag } from '../../src/device-model/protocol.ts';
import { negotiatedPair, until, type Pair } from '../device-model/helpers.ts';
import { Server } from '../../src/device-model/server.ts';
import { VfioUserClient } from '../../src/device-model/client.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

let engine: Engine | null = null;
let agg: Aggregator | null = null;
const pairs: Pair[] = [];
const fds: number[] = [];
afterEach(async () => {
  for (const p of pairs.splice(0)) {
    p.client.close();
    await p.closed;
  }
  agg?.close();
  engine?.close();
  for (const fd of fds.splice(0)) native.close(fd);
  agg = null;
  engine = null;
});

function setup(): void {
  engine = new Engine({ vramSize: 128 << 20, channels: 8 });
  agg = new Aggregator({ engine, hostReserved: 16 << 20, quarantineMs: 0 });
}

async function connect(v: MediatedVgpu): Promise<Pair> {
  const p = await negotiatedPair(v.device);
  pairs.push(p);
  return p;
}

const bytes = (v: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v >>> 0, true);
  return b;
};

describe('mediated PCI function', () => {
  it('fv: BAR1 is the slice, mmapped from the engine VRAM at the slice offset', async () => {
    setup();
    const v = new MediatedVgpu(agg!, { name: 'a', mode: 'fv', slice: 32 << 20 });
    new MediatedVgpu(agg!, { name: 'b', mode: 'fv', slice: 32 << 20 });
    const { client } = await connect(v);
    const info = await client.getRegionInfo(1);
    fds.push(info.fd);
    expect(info.size).toBe(32 << 20);
    expect(info.flags & RegionInfoFlag.MMAP).toBe(RegionInfoFlag.MMAP);
    expect(info.offset).toBe(v.vgpu.slice.base);
    const bar1 = new Uint32Array(client.mmapRegion(info));
    bar1[0x40] = 0xcafef00d;
    expect(engine!.vram.read32(v.vgpu.slice.base + 0x100)).toBe(0xcafef00d);
    native.munmap(bar1.buffer as ArrayBuffer);
    expect(await client.read32(0, S.PFB_PART_SIZE_MB)).toBe(32);
    expect(await client.read32(0, S.PMC_BOOT_0)).toBe(S.PMC_BOOT_0_VALUE);
    expect(v.vgpu.counters.mmioReads).toBe(2);
  });

  it('fv-naive: BAR1 has no mmap; every access traps into the slice', async () => {
    setup();
    const v = new MediatedVgpu(agg!, { name: 'n', mode: 'fv-naive', slice: 16 << 20 });
    const { client } = await connect(v);
    const info = await client.getRegionInfo(1);
    expect(info.fd).toBe(-1);
    expect(info.flags & RegionInfoFlag.MMAP).toBe(0);
    await client.write32(1, 0x2000, 0x600dcafe);
    expect(engine!.vram.read32(v.vgpu.slice.base + 0x2000)).toBe(0x600dcafe);
    expect(await client.read32(1, 0x2000)).toBe(0x600dcafe);
    expect(v.vgpu.counters.bar1Writes).toBe(1);
    expect(v.vgpu.counters.bar1Reads).toBe(1);
  });

  it('interrupts go to the owning VM’s eventfd only; PDIAG DMA uses its DMA map', async () => {
    setup();
    const va = new MediatedVgpu(agg!, { name: 'a', mode: 'pv', slice: 16 << 20 });
    const vb = new MediatedVgpu(agg!, { name: 'b', mode: 'fv', slice: 16 << 20 });
    const pa = await connect(va);
    const pb = await connect(vb);
    const efd = (n: number) => Array.from({ length: n }, () => {
      const fd = native.eventfd(0, true);
      fds.push(fd);
      return fd;
    });
    const ea = efd(4), eb = efd(4);
    for (const [p, e, v] of [[pa, ea, va], [pb, eb, vb]] as const) {
      await p.client.setIrqs({ index: IrqIndex.MSIX, flags: IrqSetFlag.ACTION_TRIGGER | IrqSetFlag.DATA_EVENTFD, start: 0, count: 4, fds: [...e] });
      v.device.irq.setMsixControl(true, false);
      await p.client.write32(0, S.PMC_INTR_EN, 0xf);
    }
    await pa.client.write32(0, S.DIAG_IRQ_FIRE, 3);
    await until(() => native.eventfdRead(ea[3]!) === 1);
    for (const fd of eb) expect(native.eventfdRead(fd)).toBe(-11);
    expect(await pb.client.read32(0, S.PMC_INTR)).toBe(0);
    expect(await pa.client.read32(0, S.PMC_INTR)).toBe(8);

    // DIAG DMA: guest memory at gpa 0x100000 → VRAM offset 0x3000 of a's slice.
    const memfd = native.memfdCreate('guest', 1 << 20);
    const mem = new Uint8Array(native.mmap(memfd, 1 << 20, 0));
    mem.fill(0x5c, 0, 4096);
    await pa.client.dmaMap({ addr: 0x100000, size: 1 << 20, fd: memfd });
    native.close(memfd);
    for (const [reg, val] of [[S.DIAG_DMA_ADDR_LO, 0x100000], [S.DIAG_DMA_LEN, 4096], [S.DIAG_DMA_VRAM_OFF, 0x3000], [S.DIAG_DMA_CTRL, 1]]) {
      await pa.client.regionWrite(0, reg!, bytes(val!));
    }
    expect(await pa.client.read32(0, S.DIAG_DMA_STATUS)).toBe(1);
    expect(engine!.vram.u8[va.vgpu.slice.base + 0x3000]).toBe(0x5c);
    // b has no DMA map there.
    for (const [reg, val] of [[S.DIAG_DMA_ADDR_LO, 0x100000], [S.DIAG_DMA_LEN, 4096], [S.DIAG_DMA_CTRL, 1]]) {
      await pb.client.regionWrite(0, reg!, bytes(val!));
    }
    expect(await pb.client.read32(0, S.DIAG_DMA_ERROR)).toBe(14);
    // The PV page exists for a (pv) and not for b (fv); a's area registers through its DMA map.
    expect(await pa.client.read32(0, S.PV_MAGIC)).toBe(S.PV_MAGIC_VALUE);
    expect(await pb.client.read32(0, S.PV_MAGIC)).toBe(0);
    await pa.client.write32(0, S.PV_AREA_LO, 0x100000);
    await pa.client.write32(0, S.PV_AREA_SLOTS, 2);
    expect(await pa.client.read32(0, S.PV_STATUS)).toBe(0);
    native.munmap(mem.buffer as ArrayBuffer);
  });

  it('a scrub runs in steps: another VM is served meanwhile, and the next client of the VM only once it is done', async () => {
    engine = new Engine({ vramSize: 320 << 20, channels: 8 });
    agg = new Aggregator({ engine, hostReserved: 16 << 20, quarantineMs: 0 });
    const a = new MediatedVgpu(agg, { name: 'a', mode: 'fv', slice: 256 << 20 });
    const b = new MediatedVgpu(agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    expect(a.vgpu.s.scrubPending).toBe(false); // a free slice is zero: nothing to scrub at attach
    const { base, size } = a.vgpu.slice;
    const server = new Server();
    const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-scrub-'));
    try {
      const sock = path.join(dir, 'a.sock');
      const l = server.listen(sock, a.device);
      const c1 = VfioUserClient.connect(sock);
      await c1.version();
      // The guest leaves data all over its slice, then goes away. A word in every page: the
      // scrub zeroes only pages that hold data, and with one page per MiB its 16 steps took a
      // few µs each and could all run before the test's 2 ms poll saw the client go.
      for (let off = 0; off < size; off += 4096) engine.vram.write32(base + off + 0x40, 0xdead0000 + off / (1 << 20));
      const pb = await connect(b);
      c1.close();
      await until(() => l.endpoint === null);
      expect(a.vgpu.s.scrubPending).toBe(true);
      // b's register reads are answered while a's 256 MiB are zeroed 16 MiB per turn.
      const order: string[] = [];
      a.vgpu.whenScrubbed(() => order.push('scrubbed'));
      expect(await pb.client.read32(0, S.PMC_BOOT_0)).not.toBe(0);
      order.push('b served');
      // A client that connects now is held until the scrub is done, and sees none of the data.
      const c2 = VfioUserClient.connect(sock);
      await c2.version();
      order.push('a served');
      expect(order).toEqual(['b served', 'scrubbed', 'a served']);
      for (let off = 0; off < size; off += 1 << 20) {
        if (engine.vram.read32(base + off + 0x40) !== 0) expect.fail(`word at +${off} survived the scrub`);
      }
      c2.close();
      await until(() => l.endpoint === null);
    } finally {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a client that goes away leaves the vGPU reset, its channels freed and its slice scrubbed', async () => {
    setup();
    const v = new MediatedVgpu(agg!, { name: 'a', mode: 'fv', slice: 16 << 20 });
    const p = await connect(v);
    const { base } = v.vgpu.slice;
    // An instance block in the slice and a bound channel.
    await p.client.write32(1, 0x10000 + S.INST.USERD_LO, 0x20000);
    await p.client.write32(1, 0x10000 + S.INST.GP_BASE_HI, 1 << 16);
    await p.client.write32(1, 0x10000 + S.INST.PD_LO, 0x30000);
    await p.client.write32(0, S.PFIFO_CHAN + 8 * 2, (S.CHAN_VALID | 0x10) >>> 0);
    expect(await p.client.read32(0, S.PFIFO_CHAN_ERR + 8 * 2)).toBe(0);
    expect(agg!.chidsInUse).toBe(1);
    engine!.vram.write32(base + 0x50000, 0x12345678);
    p.client.close();
    await p.closed;
    pairs.splice(pairs.indexOf(p), 1);
    expect(agg!.chidsInUse).toBe(0);
    await new Promise<void>((r) => v.vgpu.whenScrubbed(r));
    expect(engine!.vram.read32(base + 0x50000)).toBe(0);
    expect(engine!.vram.read32(base + 0x10000 + S.INST.PD_LO)).toBe(0);
    // The socket takes the next client, which sees a fresh device.
    const q = await connect(v);
    expect(await q.client.read32(0, S.PFIFO_CHAN + 8 * 2)).toBe(0);
  });
});
