// The fd keeper's wire format: one SOCK_SEQPACKET record per message (boundaries kept by the
// kernel), a UTF-8 JSON object, with SCM_RIGHTS fds riding on the same record. Shared by the
// keeper process (keeper.ts) and the server's client (keeper-client.ts).
import { native, EAGAIN } from '../native.ts';

/** Most fds one record carries (Linux SCM_MAX_FD is 253). */
export const FDS_PER_RECORD = 200;
/** Largest record we read (JSON of key lists and arrival times stays far below). */
export const MAX_RECORD = 256 * 1024;

export interface WireRecord {
  msg: { op: string; [k: string]: unknown };
  fds: number[];
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Send one record; false if the peer is gone or not reading (the caller drops it). Never
 * blocks for long: SEQPACKET sends are whole or nothing, a full peer is waited on 1 s at most. */
export function sendRecord(fd: number, msg: object, fds?: number[]): boolean {
  const bytes = enc.encode(JSON.stringify(msg));
  const r = native.sendmsg(fd, bytes, fds && fds.length > 0 ? fds : undefined, 1000);
  return r === bytes.length;
}

/** Read every record that is waiting. Returns them, and whether the peer is gone (EOF or an
 * error). Malformed records are dropped with their fds closed. */
export function readRecords(fd: number, buf: Uint8Array, fdsOut: Int32Array): { records: WireRecord[]; gone: boolean } {
  const records: WireRecord[] = [];
  for (;;) {
    const n = native.recvmsg(fd, buf, fdsOut);
    if (n === -EAGAIN) return { records, gone: false };
    if (n <= 0) return { records, gone: true };
    const count = fdsOut[0]!;
    const fds = count > 0 ? Array.from(fdsOut.subarray(1, 1 + count)) : [];
    let msg: unknown;
    try {
      msg = JSON.parse(dec.decode(buf.subarray(0, n)));
    } catch {
      msg = null;
    }
    if (count < 0 || msg === null || typeof msg !== 'object' || typeof (msg as { op?: unknown }).op !== 'string') {
      for (const f of fds) native.close(f);
      continue;
    }
    records.push({ msg: msg as WireRecord["msg"], fds });
  }
}
