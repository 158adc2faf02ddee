// The setup manifest (written by scripts/setup.sh): how to run QEMU, and the guest kernel and
// initramfs to boot.
import fs from 'node:fs';
import path from 'node:path';

export interface QemuInvocation {
  /** Command prefix that runs qemu-system-x86_64 (a system binary, or the rootfs's through its own ld.so). */
  argv: string[];
  /** Extra environment for that command (e.g. QEMU_MODULE_DIR). */
  env: Record<string, string>;
  version: string;
  source: 'system' | 'rootfs';
}

export interface Manifest {
  format: number;
  qemu: QemuInvocation;
  kernel: string;
  initramfs: string;
  kernelRelease: string;
  rootfs: string;
  /** The application layer's read-only disk image (guest/vkapp), absent from older setups. */
  vkapp?: string;
  /** Files the guest components put into the initramfs (e.g. /opt/vugpu/foundation-test). */
  guestFiles: string[];
}

export function cacheDir(): string {
  return process.env.VUGPU_CACHE ?? '/var/cache/vugpu';
}

export class SetupMissingError extends Error {
  constructor(detail: string) {
    super(`vugpu guest tooling is not set up: ${detail}. Run \`npm run setup\` (scripts/setup.sh, as root) first.`);
    this.name = 'SetupMissingError';
  }
}

/** Reads and validates the manifest; throws SetupMissingError with a clear message if unusable. */
export function loadManifest(dir: string = cacheDir()): Manifest {
  const file = path.join(dir, 'manifest.json');
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch {
    throw new SetupMissingError(`${file} does not exist`);
  }
  let m: Manifest;
  try {
    m = JSON.parse(raw) as Manifest;
  } catch (err) {
    throw new SetupMissingError(`${file} is not valid JSON (${(err as Error).message})`);
  }
  if (m.format !== 1 || !Array.isArray(m.qemu?.argv) || m.qemu.argv.length === 0) {
    throw new SetupMissingError(`${file} has an unknown format`);
  }
  for (const f of [m.qemu.argv[0], m.kernel, m.initramfs]) {
    if (!fs.existsSync(f)) throw new SetupMissingError(`${f} (named in ${file}) is missing`);
  }
  return m;
}
