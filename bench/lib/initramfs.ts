// A benchmark's own guest files without rebuilding the guest image: the setup initramfs with a
// small uncompressed cpio (newc) archive appended. Linux unpacks concatenated archives in order
// (init/initramfs.c: each one compressed or not, zero padding between them, a new archive
// starting on a 4-byte boundary), so the appended files simply join the image.
import fs from 'node:fs';

export interface ExtraFile {
  /** Absolute path in the guest, e.g. /opt/vugpu-bench/counts.sh. */
  path: string;
  content: string | Uint8Array;
  /** Permission bits (default 0o755: these are scripts). */
  mode?: number;
}

function hex8(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/** One newc entry: the 110-byte header, the name (NUL-terminated, padded to 4), the data (padded to 4). */
function entry(ino: number, name: string, mode: number, data: Uint8Array): Buffer {
  const nameBytes = Buffer.from(`${name}\0`, 'utf8');
  const fields = [ino, mode, 0, 0, mode & 0o040000 ? 2 : 1, 0, data.length, 0, 0, 0, 0, nameBytes.length, 0];
  const header = Buffer.from(`070701${fields.map(hex8).join('')}`, 'ascii');
  const pad = (n: number) => Buffer.alloc((4 - (n % 4)) % 4);
  return Buffer.concat([header, nameBytes, pad(header.length + nameBytes.length), data, pad(data.length)]);
}

/** An uncompressed newc archive holding `files` and the directories above them. */
export function newcArchive(files: ExtraFile[]): Buffer {
  const parts: Buffer[] = [];
  const dirs = new Set<string>();
  let ino = 0x7e0000; // clear of the base archive's inode numbers (only hard links care)
  for (const f of files) {
    if (!f.path.startsWith('/') || f.path.endsWith('/')) throw new Error(`guest file path must be absolute: ${f.path}`);
    const rel = f.path.slice(1);
    const segs = rel.split('/');
    for (let i = 1; i < segs.length; i++) {
      const d = segs.slice(0, i).join('/');
      if (dirs.has(d)) continue;
      dirs.add(d);
      parts.push(entry(ino++, d, 0o040755, new Uint8Array(0)));
    }
    const data = typeof f.content === 'string' ? Buffer.from(f.content, 'utf8') : f.content;
    parts.push(entry(ino++, rel, 0o100000 | (f.mode ?? 0o755), data));
  }
  parts.push(entry(0, 'TRAILER!!!', 0, new Uint8Array(0)));
  return Buffer.concat(parts);
}

/**
 * Write `out` = a copy of `base` (the setup image, read once, so a concurrent setup cannot change
 * it under a running benchmark), zero-padded to 512 bytes, followed by an archive of `files`.
 */
export function extendInitramfs(base: string, files: ExtraFile[], out: string): string {
  const img = fs.readFileSync(base);
  const pad = Buffer.alloc((512 - (img.length % 512)) % 512);
  fs.writeFileSync(out, Buffer.concat([img, pad, newcArchive(files)]));
  return out;
}
