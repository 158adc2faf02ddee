// bench/vulkan-gemm-floor.c, the hand-pipelined GEMM-with-transfers probe behind the README's
// "Known limits" (run on the GPU host; here on lavapipe, whose one queue runs every plan in
// order): it builds with the host's gcc, runs every plan on the engine's own GEMM shader, checks
// each plan's C, reports a wrong one with exit 1, and refuses bad arguments with one line and
// exit 2.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const SPV = path.join(ROOT, 'build/spirv/native/shaders/builtins/fmmul_gpu64.spv');
let dir: string;
let tool: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vugpu-vkgemm-'));
  tool = path.join(dir, 'vulkan-gemm-floor');
  execFileSync('gcc', ['-O2', '-Wall', '-Werror', '-o', tool, path.join(ROOT, 'bench/vulkan-gemm-floor.c'), '-lvulkan', '-lm']);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Out {
  device: string;
  n: number;
  rounds: number;
  plans: { name: string; bestUs: number; p50Us: number; checkWorst: number }[];
  allChecked: boolean;
}

describe('bench/vulkan-gemm-floor.c', () => {
  it('runs every plan on the engine shader, each result checked', () => {
    const r = spawnSync(tool, [SPV, '512', '1'], { encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as Out;
    expect([out.n, out.rounds, out.allChecked]).toEqual([512, 1, true]);
    expect(out.plans.map((p) => p.name)).toEqual(['serial 1q', 'serial 3q', 'panels 2', 'panels 4', 'panels 8']);
    for (const p of out.plans) {
      expect(p.checkWorst, p.name).toBeLessThanOrEqual(1);
      expect(p.bestUs, p.name).toBeGreaterThan(0);
      expect(p.p50Us, p.name).toBeGreaterThanOrEqual(p.bestUs);
    }
    expect(r.stderr).toContain(out.device);
  });

  it('reports a shader that computes the wrong C with exit 1', () => {
    // The same interface as fmmul_gpu64.comp; every workgroup writes 1 where C is A·B.
    const src = path.join(dir, 'wrong.comp');
    writeFileSync(src, `#version 450
layout(local_size_x = 16, local_size_y = 16) in;
layout(set = 0, binding = 0) readonly buffer A { vec4 a[]; };
layout(set = 0, binding = 1) readonly buffer B { vec4 b[]; };
layout(set = 0, binding = 2) buffer C { vec4 c[]; };
layout(push_constant) uniform P { uint n, k0, k1, acc; } pc;
void main() {
  uint n4 = pc.n >> 2u, row0 = gl_WorkGroupID.y * 64u, q = gl_WorkGroupID.x * 16u + gl_LocalInvocationID.x;
  for (uint i = 0u; i < 4u; i++) c[(row0 + gl_LocalInvocationID.y * 4u + i) * n4 + q] = vec4(1.0);
}
`);
    const spv = path.join(dir, 'wrong.spv');
    execFileSync('glslangValidator', ['-V', '--target-env', 'vulkan1.1', '-o', spv, src], { stdio: 'pipe' });
    const r = spawnSync(tool, [spv, '512', '1'], { encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(1);
    const out = JSON.parse(r.stdout) as Out;
    expect(out.allChecked).toBe(false);
    for (const p of out.plans) expect(p.checkWorst, p.name).toBeGreaterThan(1);
  });

  it('refuses bad arguments with one line and exit 2', () => {
    const notSpirv = path.join(dir, 'not.spv');
    writeFileSync(notSpirv, 'not a module\n');
    for (const args of [[SPV, '1000'], [SPV, '256'], [SPV, '512', '0'], [SPV, '512', '501'], [path.join(dir, 'none.spv')], [notSpirv]]) {
      const r = spawnSync(tool, args, { encoding: 'utf8', timeout: 10_000 });
      expect(r.status, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^(usage: )?vulkan-gemm-floor/);
    }
  });
});
