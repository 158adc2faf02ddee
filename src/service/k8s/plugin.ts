// `vugpu k8s-device-plugin`: vGPU slots as Kubernetes extended resources, through the kubelet
// device-plugin API v1beta1 (api.proto) over gRPC (grpc.ts).
//
// Slots come in classes by VRAM (`--slots 4x256M,2x1G`); each class is one resource, named like
// MIG profiles (`vugpu.io/vgpu-256m`), with its own plugin socket in the kubelet's directory and
// its own Register call; a slot is a device (`vgpu-256m-0` …). ListAndWatch advertises them,
// Healthy while the vugpu server answers and its VRAM has room for them. Allocate creates the
// slot's VM through the control API (`k8s-<device>`, a mediated VM with the class's slice and a
// socket in its own directory under /run/vugpu/k8s) and hands the pod that directory (a mount at
// /var/run/vugpu/gpu0, gpu1, … by position; the directory, not the socket file, so that a
// re-created socket stays visible), env variables naming the socket, and optionally a CDI device
// (whose edits mount at /var/run/vugpu/<device>: CDI edits are per device). There is no Deallocate in the API: a slot's VM
// stays, idle once its QEMU is gone (vugpu scrubbed its VRAM then), and is reused by the next
// Allocate of that device. The kubelet deletes plugin sockets when it restarts: the plugin
// notices (its socket or kubelet.sock changed) and registers again.
import fs from 'node:fs';
import path from 'node:path';
import { logger, type Logger } from '../../log.ts';
import { ControlClient } from '../ctl.ts';
import { formatSize } from '../config.ts';
import { GrpcClient, GrpcError, GrpcServer, Status, loadProto, type ServerCall } from './grpc.ts';

export const API_VERSION = 'v1beta1';
export const PROTO = path.join(import.meta.dirname, 'api.proto');
export const KUBELET_SOCKET = 'kubelet.sock';

export interface SlotClass {
  /** Slice bytes (a power of two). */
  vram: number;
  count: number;
}

export interface PluginOptions {
  control: ControlClient;
  /** The kubelet's device-plugin directory (kubelet.sock and the plugins' sockets). */
  kubeletDir: string;
  slots: SlotClass[];
  mode: string;
  /** Resource name domain: `<domain>/vgpu-<size>`. */
  domain: string;
  /** Host directory for the slots' VM sockets (one sub-directory per device). */
  socketDir: string;
  /** Where the pod sees those directories. */
  containerDir: string;
  /** Write a CDI spec here and answer CDI device names too (the DevicePluginCDIDevices gate). */
  cdiDir?: string;
  /** Health check period, ms. */
  healthMs: number;
  log?: Logger;
}

interface Slot {
  id: string;
  vram: number;
  healthy: boolean;
}

type Msg = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** `vgpu-256m`, `vgpu-1g`: a resource (and device-id prefix) per slice size. */
export function className(vram: number): string {
  return `vgpu-${formatSize(vram).toLowerCase()}`;
}

/** One resource: its gRPC server, its devices, its watchers. */
class Resource {
  readonly name: string;
  readonly resourceName: string;
  readonly endpoint: string;
  readonly slots: Slot[];
  server: GrpcServer | null = null;
  socketIno = 0;
  readonly watchers = new Set<ServerCall>();

  constructor(domain: string, c: SlotClass) {
    this.name = className(c.vram);
    this.resourceName = `${domain}/${this.name}`;
    this.endpoint = `vugpu-${this.name}.sock`;
    this.slots = Array.from({ length: c.count }, (_, i) => ({ id: `${this.name}-${i}`, vram: c.vram, healthy: false }));
  }

  list(): Msg {
    return { devices: this.slots.map((s) => ({ ID: s.id, health: s.healthy ? 'Healthy' : 'Unhealthy' })) };
  }
}

export class DevicePlugin {
  private readonly o: PluginOptions;
  private readonly log: Logger;
  private readonly root = loadProto(PROTO);
  readonly resources: Resource[];
  private readonly byId = new Map<string, { r: Resource; slot: Slot }>();
  private timer: NodeJS.Timeout | null = null;
  private kubeletIno = 0;
  private stopped = false;
  private checking = false;

  constructor(o: PluginOptions) {
    this.o = o;
    this.log = o.log ?? logger.child({ part: 'k8s' });
    const seen = new Set<string>();
    this.resources = o.slots.map((c) => new Resource(o.domain, c)).filter((r) => !seen.has(r.name) && seen.add(r.name));
    for (const r of this.resources) for (const s of r.slots) this.byId.set(s.id, { r, slot: s });
  }

  /** Serve every resource, register them, and keep checking health and the kubelet. */
  async start(): Promise<void> {
    if (this.o.cdiDir) this.writeCdiSpec();
    await this.refreshHealth();
    for (const r of this.resources) await this.serve(r);
    await this.registerAll();
    this.timer = setInterval(() => void this.tick(), Math.min(this.o.healthMs, 1000));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    for (const r of this.resources) {
      for (const w of r.watchers) w.end();
      await r.server?.close();
      fs.rmSync(path.join(this.o.kubeletDir, r.endpoint), { force: true });
    }
  }

