#version 450
// Test hook only (vulkanInjectFault, native/src/vulkan/napi.cc): one write through a buffer
// reference to the address in the push constants, which nothing maps — a real GPU page fault
// that loses the device. Guest programs can never do this: the validator refuses
// PhysicalStorageBufferAddresses, and a server without VUGPU_TEST_HOOKS=1 never enables it.
#extension GL_EXT_buffer_reference : require
layout(local_size_x = 1) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Word { uint v; };
layout(push_constant) uniform Params { Word target; } pc;
void main() { pc.target.v = 0xdeadu; }
