// What an empty compute launch costs on the Vulkan device itself, without vugpu: the floor under
// bench:programs' NOP program (docs/programs.md, "Launch latency"). Plain C over libvulkan; the
// first device, the engine's rewritten NOP (programPrepare's words) on the engine's layout (set 0
// empty, set 1 = the control block), robust buffer access on. Modes, interleaved in blocks of 25:
//   one-thread   record (descriptor sets and command buffer, as native/src/vulkan/program.cc
//                writes them for a new launch), submit, vkWaitForFences in 1 ms slices
//   worker       the caller wakes a worker that does the same, then wakes the caller (the
//                engine's hand-off: JS → pool thread → JS)
//   timeline     the caller records and submits; a waiter already blocked in vkWaitSemaphores
//                on the next timeline value wakes the caller (one hand-off fewer)
// and, on a command buffer recorded once and submitted again (the engine's relaunch replay), how
// soon the caller can see the launch end — the GPU's round trip (spinning: a GPU's launch ends in
// microseconds):
//   spin-fence   vkWaitForFences(timeout 0) in a loop (what the engine does first)
//   spin-ts      the same with the engine's two timestamp queries around the dispatch
//   spin-status  vkGetFenceStatus in a loop
//   spin-sem     a timeline semaphore's value, vkGetSemaphoreCounterValue in a loop
//   spin-flag    the command buffer's last command writes a word of host-visible memory, which
//                the caller watches (no driver call); the fence is waited for after it (flag+fence)
//   submit       vkQueueSubmit alone (from spin-fence's launches)
//   ts-*         spin-ts with the queries reset on the host (vkResetQueryPool, hostQueryReset)
//                instead of in the command buffer, written at the compute stage instead of the
//                top and bottom of the pipe, or only the one at the end
// and what the CPU side alone costs (no device): a caller waking a worker blocked on a condition
// variable and waiting to be woken back (handoff-sleep: the built-in NOP's two thread hand-offs),
// and the same between two spinning threads (handoff-spin).
// Build and run (the module as the engine hands it to the driver, from programPrepare):
//   node --input-type=module -e "import fs from 'node:fs'; import { native } from './src/native.ts';
//     import { VulkanBackend } from './src/gpu/vulkan.ts'; const b = VulkanBackend.open();
//     const m = fs.readFileSync('build/spirv/native/shaders/builtins/nop.spv');
//     fs.writeFileSync('/tmp/nop-prepared.spv', native.programPrepare(new Uint32Array(m.buffer,
//     m.byteOffset, m.length / 4), 0, new Uint32Array(0), b.limits).words); b.close();"
//   gcc -O2 -o /tmp/vk-floor bench/vulkan-floor.c -lvulkan -lpthread
//   /tmp/vk-floor /tmp/nop-prepared.spv [rounds=40]
// LP_NUM_THREADS=0 in the environment shows what llvmpipe's compute threads cost (see
// docs/programs.md: the engine does not set it, large dispatches would run on one core).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "vulkan-probe.h"

static VkDevice dev;
static VkQueue queue;
static VkPipeline pipeline;
static VkPipelineLayout layout;
static VkDescriptorSetLayout dsl[2];
static VkDescriptorPool dpool;
static VkCommandPool cpool;
static VkCommandBuffer cmd;
static VkFence fence;
static VkSemaphore timeline;
static VkBuffer control;
static volatile uint32_t* controlWords;
static VkPhysicalDeviceMemoryProperties memProps;
// Replayed command buffers (recorded once): plain, with the engine's timestamps, with a flag write.
static VkCommandPool replayPool;
static VkCommandBuffer cmdPlain, cmdTs, cmdFlag;
// Timestamp variants: queries reset in the command buffer (R) or on the host (H, hostQueryReset),
// written at the top and bottom of the pipe (TB) or at the compute stage (C), or only one at the
// end (E).
enum { TS_R_TB, TS_R_C, TS_H_TB, TS_H_C, TS_H_E, TS_VARIANTS };
static VkCommandBuffer cmdTsVar[TS_VARIANTS];
static VkQueryPool queries;
static VkBuffer flagBuf;
static volatile uint32_t* flagWord;
static VkSemaphore spinTimeline;
static uint64_t spinSignalled;

