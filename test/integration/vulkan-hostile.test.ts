// Hostile Vulkan applications through the vugpu Vulkan driver (issue 31): in an fv guest's
// application layer, guest/vkhostile's vk-hostile attacks through the Vulkan API only — an endless
// shader, data-driven out-of-bounds indices, a buffer freed while a dispatch uses it, a command
// buffer resubmitted while pending, huge grids and many dispatches, a descriptor set on freed
// memory, a process SIGKILLed mid-submission — each on a VkDevice of its own, with canary
// buffers of a witness VkDevice around its memory; then a clean run in the same process and in a
// fresh one. Each attack must end in a clear error or a lost device for that application, never a
// hang. Beside it a co-tenant fv guest generates llama.cpp tokens with the tiny model through the
// same Vulkan driver the whole time: one llama.cpp process (guest/vkapp/vkapp.sh `worker`, the
// model loaded once) whose requests come on the guest's second serial port, sent back to back.
// One process rather than one per generation keeps the co-tenant's TCG guest busy on the device,
// not on starting Node. Its tokens must equal the host CPU backend's in every generation, its
// generations must span every attack, the server must log no error, the co-tenant guest must
// leave cleanly, and afterwards the VM whose slice lies above the attacker's holds nothing but
// zeros (guest/hostile's VRAM scan).
// Needs `npm run setup` (the application image) and the npm registry once (scripts/llama-deps.sh);
// never skipped.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { llamaModel, llamaModules, scratch, workerTokens } from '../../bench/lib/llama.ts';
import { vfioErrorLines, type CheckResult, type GuestRecord } from '../../src/vm/console.ts';
import { bootGuest, runGuest, type GuestResult, type GuestVm } from '../../src/vm/launcher.ts';
import { loadManifest, type Manifest } from '../../src/vm/manifest.ts';
import { startServer, type ServerProcess } from '../../src/vm/server-process.ts';

const VKAPP = '/opt/vugpu/vkapp.sh';
const VKHOSTILE = '/opt/vugpu/vk-hostile';
const HOSTILE = '/opt/vugpu/hostile.sh';
const TOKENS = 12;
/** The co-tenant's prompt (token ids of the tiny model's vocabulary). */
const PROMPT = [1, 300, 301, 302, 303, 304];
const WATCHDOG_MS = 2000;
const GUEST_TIMEOUT_MS = 600_000;
/** The co-tenant guest lives through the attacker's boot and run. */
const CO_TIMEOUT_MS = 2 * GUEST_TIMEOUT_MS;
const LLAMA_WORKER = '/opt/vugpu/llama-worker.ts';
/** vk-hostile's records, in order (guest/vkhostile/vk-hostile.c). */
const ATTACKS = [
  'vk-endless', 'vk-oob-indices', 'vk-free-while-running', 'vk-resubmit-pending', 'vk-huge-dispatch',
  'vk-freed-descriptor', 'vk-killed-mid-submit',
];
const CHECKS = ['vk-device', ...ATTACKS, 'vk-clean-after', 'vk-clean-new-process'];
/**
 * The longest pause between two co-tenant generations: the next request is sent when the previous
 * answer arrives, so only the serial port lies between them — far below any attack's length.
 */
const MAX_GAP_MS = 2000;
const EVIL = 'vm0';

interface Stamped { rec: GuestRecord; t: number }
interface CoRun { start: number; end: number; tokens?: number[]; error?: string }

let manifest: Manifest;
let server: ServerProcess;
let dir: string;
let reference: number[];
/** The co-tenant guest and its request port. */
let co: GuestVm;
let coPort: net.Socket;
let coId = 0;
let coResult: GuestResult | undefined;

const sock = (vm: string) => path.join(dir, `${vm}.sock`);

function context(r: GuestResult): string {
  return [
    `exit=${r.exitCode} signal=${r.signal} timedOut=${r.timedOut} guestExit=${r.guestExit} wall=${Math.round(r.durationMs)}ms`,
    '--- console (tail)', ...r.console.slice(-60), '--- qemu stderr', ...r.stderr.slice(-10),
    '--- server (tail)', server?.tail(20) ?? '',
  ].join('\n');
}

function coContext(): string {
  return ['--- co-tenant console (tail)', ...co.console.slice(-30), '--- server (tail)', server?.tail(20) ?? ''].join('\n');
}

/** One greedy generation of the co-tenant guest's llama.cpp, timed on this host's clock. */
async function coTenantRun(): Promise<CoRun> {
  const id = ++coId;
  const start = performance.now();
  coPort.write(`${JSON.stringify({ id, prompt: PROMPT, tokens: TOKENS })}\n`);
  const r = await co.waitFor((x) => (x.kind === 'LLAMA_WORKER' && x.data.id === id) || x.kind === 'VM_EXITED');
  const end = performance.now();
  if (r.kind !== 'LLAMA_WORKER') return { start, end, error: 'the co-tenant guest exited' };
  if (r.data.error) return { start, end, error: String(r.data.error) };
  return { start, end, tokens: r.data.tokens as number[] };
}

