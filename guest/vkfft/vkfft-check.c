// SPDX-License-Identifier: MIT
/*
 * vkfft-check: VkFFT (Debian's libvkfft-dev, unmodified) through whatever Vulkan driver the loader
 * finds — in a vugpu guest, the vugpu ICD — checked against FFTW. The second real application of
 * the guest Vulkan driver after llama.cpp: a different shader generator (VkFFT writes GLSL and
 * compiles it with glslang at run time), different buffer and dispatch shapes.
 * One VUGPU-CHECK record per transform; exit status = failed checks (2 for bad usage).
 */
#define VKFFT_BACKEND 0
#include <complex.h>
#include <fftw3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vkFFT.h>

struct gpu {
	VkInstance inst;
	VkPhysicalDevice pd;
	VkDevice dev;
	VkQueue queue;
	VkCommandPool pool;
	VkFence fence;
	char name[256];
};

static int gpu_open(struct gpu *g)
{
	VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2 };
	VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
	uint32_t n = 1, qf = 0, nq = 0;
	VkQueueFamilyProperties qp[8];
	VkPhysicalDeviceProperties props;
	float prio = 1.0f;

	if (vkCreateInstance(&ici, NULL, &g->inst) != VK_SUCCESS)
		return -1;
	if (vkEnumeratePhysicalDevices(g->inst, &n, &g->pd) < 0 || n == 0)
		return -1;
	vkGetPhysicalDeviceProperties(g->pd, &props);
	snprintf(g->name, sizeof(g->name), "%s", props.deviceName);
	nq = 8;
	vkGetPhysicalDeviceQueueFamilyProperties(g->pd, &nq, qp);
	for (qf = 0; qf < nq && !(qp[qf].queueFlags & VK_QUEUE_COMPUTE_BIT); qf++)
		;
	if (qf == nq)
		return -1;
	VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = qf,
					.queueCount = 1, .pQueuePriorities = &prio };
	VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci };
	if (vkCreateDevice(g->pd, &dci, NULL, &g->dev) != VK_SUCCESS)
		return -1;
	vkGetDeviceQueue(g->dev, qf, 0, &g->queue);
	VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
					.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = qf };
	VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	if (vkCreateCommandPool(g->dev, &pci, NULL, &g->pool) != VK_SUCCESS || vkCreateFence(g->dev, &fci, NULL, &g->fence) != VK_SUCCESS)
		return -1;
	return 0;
}