  private lastHealth = 0;
  private async tick(): Promise<void> {
    if (this.checking || this.stopped) return;
    this.checking = true;
    try {
      // The kubelet restarted (it removes plugin sockets and makes a new kubelet.sock): serve
      // again and register again.
      const kIno = inode(path.join(this.o.kubeletDir, KUBELET_SOCKET));
      const lost = this.resources.filter((r) => inode(path.join(this.o.kubeletDir, r.endpoint)) !== r.socketIno);
      if (lost.length > 0 || (kIno !== 0 && kIno !== this.kubeletIno)) {
        this.log.info({ lost: lost.map((r) => r.resourceName), kubeletRestarted: kIno !== this.kubeletIno }, 'kubelet restarted or plugin socket gone: registering again');
        for (const r of lost) await this.serve(r);
        await this.registerAll();
      }
      if (Date.now() - this.lastHealth >= this.o.healthMs) await this.refreshHealth();
    } catch (err) {
      this.log.error({ err }, 'device plugin check failed');
    } finally {
      this.checking = false;
    }
  }

  private async serve(r: Resource): Promise<void> {
    await r.server?.close();
    const s = new GrpcServer(this.root, this.log);
    s.addService('v1beta1.DevicePlugin', {
      GetDevicePluginOptions: () => ({ pre_start_required: false, get_preferred_allocation_available: true }),
      ListAndWatch: (_req: Msg, call: ServerCall) => {
        r.watchers.add(call);
        call.onCancel(() => r.watchers.delete(call));
        call.write(r.list());
      },
      GetPreferredAllocation: (req: Msg) => ({ container_responses: (req.container_requests as Msg[]).map((c) => ({ deviceIDs: preferred(c) })) }),
      Allocate: (req: Msg) => this.allocate(req),
      PreStartContainer: () => ({}),
    });
    const sock = path.join(this.o.kubeletDir, r.endpoint);
    await s.listen(sock);
    r.server = s;
    r.socketIno = inode(sock);
    this.log.info({ resource: r.resourceName, socket: sock, devices: r.slots.length }, 'device plugin serving');
  }

  private async registerAll(): Promise<void> {
    const kubelet = path.join(this.o.kubeletDir, KUBELET_SOCKET);
    this.kubeletIno = inode(kubelet);
    if (this.kubeletIno === 0) {
      this.log.warn({ socket: kubelet }, 'no kubelet socket yet: registering when it appears');
      return;
    }
    const c = new GrpcClient(this.root, kubelet);
    try {
      for (const r of this.resources) {
        await c.unary('v1beta1.Registration', 'Register', {
          version: API_VERSION, endpoint: r.endpoint, resource_name: r.resourceName,
          options: { pre_start_required: false, get_preferred_allocation_available: true },
        });
        this.log.info({ resource: r.resourceName, endpoint: r.endpoint }, 'registered with the kubelet');
      }
    } catch (err) {
      // Retried at the next check (kubeletIno reset): the kubelet may be starting.
      this.kubeletIno = -1;
      this.log.error({ err: (err as Error).message }, 'registration with the kubelet failed');
    } finally {
      await c.close();
    }
  }

  /** Healthy: the server answers, and the slot's VM exists or the free VRAM has room for it. */
  async refreshHealth(): Promise<void> {
    this.lastHealth = Date.now();
    let vms = new Set<string>();
    let free = 0;
    let up = true;
    try {
      const st = await this.o.control.call('GET', '/v1');
      free = (st.vram as { freeBytes: number }).freeBytes;
      const list = await this.o.control.call('GET', '/v1/vms');
      vms = new Set((list.vms as { name: string }[]).map((v) => v.name));
    } catch (err) {
      up = false;
      if (this.resources.some((r) => r.slots.some((s) => s.healthy))) this.log.warn({ err: (err as Error).message }, 'vugpu does not answer: slots unhealthy');
    }
    for (const r of this.resources) {
      let changed = false;
      for (const s of r.slots) {
        let healthy = up && vms.has(vmName(s.id));
        if (up && !healthy && free >= s.vram) {
          healthy = true;
          free -= s.vram;
        }
        if (healthy !== s.healthy) {
          s.healthy = healthy;
          changed = true;
        }
      }
      if (changed) {
        this.log.info({ resource: r.resourceName, healthy: r.slots.filter((s) => s.healthy).length, of: r.slots.length }, 'device health changed');
        for (const w of r.watchers) w.write(r.list());
      }
    }
  }

