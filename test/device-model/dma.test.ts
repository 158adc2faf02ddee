import { afterEach, describe, expect, it } from 'vitest';
import { native, type Extent } from '../../src/native.ts';
import { DmaTable, type DmaMapRequest, type DmaMappingInfo } from '../../src/device-model/dma.ts';
import { countFds, memfdWith, uniqueName } from './helpers.ts';

const MiB = 1 << 20;
const rw = { readable: true, writable: true };

let tables: DmaTable[] = [];
afterEach(() => {
  for (const t of tables) t.unmapAll();
  tables = [];
});

function table(opts: ConstructorParameters<typeof DmaTable>[0] = {}): DmaTable {
  const t = new DmaTable(opts);
  tables.push(t);
  return t;
}

/** A memfd named uniquely, so /proc/self/fd can tell whether it is still open. */
function ram(size: number): { fd: number; name: string } {
  const name = uniqueName('ram');
  return { fd: memfdWith(name, size), name };
}

function req(addr: number, size: number, fd: number, extra: Partial<DmaMapRequest> = {}): DmaMapRequest {
  return { addr, size, offset: 0, fd, ...rw, ...extra };
}

/** A translation without its extents' mappings (what native code reads of it). */
function plain(r: ReturnType<DmaTable['translate']>): unknown {
  return r.ok ? { ok: true, extents: r.extents.map(({ fd, offset, length }) => ({ fd, offset, length })) } : r;
}

