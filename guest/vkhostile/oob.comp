#version 450
// Data-driven indices: invocation i reads data[idx[i]] into got[i], then writes mark + i there.
// Indices past the binding's range must read 0 and drop the write (the device bounds every access
// to its binding); in-range indices are distinct, so the result is deterministic.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Idx { uint idx[]; };
layout(set = 0, binding = 1) buffer Data { uint data[]; };
layout(set = 0, binding = 2) buffer Got { uint got[]; };
layout(push_constant) uniform Params { uint n; uint mark; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= pc.n) return;
  uint j = idx[i];
  got[i] = data[j];
  data[j] = pc.mark + i;
}
