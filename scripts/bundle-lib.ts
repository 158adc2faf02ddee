// Helpers of scripts/bundle.sh (the offline bundle for GPU hosts), kept in TypeScript so the
// rules are unit-tested (test/bundle.test.ts):
//   deps [--exclude a,b]           the runtime npm packages, from package-lock.json (one path a line)
//   symbols FILE...                the glibc/libstdc++/libgcc_s symbol versions FILE... need, checked
//                                  against what a bare Ubuntu 24.04 provides (exit 1 on a miss)
//   qemu-template CACHE_MANIFEST KERNEL INITRAMFS OUT [VKAPP]   the QEMU manifest with @BUNDLE@ placeholders
//   manifest DIR INFO_JSON         MANIFEST.json + SHA256SUMS + BUNDLE-INFO for the staged bundle DIR
//   llama-files NODE_MODULES_DIR   the files of node-llama-cpp's install that --with-llama carries (NUL-separated)
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// ---------------------------------------------------------------- npm runtime dependencies

interface LockPackage {
  version?: string;
  dev?: boolean;
  optional?: boolean;
  link?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}
export interface PackageLock {
  lockfileVersion: number;
  packages: Record<string, LockPackage>;
}

/** Where npm put `name` as seen from the package at `from` ('' = the project): the nearest
 *  node_modules/<name> walking up the tree, as Node's resolver finds it. */
export function resolveInLock(packages: Record<string, LockPackage>, from: string, name: string): string | null {
  let base = from;
  for (;;) {
    const candidate = `${base ? `${base}/` : ''}node_modules/${name}`;
    if (candidate in packages) return candidate;
    if (!base) return null;
    const i = base.lastIndexOf('/node_modules/');
    base = i < 0 ? '' : base.slice(0, i);
  }
}

/** The lock entries (paths like node_modules/pino) the project needs at run time: the closure of
 *  its `dependencies` (minus `exclude`: build-time-only packages such as node-addon-api) over
 *  dependencies, optional and peer dependencies. Optional ones npm did not lock are skipped;
 *  a required one that is missing, or one the lock marks dev-only, is an error. */
export function runtimeDeps(lock: PackageLock, exclude: readonly string[] = []): string[] {
  if (!lock.packages || lock.lockfileVersion < 2) throw new Error('package-lock.json: lockfileVersion 2 or 3 needed (a "packages" map)');
  const pk = lock.packages;
  const root = pk[''] ?? {};
  const queue: { name: string; from: string; optional: boolean }[] = [];
  const push = (p: LockPackage, from: string) => {
    for (const name of Object.keys(p.dependencies ?? {})) queue.push({ name, from, optional: false });
    for (const name of Object.keys(p.optionalDependencies ?? {})) queue.push({ name, from, optional: true });
    for (const name of Object.keys(p.peerDependencies ?? {})) {
      queue.push({ name, from, optional: p.peerDependenciesMeta?.[name]?.optional ?? false });
    }
  };
  push({ ...root, dependencies: Object.fromEntries(Object.entries(root.dependencies ?? {}).filter(([n]) => !exclude.includes(n))) }, '');
  const seen = new Set<string>();
  while (queue.length) {
    const { name, from, optional } = queue.shift()!;
    const at = resolveInLock(pk, from, name);
    if (!at) {
      if (optional) continue;
      throw new Error(`package-lock.json has no ${name} (needed by ${from || 'the project'})`);
    }
    if (seen.has(at)) continue;
    const p = pk[at]!;
    if (p.link) throw new Error(`${at} is a link (workspace): not supported in a bundle`);
    if (p.dev) throw new Error(`${at} is needed at run time (by ${from || 'the project'}) but the lock marks it dev-only`);
    seen.add(at);
    push(p, at);
  }
  return [...seen].sort();
}

// ---------------------------------------------------------------- symbol versions

/** What a bare Ubuntu 24.04 provides (glibc 2.39, GCC 14's libstdc++ and libgcc_s). */
export const UBUNTU_2404_LIMITS: Record<string, Record<string, string>> = {
  'libc.so.6': { GLIBC: '2.39' },
  'libm.so.6': { GLIBC: '2.39' },
  'libpthread.so.0': { GLIBC: '2.39' },
  'libdl.so.2': { GLIBC: '2.39' },
  'librt.so.1': { GLIBC: '2.39' },
  'ld-linux-x86-64.so.2': { GLIBC: '2.39' },
  'libstdc++.so.6': { GLIBCXX: '3.4.33', CXXABI: '1.3.15' },
  'libgcc_s.so.1': { GCC: '14.0.0', GLIBC: '2.39' },
};
/** Libraries every glibc system has: never bundled (bundling glibc breaks the host's ld.so). */
export const SYSTEM_LIBS = new Set([...Object.keys(UBUNTU_2404_LIMITS), 'linux-vdso.so.1']);

