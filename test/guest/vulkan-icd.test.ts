// The Vulkan driver (guest/vulkan, libvulkan_vugpu.so) in a host process over vfio-user — the
// native twin of the guest's application layer: the Khronos loader finds it through its manifest
// (VK_DRIVER_FILES), vulkaninfo lists the device, and vk-icd-check (guest/vulkan/test) computes
// through it: copies, fill, update, spec + push constants, 8/16-bit storage, indirect dispatch,
// events, timestamps, timeline semaphores, subgroup sums, a module refused at pipeline creation
// and a device lost beside a working one. The validation layer must find nothing on the driver's
// side. Then llama.cpp, unmodified, generates the CPU backend's tokens through it. The programs
// run on the server's program device (lavapipe here).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Vugpu } from '../../src/server.ts';
import { native } from '../../src/native.ts';
import { llamaModel, llamaModules, runLlama } from '../../bench/lib/llama.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const LAYER = '/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json';
const hasVulkaninfo = spawnSync('sh', ['-c', 'command -v vulkaninfo'], { encoding: 'utf8' }).status === 0;
const hasGlslang = spawnSync('sh', ['-c', 'command -v glslangValidator'], { encoding: 'utf8' }).status === 0;
const hasLayer = fs.existsSync(LAYER);
const programDevices = native.vulkanDevices().length;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
}

/** Run asynchronously: the server answers from this process's event loop. */
function run(cmd: string, args: string[], env: Record<string, string>, timeoutMs = 180_000): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env: { ...process.env, ...env } });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

function checks(out: string): Map<string, { ok: boolean; detail?: string; skipped?: string }> {
  const m = new Map<string, { ok: boolean; detail?: string; skipped?: string }>();
  for (const line of out.split('\n')) {
    if (!line.startsWith('VUGPU-CHECK ')) continue;
    const c = JSON.parse(line.slice('VUGPU-CHECK '.length)) as { check: string; ok: boolean; detail?: string; skipped?: string };
    m.set(c.check, c);
  }
  return m;
}

const CHECKS = ['device', 'vadd', 'narrow', 'subgroup', 'host-sem', 'refused', 'lost'];

