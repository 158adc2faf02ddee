#version 450
// 8- and 16-bit storage (what ggml's quantized shaders need): out[i] = float(q[i]) * float(h[i])
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
layout(local_size_x = 32) in;
layout(std430, set = 0, binding = 0) readonly buffer Q { uint8_t q[]; };
layout(std430, set = 0, binding = 1) readonly buffer H { float16_t h[]; };
layout(std430, set = 0, binding = 2) buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } pc;
void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i < pc.n)
		o[i] = float(uint(q[i])) * float(h[i]);
}
