#version 450
// one sum per subgroup (subgroupAdd), written by its first invocation
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(std430, set = 0, binding = 1) buffer S { uint s[]; };
void main() {
	uint v = subgroupAdd(x[gl_GlobalInvocationID.x]);
	if (subgroupElect())
		s[gl_GlobalInvocationID.x / gl_SubgroupSize] = v;
}
