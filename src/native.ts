// Typed view of the node-addon-api addon (native/). The addon knows syscalls and compute
// kernels only: no protocol, no GPU semantics. Every call that can fail returns a negative
// errno (number) or throws an Error whose message names the syscall, as documented per call.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

/** One piece of host memory a native job may touch: a range of an fd-backed mapping. */
export interface Extent {
  fd: number;        // memfd (VRAM) or a guest-RAM fd from DMA_MAP
  offset: number;    // byte offset into the fd (page aligned for map windows)
  length: number;    // bytes
  /** Where the server maps the same bytes already (a DMA map's mmap) and at which offset in it,
   * valid while the turn that resolved the extent runs: reads then need no system call (bus.ts
   * readExtents). Native code ignores both. */
  mem?: ArrayBuffer;
  memOffset?: number;
}

/** A contiguous host view over scattered extents, made with mmap(MAP_FIXED) per extent. */
export interface MapWindow {
  id: number;        // handle for unmapWindow
  address: bigint;   // base address of the contiguous view
  length: number;
}

export interface KernelJob {
  kernel: number;            // kernel id (docs/hw-spec.md, compute class)
  windows: bigint[];         // base address of each buffer window, in the kernel's argument order
  lengths: number[];         // byte length of each window (kernels never touch beyond it)
  params: Uint8Array;        // kernel parameters (copied at submit)
  way?: number;              // whose queue and pool threads run it (the VM; default 0)
}

export interface CopyJob {
  src: Extent[];             // scatter-gather source (sum of lengths = dst sum)
  dst: Extent[];
  way?: number;              // whose queue and pool threads run it (the VM; default 0)
}

export interface JobCompletion {
  job: number;               // id returned by submit*
  status: number;            // 0 ok, negative errno, or -ECANCELED when cancelled
  deviceNs: number;          // time the job ran on a pool thread, ns
  part?: number;             // tasks: parts (a batch's launches) completed before status
}

// ---- Vulkan program backend (native/src/vulkan) ----
/** Limits of the program device (hw-spec §3.10 PPROG): program.h's Limits plus launch limits. */
export interface ProgramLimits {
  maxModuleBytes: number;
  maxBindings: number;
  maxPushBytes: number;
  maxSpecConstants: number;
  maxWgInvocations: number;
  maxWgSize: [number, number, number];
  maxSharedBytes: number;
  maxGrid: [number, number, number];
  maxBufferBytes: number;
  bufferAlign: number;        // binding addresses must be multiples of this
  subgroupSize: number;
  loopLimit: number;          // PROG_MAX_LOOP_ITERATIONS (0 = no counting)
  features: number;           // PROG_FEATURES bits
}

export interface VulkanDeviceInfo {
  name: string;
  type: string;               // 'discrete' | 'integrated' | 'virtual' | 'cpu' | 'other'
  api: string;                // e.g. '1.3.230'
  driver: string;             // driverName, e.g. 'llvmpipe'
  driverInfo: string;
  driverId: number;           // VkDriverId (13 = lavapipe)
  driverVersion: number;
  vendorId: number;
  deviceId: number;
  limits: ProgramLimits;
  timestamps: boolean;        // deviceNs of dispatches comes from GPU timestamps
  timestampPeriod: number;
  importAlign: number;        // host-pointer import alignment (windows are imported by these pages)
  robustStorageAlign: number; // bounds checks round a binding's length up to this (1 = exact)
  nullDescriptor: boolean;    // zero-length bindings allowed
  cancelWordDeviceLocal: boolean;
  /** VK_EXT_device_fault: a loss's log line says what the device reported as faulting. */
  deviceFault: boolean;
  /** Buffer device address enabled for vulkanInjectFault (VUGPU_TEST_HOOKS=1 at open, GPUs only). */
  faultInjection: boolean;
  memory: 'import' | 'device'; // zero-copy host imports, or device-local copies per launch
  /** New pipelines are dispatched once on a private device before their first launch, so a CPU
   * device's JIT (lavapipe) stays off the shared queue (native/src/vulkan/warmup.cc). */
  warmUp: boolean;
  transferQueues: number;     // dedicated copy queues (0: copies on the compute queue)
  computeQueues: number;      // compute queues, one per way (VM) onto the device
  maxStorageRange: number;
  /** The tuning knobs in force, parsed from the environment at open (native/src/vulkan/tuning.h). */
  tuning: VulkanTuning;
}

