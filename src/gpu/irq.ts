// Interrupt logic of hw-spec §2: a source sets its PMC_INTR bit and, if enabled in
// PMC_INTR_EN, sends its MSI-X vector — once per event (edge semantics). FIFO events pass
// through PFIFO_INTR / PFIFO_INTR_EN first.
import type { RegisterFile } from './regs.ts';
import {
  IRQ_CHAN_ERROR, IRQ_FIFO, PFIFO_INTR, PFIFO_INTR_CHAN_ERROR, PFIFO_INTR_EN, PFIFO_INTR_FENCE,
  PFIFO_INTR_RUNLIST_ERROR, PMC_INTR, PMC_INTR_EN,
} from './spec.ts';

export type InterruptSink = (vector: number) => void;

export class Interrupts {
  private regsOf: () => RegisterFile;
  sink: InterruptSink;
  /** Messages sent per vector since reset (metrics and tests). */
  readonly sent = [0, 0, 0, 0];

  constructor(regsOf: () => RegisterFile, sink: InterruptSink) {
    this.regsOf = regsOf;
    this.sink = sink;
  }

  /** Raise source n (0–3). */
  raise(source: number): void {
    const regs = this.regsOf();
    regs.setBits(PMC_INTR, 1 << source);
    if (regs.get(PMC_INTR_EN) & (1 << source)) this.deliver(source);
  }

  /** Raise a PFIFO_INTR bit; it reaches PMC_INTR only if enabled in PFIFO_INTR_EN. */
  raiseFifo(bit: number): void {
    const regs = this.regsOf();
    regs.setBits(PFIFO_INTR, bit);
    if ((regs.get(PFIFO_INTR_EN) & bit) === 0) return;
    if (bit & PFIFO_INTR_FENCE) this.raise(IRQ_FIFO);
    if (bit & (PFIFO_INTR_CHAN_ERROR | PFIFO_INTR_RUNLIST_ERROR)) this.raise(IRQ_CHAN_ERROR);
  }

  /** PMC_INTR_EN was written: newly enabled bits that are pending send their vector once. */
  enableChanged(now: number, old: number): void {
    const fresh = now & ~old & this.regsOf().get(PMC_INTR);
    for (let n = 0; n < 4; n++) if (fresh & (1 << n)) this.deliver(n);
  }

  private deliver(vector: number): void {
    this.sent[vector]!++;
    this.sink(vector);
  }
}
