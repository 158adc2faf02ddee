#version 450
// more workgroup memory than any vugpu device allows: the device refuses it at launch
layout(local_size_x = 64) in;
shared float big[65536];
layout(std430, set = 0, binding = 0) buffer O { float o[]; };
void main() {
	big[gl_LocalInvocationIndex] = 1.0;
	barrier();
	o[gl_LocalInvocationIndex] = big[63 - gl_LocalInvocationIndex];
}