function versionLE(a: string, b: string): boolean {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d < 0;
  }
  return true;
}

/** Parse `readelf -V --wide` output: the (library, version) pairs of the .gnu.version_r section. */
export function neededVersions(readelf: string): { file: string; name: string }[] {
  const out: { file: string; name: string }[] = [];
  let inNeeds = false;
  let file = '';
  for (const line of readelf.split('\n')) {
    if (/^Version needs section/.test(line)) { inNeeds = true; continue; }
    if (/^Version (definition|symbols) section/.test(line) || /^File: /.test(line)) { inNeeds = false; continue; }
    if (!inNeeds) continue;
    const f = /\bFile: (\S+)\s+Cnt:/.exec(line);
    if (f) { file = f[1]!; continue; }
    const n = /\bName: (\S+)\s+Flags:/.exec(line);
    if (n && file) out.push({ file, name: n[1]! });
  }
  return out;
}

/** Versions a system library must provide that Ubuntu 24.04's does not (empty = fine). */
export function symbolViolations(needs: { file: string; name: string }[], limits = UBUNTU_2404_LIMITS): string[] {
  const bad: string[] = [];
  for (const { file, name } of needs) {
    const lim = limits[file];
    if (!lim) continue;  // a bundled library: the bundle carries it
    const m = /^([A-Z]+)_([0-9.]+)$/.exec(name);
    if (!m) continue;    // GLIBC_PRIVATE and the like are not versioned releases
    const max = lim[m[1]!];
    if (max === undefined) { bad.push(`${file}: ${name} (no such version family on Ubuntu 24.04)`); continue; }
    if (!versionLE(m[2]!, max)) bad.push(`${file}: ${name} > ${m[1]}_${max}`);
  }
  return [...new Set(bad)];
}

// ---------------------------------------------------------------- QEMU manifest template

export const BUNDLE_PLACEHOLDER = '@BUNDLE@';

/** src/vm/manifest.ts's format with every path under the bundle written as @BUNDLE@/…: the
 *  launcher (libexec/vugpu-env.sh) substitutes where the bundle was unpacked. The QEMU runs
 *  with the bundle's own (trixie) ld.so and libraries, as setup.sh runs the rootfs's. */
export function qemuManifestTemplate(cache: { qemu: { version: string }; kernelRelease: string; guestFiles: string[] },
                                     kernel: string, initramfs: string, vkapp?: string): string {
  const B = BUNDLE_PLACEHOLDER;
  const m = {
    format: 1,
    qemu: {
      argv: [`${B}/qemu/lib/ld-linux-x86-64.so.2`, '--library-path', `${B}/qemu/lib`, `${B}/qemu/bin/qemu-system-x86_64`,
             '-L', `${B}/qemu/share`],
      env: { QEMU_MODULE_DIR: `${B}/qemu/modules` },
      version: cache.qemu.version,
      source: 'rootfs',
    },
    kernel: `${B}/guest/${kernel}`,
    initramfs: `${B}/guest/${initramfs}`,
    kernelRelease: cache.kernelRelease,
    rootfs: `${B}/qemu`,
    guestFiles: cache.guestFiles,
    // the guest's application disk, made where the bundle runs (bin/vugpu-vkapp)
    ...(vkapp ? { vkapp: `${B}/guest/${vkapp}` } : {}),
  };
  return `${JSON.stringify(m, null, 2)}\n`;
}

// ---------------------------------------------------------------- manifest of the bundle

export interface FileEntry { path: string; size?: number; sha256?: string; link?: string; mode?: string }

/** Every file and symlink under dir (sorted), with size and sha256 of regular files. */
export function listFiles(dir: string): FileEntry[] {
  const out: FileEntry[] = [];
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(path.join(dir, r));
      if (st.isSymbolicLink()) out.push({ path: r, link: fs.readlinkSync(path.join(dir, r)) });
      else if (st.isDirectory()) walk(r);
      else if (st.isFile()) {
        const sha256 = crypto.createHash('sha256').update(fs.readFileSync(path.join(dir, r))).digest('hex');
        out.push({ path: r, size: st.size, sha256, mode: (st.mode & 0o777).toString(8) });
      }
    }
  };
  walk('');
  return out;
}

const GENERATED = ['MANIFEST.json', 'SHA256SUMS', 'BUNDLE-INFO'];

