// Shared by the built-in kernels' GPU forms (included, never compiled alone).
// Elementwise kernels run 256-wide workgroups over a 2-D grid (x ≤ 65535 workgroups per
// dimension), read as one linear index: the plan (src/gpu/program/builtins.ts) sizes the grid
// to cover every element and each shader bounds-checks against its own element count.
#ifndef VUGPU_BUILTIN_COMMON
#define VUGPU_BUILTIN_COMMON

uint linear_id() {
  return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
         gl_LocalInvocationID.x;
}

#endif
