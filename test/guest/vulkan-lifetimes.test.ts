// The Vulkan driver (guest/vulkan) over the native twin, where the driver core's lifetimes meet a
// busy or failed channel (issue 31's two open bugs):
// - vk-lifetimes (guest/vulkan/test), free-busy and load-busy: device memory allocated and freed, unused, while a long dispatch
//   still runs and a later submission (which carries the device's clear of that memory) waits
//   behind it — legal Vulkan, no command uses the memory; and shader modules loaded and first
//   launched behind a long dispatch, as llama.cpp does, with no idle wait in the driver. The core
//   once unmapped freed memory before the work queued ahead of the free had run: the clear
//   faulted (PTE not present on a COMPUTE write) and the VkDevice was lost.
// - vk-lifetimes' after-loss: a VkDevice lost to a launch the device refuses (BAD_PROGRAM), the
//   loss seen by polling its fence, the device destroyed, then a new VkDevice of the same
//   process must compute. Its channel (the same chid) once inherited the lost one's
//   unacknowledged error interrupt and failed its first submission. vk-hostile's huge-dispatch
//   attack and clean run after it (--one-process: the twin serves one process per VM socket) is
//   the same in a hostile application's order.
// Both through a pass-through and a mediated (fv) VM; the programs run on the server's program
// device (lavapipe here).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Vugpu } from '../../src/server.ts';
import { native } from '../../src/native.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const hasGlslang = spawnSync('sh', ['-c', 'command -v glslangValidator'], { encoding: 'utf8' }).status === 0;
const programDevices = native.vulkanDevices().length;

interface Run {
  code: number | null;
  out: string;
}

/** Run asynchronously: the server answers from this process's event loop. */
function run(cmd: string, args: string[], env: Record<string, string>, timeoutMs = 240_000): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env: { ...process.env, ...env } });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

type Check = { check: string; ok: boolean } & Record<string, unknown>;

function checks(out: string): Map<string, Check> {
  const m = new Map<string, Check>();
  for (const line of out.split('\n')) {
    if (!line.startsWith('VUGPU-CHECK ')) continue;
    const c = JSON.parse(line.slice('VUGPU-CHECK '.length)) as Check;
    m.set(c.check, c);
  }
  return m;
}

describe.skipIf(!hasGlslang || programDevices === 0).each(['pt', 'fv'] as const)('Vulkan driver lifetimes over the twin (%s)', (mode) => {
  let dir = '';
  let server: Vugpu | undefined;
  let env: Record<string, string> = {};

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-vklife-'));
    for (const [sub, target] of [['guest/vulkan', 'check'], ['guest/vkhostile', 'all']]) {
      const b = spawnSync('make', ['-s', '-C', path.join(ROOT, sub!), target!, `O=${dir}`], { encoding: 'utf8' });
      if (b.status !== 0) throw new Error(`building ${sub} failed:\n${b.stdout}\n${b.stderr}`);
    }
    const socket = path.join(dir, 'vm.sock');
    server = new Vugpu({
      vramSize: 1 << 30, channels: 64, watchdogMs: 30_000, policy: 'fifo',
      vms: [{ name: 'vm', socket, mode, slice: mode === 'pt' ? undefined : 512 << 20 }],
    });
    const manifest = path.join(dir, 'vugpu_icd.json');
    env = { VUGPU_SOCKET: socket, VK_DRIVER_FILES: manifest, VK_ICD_FILENAMES: manifest };
  }, 180_000);
  afterAll(() => {
    server?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('memory freed and modules loaded while the device is busy, a new VkDevice after a lost one: nothing faults, every word is right', async () => {
    const r = await run(path.join(dir, 'vk-lifetimes'), ['--rounds', '3', '--long-groups', '512', dir], env);
    const c = checks(r.out);
    for (const name of ['load-busy', 'free-busy', 'after-loss']) expect(c.get(name)?.ok, `${name}: ${r.out}`).toBe(true);
    // the loads and frees began while the long dispatch still ran (it takes far longer than the
    // allocations, submissions and frees that follow it), at least once each
    expect(c.get('load-busy')!.while_busy as number, r.out).toBeGreaterThan(0);
    expect(c.get('free-busy')!.while_busy as number, r.out).toBeGreaterThan(0);
    expect(r.out).not.toMatch(/MMU fault|error 0 \(NONE\)/);
    // the only losses are after-loss's deliberate ones, one a round
    expect(r.out.match(/device lost in/g) ?? [], r.out).toHaveLength(3);
    expect(r.code, r.out).toBe(0);
  }, 300_000);

  it('vk-hostile: after its BAD_PROGRAM loss, a new VkDevice of the same process computes', async () => {
    const r = await run(path.join(dir, 'vk-hostile'), ['--only', 'huge-dispatch', '--one-process'], env);
    const c = checks(r.out);
    expect((c.get('vk-huge-dispatch')?.over_max as { result: string } | undefined)?.result, r.out).toBe('VK_ERROR_DEVICE_LOST');
    expect(c.get('vk-huge-dispatch')?.ok, r.out).toBe(true);
    expect(c.get('vk-clean-after')?.ok, r.out).toBe(true);
    expect(c.get('vk-clean-after')?.result, r.out).toBe('VK_SUCCESS');
    expect([...c.keys()], r.out).toEqual(['vk-device', 'vk-huge-dispatch', 'vk-clean-after']);
    expect(r.code, r.out).toBe(0);
  }, 300_000);
});