export function writeManifest(dir: string, info: Record<string, unknown>): { files: number; bytes: number } {
  const files = listFiles(dir).filter((f) => !GENERATED.includes(f.path));
  const bytes = files.reduce((s, f) => s + (f.size ?? 0), 0);
  const manifest = { format: 1, ...info, files: files.length, bytes, contents: files };
  fs.writeFileSync(path.join(dir, 'MANIFEST.json'), `${JSON.stringify(manifest, null, 1)}\n`);
  fs.writeFileSync(path.join(dir, 'SHA256SUMS'),
    files.filter((f) => f.sha256).map((f) => `${f.sha256}  ${f.path}\n`).join(''));
  const lines = Object.entries(info).map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`);
  lines.push(`files: ${files.length} (${(bytes / 1048576).toFixed(1)} MiB unpacked)`);
  fs.writeFileSync(path.join(dir, 'BUNDLE-INFO'), `${lines.join('\n')}\n`);
  return { files: files.length, bytes };
}

// ---------------------------------------------------------------- llama.cpp (--with-llama)

/** Packages of node-llama-cpp's install (scripts/llama-deps.sh) that nothing loads when it runs
 *  the prebuilt Vulkan build: the CPU-only prebuilt and what only compiles llama.cpp. */
export const LLAMA_DROP_PACKAGES = ['@node-llama-cpp/linux-x64', 'cmake-js', 'node-addon-api', 'node-api-headers'];

/** Whether a file of that install (path relative to its node_modules/) goes into the bundle:
 *  not a dropped package, not node-llama-cpp's llama.cpp source and build files (its llama/ keeps
 *  the JSON files it reads at run time and its grammars), no docs, types or source maps. */
export function llamaKeeps(rel: string): boolean {
  const parts = rel.split('/');
  const pkg = parts[0]!.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
  if (LLAMA_DROP_PACKAGES.includes(pkg)) return false;
  if (/(^|\/)(docs?|test|tests|examples?)\//.test(rel.slice(pkg.length))) return false;
  if (/\.(md|map|d\.ts|d\.mts|d\.cts)$/.test(rel) && !/LICENSE/i.test(rel)) return false;
  if (pkg === 'node-llama-cpp') {
    const sub = parts.slice(1).join('/');
    if (sub.startsWith('llama/')) return /^llama\/[^/]+\.json$/.test(sub) || sub.startsWith('llama/grammars/');
    if (sub.startsWith('templates/')) return false; // `create-node-llama-cpp` project templates
  }
  return true;
}

/** Every file under DIR (relative paths) that llamaKeeps. */
export function llamaFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(r);
      else if ((e.isFile() || e.isSymbolicLink()) && llamaKeeps(r)) out.push(r);
    }
  };
  walk('');
  return out.sort();
}

// ---------------------------------------------------------------- command line

function main(argv: string[]): number {
  const [cmd, ...rest] = argv;
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  switch (cmd) {
    case 'deps': {
      let exclude: string[] = [];
      const i = rest.indexOf('--exclude');
      if (i >= 0) exclude = (rest[i + 1] ?? '').split(',').filter(Boolean);
      const lock = JSON.parse(fs.readFileSync(path.join(repo, 'package-lock.json'), 'utf8')) as PackageLock;
      for (const p of runtimeDeps(lock, exclude)) process.stdout.write(`${p}\n`);
      return 0;
    }
    case 'symbols': {
      let bad: string[] = [];
      for (const f of rest) {
        const out = execFileSync('readelf', ['-V', '--wide', f], { encoding: 'utf8', maxBuffer: 64 << 20 });
        bad = bad.concat(symbolViolations(neededVersions(out)).map((v) => `${f}: ${v}`));
      }
      for (const b of bad) process.stderr.write(`${b}\n`);
      return bad.length ? 1 : 0;
    }
    case 'qemu-template': {
      const [cacheManifest, kernel, initramfs, out, vkapp] = rest;
      if (!cacheManifest || !kernel || !initramfs || !out) throw new Error('qemu-template CACHE_MANIFEST KERNEL INITRAMFS OUT [VKAPP]');
      const cache = JSON.parse(fs.readFileSync(cacheManifest, 'utf8'));
      fs.writeFileSync(out, qemuManifestTemplate(cache, kernel, initramfs, vkapp));
      return 0;
    }
    case 'manifest': {
      const [dir, infoFile] = rest;
      if (!dir || !infoFile) throw new Error('manifest DIR INFO_JSON');
      const r = writeManifest(dir, JSON.parse(fs.readFileSync(infoFile, 'utf8')) as Record<string, unknown>);
      process.stdout.write(`${r.files} files, ${(r.bytes / 1048576).toFixed(1)} MiB unpacked\n`);
      return 0;
    }
    case 'llama-files': {
      const [dir] = rest;
      if (!dir) throw new Error('llama-files NODE_MODULES_DIR');
      for (const f of llamaFiles(dir)) process.stdout.write(`${f}\0`);
      return 0;
    }
    default:
      process.stderr.write('usage: bundle-lib.ts deps [--exclude a,b] | symbols FILE... | qemu-template CACHE_MANIFEST KERNEL INITRAMFS OUT | manifest DIR INFO_JSON | llama-files NODE_MODULES_DIR\n');
      return 2;
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    process.exitCode = main(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`bundle-lib: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
