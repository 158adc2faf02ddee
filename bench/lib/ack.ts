// A host → guest line channel: a second serial port (the guest's /dev/ttyS1) whose QEMU chardev
// connects to a UNIX socket served here. The guest console (ttyS0) carries records out; this
// carries acknowledgements in, so a guest script can stop at a marker until the host has looked
// at the server's counters (bench/counts.ts).
import net from 'node:net';
import fs from 'node:fs';

export class AckChannel {
  readonly path: string;
  private readonly server: net.Server;
  private conn: net.Socket | null = null;
  private readonly queued: string[] = [];
  private readonly ready: Promise<void>;

  constructor(socketPath: string) {
    this.path = socketPath;
    if (fs.existsSync(socketPath)) fs.unlinkSync(socketPath);
    this.server = net.createServer((c) => {
      if (this.conn) {
        c.destroy(); // one guest per channel
        return;
      }
      this.conn = c;
      c.on('error', () => {}); // the guest powering off resets the connection
      c.on('data', () => {}); // tty echo, if the guest did not turn it off
      c.on('close', () => {
        if (this.conn === c) this.conn = null;
      });
      for (const l of this.queued.splice(0)) c.write(l);
    });
    this.ready = new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(socketPath, () => resolve());
    });
  }

  /** Resolves once listening (QEMU must find the socket when it starts). */
  listening(): Promise<void> {
    return this.ready;
  }

  /** QEMU arguments: a chardev connected to this socket and a second ISA serial port on it. */
  qemuArgs(id = 'ack'): string[] {
    return ['-chardev', `socket,id=${id},path=${this.path}`, '-device', `isa-serial,chardev=${id}`];
  }

  /** Send one line to the guest (queued until QEMU has connected). */
  send(line: string): void {
    const l = `${line}\n`;
    if (this.conn) this.conn.write(l);
    else this.queued.push(l);
  }

  close(): void {
    this.conn?.destroy();
    this.server.close();
    fs.rmSync(this.path, { force: true });
  }
}