/** The VUGPU_VK_* knobs (names less the prefix), as the backend parsed them. */
export interface VulkanTuning {
  MEMORY: 'auto' | 'import' | 'device'; CMD_QUERY_RESET: boolean; COMPUTE_QUEUES: number; CPU_WAYS: number;
  WARMUP: boolean; MAX_PANELS: number; PANEL_BYTES: number; PANEL_WORKGROUPS: number; PANEL_PAIR: boolean;
  K_SLICES: number; K_SLAB_BYTES: number; UPLOAD_ALL: boolean; IMPORT_TRANSIENT: boolean; ONE_QUEUE_BYTES: number;
  CHAIN_ONE_QUEUE: boolean; FILL_EACH_PANEL: boolean; NO_REPLAY: boolean; SPIN_US: number;
}

export interface ProgramCompileJob {
  slot: number;               // process-wide program slot chosen by JS (0..2^31-1), must be free
  words: Uint32Array;         // SPIR-V module (copied at submit)
  entryIndex: number;         // index among the module's GLCompute entry points
  spec?: Uint32Array;         // (constantId, value) pairs
  /** Narrow the device's limits for this module (e.g. maxBindings = BUFFER_COUNT); never widens. */
  limits?: Partial<Omit<ProgramLimits, 'maxGrid' | 'maxBufferBytes' | 'bufferAlign' | 'subgroupSize'>>;
}

export interface DispatchJob {
  slot: number;
  windows: bigint[];          // host address of binding i's window (bufferAlign-aligned)
  lengths: number[];          // its exact byte length (the shader sees exactly this much)
  params?: Uint8Array;        // push constants (at least the entry's pushBytes)
  grid: [number, number, number];
  builtin?: boolean;          // a built-in kernel: bindings up to the device's maxStorageBufferRange
  panelRowBytes?: number[];   // built-ins: bytes of binding i per workgroup row (0 = whole), streamable
  overwrites?: number[];      // built-ins only (else TypeError): bindings the dispatch writes every byte of
  kStream?: KStream;          // built-ins only (else TypeError): a GEMM operand streamed by rows of k
  way?: number;               // whose way onto the device and pool threads (the VM; default 0)
}

/** A built-in GEMM's operand read by rows of k (vk.h DispatchInput::KStream): the dispatch sums k
 * over [u32 at k0Offset, u32 at k1Offset) of its params and adds into its output when the u32 at
 * accumulateOffset is nonzero, so the device-memory path may run its first panel in slices of k. */
export interface KStream {
  binding: number; rowBytes: number; k0Offset: number; k1Offset: number; accumulateOffset: number;
}

export interface ProgramInfo {
  reason: number;             // 0, or the BAD_PROGRAM reason (hw-spec §6.3.6)
  message: string;
  entry: {
    name: string;
    wg: [number, number, number];
    sharedBytes: number;
    pushBytes: number;
    bindings: { binding: number; writable: boolean }[];
  } | null;                   // null when refused before the entry point was known
}

