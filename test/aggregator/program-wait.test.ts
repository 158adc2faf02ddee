// A VM whose channel waits for a program compile must not hold the device (hw-spec §6.3.4:
// compiles run beside the device, on the compiling VM's own time). Found by bench/flood.ts: a
// guest that rings a second doorbell while its first launch compiles was dispatched again, and
// the aggregator kept that submission on the device (BUSY, not ACQUIRE_WAIT) until the compile
// — on the nice-19 lane, slow on a busy host — was done; a co-tenant's launches waited behind it
// (its NOP program's p50 went from 0.4 to 8.8 ms). Real engine, aggregator and Vulkan device
// (lavapipe here); the compile's completion is held back by a gate around the real backend.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native.ts';
import { VulkanBackend } from '../../src/gpu/vulkan.ts';
import type { ProgramBackend } from '../../src/gpu/programs.ts';
import type { JobResult } from '../../src/gpu/jobs.ts';
import { guest, host, type Guest } from './harness.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const spirv = (rel: string) => new Uint8Array(readFileSync(path.join(ROOT, 'build/spirv', rel)));
const haveBackend = typeof (native as { vulkanOpen?: unknown }).vulkanOpen === 'function';

/** The real backend; while `held`, finished compiles are reported only on release(). */
function gated(real: ProgramBackend): { backend: ProgramBackend; hold(): void; release(): void; pending(): number } {
  let held = false;
  const waiting: (() => void)[] = [];
  const backend: ProgramBackend = {
    get device() { return real.device; },
    get limits() { return real.limits; },
    get readOnlyWindows() { return real.readOnlyWindows; },
    compile: (slot, words, entry, spec, done) => real.compile(slot, words, entry, spec, (r: JobResult) => {
      if (held) waiting.push(() => done(r));
      else done(r);
    }),
    info: (slot) => real.info(slot),
    dispatch: (job, wd, done) => real.dispatch(job, wd, done),
    cancel: (id) => real.cancel(id),
    release: (slot) => real.release(slot),
    close: () => real.close(),
  };
  return {
    backend,
    hold: () => { held = true; },
    release: () => {
      held = false;
      for (const f of waiting.splice(0)) f();
    },
    pending: () => waiting.length,
  };
}

const settled = <T>(p: Promise<T>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true, () => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

describe.skipIf(!haveBackend)('a channel waiting for a compile', () => {
  let h: ReturnType<typeof host>;
  let gate: ReturnType<typeof gated>;
  let canary: Guest;
  let attacker: Guest;

  beforeAll(() => {
    execFileSync('bash', [path.join(ROOT, 'scripts/build-spirv.sh')], { stdio: 'inherit' });
    gate = gated(VulkanBackend.open(process.env.VUGPU_TEST_VULKAN_DEVICE || undefined));
    h = host({ programs: gate.backend }, { policy: 'band' });
    canary = guest(h.agg, { name: 'canary', mode: 'fv', slice: 64 << 20 });
    attacker = guest(h.agg, { name: 'attacker', mode: 'fv', slice: 64 << 20 });
  });
  afterAll(() => {
    canary?.close();
    attacker?.close();
    h?.close();
  });

  it('leaves the device to the other VM, also when dispatched again while waiting', async () => {
    const nop = canary.drv.programBuffer(canary.gvm, spirv('native/shaders/builtins/nop.spv'));
    await canary.ch.launchProgram(nop, { buffers: [] }); // compiled and cached

    const vecadd = spirv('guest/programs/vecadd.spv');
    const buf = attacker.vram(4096);
    const launch = (generator: number) => {
      const w = vecadd.slice();
      new DataView(w.buffer).setUint32(8, generator, true); // SPIR-V generator word: a new module
      return attacker.ch.launchProgram(attacker.drv.programBuffer(attacker.gvm, w), {
        push: new Uint8Array(new Uint32Array([64]).buffer),
        buffers: [{ va: buf.va, length: 4096, readOnly: true }, { va: buf.va + 1024, length: 1024, readOnly: true }, { va: buf.va + 2048, length: 1024 }],
      });
    };
    gate.hold();
    // Two submissions: the second doorbell dispatches the channel while it waits for the first compile.
    const first = launch(0x10001);
    const second = launch(0x10002);
    const t0 = performance.now();
    while (gate.pending() === 0 && performance.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 2));
    expect(gate.pending(), 'the attacker\'s compile finished').toBe(1);
    await new Promise((r) => setTimeout(r, 20)); // the second doorbell has been dispatched
    try {
      const done = await settled(canary.ch.launchProgram(nop, { buffers: [] }), 1000);
      expect(done, 'the canary\'s launch waited for the attacker\'s compile').toBe(true);
    } finally {
      gate.release();
    }
    const late = setInterval(() => gate.release(), 5); // the second module's compile too
    try {
      await Promise.all([first, second]);
    } finally {
      clearInterval(late);
    }
    expect(h.agg.vm('attacker')!.counters.faults).toBe(0);
  });
});
