// Kernel parameter blocks (docs/kernels.md): little-endian u32/f32/u64 fields in order.
type Field = ['u32', number] | ['f32', number] | ['u64', bigint];

export function params(...fields: Field[]): Uint8Array {
  const size = fields.reduce((s, f) => s + (f[0] === 'u64' ? 8 : 4), 0);
  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  let off = 0;
  for (const [type, value] of fields) {
    if (type === 'u64') {
      dv.setBigUint64(off, value, true);
      off += 8;
    } else {
      if (type === 'u32') dv.setUint32(off, value, true);
      else dv.setFloat32(off, value, true);
      off += 4;
    }
  }
  return out;
}
