#version 450
// c[i] = SCALE * (a[i] + b[i]) + bias for i < n; workgroup size and SCALE are specialization constants
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float SCALE = 1.0;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform P { uint n; float bias; } pc;
void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i < pc.n)
		c[i] = SCALE * (a[i] + b[i]) + pc.bias;
}
