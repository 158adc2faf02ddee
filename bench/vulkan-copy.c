// What copies between host and device memory cost on the Vulkan device itself, without vugpu:
// the floor under a staged launch's transfers (docs/architecture.md, "GPU memory"; README, the
// GEMM 1024³ row). Plain C over libvulkan, the first device. Every queue family that can copy
// gets up to two queues; buffers are pinned host memory (HOST_VISIBLE | COHERENT | CACHED, as
// the engine's bounce buffers) and device-local memory. Wall time per case (submit → fence),
// best and median of R rounds, the cases interleaved:
//   alone        up (8·X MiB host → device) and down (4·X MiB device → host) on each queue
//   pairs        up on queue i and down on queue j submitted together, for every i ≠ j: do the
//                two directions run at once (PCIe is full duplex; CUDA's copies measured so on
//                the same host: bench/cublas-sgemm.py, "both")?
//   split        the up copy as two halves on queues i < j at once (a second copy engine: more
//                than one engine's rate?), and the same with the down copy on the engine's
//                download queue beside them
//   floor        a submission of no command buffer, and one of an empty command buffer, and its
//                fence, on the compute queue
//   pieces       the up copy as 8 regions of one command, and as 8 submissions of one region
//   hops         8 empty submissions chained by a timeline semaphore, across the engine's three
//                queues (upload → compute → download → …) and on one queue
// Prints one JSON object (stdout) and a readable summary (stderr).
//   gcc -O2 -o /tmp/vk-copy bench/vulkan-copy.c -lvulkan && /tmp/vk-copy [rounds=15] [X=1]
// (bench/vulkan-probe.h, beside it, holds the helpers it shares with bench/vulkan-floor.c)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

#include "vulkan-probe.h"

#define MAXQ 16
#define MAXR 200

static VkDevice dev;
static VkPhysicalDeviceMemoryProperties mp;
static uint32_t nfam, fams[8];
static VkQueue q[MAXQ];
static VkCommandPool pool[MAXQ];
static int qfam[MAXQ], qidx[MAXQ], nq;
static VkFence fence[3];
static VkSemaphore sem;
static uint64_t semv;

static VkBuffer mkbuf(VkDeviceSize size, VkMemoryPropertyFlags want, int host) {
  void* p = NULL;
  VkBuffer b = probe_buffer(dev, &mp, nfam, fams, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, want,
                            host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0, host ? &p : NULL);
  if (host) memset(p, 1, size);
  return b;
}

// A command buffer of queue qi copying `pieces` equal regions (offset `at` in both buffers).
static VkCommandBuffer copycmd(int qi, VkBuffer s, VkBuffer d, VkDeviceSize at, VkDeviceSize size, int pieces) {
  VkCommandBuffer c = probe_begin(dev, pool[qi]);
  for (int i = 0; i < pieces; i++) {
    VkBufferCopy r = {at + size / pieces * i, at + size / pieces * i, size / pieces};
    vkCmdCopyBuffer(c, s, d, 1, &r);
  }
  CHECK(vkEndCommandBuffer(c));
  return c;
}

// Submits c (or nothing) to queue qi; chained: waits for the semaphore's current value and
// signals the next.
static void submit(int qi, VkCommandBuffer c, int chained, VkFence f) {
  VkTimelineSemaphoreSubmitInfo ts = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  uint64_t wv = semv, sv = semv + 1;
  VkPipelineStageFlags st = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.pNext = &ts;
  si.commandBufferCount = c ? 1 : 0;
  si.pCommandBuffers = &c;
  if (chained) {
    if (semv > 0) {
      si.waitSemaphoreCount = 1;
      si.pWaitSemaphores = &sem;
      si.pWaitDstStageMask = &st;
      ts.waitSemaphoreValueCount = 1;
      ts.pWaitSemaphoreValues = &wv;
    }
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &sem;
    ts.signalSemaphoreValueCount = 1;
    ts.pSignalSemaphoreValues = &sv;
    semv++;
  }
  CHECK(vkQueueSubmit(q[qi], 1, &si, f));
}

static void wait(int n) {
  CHECK(vkWaitForFences(dev, (uint32_t)n, fence, VK_TRUE, UINT64_MAX));
  CHECK(vkResetFences(dev, (uint32_t)n, fence));
}

// One measured case: a name, and the queues it uses (-1 = none).
typedef struct { char name[64]; int kind, i, j; double t[MAXR]; } Case;
enum { UP, DOWN, PAIR, SPLIT, SPLIT_DOWN, FLOOR, FLOOR_CMD, PIECES, SUBMITS, HOPS3, HOPS1 };

