// llama.cpp, unmodified (node-llama-cpp 3.21.1's prebuilt Vulkan build), on the vugpu GPU through
// the guest Vulkan driver (guest/vulkan): greedy token ids of a seeded tiny model must equal those
// of the same model run directly on the host — on llama.cpp's CPU backend and on the host's own
// Vulkan device (lavapipe). The tiny model is F32: with quantized weights the CPU backend and the
// Vulkan shaders round differently and the greedy streams part after a few tokens.
// Needs `npm run setup` (the application image) and the npm registry once (scripts/llama-deps.sh);
// never skipped.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { lavapipeIcd, llamaModel, llamaModules, runLlama, scratch, type LlamaRun } from '../../bench/lib/llama.ts';
import { vfioErrorLines } from '../../src/vm/console.ts';
import { runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';

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

function context(r: GuestResult): string {
  return [`exit=${r.exitCode} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`, ...r.console.slice(-30)].join('\n');
}

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

  afterAll(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

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
