// What an fd keeper does with fds, for the tests: a real duplicate of an fd (sent through a
// socketpair with SCM_RIGHTS, as the keeper receives them), kept under its stable name.
import { native } from '../../src/native.ts';

export function dupFd(fd: number): number {
  const [a, b] = native.socketpair();
  try {
    if (native.sendmsg(a, new Uint8Array([1]), [fd]) !== 1) throw new Error('sendmsg failed');
    const out = new Int32Array(4);
    if (native.recvmsg(b, new Uint8Array(1), out) !== 1 || out[0] !== 1) throw new Error('recvmsg failed');
    return out[1]!;
  } finally {
    native.close(a);
    native.close(b);
  }
}

/** A stand-in keeper: holds duplicates by name, hands out fresh duplicates (as `take` would). */
export class FdBox {
  readonly held = new Map<string, number>();

  put(name: string, fd: number): void {
    this.drop(name);
    this.held.set(name, dupFd(fd));
  }

  drop(name: string): void {
    const fd = this.held.get(name);
    if (fd !== undefined) native.close(fd);
    this.held.delete(name);
  }

  /** Fresh duplicates of everything held (the restarted process owns these). */
  take(): Map<string, number> {
    const m = new Map<string, number>();
    for (const [k, fd] of this.held) m.set(k, dupFd(fd));
    return m;
  }

  close(): void {
    for (const fd of this.held.values()) native.close(fd);
    this.held.clear();
  }
}
