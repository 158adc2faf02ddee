// What an empty compute launch costs on the Vulkan device itself, without vugpu: the floor under
// bench:programs' NOP program (docs/programs.md, "Launch latency"). Plain C over libvulkan; one
// device, the engine's rewritten NOP (programPrepare's words) on the engine's layout (set 0 empty,
// set 1 = the control block), robust buffer access on, descriptor sets and the command buffer
// written per launch as native/src/vulkan/program.cc does. Modes, interleaved in blocks of 25:
//   one-thread   submit → vkWaitForFences on the calling thread (the device alone)
//   worker       the caller wakes a worker that records, submits and waits on the fence, then
//                wakes the caller (the engine's hand-off: JS → pool thread → JS)
//   timeline     the caller records and submits; a waiter already blocked in vkWaitSemaphores
//                on the next timeline value wakes the caller (one hand-off fewer)
// Build and run (the module as the engine hands it to the driver, from programPrepare):
//   node --input-type=module -e "import fs from 'node:fs'; import { native } from './src/native.ts';
//     import { VulkanBackend } from './src/gpu/vulkan.ts'; const b = VulkanBackend.open();
//     const m = fs.readFileSync('build/spirv/native/shaders/builtins/nop.spv');
//     fs.writeFileSync('/tmp/nop-prepared.spv', native.programPrepare(new Uint32Array(m.buffer,
//     m.byteOffset, m.length / 4), 0, new Uint32Array(0), b.limits).words); b.close();"
//   gcc -O2 -o /tmp/lvp-floor bench/lavapipe-floor.c -lvulkan -lpthread
//   /tmp/lvp-floor /tmp/nop-prepared.spv [rounds=40]
// LP_NUM_THREADS=0 in the environment shows what llvmpipe's compute threads cost (see
// docs/programs.md: the engine does not set it, large dispatches would run on one core).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#define CHECK(x) do { VkResult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, r_); exit(1); } } while (0)

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

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

// Descriptor sets, cancel words and the command buffer, as the engine writes them per launch.
static void record(void) {
  CHECK(vkResetDescriptorPool(dev, dpool, 0));
  VkDescriptorSetAllocateInfo da = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  da.descriptorPool = dpool;
  da.descriptorSetCount = 2;
  da.pSetLayouts = dsl;
  VkDescriptorSet sets[2];
  CHECK(vkAllocateDescriptorSets(dev, &da, sets));
  VkDescriptorBufferInfo bi = {control, 0, 8};
  VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = sets[1];
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = &bi;
  vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);
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

static void submit(const uint64_t* signal) {
  VkTimelineSemaphoreSubmitInfo ti = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  if (signal) {
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = signal;
    si.pNext = &ti;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &timeline;
    CHECK(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE));
  } else {
    CHECK(vkResetFences(dev, 1, &fence));
    CHECK(vkQueueSubmit(queue, 1, &si, fence));
  }
}

static void waitFence(void) {
  // 1 ms slices, as the engine waits (so a cancel can reach the program).
  while (vkWaitForFences(dev, 1, &fence, VK_TRUE, 1000000) == VK_TIMEOUT) {
  }
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t toWorker = PTHREAD_COND_INITIALIZER, toCaller = PTHREAD_COND_INITIALIZER;
static int request, done, stopping;
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
    record();
    submit(NULL);
    waitFence();
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
  VkApplicationInfo ai = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  ai.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &ai;
  VkInstance inst;
  CHECK(vkCreateInstance(&ici, NULL, &inst));
  uint32_t n = 1;
  VkPhysicalDevice pd;
  vkEnumeratePhysicalDevices(inst, &n, &pd);
  if (n == 0) return 1;
  float prio = 1;
  VkDeviceQueueCreateInfo qi = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkPhysicalDeviceRobustness2FeaturesEXT rob2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT};
  rob2.robustBufferAccess2 = VK_TRUE;
  rob2.nullDescriptor = VK_TRUE;
  VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
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

  FILE* f = fopen(argv[1], "rb");
  if (!f) return 1;
  static uint32_t code[1 << 18];
  size_t size = fread(code, 1, sizeof code, f);
  fclose(f);
  VkShaderModuleCreateInfo smi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = size;
  smi.pCode = code;
  VkShaderModule mod;
  CHECK(vkCreateShaderModule(dev, &smi, NULL, &mod));
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
  VkComputePipelineCreateInfo cpi = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = mod;
  cpi.stage.pName = "main";
  cpi.layout = layout;
  cpi.flags = VK_PIPELINE_CREATE_DISPATCH_BASE_BIT;
  CHECK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, NULL, &pipeline));
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 17};
  VkDescriptorPoolCreateInfo dpi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 2;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  CHECK(vkCreateDescriptorPool(dev, &dpi, NULL, &dpool));
  VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = 256;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  CHECK(vkCreateBuffer(dev, &bci, NULL, &control));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, control, &req);
  VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = (uint32_t)__builtin_ctz(req.memoryTypeBits);  // lavapipe: one host-visible type
  VkDeviceMemory mem;
  CHECK(vkAllocateMemory(dev, &mai, NULL, &mem));
  CHECK(vkBindBufferMemory(dev, control, mem, 0));
  void* map;
  CHECK(vkMapMemory(dev, mem, 0, 256, 0, &map));
  controlWords = map;
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
  pthread_t tw, tt;
  pthread_create(&tw, NULL, worker, NULL);
  pthread_create(&tt, NULL, waiter, NULL);

  enum { MODES = 3, BLOCK = 25 };
  const char* names[MODES] = {"one-thread", "worker", "timeline"};
  uint64_t* lat[MODES];
  for (int m = 0; m < MODES; m++) lat[m] = calloc((size_t)rounds * BLOCK, sizeof(uint64_t));
  for (int r = 0; r < rounds; r++)
    for (int m = 0; m < MODES; m++)
      for (int i = 0; i < BLOCK; i++) {
        uint64_t t0 = now_ns();
        if (m == 0) {
          record();
          submit(NULL);
          waitFence();
        } else if (m == 1) {
          pthread_mutex_lock(&mu);
          request = 1;
          pthread_cond_signal(&toWorker);
          pthread_mutex_unlock(&mu);
          awaitDone();
        } else {
          record();
          uint64_t v = ++signalled;
          submit(&v);
          awaitDone();
        }
        lat[m][r * BLOCK + i] = now_ns() - t0;
      }
  for (int m = 0; m < MODES; m++) {
    size_t cnt = (size_t)rounds * BLOCK;
    qsort(lat[m], cnt, sizeof(uint64_t), cmpU64);
    printf("%-10s p50 %7.1f us  p90 %7.1f us\n", names[m], lat[m][cnt / 2] / 1e3, lat[m][cnt * 9 / 10] / 1e3);
  }
  fflush(stdout);
  _exit(0);  // the worker threads are parked; nothing to clean up for a measurement
}
