// Lazy shadowing (fv) against the moment the device reads GP_PUT. The engine reads a channel's
// GP_PUT when its submission is dispatched (or a runlist submit kicks it), which can be after the
// guest flushed new mappings and wrote further entries that use them, but before the doorbell
// for those entries arrived. The shadow must be current whenever the device reads GP_PUT
// (found by test/integration/hostile.test.ts: co-tenant kernels faulting PTE_NOT_PRESENT while
// another VM kept the device busy).
import { describe, expect, it } from 'vitest';
import { K } from '../../src/gpu/kernels.ts';
import * as S from '../../src/gpu/spec.ts';
import { buf, closedAfterEach, until, type Host } from './harness.ts';
import { params } from '../gpu/helpers.ts';

const { host, guest } = closedAfterEach();
let h: Host | null = null;

describe('lazy shadowing and the device reading GP_PUT', () => {
  it('entries written after a flush, whose doorbell is still on its way, see the flushed mappings when an earlier submission is dispatched', async () => {
    h = host();
    const a = guest(h.agg, { name: 'a', mode: 'fv', slice: 32 << 20 });
    const b = guest(h.agg, { name: 'b', mode: 'fv', slice: 32 << 20 });
    // b keeps the device busy ...
    const out = b.vram(64);
    const long = b.ch.launch(K.LOOP, [buf(out)], params(['u64', 0n], ['u64', 300_000_000n], ['u32', 1]));
    await until(() => h!.agg.policy.running === 'b');
    // ... so a's first submission waits for dispatch.
    const first = a.ch.launch(K.NOP, []);
    // a maps a new buffer (flush: the lazy shadow is only marked dirty) and writes a kernel
    // that fills it, GP_PUT included; its doorbell has not arrived when the dispatch happens.
    const fresh = a.vram(4096);
    fresh.u32.fill(0xdeadbeef);
    const held: number[] = [];
    const wr = a.drv.wr.bind(a.drv);
    a.drv.wr = (off: number, v: number) => (off === S.DOORBELL ? void held.push(v) : wr(off, v));
    const second = a.ch.launch(K.MEMSET, [buf(fresh)], params(['u32', 0x12345678], ['u32', 0], ['u64', 1024n]));
    a.drv.wr = wr;
    second.catch(() => {}); // awaited below; a fault is reported by the counter first
    expect(held.length).toBeGreaterThan(0);
    await long;
    await first;
    // The dispatch of `first` made the device read GP_PUT, which already covers `second`.
    await until(() => fresh.u32[1023] !== 0xdeadbeef || a.vm.counters.faults > 0);
    expect(a.vm.counters.faults).toBe(0);
    for (const v of held) a.wr(S.DOORBELL, v);
    await second;
    expect(fresh.u32.every((x) => x === 0x12345678)).toBe(true);
  });
});