// The first memory type with all of `want` (and, when it exists, all of `prefer`) set.
static uint32_t memType(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) {
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < memProps.memoryTypeCount; i++) {
      VkMemoryPropertyFlags fl = memProps.memoryTypes[i].propertyFlags;
      if ((bits >> i & 1) && (fl & want) == want && (pass || (fl & prefer) == prefer)) return i;
    }
  fprintf(stderr, "no memory type with flags %#x\n", want);
  exit(1);
}

static void* hostBuffer(VkBuffer* buf, VkMemoryPropertyFlags prefer) {
  VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = 256;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  CHECK(vkCreateBuffer(dev, &bci, NULL, buf));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, *buf, &req);
  VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = memType(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, prefer);
  VkDeviceMemory mem;
  CHECK(vkAllocateMemory(dev, &mai, NULL, &mem));
  CHECK(vkBindBufferMemory(dev, *buf, mem, 0));
  void* map;
  CHECK(vkMapMemory(dev, mem, 0, 256, 0, &map));
  return map;
}

// The engine's two descriptor sets from pool: set 0 empty, set 1 the control block.
static void allocSets(VkDescriptorPool pool, VkDescriptorSet sets[2]) {
  VkDescriptorSetAllocateInfo da = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  da.descriptorPool = pool;
  da.descriptorSetCount = 2;
  da.pSetLayouts = dsl;
  CHECK(vkAllocateDescriptorSets(dev, &da, sets));
  VkDescriptorBufferInfo bi = {control, 0, 8};
  VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = sets[1];
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = &bi;
  vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);
}

// Descriptor sets, cancel words and the command buffer, as the engine writes them per launch.
static void record(void) {
  CHECK(vkResetDescriptorPool(dev, dpool, 0));
  VkDescriptorSet sets[2];
  allocSets(dpool, sets);
  controlWords[0] = controlWords[1] = 0;
  CHECK(vkResetCommandPool(dev, cpool, 0));
  VkCommandBufferBeginInfo cb = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  cb.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  CHECK(vkBeginCommandBuffer(cmd, &cb));
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 2, sets, 0, NULL);
  vkCmdDispatch(cmd, 1, 1, 1);
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  CHECK(vkEndCommandBuffer(cmd));
}

// One submission of c, signalling the fence f and/or the timeline semaphore sem at *signal.
static void submitTo(VkCommandBuffer c, VkFence f, VkSemaphore sem, const uint64_t* signal) {
  VkTimelineSemaphoreSubmitInfo ti = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &c;
  if (signal) {
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = signal;
    si.pNext = &ti;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &sem;
  }
  CHECK(vkQueueSubmit(queue, 1, &si, f));
}

static void submit(const uint64_t* signal) {
  if (!signal) CHECK(vkResetFences(dev, 1, &fence));
  submitTo(cmd, signal ? VK_NULL_HANDLE : fence, timeline, signal);
}

static void waitFence(void) {
  // 1 ms slices, as the engine waits (so a cancel can reach the program).
  while (vkWaitForFences(dev, 1, &fence, VK_TRUE, 1000000) == VK_TIMEOUT) {
  }
}