/** The Vulkan program backend's calls (part of NativeAddon). */
export interface VulkanAddon {
  // guest SPIR-V; the addon loads libvulkan.so.1 at run time
  /** Devices the loader sees; [] (with a `reason` property) when there is no loader or device. */
  vulkanDevices(): { name: string; type: string; driver: string; api: string }[] & { reason?: string };
  /** Open the process-wide program device (name substring, case-insensitive; default: a GPU before
   * a CPU device). Idempotent while open; another device needs vulkanClose first. */
  vulkanOpen(opts?: { device?: string }): { ok: true; info: VulkanDeviceInfo } | { ok: false; error: string };
  /** Drop the device and every program slot (freed once running jobs end). */
  vulkanClose(): void;
  /** Counters since load: imports (new host imports; importHits = reuses of a cached one), the
   * device-memory path's copies, streamed panels, device losses and rebuilds; dispatchPhases:
   * where the pool thread's time per dispatch went (sums: setup = lane, imports, staging and
   * descriptors; record; queueSubmit = vkQueueSubmit; wait = until the fence; finish =
   * timestamps and write-back); replays: launches that submitted the command buffer their lane
   * recorded for the identical launch before it; lastLoss: the last loss's log text (where it
   * was seen, and what the device said faulted where it has VK_EXT_device_fault), "" before any. */
  vulkanStats(): {
    imports: number; importNs: number; importHits: number; uploadBytes: number; downloadBytes: number;
    bounceBytes: number; zeroedBytes: number; panels: number; losses: number; rebuilds: number; warmUps: number; kSlices: number; replays: number; residentBytes: number; residentUploadBytes: number; mirrorBytes: number; residentDroppedPages: number; generation: number; computeNs: number; lastLoss: string;
    dispatchPhases: { dispatches: number; setupNs: number; recordNs: number; queueSubmitNs: number; waitNs: number; finishNs: number };
  };
  /** Parse the VUGPU_VK_* knobs again (launches read them from what vulkanOpen parsed, never from
   * the environment): for tests and benchmarks that change one between launches. The knobs read
   * at open (MEMORY, CMD_QUERY_RESET, COMPUTE_QUEUES) keep the open device's choice. */
  vulkanReadTuning(): VulkanTuning;
  /** Open way `way`'s own device now on a thread of its own (a GPU's; otherwise at first launch). */
  vulkanPrepareWay(way: number): void;
  /** Resident VRAM (native/src/vulkan/resident.cc): its size (0 = off), and engine writes to it. */
  vulkanResident(vramBytes: number): void;
  vulkanVramWritten(offset: number, length: number): void;
  /** Test hook (VUGPU_TEST_HOOKS=1): act as if the device were lost, then rebuild it; true if rebuilt. */
  vulkanSimulateLoss(): boolean;
  /** Test hook (VUGPU_TEST_HOOKS=1, a GPU opened with them): really lose the device — dispatch
   * `words` (build/spirv/native/shaders/test/fault.spv), which writes to `address` through a
   * buffer reference; nothing maps it, so the GPU faults. Returns the VkResult name its own
   * fence wait saw; RangeError on a CPU device (the fault would crash the process). */
  vulkanInjectFault(words: Uint32Array, address: bigint): string;
  /** Benchmark reference: a raw module run straight through Vulkan with pinned-memory transfers
   * (copies in, one dispatch, writable buffers copied back; results land in the given buffers). */
  vulkanDirectRun(job: { words: Uint32Array; buffers: ArrayBufferView[]; writable: boolean[]; push?: Uint8Array;
    grid: [number, number, number]; reps?: number;
    /** The words are programPrepare's (rewritten): bind the control block (set 1) as the engine does. */
    control?: boolean; entry?: string;
    /** With control: the cancel word is set before the launch starts (tests). */
    cancelled?: boolean;
    /** More modules on the same layout and buffers, run in turn with the main one every repetition. */
    variants?: { words: Uint32Array; entry?: string }[] }): {
    wallNs: number[]; kernelNs: number[]; transferQueue: boolean; status: number; variants: { wallNs: number[]; kernelNs: number[] }[] };
  /** Queue a compile into a free slot (RangeError if in use). Completes 0, -EINVAL (refused or
   * compile failed: programInfo has the reason) or -ENODEV (no device open). */
  submitProgramCompile(job: ProgramCompileJob): number;
  /** Queue a launch of a slot's program (RangeError if the slot is empty; it waits for a compile
   * still running). Completes 0, -ECANCELED (cancelJob), -ELOOP (loop limit), -EINVAL (failed
   * compile, missing binding, misaligned window, short params, grid over the limit), -ENODEV
   * (device lost), -EFAULT (a window could not be imported). deviceNs from GPU timestamps. */
  submitDispatch(job: DispatchJob): number;
  /** A channel's launches in order as one job on one way, packed (jobs.ts packBatch); the
   * completion's part counts those done. */
  submitDispatchBatch(meta: Float64Array, params: Uint8Array, way: number): number;
  /** Compile outcome; null while compiling or for an empty slot. */
  programInfo(slot: number): ProgramInfo | null;
  /** Free a slot (idempotent); jobs already queued keep the program until they end. */
  programRelease(slot: number): void;
}

