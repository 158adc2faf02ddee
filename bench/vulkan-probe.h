// What bench/vulkan-floor.c, bench/vulkan-copy.c and bench/vulkan-gemm-floor.c share: a Vulkan
// call that must succeed, a monotonic clock in nanoseconds, the first device of a new instance,
// its queue families and memory types, and a compute pipeline from a SPIR-V file. Found beside
// them by `#include "vulkan-probe.h"`.
#ifndef VUGPU_VULKAN_PROBE_H
#define VUGPU_VULKAN_PROBE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <vulkan/vulkan.h>

#define CHECK(x) do { VkResult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, r_); exit(1); } } while (0)

static inline uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

// An instance of Vulkan `api` and its first physical device; exits 1 with one line if there is none.
static inline VkPhysicalDevice first_device(uint32_t api) {
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = api;
  VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  VkInstance inst;
  CHECK(vkCreateInstance(&ici, NULL, &inst));
  uint32_t n = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  VkResult r = vkEnumeratePhysicalDevices(inst, &n, &pd);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
    fprintf(stderr, "no Vulkan device\n");
    exit(1);
  }
  return pd;
}
// qsort's comparison for doubles (times per round → best and median).
static inline int probe_cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// The first device of a new instance of Vulkan `api`, with its properties, memory types and
// queue families (at most 8; *nfam of them).
static inline VkPhysicalDevice probe_device(uint32_t api, VkPhysicalDeviceProperties* pp, VkPhysicalDeviceMemoryProperties* mp,
                                            VkQueueFamilyProperties fam[8], uint32_t* nfam) {
  VkPhysicalDevice pd = first_device(api);
  vkGetPhysicalDeviceProperties(pd, pp);
  vkGetPhysicalDeviceMemoryProperties(pd, mp);
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
  if (n > 8) n = 8;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fam);
  *nfam = n;
  return pd;
}

// The first memory type in `bits` with all of `want`, or -1.
static inline int probe_memtype(const VkPhysicalDeviceMemoryProperties* mp, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < mp->memoryTypeCount; i++)
    if ((bits & (1u << i)) && (mp->memoryTypes[i].propertyFlags & want) == want) return (int)i;
  return -1;
}

// A buffer every one of the `nfam` families in `fams` may use (concurrent sharing), bound to
// memory of the first type with `want`, else with `fallback`; *map (when map is not NULL) points
// at it mapped.
static inline VkBuffer probe_buffer(VkDevice dev, const VkPhysicalDeviceMemoryProperties* mp, uint32_t nfam, const uint32_t* fams,
                                    VkDeviceSize size, VkBufferUsageFlags usage, VkMemoryPropertyFlags want,
                                    VkMemoryPropertyFlags fallback, void** map) {
  VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = usage;
  bi.sharingMode = nfam > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE;
  bi.queueFamilyIndexCount = nfam > 1 ? nfam : 0;
  bi.pQueueFamilyIndices = fams;
  VkBuffer b;
  CHECK(vkCreateBuffer(dev, &bi, NULL, &b));
  VkMemoryRequirements mr;
  vkGetBufferMemoryRequirements(dev, b, &mr);
  int t = probe_memtype(mp, mr.memoryTypeBits, want);
  if (t < 0) t = probe_memtype(mp, mr.memoryTypeBits, fallback);
  VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = mr.size;
  ai.memoryTypeIndex = (uint32_t)t;
  VkDeviceMemory m;
  CHECK(vkAllocateMemory(dev, &ai, NULL, &m));
  CHECK(vkBindBufferMemory(dev, b, m, 0));
  if (map) CHECK(vkMapMemory(dev, m, 0, size, 0, map));
  return b;
}

// A primary command buffer of `pool`, begun.
static inline VkCommandBuffer probe_begin(VkDevice dev, VkCommandPool pool) {
  VkCommandBufferAllocateInfo a = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  a.commandPool = pool;
  a.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  a.commandBufferCount = 1;
  VkCommandBuffer c;
  CHECK(vkAllocateCommandBuffers(dev, &a, &c));
  VkCommandBufferBeginInfo b = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  CHECK(vkBeginCommandBuffer(c, &b));
  return c;
}

// Reads a SPIR-V module of at most `cap` bytes into `words`; its size in bytes, or 0 after one
// line on stderr (`who`: the probe's name) when the file is missing or not a module.
static inline size_t probe_read_spirv(const char* who, const char* path, uint32_t* words, size_t cap) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot read %s\n", who, path);
    return 0;
  }
  const size_t n = fread(words, 1, cap, f);
  const int more = fgetc(f) != EOF;
  fclose(f);
  if (more || n < 20 || n % 4 || words[0] != 0x07230203u) {
    fprintf(stderr, "%s: %s is not a SPIR-V module of at most %zu bytes\n", who, path, cap);
    return 0;
  }
  return n;
}

// A compute pipeline of the module's "main" that can be dispatched with a base workgroup (the
// engine's panels: vkCmdDispatchBase).
static inline VkPipeline probe_pipeline(VkDevice dev, const uint32_t* words, size_t bytes, VkPipelineLayout layout) {
  VkShaderModuleCreateInfo smi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = bytes;
  smi.pCode = words;
  VkShaderModule sm;
  CHECK(vkCreateShaderModule(dev, &smi, NULL, &sm));
  VkComputePipelineCreateInfo ci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.flags = VK_PIPELINE_CREATE_DISPATCH_BASE_BIT;
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = sm;
  ci.stage.pName = "main";
  ci.layout = layout;
  VkPipeline p;
  CHECK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, NULL, &p));
  return p;
}
#endif