describe('DMA map table', () => {
  it('maps an fd and gives CPU views and fd extents into it', () => {
    const { fd } = ram(4 * MiB);
    const t = table();
    expect(t.map(req(0x100000, 2 * MiB, fd, { offset: MiB }))).toBe(0);
    const v = t.view(0x100000 + 16, 4, true);
    expect(v.ok).toBe(true);
    if (v.ok) v.bytes.set([1, 2, 3, 4]);
    // The bytes land in the memfd at offset + (gpa - addr).
    const check = new Uint8Array(4);
    const dup = t.translate(0x100000 + 16, 4, false);
    expect(plain(dup)).toEqual({ ok: true, extents: [{ fd, offset: MiB + 16, length: 4 }] });
    // The extent names the table's own mapping of those bytes (the engine reads through it).
    const memOf = (e: Extent) => Array.from(new Uint8Array(e.mem!, e.memOffset, e.length));
    expect(dup.ok && memOf(dup.extents[0]!)).toEqual([1, 2, 3, 4]);
    expect(native.pread(fd, check, MiB + 16)).toBe(4);
    expect(Array.from(check)).toEqual([1, 2, 3, 4]);
    const out = new Uint8Array(4);
    expect(t.read(0x100000 + 16, out)).toBeNull();
    expect(Array.from(out)).toEqual([1, 2, 3, 4]);
  });

  it('identical re-map is a no-op and closes the duplicate fd', () => {
    const a = ram(MiB);
    const t = table();
    expect(t.map(req(0, MiB, a.fd))).toBe(0);
    const again = native.open(`/proc/self/fd/${a.fd}`, 2); // same file, new fd
    expect(countFds(a.name)).toBe(2);
    expect(t.map(req(0, MiB, again))).toBe(0);
    expect(countFds(a.name)).toBe(1);
    expect(t.count).toBe(1);
  });

  it('re-map of the same range with a different file, offset or protection is EINVAL', () => {
    const a = ram(2 * MiB);
    const b = ram(MiB);
    const t = table();
    expect(t.map(req(0, MiB, a.fd))).toBe(0);
    expect(t.map(req(0, MiB, b.fd))).toBe(22);
    expect(t.map(req(0, MiB, -1))).toBe(22);
    const dup = native.open(`/proc/self/fd/${a.fd}`, 2);
    expect(t.map(req(0, MiB, dup, { offset: 4096 }))).toBe(22);
    expect(t.map(req(0, MiB, dup, { writable: false }))).toBe(22);
    native.close(dup);
    native.close(b.fd);
  });

  it('partial overlap is EINVAL (libvfio-user behaviour; the spec says EEXIST)', () => {
    const a = ram(4 * MiB);
    const t = table();
    expect(t.map(req(MiB, MiB, -1))).toBe(0);
    expect(t.map(req(MiB + 4096, 4096, -1))).toBe(22); // inside
    expect(t.map(req(MiB - 4096, 8192, -1))).toBe(22); // straddles the start
    expect(t.map(req(2 * MiB - 4096, 8192, -1))).toBe(22); // straddles the end
    expect(t.map(req(0, 4 * MiB, -1))).toBe(22); // covers it
    expect(t.map(req(0, MiB, a.fd))).toBe(0); // adjacent below: fine
    expect(t.map(req(2 * MiB, MiB, -1))).toBe(0); // adjacent above: fine
    expect(t.count).toBe(3);
  });

  it('rejects empty, oversized and unmappable maps', () => {
    const t = table();
    expect(t.map(req(0, 0, -1))).toBe(22);
    expect(t.map(req(0, 2 ** 44, -1))).toBe(28); // ENOSPC, like libvfio-user's max size
    expect(t.map(req(2 ** 53 - 4096, 8192, -1))).toBe(22);
    const small = ram(4096);
    expect(t.map(req(0, MiB, small.fd))).toBe(22); // past the end of the file
    const efd = native.eventfd(0, true);
    expect(t.map(req(0, 4096, efd))).toBe(22); // not mappable
    native.close(efd);
    native.close(small.fd);
    expect(t.count).toBe(0);
  });

  it('enforces the map count limit with ENOSPC', () => {
    const t = table({ maxMaps: 3 });
    for (let i = 0; i < 3; i++) expect(t.map(req(i * 4096, 4096, -1))).toBe(0);
    expect(t.map(req(3 * 4096, 4096, -1))).toBe(28);
  });

  it('unmap must match exactly (ENOENT otherwise) and closes the fd', () => {
    const a = ram(2 * MiB);
    const t = table();
    expect(t.map(req(0, 2 * MiB, a.fd))).toBe(0);
    const v = t.view(0, 16);
    expect(t.unmap(0, MiB)).toBe(2);
    expect(t.unmap(4096, 2 * MiB - 4096)).toBe(2);
    expect(t.unmap(0x1000000, 2 * MiB)).toBe(2);
    expect(countFds(a.name)).toBe(1);
    expect(t.unmap(0, 2 * MiB)).toBe(0);
    expect(countFds(a.name)).toBe(0);
    expect(v.ok && v.bytes.length).toBe(0); // the old view is detached, not dangling
    expect(t.unmap(0, 2 * MiB)).toBe(2);
  });

  it('unmapAll drops everything and reports each map to the callback', () => {
    const seen: string[] = [];
    const a = ram(MiB);
    const b = ram(MiB);
    const t = table({
      onMapped: (m: DmaMappingInfo) => seen.push(`+${m.addr.toString(16)}`),
      onUnmapped: (m: DmaMappingInfo) => seen.push(`-${m.addr.toString(16)}`),
    });
    t.map(req(0, MiB, a.fd));
    t.map(req(0x100000, MiB, b.fd));
    t.map(req(0xfffc0000, 0x40000, -1, { writable: false }));
    t.unmapAll();
    expect(t.count).toBe(0);
    expect(seen).toEqual(['+0', '+100000', '+fffc0000', '-0', '-100000', '-fffc0000']);
    expect(countFds(a.name) + countFds(b.name)).toBe(0);
  });

  it('translate follows adjacent maps and splits into extents', () => {
    const a = ram(MiB);
    const b = ram(2 * MiB);
    const t = table();
    expect(t.map(req(0, MiB, a.fd, { offset: 0 }))).toBe(0);
    expect(t.map(req(MiB, MiB, b.fd, { offset: 4096 }))).toBe(0);
    const r = t.translate(MiB - 100, 300, true);
    expect(plain(r)).toEqual({
      ok: true,
      extents: [
        { fd: a.fd, offset: MiB - 100, length: 100 },
        { fd: b.fd, offset: 4096, length: 200 },
      ],
    });
    // Copies cross the boundary too.
    const src = Uint8Array.from({ length: 300 }, (_, i) => i & 0xff);
    expect(t.write(MiB - 100, src)).toBeNull();
    // each extent's mapping holds its own map's bytes
    const memOf = (e: Extent) => Array.from(new Uint8Array(e.mem!, e.memOffset, e.length));
    expect(r.ok && memOf(r.extents[0]!)).toEqual(Array.from(src.subarray(0, 100)));
    expect(r.ok && memOf(r.extents[1]!)).toEqual(Array.from(src.subarray(100)));
    const back = new Uint8Array(300);
    expect(t.read(MiB - 100, back)).toBeNull();
    expect(back).toEqual(src);
    // A view cannot span two maps.
    const v = t.view(MiB - 100, 300);
    expect(!v.ok && v.fault.kind).toBe('discontiguous');
  });

  it('adjacent maps of the same file share one fd and merge into one extent', () => {
    const a = ram(2 * MiB);
    const t = table();
    expect(t.map(req(0, MiB, a.fd))).toBe(0);
    // The same file opened again (QEMU sends a new fd with every map): the table keeps one.
    const dup = native.open(`/proc/self/fd/${a.fd}`, 2);
    expect(t.map(req(MiB, MiB, dup, { offset: MiB }))).toBe(0);
    expect(countFds(a.name)).toBe(1);
    expect(t.fileCount).toBe(1);
    const r = t.translate(0, 2 * MiB, false);
    expect(plain(r)).toEqual({ ok: true, extents: [{ fd: a.fd, offset: 0, length: 2 * MiB }] });
    // merged across two maps (two mappings): no mapping, readers pread
    expect(r.ok && r.extents[0]!.mem).toBeUndefined();
    // The fd stays open while any map of the file remains.
    expect(t.unmap(0, MiB)).toBe(0);
    expect(countFds(a.name)).toBe(1);
    expect(t.unmap(MiB, MiB)).toBe(0);
    expect(countFds(a.name)).toBe(0);
  });

  it('a read-only fd of a file does not back a writable map of it', () => {
    const a = ram(2 * MiB);
    const t = table();
    const ro = native.open(`/proc/self/fd/${a.fd}`, 0);
    expect(t.map(req(0, MiB, ro, { writable: false }))).toBe(0);
    expect(t.map(req(MiB, MiB, a.fd, { offset: MiB }))).toBe(0);
    expect(t.fileCount).toBe(2);
    expect(t.view(MiB, 16, true).ok).toBe(true);
  });

  it('limits: maps, total bytes and distinct files per table (ENOSPC), non-regular files (EINVAL)', () => {
    const t = table({ maxMaps: 8, maxBytes: 16 * MiB, maxFiles: 2 });
    const a = ram(16 * MiB);
    expect(t.map(req(0, 15 * MiB, a.fd))).toBe(0);
    expect(t.map(req(32 * MiB, 2 * MiB, -1))).toBe(28); // 17 MiB > 16 MiB
    expect(t.map(req(32 * MiB, MiB, -1))).toBe(0);
    expect(t.mappedBytes).toBe(16 * MiB);
    expect(t.unmap(32 * MiB, MiB)).toBe(0);
    const b = ram(4096);
    const c = ram(4096);
    expect(t.map(req(64 * MiB, 4096, b.fd))).toBe(0);
    expect(t.map(req(65 * MiB, 4096, c.fd))).toBe(28); // a third file
    expect(countFds(c.name)).toBe(1); // on error the caller keeps its fd
    native.close(c.fd);
    t.setLimits({ maxBytes: 2 ** 40 });
    for (let i = 0; i < 6; i++) expect(t.map(req(128 * MiB + i * 4096, 4096, -1))).toBe(0);
    expect(t.count).toBe(8);
    expect(t.map(req(256 * MiB, 4096, -1))).toBe(28);
    t.unmapAll();
    expect(t.mappedBytes).toBe(0);
    expect(t.fileCount).toBe(0);
    // /dev/zero, an eventfd, a socket: not regular files.
    const zero = native.open('/dev/zero', 2);
    const efd = native.eventfd(0, true);
    const [s1, s2] = native.socketpair();
    for (const fd of [zero, efd, s1]) {
      expect(t.map(req(0, 4096, fd))).toBe(22);
      native.close(fd);
    }
    native.close(s2);
  });

  it('translate of an unmapped or partly unmapped range is a clear fault', () => {
    const a = ram(MiB);
    const t = table();
    t.map(req(0x200000, MiB, a.fd));
    expect(t.translate(0x100000, 16, false)).toEqual({
      ok: false,
      fault: { kind: 'unmapped', address: 0x100000, message: 'no DMA map covers 0x100000' },
    });
    const tail = t.translate(0x200000 + MiB - 8, 16, false);
    expect(!tail.ok && tail.fault).toMatchObject({ kind: 'unmapped', address: 0x300000 });
    expect(!t.translate(0, 0, false).ok).toBe(true);
    const buf = new Uint8Array(16);
    expect(t.read(0x100000, buf)?.kind).toBe('unmapped');
  });

  it('reload over maps loaded ahead keeps unchanged maps, remaps or drops the rest, and takes the new fds', () => {
    // An upgrade's successor: the predecessor's table as an earlier record, loaded ahead with
    // duplicates of its fds; then the final record with the duplicates taken at the handover.
    const a = ram(4 * MiB);
    const b = ram(2 * MiB);
    const src = table();
    expect(src.map(req(0, 2 * MiB, a.fd))).toBe(0);
    expect(src.map(req(0x800000, MiB, b.fd))).toBe(0);
    const dupOf = (fd: number) => native.open(`/proc/self/fd/${fd}`, 2); // QEMU sends a new fd per map
    expect(src.map(req(0x900000, MiB, dupOf(b.fd), { offset: MiB }))).toBe(0);
    const early = src.record();
    const fdsOf = (t: DmaTable) => new Map(t.fileIds().map((f) => [f.id, dupOf(f.fd)]));
    const ahead = fdsOf(src);
    const t = table();
    t.load(early, (id) => ahead.get(id)!);
    const before = (gpa: number) => { const v = t.view(gpa, 1); return v.ok ? v.bytes.buffer : null; };
    const keptA = before(0);
    const keptB = before(0x800000);
    expect(keptA).not.toBeNull();
    // Meanwhile the guest drops one map of b and maps more of a.
    expect(src.unmap(0x900000, MiB)).toBe(0);
    expect(src.map(req(0x400000, MiB, dupOf(a.fd), { offset: 2 * MiB }))).toBe(0);
    const final = src.record();
    const taken = fdsOf(src);
    expect(countFds(a.name)).toBe(3); // src, the early duplicate, the final one
    t.reload(final, (id) => taken.get(id)!);
    expect(t.record().maps).toEqual(final.maps);
    expect(before(0)).toBe(keptA); // the same mapping, not mapped again
    expect(before(0x800000)).toBe(keptB);
    expect(t.view(0x900000, 1).ok).toBe(false);
    // Every file is held by the fd of the final take; the early duplicates are closed.
    expect(countFds(a.name)).toBe(2);
    expect(countFds(b.name)).toBe(2);
    expect(new Set(t.fileIds().map((f) => f.fd))).toEqual(new Set(taken.values()));
    const w = t.view(0x400000 + 8, 4, true);
    expect(w.ok).toBe(true);
    if (w.ok) w.bytes.set([9, 8, 7, 6]);
    const got = new Uint8Array(4);
    expect(native.pread(a.fd, got, 2 * MiB + 8)).toBe(4);
    expect(Array.from(got)).toEqual([9, 8, 7, 6]);
  });

  it('a reload that fails leaves the maps loaded ahead as they were and closes nothing', () => {
    const a = ram(2 * MiB);
    const src = table();
    expect(src.map(req(0, 2 * MiB, a.fd))).toBe(0);
    const rec = src.record();
    const dup = native.open(`/proc/self/fd/${a.fd}`, 2);
    const t = table();
    t.load(rec, () => dup);
    const kept = t.view(0, 1);
    const notAFile = native.eventfd(0, false);
    expect(() => t.reload(rec, () => notAFile)).toThrow(/not a regular file/);
    native.close(notAFile);
    expect(t.record().maps).toEqual(rec.maps);
    expect(t.fileIds().map((f) => f.fd)).toEqual([dup]);
    const again = t.view(0, 1);
    expect(kept.ok && again.ok && again.bytes.buffer === kept.bytes.buffer).toBe(true);
    expect(countFds(a.name)).toBe(2);
  });

  it('fd-less maps are recorded but cannot be translated; read-only maps refuse writes', () => {
    const rom = ram(0x40000);
    const t = table();
    expect(t.map(req(0xc0000, 0x20000, -1))).toBe(0);
    expect(t.map(req(0xfffc0000, 0x40000, rom.fd, { writable: false }))).toBe(0);
    const nofd = t.translate(0xc0000, 4, false);
    expect(!nofd.ok && nofd.fault.kind).toBe('no-fd');
    const ro = t.translate(0xfffc0000, 4, true);
    expect(!ro.ok && ro.fault.kind).toBe('read-only');
    expect(t.translate(0xfffc0000, 4, false).ok).toBe(true);
    expect(t.describe()).toEqual([
      { addr: 0xc0000, size: 0x20000, offset: 0, readable: true, writable: true, hasFd: false },
      { addr: 0xfffc0000, size: 0x40000, offset: 0, readable: true, writable: false, hasFd: true },
    ]);
    expect(JSON.parse(JSON.stringify(t.describe()))).toEqual(t.describe());
  });

  it('maps 512 MiB of guest RAM with one fd (as QEMU does: two maps of the same memfd)', () => {
    const g = ram(512 * MiB);
    const t = table();
    const low = native.open(`/proc/self/fd/${g.fd}`, 2);
    expect(t.map(req(0, 640 * 1024, low))).toBe(0);
    // The second fd of the same memfd is closed: the table keeps `low` for both maps.
    expect(t.map(req(0x100000, 511 * MiB, g.fd, { offset: 0x100000 }))).toBe(0);
    expect(countFds(g.name)).toBe(1);
    const v = t.view(0x5b1a000, 4096, true);
    expect(v.ok).toBe(true);
    if (v.ok) v.bytes[7] = 0x5a;
    const b = new Uint8Array(1);
    expect(native.pread(low, b, 0x5b1a007)).toBe(1);
    expect(b[0]).toBe(0x5a);
    expect(plain(t.translate(0x5b1a000, 8, true))).toEqual({ ok: true, extents: [{ fd: low, offset: 0x5b1a000, length: 8 }] });
  });
});
