#version 450
// K_HOTSPOT: one explicit step of the HotSpot RC model, neighbours clamped to the grid:
//   out = T + (step/cap)·(P + (N + S − 2T)/ry + (E + W − 2T)/rx + (amb − T)/rz)
// written with reciprocals as the native kernel (and Rodinia's GPU code) does.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer TIn { float tin[]; };
layout(set = 0, binding = 1) readonly buffer Power { float power[]; };
layout(set = 0, binding = 2) buffer TOut { float tout[]; };

layout(push_constant) uniform Params {
  uint rows, cols;                       // 0, 4 (the plan guarantees rows·cols < 2^32)
  float cap, rx, ry, rz, step_, amb;     // 8 … 28
} pc;

void main() {
  const uint i = linear_id();
  if (pc.cols == 0u || i >= pc.rows * pc.cols) return;
  const uint r = i / pc.cols, c = i - r * pc.cols;
  const float t = tin[i];
  const float n = r > 0u ? tin[i - pc.cols] : t;
  const float s = r + 1u < pc.rows ? tin[i + pc.cols] : t;
  const float w = c > 0u ? tin[i - 1u] : t;
  const float e = c + 1u < pc.cols ? tin[i + 1u] : t;
  const float sdc = pc.step_ / pc.cap, rx1 = 1.0 / pc.rx, ry1 = 1.0 / pc.ry, rz1 = 1.0 / pc.rz;
  tout[i] = t + sdc * (power[i] + (s + n - 2.0 * t) * ry1 + (e + w - 2.0 * t) * rx1 +
                       (pc.amb - t) * rz1);
}
