/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "raw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SYSFS_PCI "/sys/bus/pci/devices"

static int read_hex(const char *path, unsigned long *out)
{
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -errno;
	ok = fscanf(f, "%lx", out) == 1;
	fclose(f);
	return ok ? 0 : -EINVAL;
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -EIO;
}

static int find_device(char *bdf, size_t len)
{
	DIR *dir = opendir(SYSFS_PCI);
	struct dirent *e;
	char p[512];
	unsigned long v, dv;
	int found = 0;

	if (!dir)
		return -errno;
	while (!found && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), SYSFS_PCI "/%s/vendor", e->d_name);
		if (read_hex(p, &v) || v != 0x1de5)
			continue;
		snprintf(p, sizeof(p), SYSFS_PCI "/%s/device", e->d_name);
		if (read_hex(p, &dv) || dv != 0x6b75)
			continue;
		snprintf(bdf, len, "%.31s", e->d_name);
		found = 1;
	}
	closedir(dir);
	return found ? 0 : -ENODEV;
}

/* A driver bound to the function (vugpu.ko, vugpu_diag.ko) would fight us for it: unbind it. */
static int unbind_driver(const char *bdf)
{
	char p[512], link[512];
	ssize_t n;

	snprintf(p, sizeof(p), SYSFS_PCI "/%s/driver", bdf);
	n = readlink(p, link, sizeof(link) - 1);
	if (n < 0)
		return 0; /* no driver */
	snprintf(p, sizeof(p), SYSFS_PCI "/%s/driver/unbind", bdf);
	return write_str(p, bdf);
}

/* PCI command register: memory space (bit 1) and bus master (bit 2). */
static int enable_device(const char *bdf)
{
	char p[512];
	uint16_t cmd;
	int fd;

	snprintf(p, sizeof(p), SYSFS_PCI "/%s/enable", bdf);
	(void)write_str(p, "1"); /* pci_enable_device; the config write below is what matters */
	snprintf(p, sizeof(p), SYSFS_PCI "/%s/config", bdf);
	fd = open(p, O_RDWR);
	if (fd < 0)
		return -errno;
	if (pread(fd, &cmd, 2, 4) != 2) {
		close(fd);
		return -EIO;
	}
	cmd |= 0x6;
	if (pwrite(fd, &cmd, 2, 4) != 2) {
		close(fd);
		return -EIO;
	}
	close(fd);
	return 0;
}

static int map_bar(const char *bdf, int bar, volatile uint8_t **out, size_t *size)
{
	char p[512];
	struct stat st;
	void *m;
	int fd;

	snprintf(p, sizeof(p), SYSFS_PCI "/%s/resource%d", bdf, bar);
	fd = open(p, O_RDWR | O_SYNC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size <= 0) {
		close(fd);
		return -EINVAL;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	*out = m;
	*size = (size_t)st.st_size;
	return 0;
}

int raw_open(struct raw_dev *d)
{
	int e;

	memset(d, 0, sizeof(*d));
	if ((e = find_device(d->bdf, sizeof(d->bdf)))) {
		fprintf(stderr, "no 1de5:6b75 device: %s\n", strerror(-e));
		return e;
	}
	if ((e = unbind_driver(d->bdf))) {
		fprintf(stderr, "%s: unbind failed: %s\n", d->bdf, strerror(-e));
		return e;
	}
	if ((e = enable_device(d->bdf))) {
		fprintf(stderr, "%s: enable failed: %s\n", d->bdf, strerror(-e));
		return e;
	}
	if ((e = map_bar(d->bdf, 0, &d->bar0, &d->bar0_size))) {
		fprintf(stderr, "%s: mmap resource0: %s\n", d->bdf, strerror(-e));
		return e;
	}
	if ((e = map_bar(d->bdf, 1, &d->bar1, &d->bar1_size))) {
		fprintf(stderr, "%s: mmap resource1: %s\n", d->bdf, strerror(-e));
		return e;
	}
	return 0;
}

void raw_close(struct raw_dev *d)
{
	if (d->bar0)
		munmap((void *)d->bar0, d->bar0_size);
	if (d->bar1)
		munmap((void *)d->bar1, d->bar1_size);
	d->bar0 = d->bar1 = NULL;
}

void vfill(struct raw_dev *d, uint64_t a, uint32_t pattern, size_t len)
{
	for (size_t i = 0; i + 4 <= len; i += 4)
		vw32(d, a + i, pattern);
}

int vcheck(struct raw_dev *d, uint64_t a, uint32_t pattern, size_t len)
{
	for (size_t i = 0; i + 4 <= len; i += 4)
		if (vr32(d, a + i) != pattern)
			return 0;
	return 1;
}

int sysbuf_alloc(struct sysbuf *b, size_t pages)
{
	int fd;

	memset(b, 0, sizeof(*b));
	b->va = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (b->va == MAP_FAILED)
		return -errno;
	if (mlock(b->va, pages * 4096))
		return -errno;
	memset(b->va, 0, pages * 4096);
	b->pages = pages;
	b->gpa = calloc(pages, sizeof(uint64_t));
	if (!b->gpa)
		return -ENOMEM;
	fd = open("/proc/self/pagemap", O_RDONLY);
	if (fd < 0)
		return -errno;
	for (size_t i = 0; i < pages; i++) {
		uint64_t ent;
		uintptr_t v = (uintptr_t)b->va + i * 4096;

		if (pread(fd, &ent, 8, (off_t)(v / 4096 * 8)) != 8) {
			close(fd);
			return -EIO;
		}
		/* bit 63 present, bits 54:0 PFN (0 without CAP_SYS_ADMIN) */
		if (!(ent >> 63) || !(ent & ((1ull << 55) - 1))) {
			close(fd);
			return -EPERM;
		}
		b->gpa[i] = (ent & ((1ull << 55) - 1)) << 12;
	}
	close(fd);
	return 0;
}

void sysbuf_free(struct sysbuf *b)
{
	if (b->va && b->va != MAP_FAILED)
		munmap(b->va, b->pages * 4096);
	free(b->gpa);
	memset(b, 0, sizeof(*b));
}

uint64_t ram_top(void)
{
	FILE *f = fopen("/proc/iomem", "r");
	char line[256];
	uint64_t top = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		uint64_t s, e;

		if (line[0] == ' ' || !strstr(line, "System RAM"))
			continue;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64, &s, &e) == 2 && e + 1 > top)
			top = e + 1;
	}
	fclose(f);
	return top;
}

double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}
