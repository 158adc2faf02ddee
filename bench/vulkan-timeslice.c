// Does the Vulkan device time-slice a compute program that never ends against another context?
// The question under issue 34's goal on a GPU (a neighbour's longest stall <= 50 ms while another
// VM's program spins): vugpu gives each VM's way its own VkDevice, which helps only if the driver
// preempts a spinning context for another one. Plain C over libvulkan, the first device:
//   a "measurer" context times back-to-back submissions of a tiny dispatch (the program below with
//   `stop` already set: it returns at once) and waits on each fence;
//   after 1 s a "spinner" context launches the program over 256 workgroups of 64 with `stop` clear,
//   and after SECONDS more the host sets `stop` through mapped coherent memory.
// Modes: `threads` (both contexts in one process, one VkInstance: how vugpu serve holds them),
// `instances` (one process, a VkInstance each),
// `procs` (the spinner in a child process of its own), `alone` (no spinner: the baseline).
// Prints one JSON line: the measurer's longest wait and p50 before/during/after, and how the
// spinner ended (ended when stopped, or the driver's VK_ERROR_DEVICE_LOST and when).
//   glslangValidator -V bench/vulkan-timeslice.comp -o ts.spv
//   gcc -O2 -o vk-timeslice bench/vulkan-timeslice.c -lvulkan -lpthread && ./vk-timeslice ts.spv procs 3
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vulkan-probe.h"

typedef struct {
  VkDevice dev;
  VkQueue q;
  VkCommandBuffer cb;
  VkFence fence;
  volatile uint32_t* flags;  // [0] stop, [1] count
} Ctx;

static uint32_t spv[4096];
static size_t spv_bytes;
static VkPhysicalDevice pd;
static VkPhysicalDeviceMemoryProperties mp;
static uint32_t family;

static void open_ctx(Ctx* c, uint32_t groups, uint32_t stop) {
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkDeviceCreateInfo di = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  CHECK(vkCreateDevice(pd, &di, NULL, &c->dev));
  vkGetDeviceQueue(c->dev, family, 0, &c->q);
  void* map;
  VkBuffer buf = probe_buffer(c->dev, &mp, 1, &family, 256, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                              VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                              VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, &map);
  c->flags = map;
  c->flags[0] = stop;
  c->flags[1] = 0;
  VkDescriptorSetLayoutBinding lb = {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
  VkDescriptorSetLayoutCreateInfo li = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = 1;
  li.pBindings = &lb;
  VkDescriptorSetLayout dsl;
  CHECK(vkCreateDescriptorSetLayout(c->dev, &li, NULL, &dsl));
  VkPipelineLayoutCreateInfo pli = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &dsl;
  VkPipelineLayout pl;
  CHECK(vkCreatePipelineLayout(c->dev, &pli, NULL, &pl));
  VkPipeline pipe = probe_pipeline(c->dev, spv, spv_bytes, pl);
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
  VkDescriptorPoolCreateInfo pi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pi.maxSets = 1;
  pi.poolSizeCount = 1;
  pi.pPoolSizes = &ps;
  VkDescriptorPool dp;
  CHECK(vkCreateDescriptorPool(c->dev, &pi, NULL, &dp));
  VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = dp;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &dsl;
  VkDescriptorSet ds;
  CHECK(vkAllocateDescriptorSets(c->dev, &ai, &ds));
  VkDescriptorBufferInfo bi = {buf, 0, VK_WHOLE_SIZE};
  VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = ds;
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = &bi;
  vkUpdateDescriptorSets(c->dev, 1, &w, 0, NULL);
  VkCommandPoolCreateInfo cpi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cpi.queueFamilyIndex = family;
  VkCommandPool pool;
  CHECK(vkCreateCommandPool(c->dev, &cpi, NULL, &pool));
  c->cb = probe_begin(c->dev, pool);
  vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, NULL);
  vkCmdDispatch(c->cb, groups, 1, 1);
  CHECK(vkEndCommandBuffer(c->cb));
  VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  CHECK(vkCreateFence(c->dev, &fi, NULL, &c->fence));
}

static VkResult submit(Ctx* c) {
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &c->cb;
  return vkQueueSubmit(c->q, 1, &si, c->fence);
}

// The spinner's life: launch, wait for `stop_at` (ns, set by whoever ends it), write stop, wait.
typedef struct {
  Ctx c;
  volatile uint64_t stop_at;
  uint64_t launched, ended;
  int result;
  int ready;
} Spin;

static void spin_run(Spin* s) {
  CHECK(submit(&s->c));
  s->launched = now_ns();
  VkResult r = VK_TIMEOUT;
  while (r == VK_TIMEOUT) {
    r = vkWaitForFences(s->c.dev, 1, &s->c.fence, VK_TRUE, 1000000);  // 1 ms
    if (r == VK_TIMEOUT && s->stop_at && now_ns() >= s->stop_at) s->c.flags[0] = 1;
  }
  s->ended = now_ns();
  s->result = r;
}

static void* spin_thread(void* p) {
  spin_run(p);
  return NULL;
}

