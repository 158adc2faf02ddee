#version 450
// K_NOP: an empty launch (launch overhead). No buffers, no push constants.
layout(local_size_x = 1) in;
void main() {}
