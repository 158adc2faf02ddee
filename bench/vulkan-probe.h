// What bench/vulkan-floor.c and bench/vulkan-copy.c share: a Vulkan call that must succeed, a
// monotonic clock in nanoseconds, and the first device of a new instance. Found beside them by `#include "vulkan-probe.h"`.
#ifndef VUGPU_VULKAN_PROBE_H
#define VUGPU_VULKAN_PROBE_H
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
#endif