describe('hostile Vulkan applications in a guest beside a co-tenant guest generating tokens', () => {
  beforeAll(async () => {
    manifest = loadManifest();
    expect(manifest.vkapp, 'no application image: run npm run setup').toBeTruthy();
    for (const f of [VKAPP, VKHOSTILE, HOSTILE, LLAMA_WORKER]) expect(manifest.guestFiles, `guest image lacks ${f}: run npm run setup`).toContain(f);
    dir = scratch('vugpu-vkhostile-');
    // the application image's /opt/models/tiny.gguf is this model (the same writer, shape, type, seed)
    reference = await workerTokens({ modules: llamaModules(), model: llamaModel('tiny', 'f32'), gpu: 'cpu', prompt: PROMPT, tokens: TOKENS });
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
    // The co-tenant: llama.cpp in an fv guest, its requests on the second serial port.
    const ctl = path.join(dir, 'co-ctl.sock');
    co = bootGuest({
      manifest, sockets: [sock('co')], appImage: true, memoryMiB: 1024, timeoutMs: CO_TIMEOUT_MS,
      run: VKAPP, args: ['worker', 'tiny', 'vulkan', '256'],
      qemuArgs: ['-chardev', `socket,id=vgctl,path=${ctl},server=on,wait=off`, '-serial', 'chardev:vgctl'],
    });
    const ready = await co.waitFor((r) => r.kind === 'LLAMA_WORKER' || r.kind === 'ERROR' || r.kind === 'VM_EXITED');
    expect(ready.data, coContext()).toMatchObject({ ready: true, device: 'vugpu GPU (kmod)' });
    coPort = net.connect(ctl);
    await new Promise<void>((res, rej) => coPort.once('connect', res).once('error', rej));
  }, 900_000);

  afterAll(async () => {
    coPort?.destroy();
    co?.killNow('SIGKILL');
    await server?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the co-tenant alone: llama.cpp in its guest generates the CPU backend\'s tokens', async () => {
    // also the co-tenant VM's first use of every llama.cpp module (checked and compiled once)
    const r = await coTenantRun();
    expect(r.error, coContext()).toBeUndefined();
    expect(r.tokens).toEqual(reference);
  }, 400_000);

  test('every attack is contained; the co-tenant generated the same tokens throughout; the server logged no error', async () => {
    const stamped: Stamped[] = [];
    const runs: CoRun[] = [];
    let attackerDone = false;
    const loop = (async () => {
      while (!attackerDone) {
        const r = await coTenantRun();
        runs.push(r);
        if (r.error) break;
      }
    })();
    // the co-tenant's first generation starts now; the attacker's guest takes far longer to boot
    const g = bootGuest({
      manifest, sockets: [sock(EVIL)], appImage: true, memoryMiB: 1024, run: VKAPP, args: ['sh', VKHOSTILE],
      timeoutMs: GUEST_TIMEOUT_MS, onLine: (_l, rec) => { if (rec) stamped.push({ rec, t: performance.now() }); },
    });
    const evil = await g.done;
    attackerDone = true;
    await loop;
    // the co-tenant's input ends: its llama.cpp exits and its guest powers off
    coPort.write('\x04');
    coResult = await co.done;
    const info = context(evil);

    // The attacker: every record, every one contained, no hang, a clean exit.
    const checks = evil.checks as (CheckResult & Record<string, unknown>)[];
    console.log('\nvk-hostile in an fv guest: what each attack saw');
    for (const c of checks) console.log(JSON.stringify(c));
    expect(evil.timedOut, info).toBe(false);
    expect(checks.map((c) => c.check), info).toEqual(CHECKS);
    // soft: one contained-attack failure still lets the co-tenant's and the server's checks speak
    for (const c of checks) expect.soft(c.ok, `${c.check}: ${JSON.stringify(c)}\n${info}`).toBe(true);
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

    // The co-tenant: every generation gave the reference tokens, and its generations, back to
    // back, span every attack; its guest left cleanly.
    for (const r of runs) {
      expect(r.error, coContext()).toBeUndefined();
      expect(r.tokens).toEqual(reference);
    }
    console.log(`co-tenant guest: ${runs.length} generations of ${TOKENS} tokens`);
    for (let i = 1; i < runs.length; i++) expect(runs[i]!.start - runs[i - 1]!.end).toBeLessThan(MAX_GAP_MS);
    for (const iv of intervals) {
      const covering = runs.filter((r) => r.start < iv.end && r.end > iv.start);
      expect(covering.length, `no co-tenant generation during ${iv.name}`).toBeGreaterThan(0);
      expect(runs[0]!.start, `the co-tenant started after ${iv.name}`).toBeLessThan(iv.start);
      expect(runs.at(-1)!.end, `the co-tenant ended before ${iv.name}`).toBeGreaterThan(iv.end);
    }
    expect(coResult.timedOut, coContext()).toBe(false);
    expect(coResult.guestExit, coContext()).toBe(0);
    expect(vfioErrorLines(coResult.stderr), coContext()).toEqual([]);

    // The server: up, nothing at error level.
    expect(server.alive, server.tail()).toBe(true);
    expect(server.errorLines()).toEqual([]);
  }, GUEST_TIMEOUT_MS + 120_000);

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