export interface NativeAddon extends VulkanAddon {
  // ---- UNIX stream sockets with fd passing ----
  /** socket+bind+listen, non-blocking, CLOEXEC. Removes a stale socket file first.
   * seqpacket: SOCK_SEQPACKET (message boundaries kept; the fd keeper's protocol). */
  listenUnix(path: string, backlog: number, seqpacket?: boolean): number;
  /** accept4 non-blocking; returns fd, or -EAGAIN (-11) when none is pending. */
  accept(listenFd: number): number;
  /** connect (blocking connect, then the fd is set non-blocking if nonblock). */
  connectUnix(path: string, nonblock: boolean, seqpacket?: boolean): number;
  socketpair(): [number, number];
  setNonblock(fd: number, on: boolean): void;
  /** recvmsg into buf (up to buf.length); fds received go to fdsOut[1..], fdsOut[0] = count
   * (or -1 if control data was truncated or there were more fds than fdsOut has room for; the
   * extra fds are closed). Returns bytes (0 = EOF) or -errno. */
  recvmsg(fd: number, buf: Uint8Array, fdsOut: Int32Array, peek?: boolean): number;
  /** setsockopt(SO_PEEK_OFF): offset >= 0 makes MSG_PEEK reads start that far into the queue
   * and advance (-1: off). Per socket, not per fd. Returns 0 or -errno. */
  setPeekOffset(fd: number, offset: number): number;
  /** getsockopt(SO_PEERCRED) of a connected UNIX socket, or -errno. */
  peerCred(fd: number): { pid: number; uid: number; gid: number } | number;
  /** One datagram (with optional SCM_RIGHTS fds) to a UNIX datagram socket path ('@' =
   * abstract namespace) from a fresh socket: sd_notify. Returns bytes or -errno. */
  sendDatagram(path: string, data: Uint8Array, fds?: number[]): number;
  /** A bound non-blocking UNIX datagram socket ('@' = abstract); fd or -errno. */
  bindDatagram(path: string): number;
  /** one sendmsg with the whole buffer and its fds (SCM_RIGHTS), MSG_NOSIGNAL; loops on partial
   * writes (fds go with the first chunk). On a full non-blocking socket it polls for room for up
   * to 2 s rather than split a message: then -EAGAIN if nothing was sent, -ETIMEDOUT if only part
   * was (the stream is out of frame). Returns bytes or -errno.
   * With waitMs (0..60000) it waits at most that long and a partial send returns the byte count
   * (< data.length; the fds went with it): waitMs 0 never blocks, for event-loop servers that
   * queue the rest and wait for writability (watch events 2).
   * journal: a request-journal state word (src/persist/journal.ts): set to 2 (reply intended)
   * just before the first syscall and to 3 (replied) once the whole message is sent. */
  sendmsg(fd: number, data: Uint8Array, fds?: number[], waitMs?: number, journal?: Uint32Array): number;
  close(fd: number): number;
  /** uv_poll on the JS thread; cb(status, events) with events bit 1 = readable, 2 = writable,
   * 4 = disconnect. `events` chooses what to wait for (1 readable (default), 2 writable, 3 both;
   * disconnect always). An exception thrown by cb goes to process 'uncaughtException'. */
  watch(fd: number, cb: (status: number, events: number) => void, events?: number): number;
  /** Change what a watcher waits for (1 readable, 2 writable, 3 both); no-op once unwatched. */
  watchEvents(handle: number, events: number): void;
  /** Stop a watcher; idempotent and safe inside its own callback. Unwatch before closing the fd. */
  unwatch(handle: number): void;