// The replayed command buffers: the dispatch on persistent descriptor sets, then (ts) the
// engine's timestamps, or (flag) a transfer writing 1 into the flag word after the dispatch.
static void recordReplays(void) {
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
  VkDescriptorPoolCreateInfo dpi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 2;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  VkDescriptorPool pool;
  CHECK(vkCreateDescriptorPool(dev, &dpi, NULL, &pool));
  VkDescriptorSet sets[2];
  allocSets(pool, sets);
  VkCommandPoolCreateInfo cpci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  CHECK(vkCreateCommandPool(dev, &cpci, NULL, &replayPool));
  VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = replayPool;
  cai.commandBufferCount = 3 + TS_VARIANTS;
  VkCommandBuffer bufs[3 + TS_VARIANTS];
  CHECK(vkAllocateCommandBuffers(dev, &cai, bufs));
  cmdPlain = bufs[0], cmdFlag = bufs[2];
  for (int v = 0; v < TS_VARIANTS; v++) cmdTsVar[v] = bufs[3 + v];
  cmdTs = cmdTsVar[TS_R_TB];
  VkQueryPoolCreateInfo qpi = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qpi.queryCount = 2;
  CHECK(vkCreateQueryPool(dev, &qpi, NULL, &queries));
  for (int k = 0; k < 3 + TS_VARIANTS; k++) {
    if (k == 1) continue;  // bufs[1] unused (cmdTs is the first variant)
    VkCommandBuffer c = bufs[k];
    const int v = k - 3;
    const VkPipelineStageFlagBits top = v == TS_R_C || v == TS_H_C ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
    const VkPipelineStageFlagBits bottom = v == TS_R_C || v == TS_H_C ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT;
    VkCommandBufferBeginInfo cb = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(c, &cb));
    if (v == TS_R_TB || v == TS_R_C) vkCmdResetQueryPool(c, queries, 0, 2);
    if (v >= 0 && v != TS_H_E) vkCmdWriteTimestamp(c, top, queries, 0);
    vkCmdBindPipeline(c, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(c, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 2, sets, 0, NULL);
    vkCmdDispatch(c, 1, 1, 1);
    if (v >= 0) vkCmdWriteTimestamp(c, bottom, queries, 1);
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | (c == cmdFlag ? VK_ACCESS_TRANSFER_WRITE_BIT : 0);
    vkCmdPipelineBarrier(c, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT | (c == cmdFlag ? VK_PIPELINE_STAGE_TRANSFER_BIT : 0), 0, 1, &mb, 0,
                         NULL, 0, NULL);
    if (c == cmdFlag) {
      vkCmdFillBuffer(c, flagBuf, 0, 4, 1);
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(c, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    }
    CHECK(vkEndCommandBuffer(c));
  }
}

static void submitReplay(VkCommandBuffer c, VkFence f, const uint64_t* signal) { submitTo(c, f, spinTimeline, signal); }

static void spinFence(void) {
  while (vkWaitForFences(dev, 1, &fence, VK_TRUE, 0) == VK_TIMEOUT) {
  }
}

// The CPU hand-offs alone: handoffSleep wakes the worker through the condition variable below;
// handoffSpin through two words both threads spin on.
static volatile int spinRequest, spinDone, spinActive;
static int request, done, stopping, echoOnly;

static void* spinner(void* arg) {
  (void)arg;
  for (;;) {
    if (!__atomic_load_n(&spinActive, __ATOMIC_ACQUIRE)) {  // parked between its blocks
      usleep(200);
      continue;
    }
    if (!__atomic_load_n(&spinRequest, __ATOMIC_ACQUIRE)) {
      __builtin_ia32_pause();
      continue;
    }
    __atomic_store_n(&spinRequest, 0, __ATOMIC_RELAXED);
    if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) return NULL;
    __atomic_store_n(&spinDone, 1, __ATOMIC_RELEASE);
  }
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t toWorker = PTHREAD_COND_INITIALIZER, toCaller = PTHREAD_COND_INITIALIZER;
static uint64_t signalled;

static void finish(void) {
  pthread_mutex_lock(&mu);
  done = 1;
  pthread_cond_signal(&toCaller);
  pthread_mutex_unlock(&mu);
}

static void* worker(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!request && !stopping) pthread_cond_wait(&toWorker, &mu);
    int stop = stopping;
    request = 0;
    pthread_mutex_unlock(&mu);
    if (stop) return NULL;
    if (!echoOnly) {
      record();
      submit(NULL);
      waitFence();
    }
    finish();
  }
}

static void* waiter(void* arg) {
  (void)arg;
  for (uint64_t v = 1;; v++) {
    VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline;
    wi.pValues = &v;
    while (vkWaitSemaphores(dev, &wi, 1000000) == VK_TIMEOUT) {
      pthread_mutex_lock(&mu);
      int stop = stopping;
      pthread_mutex_unlock(&mu);
      if (stop) return NULL;
    }
    finish();
  }
}

static void awaitDone(void) {
  pthread_mutex_lock(&mu);
  while (!done) pthread_cond_wait(&toCaller, &mu);
  done = 0;
  pthread_mutex_unlock(&mu);
}

