// What a GEMM with transfers costs on the Vulkan device itself, hand-pipelined, without vugpu:
// the floor under the engine's staged launch (README, "Known limits"; docs/architecture.md, "The
// bus as Vulkan drives it"). Plain C over libvulkan, the first device, the engine's own shader
// (build/spirv/native/shaders/builtins/fmmul_gpu64.spv: C = A·B, n×n f32, 64×64 tiles) and the
// engine's queues (a compute queue; uploads and downloads on transfer-only queues 0 and 1 where
// the device has them). Operands in pinned host memory (HOST_VISIBLE | COHERENT | CACHED, as the
// engine's bounce buffers), copied to device-local buffers and C back — what cuBLAS's figure
// with transfers does (bench/cublas-sgemm.py). Plans, interleaved over R rounds:
//   serial 1q      one command buffer on the compute queue: A, B up; the GEMM; C down
//   serial 3q      up, GEMM, down on the three queues, chained by timeline semaphores
//   panels P       B first, then A in P row panels on the upload queue; panel p's GEMM as soon as
//                  its rows are up; its C rows down as soon as they are computed (P = 2, 4, 8):
//                  copies in both directions overlap the compute, as the engine's plan does
// Each round: wall from the first vkQueueSubmit to the fence, which the thread polls (no sleep:
// the floor). Every plan's result is checked once (sampled dot products in doubles).
// Prints one JSON object (stdout) and a readable summary (stderr).
//   gcc -O2 -o /tmp/vk-gemm bench/vulkan-gemm-floor.c -lvulkan && /tmp/vk-gemm SPV [n=1024] [rounds=30]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "vulkan-probe.h"

#define MAXR 500
#define MAXP 8

static VkDevice dev;
static VkPhysicalDeviceMemoryProperties mp;
static uint32_t nfam, fams[8];

// A buffer every queue family may use; host ones are mapped (*map).
static VkBuffer mkbuf(VkDeviceSize size, VkMemoryPropertyFlags want, void** map) {
  const VkBufferUsageFlags usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  return probe_buffer(dev, &mp, nfam, fams, size, usage, want, map ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0, map);
}

static void copy(VkCommandBuffer c, VkBuffer s, VkBuffer d, VkDeviceSize at, VkDeviceSize size) {
  VkBufferCopy r = {at, at, size};
  vkCmdCopyBuffer(c, s, d, 1, &r);
}

static void barrier(VkCommandBuffer c, VkPipelineStageFlags from, VkPipelineStageFlags to) {
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  vkCmdPipelineBarrier(c, from, to, 0, 1, &mb, 0, NULL, 0, NULL);
}

static VkPipeline pipe;
static VkPipelineLayout layout;
static VkDescriptorSet set;
// What a run submits to and waits on.
static VkQueue compQ, upQ, downQ;
static VkSemaphore semUp, semComp;
static VkFence fence;
static uint64_t tl;  // both timelines advance together: panel i of a run waits for / signals tl + 1 + i

