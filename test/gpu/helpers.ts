// Shared setup for the engine tests: a real engine (memfd VRAM), the host driver, and buffers
// in VRAM or system memory (memfds behind the driver's bus resolver) with CPU views.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Engine, type EngineOptions } from '../../src/gpu/engine.ts';
import { HostDriver, type GpuVm, type HostChannel } from '../support/host-driver/driver.ts';
import { TARGET_SYSMEM } from '../../src/gpu/spec.ts';

export interface GpuBuf {
  va: number;
  bytes: number;
  u8: Uint8Array;
  f32: Float32Array;
  u32: Uint32Array;
  where: 'vram' | 'sysmem';
}

export interface Rig {
  engine: Engine;
  drv: HostDriver;
  ch: HostChannel;
  vm: GpuVm;
  vram(bytes: number, opts?: { readOnly?: boolean; large?: boolean }): GpuBuf;
  sys(bytes: number, opts?: { readOnly?: boolean }): GpuBuf;
  close(): void;
}

export function rig(opts: EngineOptions = {}): Rig {
  const engine = new Engine({ vramSize: 128 << 20, channels: 8, ...opts });
  const drv = new HostDriver(engine);
  const ch = drv.createChannel();
  const vm = ch.vm;
  const views = (u8: Uint8Array) => ({
    u8,
    f32: new Float32Array(u8.buffer, u8.byteOffset, u8.byteLength >> 2),
    u32: new Uint32Array(u8.buffer, u8.byteOffset, u8.byteLength >> 2),
  });
  return {
    engine, drv, ch, vm,
    vram(bytes, o = {}) {
      const b = drv.vramBuffer(vm, bytes, o);
      return { va: b.va, bytes, where: 'vram', ...views(b.u8) };
    },
    sys(bytes, o = {}) {
      const b = drv.allocSysmem(bytes);
      const va = vm.map(b.bus, b.size, { target: TARGET_SYSMEM, readOnly: o.readOnly });
      return { va, bytes, where: 'sysmem', ...views(b.u8.subarray(0, bytes)) };
    },
    close() {
      drv.close();
      engine.close();
    },
  };
}

/** A GLSL compute shader compiled with glslangValidator (a host tool setup installs). */
export function glsl(src: string): Uint8Array {
  const dir = mkdtempSync(path.join(tmpdir(), 'vugpu-glsl-'));
  try {
    writeFileSync(path.join(dir, 's.comp'), src);
    execFileSync('glslangValidator', ['-V', '--target-env', 'vulkan1.1', '-o', path.join(dir, 's.spv'), path.join(dir, 's.comp')]);
    return new Uint8Array(readFileSync(path.join(dir, 's.spv')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export { rng } from '../prng.ts';

export { params } from '../kernel-params.ts';

export const buf = (b: GpuBuf) => ({ va: b.va, length: b.bytes });