describe.skipIf(!hasGlslang || programDevices === 0)('Vulkan ICD over the native twin', () => {
  let dir = '';
  let server: Vugpu | undefined;
  let env: Record<string, string> = {};

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vugpu-vkicd-'));
    const b = spawnSync('make', ['-s', '-C', path.join(ROOT, 'guest/vulkan'), 'check', `O=${dir}`], { encoding: 'utf8' });
    if (b.status !== 0) throw new Error(`building the Vulkan driver failed:\n${b.stdout}\n${b.stderr}`);
    const socket = path.join(dir, 'vm.sock');
    server = new Vugpu({ vramSize: 1 << 30, channels: 64, watchdogMs: 30_000, policy: 'fifo', vms: [{ name: 'vm', socket, mode: 'pt' }] });
    const manifest = path.join(dir, 'vugpu_icd.json');
    // only this driver: the loader must not pick lavapipe instead
    env = { VUGPU_SOCKET: socket, VK_DRIVER_FILES: manifest, VK_ICD_FILENAMES: manifest };
  }, 180_000);
  afterAll(() => {
    server?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the manifest names the library it sits beside', () => {
    const m = JSON.parse(fs.readFileSync(path.join(dir, 'vugpu_icd.json'), 'utf8')) as { ICD: { library_path: string; api_version: string } };
    expect(m.ICD.library_path).toBe(path.join(dir, 'libvulkan_vugpu.so'));
    expect(m.ICD.api_version).toMatch(/^1\.2\./);
    // only the loader's entry points leave the library (no vk* symbol interposes on the loader's)
    const nm = spawnSync('nm', ['-D', '--defined-only', m.ICD.library_path], { encoding: 'utf8' });
    const syms = nm.stdout.split('\n').filter((l) => l.trim()).map((l) => l.split(' ').pop());
    expect(syms.sort()).toEqual(['vk_icdGetInstanceProcAddr', 'vk_icdGetPhysicalDeviceProcAddr', 'vk_icdNegotiateLoaderICDInterfaceVersion']);
  });

  it.skipIf(!hasVulkaninfo)('vulkaninfo --summary lists the vugpu device', async () => {
    const r = await run('vulkaninfo', ['--summary'], env);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/apiVersion\s+= 1\.2\./);
    expect(r.out).toMatch(/deviceType\s+= PHYSICAL_DEVICE_TYPE_DISCRETE_GPU/);
    expect(r.out).toMatch(/deviceName\s+= vugpu GPU \(host\)/);
    expect(r.out).toMatch(/driverName\s+= vugpu/);
  }, 120_000);

  it.skipIf(!hasVulkaninfo || !hasLayer)('full vulkaninfo under the validation layer: no error, the advertised features', async () => {
    const r = await run('vulkaninfo', [], { ...env, VK_INSTANCE_LAYERS: 'VK_LAYER_KHRONOS_validation' });
    expect(r.code, r.out.slice(-4000)).toBe(0);
    expect(r.out).not.toMatch(/Validation Error/);
    expect(r.out).toMatch(/VK_KHR_16bit_storage/);
    expect(r.out).toMatch(/storageBuffer16BitAccess\s+= true/);
    expect(r.out).toMatch(/storageBuffer8BitAccess\s+= true/);
    expect(r.out).toMatch(/timelineSemaphore\s+= true/);
    expect(r.out).toMatch(/bufferDeviceAddress\s+= false/);
    expect(r.out).toMatch(/maxPerStageDescriptorStorageBuffers\s+= (1[2-9]|[2-9]\d)/);
    expect(r.out).toMatch(/queueFlags\s+= QUEUE_COMPUTE \| QUEUE_TRANSFER\s*\n/);
    expect(r.out).not.toMatch(/VK_KHR_buffer_device_address|VK_KHR_cooperative_matrix|VK_KHR_shader_integer_dot_product/);
  }, 300_000);

  it('vk-icd-check: every check passes', async () => {
    const r = await run(path.join(dir, 'vk-icd-check'), [dir], env);
    const c = checks(r.out);
    for (const name of CHECKS) expect(c.get(name)?.ok, `${name}: ${r.out}`).toBe(true);
    expect(r.code, r.out).toBe(0);
  }, 300_000);

  it.skipIf(!hasLayer)('vk-icd-check under the validation layer: no error from the driver', async () => {
    const r = await run(path.join(dir, 'vk-icd-check'), ['--validate', dir], env);
    const c = checks(r.out);
    for (const name of [...CHECKS, 'validation']) expect(c.get(name)?.ok, `${name}: ${r.out}`).toBe(true);
    expect(r.code, r.out).toBe(0);
  }, 300_000);

  // an unmodified application: node-llama-cpp 3.21.1's prebuilt Vulkan build (scripts/llama-deps.sh
  // installs it from npm once); the tiny model is F32, so the CPU backend is a token-exact reference
  it('llama.cpp through the driver: greedy tokens equal the CPU backend\'s', async () => {
    const modules = llamaModules();
    const model = llamaModel('tiny', 'f32');
    const cpu = await runLlama({ modules, model, gpu: 'cpu', tokens: 8 });
    const st0 = { ...server!.engine.programs!.stats }; // vk-icd-check's deliberate refusals came before
    const vk = await runLlama({ modules, model, gpu: 'vulkan', tokens: 8, env, timeoutMs: 500_000 });
    expect(vk.device).toBe('vugpu GPU (host)');
    expect(vk.tokens).toHaveLength(8);
    expect(vk.tokens).toEqual(cpu.tokens);
    // Every module ggml-vulkan created went through the device's checker and compiler: none
    // refused (what the driver does not advertise — integer dot product, cooperative matrix,
    // buffer device address — keeps the modules that need it out of llama.cpp's choice).
    const st = server!.engine.programs!.stats;
    const compiled = st.compiles - st0.compiles;
    const refused = st.refused - st0.refused;
    console.log(`llama.cpp through the driver: ${compiled} programs compiled, ${refused} refused`);
    expect(compiled).toBeGreaterThan(10);
    expect(refused).toBe(0);
  }, 600_000);

  it('no vugpu device: the loader sees none, the application gets a clean error', async () => {
    const r = await run(path.join(dir, 'vk-icd-check'), [dir], { ...env, VUGPU_SOCKET: path.join(dir, 'nothing.sock') });
    expect(r.signal).toBeNull();
    expect(r.code).toBe(1);
    expect(checks(r.out).get('device')?.ok).toBe(false);
  }, 120_000);
});