// The GEMM over workgroup rows [y0, y1) of C (64 rows each).
static void gemm(VkCommandBuffer c, uint32_t n, uint32_t y0, uint32_t y1) {
  const uint32_t pc[4] = {n, 0, n, 0};
  vkCmdBindPipeline(c, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(c, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
  vkCmdPushConstants(c, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, pc);
  vkCmdDispatchBase(c, 0, y0, 0, (n + 63) / 64, y1 - y0, 1);
}

// One batch of submissions to a queue: each waits on (wsem, wval[i]) if wsem, signals (ssem, sval[i]).
static void submit(VkQueue q, int count, const VkCommandBuffer* cmds, VkSemaphore wsem, const uint64_t* wval,
                   VkSemaphore ssem, const uint64_t* sval, VkFence f) {
  VkSubmitInfo si[MAXP];
  VkTimelineSemaphoreSubmitInfo ts[MAXP];
  const VkPipelineStageFlags st = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  for (int i = 0; i < count; i++) {
    ts[i] = (VkTimelineSemaphoreSubmitInfo){VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    si[i] = (VkSubmitInfo){VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si[i].pNext = &ts[i];
    si[i].commandBufferCount = 1;
    si[i].pCommandBuffers = &cmds[i];
    if (wsem) {
      si[i].waitSemaphoreCount = 1;
      si[i].pWaitSemaphores = &wsem;
      si[i].pWaitDstStageMask = &st;
      ts[i].waitSemaphoreValueCount = 1;
      ts[i].pWaitSemaphoreValues = &wval[i];
    }
    if (ssem) {
      si[i].signalSemaphoreCount = 1;
      si[i].pSignalSemaphores = &ssem;
      ts[i].signalSemaphoreValueCount = 1;
      ts[i].pSignalSemaphoreValues = &sval[i];
    }
  }
  CHECK(vkQueueSubmit(q, (uint32_t)count, si, f));
}

// Worst |c − dot| / (2e-4·Σ|a·b| + 2e-6) over sampled entries (bench/engine-vulkan.ts's check).
static double check(uint32_t n, const float* a, const float* b, const float* c) {
  double worst = 0;
  uint32_t s = 12345;
  for (int t = 0; t < 128; t++) {
    s = s * 1103515245u + 12345u;
    const uint32_t i = s % n;
    s = s * 1103515245u + 12345u;
    const uint32_t j = s % n;
    double dot = 0, mag = 0;
    for (uint32_t k = 0; k < n; k++) {
      const double p = (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
      dot += p;
      mag += fabs(p);
    }
    const double r = fabs(c[(size_t)i * n + j] - dot) / (2e-4 * mag + 2e-6);
    if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
  }
  return worst;
}

// A plan: one command buffer on the compute queue (oneQueue: comp[0]), or `panels` row panels,
// each an upload, a GEMM and a download on the three queues (three queues in series: 1 panel).
typedef struct {
  char name[32];
  int oneQueue, panels;
  VkCommandBuffer up[MAXP], comp[MAXP], down[MAXP];
  double t[MAXR], check;
} Plan;

// One run of P: µs from the first submit to the fence, which this thread polls.
static double run(const Plan* P) {
  uint64_t v[MAXP];
  for (int i = 0; i < P->panels; i++) v[i] = tl + 1 + (uint64_t)i;
  const uint64_t t0 = now_ns();
  if (P->oneQueue) {
    submit(compQ, 1, P->comp, VK_NULL_HANDLE, NULL, VK_NULL_HANDLE, NULL, fence);
  } else {
    submit(upQ, P->panels, P->up, VK_NULL_HANDLE, NULL, semUp, v, VK_NULL_HANDLE);
    submit(compQ, P->panels, P->comp, semUp, v, semComp, v, VK_NULL_HANDLE);
    submit(downQ, P->panels, P->down, semComp, v, VK_NULL_HANDLE, NULL, fence);
    tl += (uint64_t)P->panels;
  }
  VkResult r;
  while ((r = vkGetFenceStatus(dev, fence)) == VK_NOT_READY) {
  }
  CHECK(r);
  const double us = (double)(now_ns() - t0) / 1e3;
  CHECK(vkResetFences(dev, 1, &fence));
  return us;
}

int main(int argc, char** argv) {
  const char* spv = argc > 1 ? argv[1] : "build/spirv/native/shaders/builtins/fmmul_gpu64.spv";
  const uint32_t n = argc > 2 ? (uint32_t)atoi(argv[2]) : 1024;
  const int R = argc > 3 ? atoi(argv[3]) : 30;
  if (n < 512 || n > 8192 || n % 512 || R < 1 || R > MAXR) {
    fprintf(stderr, "usage: vulkan-gemm-floor [spv] [n: a multiple of 512, 512..8192] [rounds 1..%d]\n", MAXR);
    return 2;
  }
  static uint32_t words[1 << 16];
  const size_t bytes = probe_read_spirv("vulkan-gemm-floor", spv, words, sizeof words);
  if (!bytes) return 2;

  VkPhysicalDeviceProperties pp;
  VkQueueFamilyProperties qf[8];
  VkPhysicalDevice pd = probe_device(VK_API_VERSION_1_2, &pp, &mp, qf, &nfam);
  int cfam = -1, xfam = -1;
  for (uint32_t i = 0; i < nfam; i++) {
    fams[i] = i;
    const VkQueueFlags fl = qf[i].queueFlags;
    if (cfam < 0 && (fl & VK_QUEUE_COMPUTE_BIT)) cfam = (int)i;
    if (xfam < 0 && (fl & VK_QUEUE_TRANSFER_BIT) && !(fl & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) xfam = (int)i;
  }
  if (cfam < 0) {
    fprintf(stderr, "vulkan-gemm-floor: no compute queue\n");
    return 1;
  }
  float prio[2] = {1, 1};
  VkDeviceQueueCreateInfo qci[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}, {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
  qci[0].queueFamilyIndex = (uint32_t)cfam;
  qci[0].queueCount = 1;
  qci[0].pQueuePriorities = prio;
  const uint32_t xcount = xfam >= 0 ? (qf[xfam].queueCount > 1 ? 2 : 1) : 0;
  if (xfam >= 0) {
    qci[1].queueFamilyIndex = (uint32_t)xfam;
    qci[1].queueCount = xcount;
    qci[1].pQueuePriorities = prio;
  }
  VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f12;
  dci.queueCreateInfoCount = xfam >= 0 ? 2 : 1;
  dci.pQueueCreateInfos = qci;
  CHECK(vkCreateDevice(pd, &dci, NULL, &dev));
  vkGetDeviceQueue(dev, (uint32_t)cfam, 0, &compQ);
  upQ = downQ = compQ;
  if (xfam >= 0) {
    vkGetDeviceQueue(dev, (uint32_t)xfam, 0, &upQ);
    vkGetDeviceQueue(dev, (uint32_t)xfam, xcount - 1, &downQ);
  }
  VkCommandPool cpool, xpool;
  VkCommandPoolCreateInfo pc = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pc.queueFamilyIndex = (uint32_t)cfam;
  CHECK(vkCreateCommandPool(dev, &pc, NULL, &cpool));
  pc.queueFamilyIndex = (uint32_t)(xfam >= 0 ? xfam : cfam);
  CHECK(vkCreateCommandPool(dev, &pc, NULL, &xpool));

  // Operands: A, B in [-1, 1) (an LCG), C poisoned before each plan's checked run.
  const VkDeviceSize nb = (VkDeviceSize)n * n * 4;
  const VkMemoryPropertyFlags H = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  float *ha, *hb, *hc;
  VkBuffer hA = mkbuf(nb, H, (void**)&ha), hB = mkbuf(nb, H, (void**)&hb), hC = mkbuf(nb, H, (void**)&hc);
  VkBuffer dA = mkbuf(nb, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, NULL), dB = mkbuf(nb, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, NULL),
           dC = mkbuf(nb, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, NULL);
  uint32_t s = 1;
  for (size_t i = 0; i < (size_t)n * n; i++) s = s * 1664525u + 1013904223u, ha[i] = (float)(s / 2147483648.0 - 1);
  for (size_t i = 0; i < (size_t)n * n; i++) s = s * 1664525u + 1013904223u, hb[i] = (float)(s / 2147483648.0 - 1);

  // The pipeline: 3 storage buffers, 16 bytes of push constants, dispatched with a base.
  VkDescriptorSetLayoutBinding lb[3];
  for (uint32_t i = 0; i < 3; i++)
    lb[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
  VkDescriptorSetLayoutCreateInfo dl = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = 3;
  dl.pBindings = lb;
  VkDescriptorSetLayout dsl;
  CHECK(vkCreateDescriptorSetLayout(dev, &dl, NULL, &dsl));
  VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 16};
  VkPipelineLayoutCreateInfo pl = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &dsl;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pr;
  CHECK(vkCreatePipelineLayout(dev, &pl, NULL, &layout));
  pipe = probe_pipeline(dev, words, bytes, layout);
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 1;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  VkDescriptorPool dp;
  CHECK(vkCreateDescriptorPool(dev, &dpi, NULL, &dp));
  VkDescriptorSetAllocateInfo dsa = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  dsa.descriptorPool = dp;
  dsa.descriptorSetCount = 1;
  dsa.pSetLayouts = &dsl;
  CHECK(vkAllocateDescriptorSets(dev, &dsa, &set));
  VkDescriptorBufferInfo dbi[3] = {{dA, 0, VK_WHOLE_SIZE}, {dB, 0, VK_WHOLE_SIZE}, {dC, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = set;
  w.descriptorCount = 3;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = dbi;
  vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);

  VkSemaphoreTypeCreateInfo stc = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  stc.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  sci.pNext = &stc;
  CHECK(vkCreateSemaphore(dev, &sci, NULL, &semUp));
  CHECK(vkCreateSemaphore(dev, &sci, NULL, &semComp));
  VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  CHECK(vkCreateFence(dev, &fi, NULL, &fence));

  // Record every plan once; rounds submit them again.
  const uint32_t rows = n / 64;  // workgroup rows
  const VkDeviceSize rowBytes = (VkDeviceSize)n * 4 * 64;
  const VkPipelineStageFlags XFER = VK_PIPELINE_STAGE_TRANSFER_BIT, COMP = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  Plan plans[5] = {{"serial 1q", 1, 1}, {"serial 3q", 0, 1}, {"panels 2", 0, 2}, {"panels 4", 0, 4}, {"panels 8", 0, 8}};
  const int np = 5;
  for (int p = 0; p < np; p++) {
    Plan* P = &plans[p];
    if (P->oneQueue) {
      VkCommandBuffer c = probe_begin(dev, cpool);
      copy(c, hA, dA, 0, nb);
      copy(c, hB, dB, 0, nb);
      barrier(c, XFER, COMP);
      gemm(c, n, 0, rows);
      barrier(c, COMP, XFER);
      copy(c, dC, hC, 0, nb);
      CHECK(vkEndCommandBuffer(c));
      P->comp[0] = c;
      continue;
    }
    for (int i = 0; i < P->panels; i++) {
      const uint32_t y0 = rows * (uint32_t)i / (uint32_t)P->panels, y1 = rows * (uint32_t)(i + 1) / (uint32_t)P->panels;
      VkCommandBuffer u = probe_begin(dev, xpool);
      if (i == 0) copy(u, hB, dB, 0, nb);
      copy(u, hA, dA, y0 * rowBytes, (y1 - y0) * rowBytes);
      CHECK(vkEndCommandBuffer(u));
      VkCommandBuffer c = probe_begin(dev, cpool);
      gemm(c, n, y0, y1);
      CHECK(vkEndCommandBuffer(c));
      VkCommandBuffer d = probe_begin(dev, xpool);
      copy(d, dC, hC, y0 * rowBytes, (y1 - y0) * rowBytes);
      CHECK(vkEndCommandBuffer(d));
      P->up[i] = u, P->comp[i] = c, P->down[i] = d;
    }
  }

  // Each plan once with C poisoned, checked; then the rounds, plans interleaved.
  for (int p = 0; p < np; p++) {
    memset(hc, 0xff, nb);
    run(&plans[p]);
    plans[p].check = check(n, ha, hb, hc);
  }
  for (int r = 0; r < R; r++)
    for (int p = 0; p < np; p++) plans[p].t[r] = run(&plans[p]);

  printf("{\"device\":\"%s\",\"n\":%u,\"rounds\":%d,\"transferQueues\":%u,\"plans\":[", pp.deviceName, n, R, xcount);
  fprintf(stderr, "%s: GEMM %u³ with transfers (%.0f MiB up, %.0f down), %d rounds: best / median µs, check\n", pp.deviceName, n,
          2.0 * (double)nb / (1 << 20), (double)nb / (1 << 20), R);
  int ok = 1;
  for (int p = 0; p < np; p++) {
    Plan* P = &plans[p];
    qsort(P->t, (size_t)R, sizeof(double), probe_cmp_double);
    printf("%s{\"name\":\"%s\",\"bestUs\":%.1f,\"p50Us\":%.1f,\"checkWorst\":%.4f}", p ? "," : "", P->name, P->t[0], P->t[R / 2], P->check);
    fprintf(stderr, "  %-12s %8.1f %8.1f   %.4f\n", P->name, P->t[0], P->t[R / 2], P->check);
    if (!(P->check <= 1)) ok = 0;
  }
  printf("],\"allChecked\":%s}\n", ok ? "true" : "false");
  return ok ? 0 : 1;
}
