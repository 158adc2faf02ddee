// Getting a server process ready before it is handed the VMs (an upgrade's successor, a
// standby): the adoption path compiled and the heap settled, so neither happens inside the
// guests' pause (docs/results.md, "Surviving a restart", has what each saves).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { logger } from '../log.ts';
import { Vugpu, type VugpuOptions } from '../server.ts';
import { decodeCheckpoint, encodeCheckpoint } from './checkpoint.ts';
import { restoreAll, saveAll, VRAM_FD } from './state.ts';

/**
 * Run the device-model, aggregator, engine and checkpoint code once on a throwaway server (its
 * own temporary sockets, 32 MiB of VRAM, the native engine, logs off) while this successor or
 * standby waits for its turn. In a fresh Node process that code is parsed and compiled when it
 * first runs, and on a loaded small host that was a large part of an upgrade's pause. A
 * warm-up that fails costs only its time.
 */
export function warmUp(opts: VugpuOptions): void {
  const t0 = performance.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-warm-'));
  const level = logger.level;
  logger.level = 'silent';
  let v: Vugpu | undefined;
  try {
    const vms = opts.vms.slice(0, 4).map((vm, i) => ({
      ...vm, name: `warm${i}`, socket: path.join(dir, `${i}.sock`), slice: vm.mode === 'pt' ? undefined : 4 << 20,
    }));
    const o: VugpuOptions = { vms, vramSize: 32 << 20, engine: 'native', channels: opts.channels, watchdogMs: opts.watchdogMs, policy: opts.policy, policyConfig: opts.policyConfig };
    v = new Vugpu(o);
    const state = decodeCheckpoint(encodeCheckpoint(1, { vugpu: saveAll(v) })).sections.vugpu;
    // ... and the adoption itself: restore that state into a second throwaway server.
    const vram = fs.openSync(`/proc/self/fd/${v.engine.vramFd}`, 'r+');
    v.close();
    v = undefined;
    v = restoreAll(state, new Map([[VRAM_FD, vram]]), o).vugpu;
  } catch (err) {
    logger.level = level;
    logger.debug({ err: (err as Error).message }, 'warm-up stopped early');
    logger.level = 'silent';
  } finally {
    try {
      v?.close();
    } catch {
      // only a warm-up
    }
    logger.level = level;
    fs.rmSync(dir, { recursive: true, force: true });
  }
  logger.info({ ms: Math.round(performance.now() - t0) }, 'warmed up the adoption path');
}

/**
 * A full garbage collection now, before this process is handed the VMs: start-up, the warm-up
 * and the ahead-build leave V8 an incremental mark-compact due, which otherwise runs inside the
 * guests' pause in steps (docs/results.md, "Surviving a restart").
 */
export function settleHeap(): void {
  try {
    v8.setFlagsFromString('--expose-gc');
    (runInNewContext('gc') as () => void)();
  } catch {
    // an optimisation only
  }
}