static int cmp_u64(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

#define MAXS 4000000
static uint64_t lat[MAXS], at[MAXS];

static void phase(const char* name, uint64_t from, uint64_t to, size_t n, int last) {
  static uint64_t tmp[MAXS];
  size_t k = 0;
  uint64_t mx = 0;
  for (size_t i = 0; i < n; i++)
    if (at[i] >= from && at[i] < to) {
      tmp[k++] = lat[i];
      if (lat[i] > mx) mx = lat[i];
    }
  qsort(tmp, k, sizeof tmp[0], cmp_u64);
  printf("\"%s\":{\"launches\":%zu,\"p50Us\":%.1f,\"maxMs\":%.3f}%s", name, k, k ? tmp[k / 2] / 1e3 : 0.0, mx / 1e6,
         last ? "" : ",");
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: vk-timeslice SPV threads|instances|procs|alone SECONDS\n");
    return 2;
  }
  const char* mode = argv[2];
  const double seconds = atof(argv[3]);
  const int in_process = !strcmp(mode, "threads") || !strcmp(mode, "instances");
  if (!in_process && strcmp(mode, "procs") && strcmp(mode, "alone")) {
    fprintf(stderr, "vk-timeslice: the mode is threads, instances, procs or alone, not %s\n", mode);
    return 2;
  }
  if (!(spv_bytes = probe_read_spirv("vk-timeslice", argv[1], spv, sizeof spv))) return 2;
  // procs: the child is the spinner, with an instance of its own made after the fork.
  int to_child[2], to_parent[2];
  pid_t child = -1;
  Spin* s = calloc(1, sizeof *s);
  if (!strcmp(mode, "procs")) {
    if (pipe(to_child) || pipe(to_parent)) return 1;
    child = fork();
    if (child == 0) {
      VkPhysicalDeviceProperties pp;
      VkQueueFamilyProperties fam[8];
      uint32_t nfam;
      pd = probe_device(VK_API_VERSION_1_2, &pp, &mp, fam, &nfam);
      family = 0;
      while (family < nfam && !(fam[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) family++;
      open_ctx(&s->c, 256, 0);
      char go;
      if (read(to_child[0], &go, 1) != 1) _exit(1);
      double left;
      if (read(to_child[0], &left, sizeof left) != sizeof left) _exit(1);
      s->stop_at = now_ns() + (uint64_t)(left * 1e9);
      spin_run(s);
      double out[2] = {(s->ended - s->launched) / 1e6, s->result};
      if (write(to_parent[1], out, sizeof out) != sizeof out) _exit(1);
      _exit(0);
    }
  }
  VkPhysicalDeviceProperties pp;
  VkQueueFamilyProperties fam[8];
  uint32_t nfam;
  pd = probe_device(VK_API_VERSION_1_2, &pp, &mp, fam, &nfam);
  family = 0;
  while (family < nfam && !(fam[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) family++;
  Ctx m;
  open_ctx(&m, 1, 1);
  if (!strcmp(mode, "instances")) pd = probe_device(VK_API_VERSION_1_2, &pp, &mp, fam, &nfam);
  if (in_process) open_ctx(&s->c, 256, 0);
  const uint64_t t0 = now_ns(), spin_from = t0 + 1000000000ull, spin_to = spin_from + (uint64_t)(seconds * 1e9),
                 end = spin_to + 1000000000ull;
  int started = 0;
  pthread_t th;
  size_t n = 0;
  uint64_t t;
  while ((t = now_ns()) < end && n < MAXS) {
    if (!started && t >= spin_from) {
      started = 1;
      if (in_process) {
        s->stop_at = spin_to;
        pthread_create(&th, NULL, spin_thread, s);
      } else if (child > 0) {
        double left = seconds;
        if (write(to_child[1], "g", 1) != 1 || write(to_child[1], &left, sizeof left) != sizeof left) return 1;
      }
    }
    CHECK(vkResetFences(m.dev, 1, &m.fence));
    CHECK(submit(&m));
    VkResult r = vkWaitForFences(m.dev, 1, &m.fence, VK_TRUE, 30000000000ull);
    if (r) {
      fprintf(stderr, "vk-timeslice: the measurer's wait ended with %d\n", r);
      return 1;
    }
    at[n] = t;
    lat[n++] = now_ns() - t;
  }
  double spin_ms = -1, spin_result = 0;
  if (in_process) {
    pthread_join(th, NULL);
    spin_ms = (s->ended - s->launched) / 1e6;
    spin_result = s->result;
  } else if (child > 0) {
    double out[2];
    if (read(to_parent[0], out, sizeof out) == sizeof out) spin_ms = out[0], spin_result = out[1];
    waitpid(child, NULL, 0);
  }
  printf("{\"device\":\"%s\",\"mode\":\"%s\",\"spinSeconds\":%.1f,", pp.deviceName, mode, seconds);
  phase("before", t0, spin_from, n, 0);
  phase("during", spin_from, spin_to, n, 0);
  phase("after", spin_to, end, n, 0);
  printf("\"spinner\":{\"ms\":%.1f,\"vkResult\":%d}}\n", spin_ms, (int)spin_result);
  return 0;
}