/* A host-visible buffer (coherent where offered) the FFT runs in place on. */
static int make_buffer(struct gpu *g, VkDeviceSize bytes, VkBuffer *buf, VkDeviceMemory *mem, int *coherent)
{
	VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = bytes,
				   .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT };
	VkMemoryRequirements req;
	VkPhysicalDeviceMemoryProperties mp;
	uint32_t i, pick = UINT32_MAX;

	if (vkCreateBuffer(g->dev, &bci, NULL, buf) != VK_SUCCESS)
		return -1;
	vkGetBufferMemoryRequirements(g->dev, *buf, &req);
	vkGetPhysicalDeviceMemoryProperties(g->pd, &mp);
	for (i = 0; i < mp.memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
		if (!(req.memoryTypeBits & (1u << i)) || !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
			continue;
		if (pick == UINT32_MAX || (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
			pick = i;
	}
	if (pick == UINT32_MAX)
		return -1;
	*coherent = !!(mp.memoryTypes[pick].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
	VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = pick };
	if (vkAllocateMemory(g->dev, &mai, NULL, mem) != VK_SUCCESS)
		return -1;
	return vkBindBufferMemory(g->dev, *buf, *mem, 0) == VK_SUCCESS ? 0 : -1;
}

static unsigned int rng_state = 12345;
static float frand(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* One forward C2C transform of nx (× ny) points; returns the relative L2 error against FFTW, or < 0. */
static double run_fft(struct gpu *g, unsigned int nx, unsigned int ny, const char **why)
{
	size_t n = (size_t)nx * ny, bytes = n * sizeof(float complex);
	float complex *in = fftwf_alloc_complex(n), *ref = fftwf_alloc_complex(n);
	VkBuffer buf = VK_NULL_HANDLE;
	VkDeviceMemory mem = VK_NULL_HANDLE;
	VkCommandBuffer cmd = VK_NULL_HANDLE;
	VkFFTApplication app = { 0 };
	VkFFTConfiguration cfg = { 0 };
	uint64_t size = bytes;
	int coherent = 0, app_ok = 0;
	double err = -1, num = 0, den = 0;
	void *map = NULL;
	size_t i;

	for (i = 0; i < n; i++)
		in[i] = frand() + I * frand();
	fftwf_plan p = ny > 1 ? fftwf_plan_dft_2d((int)ny, (int)nx, in, ref, FFTW_FORWARD, FFTW_ESTIMATE)
			      : fftwf_plan_dft_1d((int)nx, in, ref, FFTW_FORWARD, FFTW_ESTIMATE);
	fftwf_execute(p);
	fftwf_destroy_plan(p);

	*why = "buffer";
	if (make_buffer(g, bytes, &buf, &mem, &coherent) || vkMapMemory(g->dev, mem, 0, VK_WHOLE_SIZE, 0, &map) != VK_SUCCESS)
		goto out;
	memcpy(map, in, bytes);
	if (!coherent) {
		VkMappedMemoryRange r = { .sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = mem, .size = VK_WHOLE_SIZE };
		vkFlushMappedMemoryRanges(g->dev, 1, &r);
	}
	cfg.FFTdim = ny > 1 ? 2 : 1;
	cfg.size[0] = nx;
	cfg.size[1] = ny;
	cfg.physicalDevice = &g->pd;
	cfg.device = &g->dev;
	cfg.queue = &g->queue;
	cfg.commandPool = &g->pool;
	cfg.fence = &g->fence;
	cfg.buffer = &buf;
	cfg.bufferSize = &size;
	*why = "initializeVkFFT";
	if (initializeVkFFT(&app, cfg) != VKFFT_SUCCESS)
		goto out;
	app_ok = 1;
	VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = g->pool,
					    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
	VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
					.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
	VkFFTLaunchParams lp = { 0 };
	*why = "record";
	if (vkAllocateCommandBuffers(g->dev, &cai, &cmd) != VK_SUCCESS || vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS)
		goto out;
	lp.commandBuffer = &cmd;
	if (VkFFTAppend(&app, -1, &lp) != VKFFT_SUCCESS || vkEndCommandBuffer(cmd) != VK_SUCCESS)
		goto out;
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd };
	*why = "submit";
	if (vkQueueSubmit(g->queue, 1, &si, g->fence) != VK_SUCCESS ||
	    vkWaitForFences(g->dev, 1, &g->fence, VK_TRUE, 60ull * 1000000000ull) != VK_SUCCESS)
		goto out;
	vkResetFences(g->dev, 1, &g->fence);
	if (!coherent) {
		VkMappedMemoryRange r = { .sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = mem, .size = VK_WHOLE_SIZE };
		vkInvalidateMappedMemoryRanges(g->dev, 1, &r);
	}
	for (i = 0; i < n; i++) {
		float complex d = ((float complex *)map)[i] - ref[i];
		num += crealf(d) * crealf(d) + cimagf(d) * cimagf(d);
		den += crealf(ref[i]) * crealf(ref[i]) + cimagf(ref[i]) * cimagf(ref[i]);
	}
	err = den > 0 ? sqrt(num / den) : -1;
	*why = "";
out:
	if (cmd)
		vkFreeCommandBuffers(g->dev, g->pool, 1, &cmd);
	if (app_ok)
		deleteVkFFT(&app);
	if (map)
		vkUnmapMemory(g->dev, mem);
	if (buf)
		vkDestroyBuffer(g->dev, buf, NULL);
	if (mem)
		vkFreeMemory(g->dev, mem, NULL);
	fftwf_free(in);
	fftwf_free(ref);
	return err;
}

int main(int argc, char **argv)
{
	static const unsigned int shapes[][2] = { { 64, 1 }, { 256, 1 }, { 1024, 1 }, { 4096, 1 }, { 32, 32 }, { 128, 64 } };
	struct gpu g = { 0 };
	unsigned int i, fails = 0;

	if (argc > 1) {
		fprintf(stderr, "vkfft-check: takes no arguments\n");
		return 2;
	}
	glslang_initialize_process();
	if (gpu_open(&g)) {
		printf("VUGPU-CHECK {\"check\":\"vkfft-device\",\"ok\":false}\n");
		return 1;
	}
	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const char *why = "";
		double err = run_fft(&g, shapes[i][0], shapes[i][1], &why);
		/* single precision: FFTW and VkFFT agree to ~1e-6 relative; 1e-4 leaves room for other orders of summation */
		int ok = err >= 0 && err < 1e-4;

		fails += !ok;
		printf("VUGPU-CHECK {\"check\":\"vkfft-%ux%u\",\"ok\":%s,\"relErr\":%g,\"device\":\"%s\",\"failedAt\":\"%s\"}\n",
		       shapes[i][0], shapes[i][1], ok ? "true" : "false", err, g.name, why);
		fflush(stdout);
	}
	vkDestroyFence(g.dev, g.fence, NULL);
	vkDestroyCommandPool(g.dev, g.pool, NULL);
	vkDestroyDevice(g.dev, NULL);
	vkDestroyInstance(g.inst, NULL);
	glslang_finalize_process();
	return (int)fails;
}
