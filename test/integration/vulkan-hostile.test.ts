// Hostile Vulkan applications through the vugpu Vulkan driver (issue 31): in an fv guest's
// application layer, guest/vkhostile's vk-hostile attacks through the Vulkan API only — an endless
// shader, data-driven out-of-bounds indices, a buffer freed while a dispatch uses it, a command
// buffer resubmitted while pending, huge grids and many dispatches, a descriptor set on freed
// memory, a process SIGKILLed mid-submission — each on a VkDevice of its own, with canary
// buffers of a witness VkDevice around its memory; then a clean run in the same process and in a
// fresh one. Each attack must end in a clear error or a lost device for that application, never a
// hang. Beside it a co-tenant VM generates llama.cpp tokens with the tiny model the whole time.
// The co-tenant is the native twin (the same Vulkan driver in a host process over vfio-user, on
// its own VM socket of the same server), not a second guest: a TCG guest running Node and
// llama.cpp beside a TCG attacker would take most of this 2-core host for many minutes, while
// the twin reaches the server through the same device model, aggregator, scheduler and engine.
// Its tokens must equal the host CPU backend's in every run, its runs must span every attack,
// the server must log no error, and afterwards the VM whose slice lies above the attacker's
// holds nothing but zeros (guest/hostile's VRAM scan).
// Needs `npm run setup` (the application image) and the npm registry once (scripts/llama-deps.sh);
// never skipped.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { llamaModel, llamaModules, runLlama, scratch, type LlamaRun } from '../../bench/lib/llama.ts';
import { vfioErrorLines, type CheckResult, type GuestRecord } from '../../src/vm/console.ts';
import { bootGuest, runGuest, type GuestResult } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const VKAPP = '/opt/vugpu/vkapp.sh';
const VKHOSTILE = '/opt/vugpu/vk-hostile';
const HOSTILE = '/opt/vugpu/hostile.sh';
const TOKENS = 12;
/** Generations per co-tenant process: enough that model loading is not most of its time. */
const REPEAT = 2;
const WATCHDOG_MS = 2000;
const GUEST_TIMEOUT_MS = 600_000;
/** vk-hostile's records, in order (guest/vkhostile/vk-hostile.c). */
const ATTACKS = [
  'vk-endless', 'vk-oob-indices', 'vk-free-while-running', 'vk-resubmit-pending', 'vk-huge-dispatch',
  'vk-freed-descriptor', 'vk-killed-mid-submit',
];
const CHECKS = ['vk-device', ...ATTACKS, 'vk-clean-after', 'vk-clean-new-process'];
/**
 * The longest pause between two co-tenant generations processes: the next is spawned when the
 * previous closes, so only process start-up lies between them — far below any attack's length.
 */
const MAX_GAP_MS = 2000;
const EVIL = 'vm0';

interface Stamped { rec: GuestRecord; t: number }
interface CoRun { start: number; end: number; run?: LlamaRun; error?: string }

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let modules: string;
let model: string;
let twinEnv: Record<string, string>;
let reference: number[];

const sock = (vm: string) => path.join(dir, `${vm}.sock`);