  // ---- memory ----
  /** memfd_create + ftruncate; with `seals` (F_SEAL_* bits) the memfd allows sealing and gets
   * them after sizing (QEMU's memory-backend-memfd uses SEAL|SHRINK|GROW = 7). */
  memfdCreate(name: string, size: number, seals?: number): number;
  /** lseek SEEK_DATA (hole 0) or SEEK_HOLE (hole 1) from offset: an offset, or -errno (-ENXIO past the last data). */
  seekData(fd: number, offset: number, hole: 0 | 1): number;
  /** fcntl(F_GET_SEALS): seals of the file behind fd, or -errno (-EINVAL: not sealable). */
  getSeals(fd: number): number;
  ftruncate(fd: number, size: number): number;
  /** mmap MAP_SHARED PROT_READ|PROT_WRITE → external ArrayBuffer, no copy. Throws on failure, and
   * refuses ranges past the end of a regular file (they would SIGBUS). readonly: a private
   * copy-on-write mapping (accepts O_RDONLY fds; stray writes stay local and never fault). */
  mmap(fd: number, length: number, offset: number, readonly?: boolean): ArrayBuffer;
  /** Detach the ArrayBuffer and munmap now (does not wait for GC). */
  munmap(buf: ArrayBuffer): void;
  addressOf(buf: ArrayBuffer | ArrayBufferView): bigint;
  /** Reserve a contiguous range and mmap each extent MAP_FIXED|MAP_SHARED in order. Offsets and
   * lengths must be page multiples and lie inside each fd (RangeError / Error otherwise). A guard
   * page follows the window; readonly windows are private copy-on-write like mmap(readonly)
   * unless `shared` (for a device that pins pages and only reads them: windows.ts); `transient`:
   * unmapped after one launch (a staging device copies it rather than pinning its pages). The
   * caller must not unmapWindow() a window while a submitted job
   * that uses it has not completed: the addon does not track window users. */
  mapWindow(extents: Extent[], readonly: boolean, shared?: boolean, transient?: boolean): MapWindow;
  /** Unmap a window (idempotent). Detaches the ArrayBuffer from windowBuffer(), if any. */
  unmapWindow(id: number): void;
  /** External ArrayBuffer over a window, for JS-side access; detached by unmapWindow(). */
  windowBuffer(id: number): ArrayBuffer;
  /** pread/pwrite on an fd at an offset (for fds without a mapping). Returns bytes or -errno. */
  pread(fd: number, buf: Uint8Array, offset: number): number;
  pwrite(fd: number, buf: Uint8Array, offset: number): number;

  // ---- eventfd / misc syscalls ----
  eventfd(initval: number, nonblock: boolean): number;
  eventfdWrite(fd: number, value: number): number; // 0 or -errno
  eventfdRead(fd: number): number; // value, or -errno (-EAGAIN when non-blocking and zero)
  /** open(2) with O_CLOEXEC added (mode 0600 with O_CREAT). Returns fd or -errno. */
  open(path: string, flags: number): number;
  /** ioctl with an integer argument, or with a pointer to buf when buf is given. Returns result or -errno. */
  ioctl(fd: number, request: number, arg: number | Uint8Array): number;
  /** Read /proc/self/pagemap entries for count pages starting at virtual address addr. */
  pagemap(addr: bigint, count: number): BigUint64Array;
  monotonicNs(): bigint;