int main(int argc, char** argv) {
  int R = argc > 1 ? atoi(argv[1]) : 15;
  VkDeviceSize X = argc > 2 ? (VkDeviceSize)atoi(argv[2]) : 1;
  if (R < 1 || R > MAXR || X < 1 || X > 256) { fprintf(stderr, "usage: vulkan-copy [rounds 1..%d] [scale 1..256]\n", MAXR); return 2; }
  VkPhysicalDeviceProperties pp;
  VkQueueFamilyProperties qf[8];
  VkPhysicalDevice pd = probe_device(VK_API_VERSION_1_2, &pp, &mp, qf, &nfam);
  float prio[2] = {1, 1};
  VkDeviceQueueCreateInfo qci[8];
  uint32_t nci = 0;
  int compQ = -1, xferQ = -1;  // the engine's: the first compute family's queue, a transfer-only family
  for (uint32_t i = 0; i < nfam; i++) {
    fams[i] = i;
    if (!(qf[i].queueFlags & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) continue;
    VkDeviceQueueCreateInfo c = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    c.queueFamilyIndex = i;
    c.queueCount = qf[i].queueCount > 1 ? 2 : 1;
    c.pQueuePriorities = prio;
    qci[nci++] = c;
    const int transferOnly = (qf[i].queueFlags & VK_QUEUE_TRANSFER_BIT) && !(qf[i].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT));
    if (compQ < 0 && (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) compQ = nq;
    if (xferQ < 0 && transferOnly) xferQ = nq;
    for (uint32_t k = 0; k < c.queueCount; k++, nq++) qfam[nq] = (int)i, qidx[nq] = (int)k;
  }
  VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f12;
  dci.queueCreateInfoCount = nci;
  dci.pQueueCreateInfos = qci;
  CHECK(vkCreateDevice(pd, &dci, NULL, &dev));
  for (int i = 0; i < nq; i++) {
    vkGetDeviceQueue(dev, (uint32_t)qfam[i], (uint32_t)qidx[i], &q[i]);
    VkCommandPoolCreateInfo pc = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pc.queueFamilyIndex = (uint32_t)qfam[i];
    CHECK(vkCreateCommandPool(dev, &pc, NULL, &pool[i]));
  }
  for (int i = 0; i < 3; i++) {
    VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    CHECK(vkCreateFence(dev, &fi, NULL, &fence[i]));
  }
  VkSemaphoreTypeCreateInfo stc = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  stc.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  sci.pNext = &stc;
  CHECK(vkCreateSemaphore(dev, &sci, NULL, &sem));
  // The engine's upload and download queues: transfer-only queues 0 and 1 where there are any.
  const int upQ = xferQ >= 0 ? xferQ : compQ;
  const int downQ = xferQ >= 0 && xferQ + 1 < nq && qfam[xferQ + 1] == qfam[xferQ] ? xferQ + 1 : upQ;

  const VkMemoryPropertyFlags H = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  const VkDeviceSize M = X << 20, UPB = 8 * M, DNB = 4 * M;
  VkBuffer hup = mkbuf(UPB, H, 1), hdn = mkbuf(DNB, H, 1);
  VkBuffer dup = mkbuf(UPB, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0), ddn = mkbuf(DNB, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  VkCommandBuffer upHalf[2][MAXQ], up[MAXQ], dn[MAXQ], upPieces = copycmd(upQ, hup, dup, 0, UPB, 8), upPart[8];
  for (int i = 0; i < nq; i++) up[i] = copycmd(i, hup, dup, 0, UPB, 1), dn[i] = copycmd(i, ddn, hdn, 0, DNB, 1);
  for (int i = 0; i < nq; i++)
    for (int h = 0; h < 2; h++) upHalf[h][i] = copycmd(i, hup, dup, UPB / 2 * (VkDeviceSize)h, UPB / 2, 1);
  VkCommandBuffer emptyCmd = copycmd(compQ, hup, dup, 0, 0, 0);
  for (int k = 0; k < 8; k++) upPart[k] = copycmd(upQ, hup, dup, UPB / 8 * (VkDeviceSize)k, UPB / 8, 1);

  static Case cs[2 * MAXQ * MAXQ + 16];
  int nc = 0;
#define ADD(K, I, J, ...) do { cs[nc].kind = K; cs[nc].i = I; cs[nc].j = J; snprintf(cs[nc].name, 64, __VA_ARGS__); nc++; } while (0)
  for (int i = 0; i < nq; i++) {
    ADD(UP, i, -1, "up q%d", i);
    ADD(DOWN, i, -1, "down q%d", i);
  }
  for (int i = 0; i < nq; i++)
    for (int j = 0; j < nq; j++)
      if (i != j) ADD(PAIR, i, j, "up q%d + down q%d", i, j);
  for (int i = 0; i < nq; i++)
    for (int j = i + 1; j < nq; j++) {
      ADD(SPLIT, i, j, "up halves q%d + q%d", i, j);
      if (i != downQ && j != downQ) ADD(SPLIT_DOWN, i, j, "up halves q%d + q%d, down q%d", i, j, downQ);
    }
  ADD(FLOOR, compQ, -1, "submission of no command buffer + fence (compute queue)");
  ADD(FLOOR_CMD, compQ, -1, "an empty command buffer + fence (compute queue)");
  ADD(PIECES, upQ, -1, "up as 8 regions of one command buffer");
  ADD(SUBMITS, upQ, -1, "up as 8 submissions");
  ADD(HOPS3, -1, -1, "8 chained submissions, upload/compute/download queues");
  ADD(HOPS1, compQ, -1, "8 chained submissions, one queue");
  for (int r = 0; r < R; r++)
    for (int c = 0; c < nc; c++) {
      Case* k = &cs[c];
      const uint64_t t0 = now_ns();
      switch (k->kind) {
        case UP: submit(k->i, up[k->i], 0, fence[0]); wait(1); break;
        case DOWN: submit(k->i, dn[k->i], 0, fence[0]); wait(1); break;
        case PAIR: submit(k->i, up[k->i], 0, fence[0]); submit(k->j, dn[k->j], 0, fence[1]); wait(2); break;
        case SPLIT: submit(k->i, upHalf[0][k->i], 0, fence[0]); submit(k->j, upHalf[1][k->j], 0, fence[1]); wait(2); break;
        case SPLIT_DOWN:
          submit(k->i, upHalf[0][k->i], 0, fence[0]);
          submit(k->j, upHalf[1][k->j], 0, fence[1]);
          submit(downQ, dn[downQ], 0, fence[2]);
          wait(3);
          break;
        case FLOOR: submit(k->i, VK_NULL_HANDLE, 0, fence[0]); wait(1); break;
        case FLOOR_CMD: submit(k->i, emptyCmd, 0, fence[0]); wait(1); break;
        case PIECES: submit(k->i, upPieces, 0, fence[0]); wait(1); break;
        case SUBMITS:
          for (int s = 0; s < 8; s++) submit(k->i, upPart[s], 0, s == 7 ? fence[0] : VK_NULL_HANDLE);
          wait(1);
          break;
        case HOPS3: {
          const int order[3] = {upQ, compQ, downQ};
          for (int s = 0; s < 8; s++) submit(order[s % 3], VK_NULL_HANDLE, 1, s == 7 ? fence[0] : VK_NULL_HANDLE);
          wait(1);
          break;
        }
        case HOPS1:
          for (int s = 0; s < 8; s++) submit(k->i, VK_NULL_HANDLE, 1, s == 7 ? fence[0] : VK_NULL_HANDLE);
          wait(1);
          break;
      }
      k->t[r] = (double)(now_ns() - t0) / 1e3;
    }
  printf("{\"device\":\"%s\",\"rounds\":%d,\"upBytes\":%llu,\"downBytes\":%llu,\"engineQueues\":{\"compute\":%d,\"up\":%d,\"down\":%d},\"queues\":[",
         pp.deviceName, R, (unsigned long long)UPB, (unsigned long long)DNB, compQ, upQ, downQ);
  for (int i = 0; i < nq; i++) printf("%s{\"q\":%d,\"family\":%d,\"index\":%d,\"flags\":%u}", i ? "," : "", i, qfam[i], qidx[i], qf[qfam[i]].queueFlags);
  printf("],\"cases\":[");
  fprintf(stderr, "%s: up %llu MiB, down %llu MiB, %d rounds (best / median us)\n", pp.deviceName, (unsigned long long)(8 * X), (unsigned long long)(4 * X), R);
  for (int c = 0; c < nc; c++) {
    Case* k = &cs[c];
    qsort(k->t, (size_t)R, sizeof(double), probe_cmp_double);
    printf("%s{\"name\":\"%s\",\"bestUs\":%.1f,\"p50Us\":%.1f}", c ? "," : "", k->name, k->t[0], k->t[R / 2]);
    // the summary shows the engine's pair of the many pairs, and the best split below
    const int shown = k->kind == PAIR ? k->i == upQ && k->j == downQ : k->kind != SPLIT && k->kind != SPLIT_DOWN;
    if (shown) fprintf(stderr, "  %-56s %8.1f %8.1f\n", k->name, k->t[0], k->t[R / 2]);
  }
  printf("]}\n");
  // The best pair, for the summary.
  int best = -1;
  for (int c = 0; c < nc; c++)
    if (cs[c].kind == PAIR && (best < 0 || cs[c].t[0] < cs[best].t[0])) best = c;
  if (best >= 0) fprintf(stderr, "  best pair: %s %.1f\n", cs[best].name, cs[best].t[0]);
  for (int kind = SPLIT; kind <= SPLIT_DOWN; kind++) {
    best = -1;
    for (int c = 0; c < nc; c++)
      if (cs[c].kind == kind && (best < 0 || cs[c].t[0] < cs[best].t[0])) best = c;
    if (best >= 0) fprintf(stderr, "  best split: %s %.1f\n", cs[best].name, cs[best].t[0]);
  }
  return 0;
}