function context(r: GuestResult): string {
  return [
    `exit=${r.exitCode} signal=${r.signal} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-60), '--- qemu stderr', ...r.stderr.slice(-10),
    '--- server (tail)', server?.tail(20) ?? '',
  ].join('\n');
}

function coTenantRun(): Promise<CoRun> {
  const start = performance.now();
  return runLlama({ modules, model, gpu: 'vulkan', tokens: TOKENS, repeat: REPEAT, env: twinEnv, timeoutMs: 300_000 })
    .then((run) => ({ start, end: performance.now(), run }))
    .catch((e: Error) => ({ start, end: performance.now(), error: e.message }));
}

describe('hostile Vulkan applications in a guest beside a co-tenant generating tokens', () => {
  beforeAll(async () => {
    manifest = loadManifest();
    expect(manifest.vkapp, 'no application image: run npm run setup').toBeTruthy();
    for (const f of [VKAPP, VKHOSTILE, HOSTILE]) expect(manifest.guestFiles, `guest image lacks ${f}: run npm run setup`).toContain(f);
    dir = scratch('vugpu-vkhostile-');
    const b = spawnSync('make', ['-s', '-C', path.join(ROOT, 'guest/vulkan'), 'host', `O=${dir}`], { encoding: 'utf8' });
    if (b.status !== 0) throw new Error(`building the Vulkan driver failed:\n${b.stdout}\n${b.stderr}`);
    modules = llamaModules();
    model = llamaModel('tiny', 'f32');
    const icd = path.join(dir, 'vugpu_icd.json');
    twinEnv = { VUGPU_SOCKET: sock('co'), VK_DRIVER_FILES: icd, VK_ICD_FILENAMES: icd };
    reference = (await runLlama({ modules, model, gpu: 'cpu', tokens: TOKENS })).tokens;
    server = await startServer({
      socket: sock(EVIL),
      args: [
        '--mode', 'fv',
        // the slice right above the attacker's: scanned afterwards, never used by a guest before
        '--vm', `name=canary,socket=${sock('canary')},mode=fv,slice=64M`,
        '--vm', `name=co,socket=${sock('co')},mode=fv,slice=256M`,
        '--watchdog-ms', String(WATCHDOG_MS), '--policy', 'band',
      ],
    });
    for (const vm of ['canary', 'co']) {
      const deadline = performance.now() + 30_000;
      while (!fs.existsSync(sock(vm)) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(fs.existsSync(sock(vm)), server.tail()).toBe(true);
    }
  }, 600_000);

  afterAll(async () => {
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the co-tenant alone: the twin generates the CPU backend\'s tokens', async () => {
    // also the co-tenant VM's first use of every llama.cpp module (checked and compiled once)
    const r = await coTenantRun();
    expect(r.error).toBeUndefined();
    expect(r.run!.device).toMatch(/vugpu/);
    expect(r.run!.tokens).toEqual(reference);
    expect(r.run!.same).toBe(true);
  }, 400_000);

  test('every attack is contained; the co-tenant generated the same tokens throughout; the server logged no error', async () => {
    const stamped: Stamped[] = [];
    const co: CoRun[] = [];
    let attackerDone = false;
    const loop = (async () => {
      while (!attackerDone) co.push(await coTenantRun());
    })();
    // the co-tenant's first process starts now; the attacker's guest takes far longer to boot
    const g = bootGuest({
      manifest, sockets: [sock(EVIL)], appImage: true, memoryMiB: 1024, run: VKAPP, args: ['sh', VKHOSTILE],
      timeoutMs: GUEST_TIMEOUT_MS, onLine: (_l, rec) => { if (rec) stamped.push({ rec, t: performance.now() }); },
    });
    const evil = await g.done;
    attackerDone = true;
    await loop;
    const info = context(evil);

    // The attacker: every record, every one contained, no hang, a clean exit.
    const checks = evil.checks as (CheckResult & Record<string, unknown>)[];
    console.log('\nvk-hostile in an fv guest: what each attack saw');
    for (const c of checks) console.log(JSON.stringify(c));
    expect(evil.timedOut, info).toBe(false);
    expect(checks.map((c) => c.check), info).toEqual(CHECKS);
    for (const c of checks) expect(c.ok, `${c.check}: ${JSON.stringify(c)}`).toBe(true);
    const byName = Object.fromEntries(checks.map((c) => [c.check, c]));
    expect(byName['vk-endless']!.result).toBe('VK_ERROR_DEVICE_LOST');
    expect(byName['vk-endless']!.ms as number).toBeLessThan(60_000);
    expect((byName['vk-huge-dispatch']!.over_max as { result: string }).result).toBe('VK_ERROR_DEVICE_LOST');
    expect(evil.records.filter((x) => x.kind === 'PARSE_ERROR' || x.kind === 'ERROR'), info).toEqual([]);
    expect(evil.guestExit, info).toBe(0);
    expect(vfioErrorLines(evil.stderr), info).toEqual([]);

    // The attacks, as host-clock intervals: from each attack-start to its record.
    const intervals: { name: string; start: number; end: number }[] = [];
    let open: { name: string; start: number } | undefined;
    for (const { rec, t } of stamped) {
      if (rec.kind === 'PHASE' && rec.data.phase === 'attack-start') open = { name: String(rec.data.attack), start: t };
      if (rec.kind === 'CHECK' && open && rec.data.check === open.name) {
        intervals.push({ ...open, end: t });
        open = undefined;
      }
    }
    expect(intervals.map((i) => i.name)).toEqual([...ATTACKS, 'vk-clean-after']);

    // The co-tenant: every run generated the reference tokens, and its runs, back to back, span
    // every attack.
    for (const r of co) {
      expect(r.error).toBeUndefined();
      expect(r.run!.tokens).toEqual(reference);
      expect(r.run!.same).toBe(true);
    }
    console.log(`co-tenant: ${co.length} processes, ${co.length * REPEAT} generations of ${TOKENS} tokens`);
    for (let i = 1; i < co.length; i++) expect(co[i]!.start - co[i - 1]!.end).toBeLessThan(MAX_GAP_MS);
    for (const iv of intervals) {
      const covering = co.filter((r) => r.start < iv.end && r.end > iv.start);
      expect(covering.length, `no co-tenant generation during ${iv.name}`).toBeGreaterThan(0);
      expect(co[0]!.start, `the co-tenant started after ${iv.name}`).toBeLessThan(iv.start);
      expect(co.at(-1)!.end, `the co-tenant ended before ${iv.name}`).toBeGreaterThan(iv.end);
    }

    // The server: up, nothing at error level.
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines()).toEqual([]);
  }, GUEST_TIMEOUT_MS + 400_000);

  test('afterwards: the slice above the attacker\'s holds no byte', async () => {
    const r = await runGuest({ manifest, sockets: [sock('canary')], run: '/bin/sh', args: [HOSTILE, 'scan'], timeoutMs: 180_000 });
    const info = context(r);
    const clean = r.checks.find((c) => c.check === 'vram-clean') as (CheckResult & Record<string, unknown>) | undefined;
    expect(clean, info).toBeDefined();
    expect(clean!.ok, JSON.stringify(clean)).toBe(true);
    expect(clean!.attacker_words).toBe(0);
    expect(r.guestExit, info).toBe(0);
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines()).toEqual([]);
  }, 240_000);
});