  // ---- job pool (copies and compute kernels off the JS thread) ----
  /** Start the pool: threads (1–8); onComplete is called on the JS thread, batched. One pool per
   * process: a second poolStart throws until poolStop. The pool keeps the event loop alive only
   * while jobs are in flight. */
  poolStart(threads: number, onComplete: (completions: JobCompletion[]) => void): void;
  /** Cancel queued and running jobs, join the threads, deliver the remaining completions
   * synchronously (so every submitted job is reported), and drop the copy mapping cache.
   * Idempotent; the pool can be started again. */
  poolStop(): void;
  /** How long a pool thread that just ran a device task (a Vulkan dispatch) polls for the next
   * job before it sleeps (0–10,000 µs; 0 = never; process-wide, kept across poolStart). */
  poolSetPoll(us: number): void;
  /** Where pool jobs' time went, per kind (cpu: kernels and copies; task: device tasks such as
   * Vulkan dispatches): jobs run, and sums in ns of queued (submitted → taken by a thread), run,
   * after (run end → handed to JS) and deliver (→ the JS thread's completion callback); and the
   * pool threads' polls after device tasks that found the next job (hits) or ended at the bound. */
  poolStats(): Record<'cpu' | 'task', { jobs: number; queueNs: number; runNs: number; afterNs: number; deliverNs: number }> & { polls: { hits: number; misses: number } };
  /** Queue a kernel. windows/lengths are trusted host ranges (from mapWindow, mmap or addressOf)
   * that must stay mapped until the job completes. Kernel-side errors (unknown id, wrong buffer
   * count, sizes) come back as the completion status. Throws only on malformed arguments. */
  submitKernel(job: KernelJob): number;
  /** Queue a scatter-gather copy (src and dst byte sums must match: RangeError). Each file is
   * mapped whole once and cached by inode (so repeated copies run at memcpy speed); fd problems
   * complete with a status: -EBADF, -EINVAL (not a regular file), -EFAULT (past the end of the
   * file), -EACCES (dst fd opened read-only). The fds are only used during this call. */
  submitCopy(job: CopyJob): number;
  /** Ask a running or queued job to stop; kernels poll the flag in their outer loops. A queued
   * job completes with -ECANCELED and deviceNs 0 without running; unknown ids are ignored. */
  cancelJob(job: number): void;
  /** The job's program stops once it has run afterNs on the device since its submission. */
  preemptJob(id: number, afterNs: number): void;
  /** Drop the copy engine's cached mapping of fd's file (call when guest memory goes away, e.g.
   * DMA_UNMAP or disconnect, before closing the fd) so its pages can be freed; jobs in flight
   * keep their own reference.
   * Returns 0 or -errno. */
  forgetFd(fd: number): number;
  /** Run a kernel synchronously on the calling thread (tests and the native bench baseline). */
  runKernelSync(job: KernelJob): number;
  /** cblas_sgemm (or the C++ fallback) directly on two input and one output buffer, for the engine bench. */
  sgemmDirect(m: number, n: number, k: number, a: Float32Array, b: Float32Array, c: Float32Array): void;
  /** memmove(dst, src, length) between two buffers (ArrayBuffer or views); RangeError if too long. */
  memcpyDirect(dst: ArrayBuffer | ArrayBufferView, src: ArrayBuffer | ArrayBufferView, length: number): void;
  haveOpenBlas(): boolean;

  // ---- SPIR-V front end (native/src/spirv; contract native/include/program.h) ----
  /** Check a guest SPIR-V module (hw-spec §6.3.3) for the entryIndex-th GLCompute entry point and
   * rewrite its loops so the launch can be stopped (§6.3.5). spec: (SpecId, value) pairs. Missing
   * limits take the hw-spec envelope. Never throws for any module bytes (TypeError only for
   * malformed arguments). reason 0: entry and the rewritten, re-validated words; else a
   * BAD_PROGRAM reason (§6.3.6) and one readable sentence. Synchronous (≈ validator time). */
  programPrepare(words: Uint32Array, entryIndex: number, spec: Uint32Array, limits: Partial<SpirvLimits>): SpirvPrepared;
  /** SPIRV-Tools validation (Vulkan 1.2 environment): null when valid, else the message. */
  programValidate(words: Uint32Array): string | null;
}

/** program.h Limits; a PPROG-style limits object with more fields can be passed as is. */
export interface SpirvLimits {
  maxModuleBytes: number; maxBindings: number; maxPushBytes: number; maxSpecConstants: number;
  maxWgInvocations: number; maxWgSize: [number, number, number]; maxSharedBytes: number;
  features: number; loopLimit: number; subgroupSize: number;
  /** Benchmark switch (program.h): the cancel word's load in the loop header; the engine never sets it. */
  cancelLoadEarly?: number;
  /** Benchmark switch (program.h): bit 0 leaves out the index clamps, bit 1 the loop rewrite. */
  benchParts?: number;
  /** Devices that do not cut loops: checked back-edges between two cancel-word loads (program.h;
   * 0 = the default 64, 1 = every back-edge). */
  cancelEvery?: number;
}

export interface SpirvPrepared {
  reason: number;     // 0 accepted, else BAD_PROGRAM reason
  message: string;
  entry?: {
    name: string;
    wg: [number, number, number];   // after specialization
    sharedBytes: number;            // the guest's Workgroup memory (the rewrite's own excluded)
    pushBytes: number;              // push-constant block size, 0 = none
    bindings: { binding: number; writable: boolean }[];  // set 0 bindings the entry point uses
  };
  words?: Uint32Array;
  /** Loop headers (label ids) left without a cancel check: small constant loops, loopLimit 0 only. */
  uncheckedLoops?: Uint32Array;
}

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const native: NativeAddon = require(path.join(root, 'build/Release/vugpu_native.node'));

export const EAGAIN = 11;
export const ECANCELED = 125;