static int cmpU64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s module.spv [rounds]\n", argv[0]);
    return 2;
  }
  int rounds = argc > 2 ? atoi(argv[2]) : 40;
  VkPhysicalDevice pd = first_device(VK_API_VERSION_1_3);
  float prio = 1;
  VkDeviceQueueCreateInfo qi = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkPhysicalDeviceRobustness2FeaturesEXT rob2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
  rob2.robustBufferAccess2 = VK_TRUE;
  rob2.nullDescriptor = VK_TRUE;
  VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  f12.hostQueryReset = VK_TRUE;
  f12.pNext = &rob2;
  VkPhysicalDeviceFeatures feats = {0};
  feats.robustBufferAccess = VK_TRUE;
  const char* exts[] = {"VK_EXT_robustness2"};
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f12;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qi;
  dci.pEnabledFeatures = &feats;
  dci.enabledExtensionCount = 1;
  dci.ppEnabledExtensionNames = exts;
  CHECK(vkCreateDevice(pd, &dci, NULL, &dev));
  vkGetDeviceQueue(dev, 0, 0, &queue);

  static uint32_t code[1 << 18];
  const size_t size = probe_read_spirv("vulkan-floor", argv[1], code, sizeof code);
  if (!size) return 2;
  VkDescriptorSetLayoutCreateInfo dli = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  CHECK(vkCreateDescriptorSetLayout(dev, &dli, NULL, &dsl[0]));
  VkDescriptorSetLayoutBinding cb = {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
  dli.bindingCount = 1;
  dli.pBindings = &cb;
  CHECK(vkCreateDescriptorSetLayout(dev, &dli, NULL, &dsl[1]));
  VkPipelineLayoutCreateInfo pli = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 2;
  pli.pSetLayouts = dsl;
  CHECK(vkCreatePipelineLayout(dev, &pli, NULL, &layout));
  pipeline = probe_pipeline(dev, code, size, layout);
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 17};
  VkDescriptorPoolCreateInfo dpi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 2;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  CHECK(vkCreateDescriptorPool(dev, &dpi, NULL, &dpool));
  vkGetPhysicalDeviceMemoryProperties(pd, &memProps);
  // The cancel word where the engine keeps it (device-local host-visible on a GPU: the only kind
  // a running NVIDIA shader sees host writes to); the flag in host memory, which the CPU polls
  // from its cache.
  controlWords = hostBuffer(&control, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  flagWord = hostBuffer(&flagBuf, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  VkCommandPoolCreateInfo cpci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cpci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  CHECK(vkCreateCommandPool(dev, &cpci, NULL, &cpool));
  VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = cpool;
  cai.commandBufferCount = 1;
  CHECK(vkAllocateCommandBuffers(dev, &cai, &cmd));
  VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  CHECK(vkCreateFence(dev, &fci, NULL, &fence));
  VkSemaphoreTypeCreateInfo sti = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  sci.pNext = &sti;
  CHECK(vkCreateSemaphore(dev, &sci, NULL, &timeline));
  CHECK(vkCreateSemaphore(dev, &sci, NULL, &spinTimeline));
  recordReplays();
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  const int cpuDevice = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  pthread_t tw, tt, ts;
  pthread_create(&tw, NULL, worker, NULL);
  pthread_create(&tt, NULL, waiter, NULL);
  pthread_create(&ts, NULL, spinner, NULL);

  // Spinning on a CPU device takes a core from the threads that run the dispatch: there the
  // spin modes only show what a hand-off costs, not the device.
  enum { MODES = 15, BLOCK = 25, SUBMIT = 8, FLAG = 9 };
  const char* names[MODES] = {"one-thread", "worker", "timeline", "spin-fence", "spin-ts", "spin-status",
                              "spin-sem", "spin-flag", "submit", "flag+fence", "handoff-sleep",
                              "ts-compute", "ts-hostreset", "ts-host-comp", "ts-end-only"};
  enum { EXTRA = 1 };  // handoff-spin, timed in its own loop below
  uint64_t* lat[MODES + EXTRA];
  size_t cnt = (size_t)rounds * BLOCK;
  for (int m = 0; m < MODES + EXTRA; m++) lat[m] = calloc(cnt, sizeof(uint64_t));
  for (int r = 0; r < rounds; r++)
    for (int m = 0; m < MODES + EXTRA; m++)
      for (int i = 0; i < BLOCK; i++) {
        if (m == SUBMIT || m == FLAG) break;  // filled by spin-fence and spin-flag
        size_t at = (size_t)r * BLOCK + (size_t)i;
        if (m == MODES && i == 0) {  // wake the spinner, one exchange untimed
          __atomic_store_n(&spinActive, 1, __ATOMIC_RELEASE);
          __atomic_store_n(&spinRequest, 1, __ATOMIC_RELEASE);
          while (!__atomic_load_n(&spinDone, __ATOMIC_ACQUIRE)) __builtin_ia32_pause();
          __atomic_store_n(&spinDone, 0, __ATOMIC_RELAXED);
        }
        uint64_t t0 = now_ns();
        if (m == 0) {
          record();
          submit(NULL);
          waitFence();
        } else if (m == 1 || m == 10) {
          echoOnly = m == 10;
          pthread_mutex_lock(&mu);
          request = 1;
          pthread_cond_signal(&toWorker);
          pthread_mutex_unlock(&mu);
          awaitDone();
        } else if (m == 2) {
          record();
          uint64_t v = ++signalled;
          submit(&v);
          awaitDone();
        } else if (m == 3 || m == 4 || m == 5 || (m > 10 && m < MODES)) {
          const int v = m == 4 ? TS_R_TB : m - 11 + TS_R_C;
          const int ts = m != 3 && m != 5;
          CHECK(vkResetFences(dev, 1, &fence));
          controlWords[0] = controlWords[1] = 0;
          if (ts && v >= TS_H_TB) vkResetQueryPool(dev, queries, 0, 2);
          submitReplay(ts ? cmdTsVar[v] : cmdPlain, fence, NULL);
          if (m == 3) lat[SUBMIT][at] = now_ns() - t0;
          if (m == 5) {
            while (vkGetFenceStatus(dev, fence) == VK_NOT_READY) {
            }
          } else {
            spinFence();
          }
          if (ts) {
            uint64_t q[2];
            uint32_t first = v == TS_H_E ? 1 : 0;
            VkResult qr = vkGetQueryPoolResults(dev, queries, first, 2 - first, sizeof q, q, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
            if (qr) { fprintf(stderr, "%s: vkGetQueryPoolResults %d\n", names[m], qr); exit(1); }
          }
        } else if (m == 6) {
          controlWords[0] = controlWords[1] = 0;
          uint64_t v = ++spinSignalled, got = 0;
          submitReplay(cmdPlain, VK_NULL_HANDLE, &v);
          while (got < v) CHECK(vkGetSemaphoreCounterValue(dev, spinTimeline, &got));
        } else if (m == 7) {
          CHECK(vkResetFences(dev, 1, &fence));
          controlWords[0] = controlWords[1] = 0;
          flagWord[0] = 0;
          submitReplay(cmdFlag, fence, NULL);
          while (!__atomic_load_n(&flagWord[0], __ATOMIC_ACQUIRE)) {
          }
          lat[m][at] = now_ns() - t0;
          spinFence();
          lat[FLAG][at] = now_ns() - t0;
          continue;
        } else if (m == MODES) {
          __atomic_store_n(&spinRequest, 1, __ATOMIC_RELEASE);
          while (!__atomic_load_n(&spinDone, __ATOMIC_ACQUIRE)) __builtin_ia32_pause();
          __atomic_store_n(&spinDone, 0, __ATOMIC_RELAXED);
          if (i == BLOCK - 1) __atomic_store_n(&spinActive, 0, __ATOMIC_RELEASE);
        }
        lat[m][at] = now_ns() - t0;
      }
  printf("device %s\n", props.deviceName);
  for (int m = 0; m < MODES + EXTRA; m++) {
    qsort(lat[m], cnt, sizeof(uint64_t), cmpU64);
    printf("%-13s p10 %7.1f us  p50 %7.1f us  p90 %7.1f us%s\n", m == MODES ? "handoff-spin" : names[m],
           lat[m][cnt / 10] / 1e3, lat[m][cnt / 2] / 1e3, lat[m][cnt * 9 / 10] / 1e3,
           cpuDevice && ((m >= 3 && m <= 9) || (m > 10 && m < MODES)) ? "  (CPU device: spinning competes with its threads)" : "");
  }
  fflush(stdout);
  _exit(0);  // the worker threads are parked; nothing to clean up for a measurement
}