  private async allocate(req: Msg): Promise<Msg> {
    const responses: Msg[] = [];
    const created: string[] = [];
    try {
      for (const cr of req.container_requests as Msg[]) {
        const ids = cr.devices_ids as string[];
        if (ids.length === 0) throw new GrpcError(Status.INVALID_ARGUMENT, 'a container request without devices');
        const sockets: string[] = [];
        const mounts: Msg[] = [];
        let vram = 0;
        for (const id of ids) {
          const d = this.byId.get(id);
          if (!d) throw new GrpcError(Status.INVALID_ARGUMENT, `unknown device ${id}`);
          const name = vmName(id);
          const dir = path.join(this.o.socketDir, id);
          const socket = path.join(dir, 'vfio-user.sock');
          const existing = await this.o.control.call('GET', `/v1/vms/${name}`).catch((e: { status?: number }) => {
            if (e.status === 404) return null;
            throw e;
          });
          if (existing) {
            const state = (existing.vm as { state: string }).state;
            if (state !== 'idle') throw new GrpcError(Status.FAILED_PRECONDITION, `device ${id}: its VM ${name} still has a QEMU attached (${state})`);
          } else {
            await this.o.control.call('POST', '/v1/vms', { name, socket, mode: this.o.mode, slice: d.slot.vram });
            created.push(name);
          }
          vram += d.slot.vram;
          // In the container by position (gpu0, gpu1, …), not by device id: a path known before
          // the kubelet picks the device (a KubeVirt hook writes it into the domain XML).
          const inPod = path.join(this.o.containerDir, `gpu${sockets.length}`);
          sockets.push(path.join(inPod, 'vfio-user.sock'));
          mounts.push({ container_path: inPod, host_path: dir, read_only: false });
        }
        this.log.info({ devices: ids, created: created.length }, 'allocated');
        responses.push({
          envs: {
            VUGPU_DEVICES: ids.join(','), VUGPU_SOCKETS: sockets.join(','), VUGPU_SOCKET: sockets[0]!,
            VUGPU_VRAM_BYTES: String(vram), VUGPU_MODE: this.o.mode,
          },
          mounts,
          devices: [],
          annotations: { 'vugpu.io/devices': ids.join(',') },
          cdi_devices: this.o.cdiDir ? ids.map((id) => ({ name: `${this.o.domain}/vgpu=${id}` })) : [],
        });
      }
    } catch (err) {
      // All or nothing: VMs this call created go again.
      for (const name of created) await this.o.control.call('DELETE', `/v1/vms/${name}`).catch(() => {});
      this.log.warn({ err: (err as Error).message }, 'allocation refused');
      if (err instanceof GrpcError) throw err;
      const e = err as { status?: number; message: string };
      throw new GrpcError(e.status === 409 ? Status.RESOURCE_EXHAUSTED : Status.UNAVAILABLE, `vugpu: ${e.message}`);
    } finally {
      if (created.length > 0) void this.refreshHealth();
    }
    return { container_responses: responses };
  }

  /** A CDI spec (cdiVersion 0.6.0) with one device per slot: the same mount and env as Allocate. */
  private writeCdiSpec(): void {
    const devices = this.resources.flatMap((r) => r.slots.map((s) => ({
      name: s.id,
      containerEdits: {
        env: [`VUGPU_SOCKET=${path.join(this.o.containerDir, s.id, 'vfio-user.sock')}`, `VUGPU_DEVICES=${s.id}`, `VUGPU_VRAM_BYTES=${s.vram}`],
        mounts: [{ hostPath: path.join(this.o.socketDir, s.id), containerPath: path.join(this.o.containerDir, s.id), options: ['rbind', 'rw'] }],
      },
    })));
    const spec = { cdiVersion: '0.6.0', kind: `${this.o.domain}/vgpu`, devices };
    fs.mkdirSync(this.o.cdiDir!, { recursive: true });
    const file = path.join(this.o.cdiDir!, `${this.o.domain}-vgpu.json`);
    fs.writeFileSync(`${file}.tmp`, `${JSON.stringify(spec, null, 2)}\n`);
    fs.renameSync(`${file}.tmp`, file);
    this.log.info({ file, devices: devices.length }, 'CDI spec written');
  }
}

export function vmName(deviceId: string): string {
  return `k8s-${deviceId}`;
}

/** must_include first, then the lowest-numbered available devices, up to allocation_size. */
export function preferred(c: Msg): string[] {
  const out: string[] = [...(c.must_include_deviceIDs as string[])];
  const num = (id: string) => Number(/-(\d+)$/.exec(id)?.[1] ?? 0);
  for (const id of [...(c.available_deviceIDs as string[])].sort((a, b) => num(a) - num(b))) {
    if (out.length >= c.allocation_size) break;
    if (!out.includes(id)) out.push(id);
  }
  return out.slice(0, Math.max(c.allocation_size as number, (c.must_include_deviceIDs as string[]).length));
}

function inode(p: string): number {
  try {
    return fs.statSync(p).ino;
  } catch {
    return 0;
  }
}
