#version 450
// One atomicAdd per workgroup: the counter is the number of workgroups that ran (huge grids,
// many dispatches in one command buffer).
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Counter { uint n; } counter;
void main() {
  atomicAdd(counter.n, 1u);
}
