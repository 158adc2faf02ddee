// llama.cpp, unmodified (node-llama-cpp 3.21.1's prebuilt Vulkan build), on the vugpu GPU through
// the guest Vulkan driver (guest/vulkan): greedy token ids of a seeded tiny model must equal those
// of the same model run directly on the host — on llama.cpp's CPU backend and on the host's own
// Vulkan device (lavapipe). The tiny model is F32: with quantized weights the CPU backend and the
// Vulkan shaders round differently and the greedy streams part after a few tokens.
// Needs `npm run setup` (the application image) and the npm registry once (scripts/llama-deps.sh);
// never skipped.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { lavapipeIcd, llamaModel, llamaModules, runLlama, scratch, type LlamaRun } from '../../bench/lib/llama.ts';
import { vfioErrorLines } from '../../src/vm/console.ts';
import { runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const TOKENS = 16;
const GUEST_TIMEOUT_MS = 600_000;
const VKAPP = '/opt/vugpu/vkapp.sh';

let manifest: Manifest;
let modules: string;
let model: string;
let dir: string;
let hostCpu: LlamaRun;
let hostLavapipe: LlamaRun;
let guestCpu: GuestResult;

function llamaRecord(r: GuestResult): LlamaRun | undefined {
  return r.records.find((x) => x.kind === 'LLAMA')?.data as LlamaRun | undefined;
}

async function waitSocket(s: string, server: ServerProcess): Promise<void> {
  const deadline = performance.now() + 30_000;
  while (!fs.existsSync(s) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(fs.existsSync(s), server.tail()).toBe(true);
}

function context(r: GuestResult): string {
  return [`exit=${r.exitCode} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`, ...r.console.slice(-30)].join('\n');
}

afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('llama.cpp on the host: the references', () => {
  beforeAll(async () => {
    manifest = loadManifest();
    expect(manifest.vkapp, 'no application image: run npm run setup').toBeTruthy();
    expect(manifest.guestFiles).toContain(VKAPP);
    modules = llamaModules();
    model = llamaModel('tiny', 'f32');
    dir = scratch('vugpu-llama-');
    hostCpu = await runLlama({ modules, model, gpu: 'cpu', tokens: TOKENS });
    hostLavapipe = await runLlama({
      modules, model, gpu: 'vulkan', tokens: TOKENS,
      env: { VK_DRIVER_FILES: lavapipeIcd(), VK_ICD_FILENAMES: lavapipeIcd(), GGML_VK_VISIBLE_DEVICES: '0' },
    });
    guestCpu = await runGuest({ manifest, appImage: true, memoryMiB: 1024, run: VKAPP, args: ['llama', 'tiny', 'cpu', String(TOKENS)], timeoutMs: GUEST_TIMEOUT_MS });
  }, 3 * GUEST_TIMEOUT_MS);

  test('the guest image carries the same model the host generates', () => {
    // setup's vkapp step writes /opt/models/tiny.gguf with the same writer, shape, type and seed
    expect(path.basename(model)).toBe('tiny-f32-seed1.gguf');
  });

  test('CPU backend and the host Vulkan device (lavapipe) agree token for token', () => {
    expect(hostCpu.tokens.length).toBe(TOKENS);
    expect(hostLavapipe.device).toMatch(/llvmpipe/);
    expect(hostLavapipe.tokens).toEqual(hostCpu.tokens);
  });

  test('llama.cpp runs unmodified in a guest (CPU backend): the host tokens', () => {
    const rec = llamaRecord(guestCpu);
    expect(rec, context(guestCpu)).toBeDefined();
    expect(rec!.tokens).toEqual(hostCpu.tokens);
    expect(guestCpu.guestExit, context(guestCpu)).toBe(0);
    expect(vfioErrorLines(guestCpu.stderr)).toEqual([]);
  });
});

describe('llama.cpp on the vugpu GPU through the guest Vulkan driver', () => {
  let mediated: ServerProcess;
  let pt: ServerProcess;
  let fvSuite: GuestResult;
  let pvBatch: GuestResult;
  let ptGuest: GuestResult;
  let twin: LlamaRun;
  let twinStarted = 0;
  let twinEnded = 0;

  beforeAll(async () => {
    const a = path.join(dir, 'a.sock');
    const b = path.join(dir, 'b.sock');
    const c = path.join(dir, 'c.sock');
    mediated = await startServer({
      socket: path.join(dir, 'idle.sock'),
      args: ['--mode', 'fv', '--vram', '4G', '--vm', `name=a,socket=${a},mode=fv,slice=1G`, '--vm', `name=b,socket=${b},mode=pv-batch,slice=1G`, '--vm', `name=c,socket=${c},mode=fv,slice=1G`],
    });
    for (const s of [a, b, c]) await waitSocket(s, mediated);
    pt = await startServer({ socket: path.join(dir, 'pt.sock'), args: ['--vram', '2G'] });
    // The driver built for this host: the native twin (the same library over vfio-user).
    const icd = path.join(dir, 'icd');
    const made = spawnSync('make', ['-s', '-C', path.resolve(import.meta.dirname, '../../guest/vulkan'), 'host', `O=${icd}`], { encoding: 'utf8' });
    expect(made.status, `${made.stdout}${made.stderr}`).toBe(0);
    const manifestFile = path.join(icd, 'vugpu_icd.json');

    // fv alone, the whole suite: vulkaninfo, the validation layer, llama.cpp, VkFFT.
    fvSuite = await runGuest({ manifest, sockets: [a], appImage: true, memoryMiB: 1024, run: VKAPP, args: ['suite', String(TOKENS)], timeoutMs: GUEST_TIMEOUT_MS });
    // Then three tenants at once, each generating: a pv-batch guest, a pt guest (its own server),
    // and the twin on VM c.
    const twinRun = (async () => {
      twinStarted = performance.now();
      twin = await runLlama({ modules, model, gpu: 'vulkan', tokens: TOKENS, env: { VUGPU_SOCKET: c, VK_DRIVER_FILES: manifestFile, VK_ICD_FILENAMES: manifestFile } });
      twinEnded = performance.now();
    })();
    [pvBatch, ptGuest] = await Promise.all([
      runGuest({ manifest, sockets: [b], appImage: true, memoryMiB: 1024, run: VKAPP, args: ['--pv', '2', 'llama', 'tiny', 'vulkan', String(TOKENS)], timeoutMs: GUEST_TIMEOUT_MS }),
      runGuest({ manifest, sockets: [pt.socket], appImage: true, memoryMiB: 1024, run: VKAPP, args: ['llama', 'tiny', 'vulkan', String(TOKENS)], timeoutMs: GUEST_TIMEOUT_MS }),
    ]);
    await twinRun;
  }, 4 * GUEST_TIMEOUT_MS);

  afterAll(async () => {
    await mediated?.stop();
    await pt?.stop();
  });

  test('vulkaninfo in an fv guest lists the vugpu device, and the validation layer finds nothing', () => {
    const checks = Object.fromEntries(fvSuite.checks.map((c) => [c.check, c]));
    expect(checks['vulkaninfo-summary']?.ok, context(fvSuite)).toBe(true);
    expect(checks['vulkaninfo-validation']?.ok, JSON.stringify(checks['vulkaninfo-validation'])).toBe(true);
    const summary = fvSuite.console.join('\n');
    expect(summary).toMatch(/deviceName\s+= vugpu GPU \(kmod\)/);
    expect(summary).toMatch(/deviceType\s+= PHYSICAL_DEVICE_TYPE_DISCRETE_GPU/);
    expect(summary).toMatch(/apiVersion\s+= 1\.2\./);
  });

  test('fv guest: llama.cpp generates the host tokens on the vugpu device', () => {
    const rec = llamaRecord(fvSuite);
    expect(rec, context(fvSuite)).toBeDefined();
    expect(rec!.device).toBe('vugpu GPU (kmod)');
    expect(rec!.tokens).toEqual(hostLavapipe.tokens);
  });

  test('fv guest: VkFFT 1-D and 2-D transforms agree with FFTW', () => {
    const fft = fvSuite.checks.filter((c) => c.check.startsWith('vkfft-'));
    expect(fft.length, context(fvSuite)).toBe(6);
    for (const c of fft) expect(c.ok, JSON.stringify(c)).toBe(true);
    expect(fvSuite.guestExit, context(fvSuite)).toBe(0);
  });

  test('pv-batch guest, pt guest and the native twin at once: identical token streams', () => {
    for (const [name, r] of [['pv-batch', pvBatch], ['pt', ptGuest]] as const) {
      const rec = llamaRecord(r);
      expect(rec, `${name}\n${context(r)}`).toBeDefined();
      expect(rec!.device, name).toBe('vugpu GPU (kmod)');
      expect(rec!.tokens, name).toEqual(hostLavapipe.tokens);
      expect(r.guestExit, context(r)).toBe(0);
    }
    expect(twin.device).toBe('vugpu GPU (host)');
    expect(twin.tokens).toEqual(hostLavapipe.tokens);
    // the twin really generated while the guests ran
    expect(twinEnded).toBeGreaterThan(twinStarted);
  });

  test('no server logged an error, every guest left cleanly', () => {
    for (const r of [fvSuite, pvBatch, ptGuest]) {
      expect(r.timedOut, context(r)).toBe(false);
      expect(vfioErrorLines(r.stderr), context(r)).toEqual([]);
    }
    for (const s of [mediated, pt]) {
      expect(s.alive, s.tail()).toBe(true);
      expect(s.errorLines(), s.tail()).toEqual([]);
    }
  });
});
