#version 450
// bench/vulkan-timeslice.c's program: spins until the host writes `stop` (an atomic read, so the
// host's write is seen), adding to `count` on every pass; with stop already set it returns at once.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer B { uint stop; uint count; } b;
void main() {
  while (atomicAdd(b.stop, 0u) == 0u) atomicAdd(b.count, 1u);
}
