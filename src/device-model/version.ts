// VERSION negotiation: parse the client's capabilities (libvfio-user's checks) and build a
// reply that QEMU accepts: version 0.0, NUL-terminated compact JSON, never larger than the
// request (QEMU receives the reply into the request buffer).

import { Errno } from './protocol.ts';

export interface ServerCapabilities {
  maxMsgFds: number;
  maxDataXferSize: number;
  pgsizes: number;
  maxDmaMaps: number;
}

export const DEFAULT_SERVER_CAPS: ServerCapabilities = {
  maxMsgFds: 16,
  maxDataXferSize: 1 << 20,
  pgsizes: 4096,
  // QEMU boots use ~70 maps; each map is an mmap (a VMA) held for the client, so a hostile
  // client must not get tens of thousands of them (see limits.ts). QEMU accepts ≤ 65535.
  maxDmaMaps: 4096,
};

export interface ClientCapabilities {
  maxMsgFds: number;
  maxDataXferSize: number;
  pgsizes: number;
  writeMultiple: boolean;
}

export type ParseResult = { ok: true; caps: ClientCapabilities } | { ok: false; errno: number; reason: string };

const utf8 = new TextDecoder('utf-8', { fatal: true });

const isUint = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parse the VERSION payload (major, minor, json). */
export function parseClientVersion(payload: Uint8Array): ParseResult {
  const err = (reason: string): ParseResult => ({ ok: false, errno: Errno.EINVAL, reason });
  if (payload.length < 4) return err(`VERSION payload of ${payload.length} bytes`);
  const major = payload[0]! | (payload[1]! << 8);
  if (major !== 0) return err(`unsupported client major version ${major}`);
  // Spec defaults when a key is absent.
  const caps: ClientCapabilities = { maxMsgFds: 1, maxDataXferSize: 1 << 20, pgsizes: 4096, writeMultiple: false };
  if (payload.length === 4) return { ok: true, caps };
  if (payload[payload.length - 1] !== 0) return err('VERSION JSON is not NUL-terminated');
  let doc: unknown;
  try {
    doc = JSON.parse(utf8.decode(payload.subarray(4, payload.length - 1)));
  } catch {
    return err('VERSION JSON does not parse');
  }
  if (!isObject(doc)) return err('VERSION JSON is not an object');
  const c = doc.capabilities;
  if (c === undefined) return { ok: true, caps };
  if (!isObject(c)) return err('"capabilities" is not an object');
  if (c.max_msg_fds !== undefined) {
    if (!isUint(c.max_msg_fds) || c.max_msg_fds > 1024) return err('bad max_msg_fds');
    caps.maxMsgFds = c.max_msg_fds;
  }
  if (c.max_data_xfer_size !== undefined) {
    if (!isUint(c.max_data_xfer_size) || c.max_data_xfer_size === 0) return err('bad max_data_xfer_size');
    caps.maxDataXferSize = c.max_data_xfer_size;
  }
  if (c.pgsizes !== undefined) {
    if (!isUint(c.pgsizes)) return err('bad pgsizes');
    caps.pgsizes = c.pgsizes;
  }
  if (c.max_dma_maps !== undefined && !isUint(c.max_dma_maps)) return err('bad max_dma_maps');
  if (c.migration !== undefined) {
    if (!isObject(c.migration)) return err('"migration" is not an object');
    if (c.migration.pgsize !== undefined && !isUint(c.migration.pgsize)) return err('bad migration.pgsize');
  }
  if (c.twin_socket !== undefined) {
    if (!isObject(c.twin_socket)) return err('"twin_socket" is not an object');
    if (c.twin_socket.supported !== undefined && typeof c.twin_socket.supported !== 'boolean') return err('bad twin_socket.supported');
  }
  if (c.write_multiple !== undefined) {
    if (typeof c.write_multiple !== 'boolean') return err('bad write_multiple');
    caps.writeMultiple = c.write_multiple;
  }
  return { ok: true, caps };
}

/**
 * Reply payload (major 0, minor 0, JSON, NUL) of at most `limit` bytes. Keys whose value equals
 * QEMU's default are dropped first when space is short; `{}` is the last resort.
 */
export function buildVersionReply(server: ServerCapabilities, limit: number): Uint8Array | null {
  const full: [string, number][] = [
    ['max_msg_fds', server.maxMsgFds],
    ['max_data_xfer_size', server.maxDataXferSize],
    ['pgsizes', server.pgsizes],
    ['max_dma_maps', server.maxDmaMaps],
  ];
  for (let keep = full.length; keep >= 0; keep--) {
    const caps = Object.fromEntries(full.slice(0, keep));
    const json = keep > 0 ? JSON.stringify({ capabilities: caps }) : '{}';
    const text = new TextEncoder().encode(json);
    const out = new Uint8Array(4 + text.length + 1); // major 0, minor 0, ..., NUL
    if (out.length > limit) continue;
    out.set(text, 4);
    return out;
  }
  return null;
}
