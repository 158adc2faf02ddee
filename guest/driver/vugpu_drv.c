// SPDX-License-Identifier: GPL-2.0
/*
 * vugpu: Linux driver for the vugpu GPU (PCI 1de5:6b75), written from docs/hw-spec.md.
 *
 * This file is the Linux side: PCI probe, BAR mappings, MSI-X, the character device
 * (/dev/vugpu<N>) with its ioctls (include/uapi: guest/common/vugpu_uapi.h) and mmap of VRAM
 * buffers through BAR1, pinning of user pages for system-memory buffers, sleeping on fences,
 * and cleanup when a process exits or dies. The GPU logic (channels, page tables, submission,
 * fences, interrupt decoding) is the shared core in guest/common, which the runtime's user-space
 * host backend compiles too.
 *
 * Module parameter pv selects how address-space updates reach the device: 0 = register path
 * (page tables written through BAR1 + TLB flush), 1 = PV hypercalls one entry per call,
 * 2 = PV batched up to 128 entries per call (hw-spec §9; only when the device is mediated).
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/interrupt.h>
#include <linux/miscdevice.h>
#include <linux/dma-mapping.h>
#include <linux/scatterlist.h>
#include <linux/uaccess.h>
#include <linux/mutex.h>
#include <linux/kref.h>
#include <linux/idr.h>
#include <linux/list.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/wait.h>
#include <linux/sched/signal.h>
#include <linux/sched/mm.h>
#include <linux/rwsem.h>

#include "vg_core.h"

#define DRV_NAME "vugpu"
#define VUGPU_MAX_PIN_BYTES (1ull << 30)

static int pv;
module_param(pv, int, 0444);
MODULE_PARM_DESC(pv, "address-space updates: 0 registers (default), 1 PV single, 2 PV batched");

struct vugpu_vector {
	struct vugpu_dev *vd;
	unsigned int index;
	int irq;
	bool requested;
};

struct vugpu_dev {
	struct vg_dev core;              /* first: container_of from core callbacks */
	struct pci_dev *pdev;
	struct kref ref;                 /* probe + one per open file */
	struct mutex files_lock;         /* files list, dead */
	struct list_head files;
	bool dead;
	bool core_up;
	int index;
	char name[16];
	struct miscdevice misc;
	resource_size_t bar1_start, bar1_size;
	void *pv_cpu;
	dma_addr_t pv_dma;
	int num_vectors;
	struct vugpu_vector vec[VG_NUM_VECTORS];
};

struct vugpu_file {
	struct vugpu_dev *vd;
	struct list_head node;
	/*
	 * Every ioctl holds `use` for reading, for its whole duration (WAIT sleeps under it);
	 * device removal takes it for writing before it tears the context down. `lock` serialises
	 * the context operations themselves (not WAIT, which only reads fences and error state).
	 */
	struct rw_semaphore use;
	struct mutex lock;
	struct mutex map_lock;           /* maps: the VRAM ranges mmap may map */
	struct list_head maps;
	struct vg_ctx *ctx;
	struct file *filp;
	wait_queue_head_t wq;
};

/* A VRAM buffer of the file, as mmap sees it. */
struct vugpu_map {
	struct list_head node;
	u64 addr, size;
};

/* Pinned user pages behind a system-memory buffer, charged to the owner's RLIMIT_MEMLOCK. */
struct vugpu_pin {
	struct page **pages;
	unsigned long npages;
	struct mm_struct *mm;            /* whose locked_vm the pages are charged to */
	unsigned long charged;           /* pages charged */
	struct sg_table sgt;
	bool mapped;
	bool writable;
};

static DEFINE_IDA(vugpu_ida);

static struct vugpu_dev *to_vd(struct vg_dev *d)
{
	return container_of(d, struct vugpu_dev, core);
}

static void vugpu_dev_release(struct kref *ref)
{
	struct vugpu_dev *vd = container_of(ref, struct vugpu_dev, ref);

	ida_free(&vugpu_ida, vd->index);
	kfree(vd);
}

/* ---- callbacks of the core ---- */

static void vugpu_wake(struct vg_ctx *c)
{
	struct vugpu_file *fp = c->os_priv;

	if (fp)
		wake_up_all(&fp->wq);
}

static bool fence_or_error(struct vugpu_dev *vd, struct vg_ctx *c, u64 seq)
{
	return READ_ONCE(vd->dead) || READ_ONCE(c->err_code) || vg_ctx_seq_done(c, seq);
}

/* Sleep for a fence. killable: the driver's own waits must not be cut short by ordinary signals. */
static int vugpu_wait_fence(struct vg_ctx *c, u64 seq, unsigned int timeout_ms, bool interruptible)
{
	struct vugpu_file *fp = c->os_priv;
	struct vugpu_dev *vd = fp->vd;
	long left;
	int ret;

	if (!fence_or_error(vd, c, seq)) {
		/* a query: the fence is in memory and an error comes by interrupt, so no register
		 * read (applications poll fences in a loop; each read is a trap in a VM) */
		if (!timeout_ms)
			return -ETIMEDOUT;
		/* silent fences: ask for an interrupt before sleeping. Arming does nothing if the fence
		 * passed since the check above (no interrupt will come then); wait_event evaluates the
		 * condition again before it sleeps, so that wake-up is not lost. */
		vg_ctx_arm_irq(c, seq);
		if (interruptible)
			left = wait_event_interruptible_timeout(fp->wq, fence_or_error(vd, c, seq),
								msecs_to_jiffies(timeout_ms));
		else
			left = wait_event_killable_timeout(fp->wq, fence_or_error(vd, c, seq),
							   msecs_to_jiffies(timeout_ms));
		if (left < 0)
			return -EINTR;
		if (READ_ONCE(vd->dead))
			return -ENODEV;
		if (left == 0 && !fence_or_error(vd, c, seq)) {
			/* an error interrupt cannot be lost, but check the channel before giving up */
			ret = vg_ctx_poll_error(c);
			return ret ?: -ETIMEDOUT;
		}
	}
	/* the fence passed before the channel failed: the error is left to the wait or submission of
	 * the work it concerns (an ENGINE_LOST reported here would let the lost work count as passed
	 * unseen) */
	if (vg_ctx_seq_done(c, seq))
		return 0;
	return vg_ctx_status(c, NULL);
}

static int vugpu_core_wait(struct vg_ctx *c, u64 seq, unsigned int timeout_ms)
{
	return vugpu_wait_fence(c, seq, timeout_ms, false);
}

static void vugpu_unpin(struct vugpu_dev *vd, struct vugpu_pin *pin)
{
	if (pin->mapped)
		dma_unmap_sgtable(&vd->pdev->dev, &pin->sgt, DMA_BIDIRECTIONAL, 0);
	if (pin->sgt.sgl)
		sg_free_table(&pin->sgt);
	if (pin->npages)
		unpin_user_pages_dirty_lock(pin->pages, pin->npages, pin->writable);
	if (pin->charged)
		account_locked_vm(pin->mm, pin->charged, false);
	if (pin->mm)
		mmdrop(pin->mm);
	kvfree(pin->pages);
	kfree(pin);
}

static void vugpu_bo_release(struct vg_dev *d, struct vg_bo *bo)
{
	if (bo->os_priv)
		vugpu_unpin(to_vd(d), bo->os_priv);
	bo->os_priv = NULL;
}

/* ---- interrupts ---- */

static irqreturn_t vugpu_irq(int irq, void *arg)
{
	struct vugpu_vector *v = arg;

	vg_irq(&v->vd->core, v->index);
	return IRQ_HANDLED;
}

/* ---- file operations ---- */

static int vugpu_open(struct inode *inode, struct file *f)
{
	struct vugpu_dev *vd = container_of(f->private_data, struct vugpu_dev, misc);
	struct vugpu_file *fp;

	fp = kzalloc(sizeof(*fp), GFP_KERNEL);
	if (!fp)
		return -ENOMEM;
	init_rwsem(&fp->use);
	mutex_init(&fp->lock);
	mutex_init(&fp->map_lock);
	INIT_LIST_HEAD(&fp->maps);
	init_waitqueue_head(&fp->wq);
	fp->filp = f;
	mutex_lock(&vd->files_lock);
	if (vd->dead) {
		mutex_unlock(&vd->files_lock);
		kfree(fp);
		return -ENODEV;
	}
	fp->vd = vd;
	kref_get(&vd->ref);
	list_add(&fp->node, &vd->files);
	mutex_unlock(&vd->files_lock);
	f->private_data = fp;
	return 0;
}

static void map_clear(struct vugpu_file *fp);

/* Tear down a file's context: stop the channel, unbind, free VRAM, unpin pages. */
static void vugpu_file_teardown(struct vugpu_file *fp)
{
	map_clear(fp);
	if (fp->ctx) {
		vg_ctx_destroy(fp->ctx);
		fp->ctx = NULL;
	}
}

static int vugpu_release(struct inode *inode, struct file *f)
{
	struct vugpu_file *fp = f->private_data;
	struct vugpu_dev *vd = fp->vd;

	mutex_lock(&vd->files_lock);
	list_del(&fp->node);
	mutex_unlock(&vd->files_lock);
	/* a process that died mid-kernel gets here too: vg_ctx_destroy waits for the job */
	mutex_lock(&fp->lock);
	vugpu_file_teardown(fp);
	mutex_unlock(&fp->lock);
	kfree(fp);
	kref_put(&vd->ref, vugpu_dev_release);
	return 0;
}

/*
 * Lock order: the ioctl handlers copy their arguments and pin user pages *before* taking
 * fp->lock and copy results out after dropping it, so fp->lock is never held across a user
 * page fault; mmap() (entered with mmap_lock held) takes only fp->map_lock, which nothing holds
 * while waiting for another lock. That keeps mmap_lock -> fp->lock from ever being needed.
 */

static int ioc_ctx_create(struct vugpu_file *fp, void __user *uarg)
{
	struct vugpu_ctx_create a;
	struct vg_ctx *c = NULL;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.flags)
		return -EINVAL;
	mutex_lock(&fp->lock);
	if (fp->ctx) {
		ret = -EEXIST;
	} else {
		ret = vg_ctx_create(&fp->vd->core, fp, &c);
		if (!ret) {
			WRITE_ONCE(fp->ctx, c);
			a.chid = (u32)c->chid;
			a.pd_addr = c->vm.pd_addr;
		}
	}
	mutex_unlock(&fp->lock);
	if (ret)
		return ret;
	return copy_to_user(uarg, &a, sizeof(a)) ? -EFAULT : 0;
}

static int map_add(struct vugpu_file *fp, u64 addr, u64 size)
{
	struct vugpu_map *m = kmalloc(sizeof(*m), GFP_KERNEL);

	if (!m)
		return -ENOMEM;
	m->addr = addr;
	m->size = size;
	mutex_lock(&fp->map_lock);
	list_add(&m->node, &fp->maps);
	mutex_unlock(&fp->map_lock);
	return 0;
}

/* Forget a mappable range and zap every user mapping of it (the VRAM may be reused at once). */
static void map_remove(struct vugpu_file *fp, u64 addr, u64 size)
{
	struct vugpu_map *m, *t;

	mutex_lock(&fp->map_lock);
	list_for_each_entry_safe(m, t, &fp->maps, node) {
		if (m->addr == addr) {
			list_del(&m->node);
			kfree(m);
		}
	}
	mutex_unlock(&fp->map_lock);
	unmap_mapping_range(fp->filp->f_mapping, addr, size, 1);
}

static void map_clear(struct vugpu_file *fp)
{
	struct vugpu_map *m, *t;

	mutex_lock(&fp->map_lock);
	list_for_each_entry_safe(m, t, &fp->maps, node) {
		list_del(&m->node);
		kfree(m);
	}
	mutex_unlock(&fp->map_lock);
}

static int ioc_mem_alloc(struct vugpu_file *fp, struct vg_ctx *c, void __user *uarg)
{
	struct vugpu_mem_alloc a;
	struct vg_bo *bo;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	mutex_lock(&fp->lock);
	ret = vg_ctx_vram_alloc(c, a.size, a.flags, &bo);
	if (!ret) {
		a.handle = bo->handle;
		a.va = bo->va;
		a.size = bo->size;
		a.mmap_offset = bo->vram_addr; /* unique device-wide: a free zaps exactly its mappings */
		/* NO_CPU: its clear may still be pending, so mmap must never reach it */
		ret = (a.flags & VUGPU_MEM_NO_CPU) ? 0 : map_add(fp, bo->vram_addr, bo->size);
		if (ret)
			vg_ctx_bo_free(c, bo);
	}
	mutex_unlock(&fp->lock);
	if (ret)
		return ret;
	if (copy_to_user(uarg, &a, sizeof(a))) {
		/* the caller never learns the handle: give the buffer back */
		mutex_lock(&fp->lock);
		bo = vg_ctx_bo_find(c, a.handle);
		if (bo) {
			map_remove(fp, bo->vram_addr, bo->size);
			vg_ctx_bo_free(c, bo);
		}
		mutex_unlock(&fp->lock);
		return -EFAULT;
	}
	return 0;
}

static int ioc_mem_free(struct vugpu_file *fp, struct vg_ctx *c, void __user *uarg)
{
	struct vugpu_mem_free a;
	struct vg_bo *bo;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	mutex_lock(&fp->lock);
	bo = vg_ctx_bo_find(c, a.handle);
	if (!bo) {
		ret = -ENOENT;
	} else {
		if (!bo->sysmem)
			map_remove(fp, bo->vram_addr, bo->size);
		ret = vg_ctx_bo_free(c, bo);
	}
	mutex_unlock(&fp->lock);
	return ret;
}

/* Pin, charge and DMA-map a user range; fills bus[] with one bus address per 4 KiB page. */
static int pin_range(struct vugpu_dev *vd, u64 uaddr, u64 size, bool writable, struct vugpu_pin **out,
		     u64 **bus_out)
{
	unsigned long npages = size >> PAGE_SHIFT, i = 0;
	struct scatterlist *sg;
	struct vugpu_pin *pin;
	u64 *bus;
	long pinned;
	int ret, k;

	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return -ENOMEM;
	pin->writable = writable;
	/* pinned pages count against RLIMIT_MEMLOCK, as for vfio and RDMA */
	pin->mm = current->mm;
	mmgrab(pin->mm);
	bus = kvmalloc_array(npages, sizeof(*bus), GFP_KERNEL);
	pin->pages = kvmalloc_array(npages, sizeof(*pin->pages), GFP_KERNEL);
	if (!pin->pages || !bus) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = account_locked_vm(pin->mm, npages, true);
	if (ret)
		goto fail;
	pin->charged = npages;
	pinned = pin_user_pages_fast(uaddr, npages, FOLL_LONGTERM | (writable ? FOLL_WRITE : 0), pin->pages);
	if (pinned < 0) {
		ret = pinned;
		goto fail;
	}
	pin->npages = pinned;
	if (pinned != (long)npages) {
		ret = -EFAULT;
		goto fail;
	}
	ret = sg_alloc_table_from_pages(&pin->sgt, pin->pages, pin->npages, 0, size, GFP_KERNEL);
	if (ret)
		goto fail;
	ret = dma_map_sgtable(&vd->pdev->dev, &pin->sgt, DMA_BIDIRECTIONAL, 0);
	if (ret)
		goto fail;
	pin->mapped = true;
	/* bus address of every 4 KiB page (pass-through: the guest-physical address) */
	for_each_sgtable_dma_sg(&pin->sgt, sg, k) {
		dma_addr_t addr = sg_dma_address(sg);
		unsigned int len = sg_dma_len(sg), off;

		for (off = 0; off < len && i < npages; off += PAGE_SIZE)
			bus[i++] = addr + off;
	}
	if (i != npages) {
		ret = -EIO;
		goto fail;
	}
	*out = pin;
	*bus_out = bus;
	return 0;
fail:
	kvfree(bus);
	vugpu_unpin(vd, pin);
	return ret;
}

static int ioc_host_register(struct vugpu_file *fp, struct vg_ctx *c, void __user *uarg)
{
	struct vugpu_host_register a;
	struct vugpu_pin *pin;
	struct vg_bo *bo;
	u64 *bus;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.size || (a.uaddr | a.size) & (PAGE_SIZE - 1) || a.size > VUGPU_MAX_PIN_BYTES ||
	    (a.flags & ~VUGPU_MEM_READ_ONLY) || a.uaddr + a.size < a.uaddr)
		return -EINVAL;
	ret = pin_range(fp->vd, a.uaddr, a.size, !(a.flags & VUGPU_MEM_READ_ONLY), &pin, &bus);
	if (ret)
		return ret;
	mutex_lock(&fp->lock);
	ret = vg_ctx_sys_map(c, bus, (u32)pin->npages, a.flags, pin, &bo);
	if (!ret) {
		a.handle = bo->handle;
		a.va = bo->va;
	}
	mutex_unlock(&fp->lock);
	kvfree(bus);
	if (ret) {
		vugpu_unpin(fp->vd, pin);
		return ret;
	}
	if (copy_to_user(uarg, &a, sizeof(a))) {
		mutex_lock(&fp->lock);
		bo = vg_ctx_bo_find(c, a.handle);
		if (bo)
			vg_ctx_bo_free(c, bo);
		mutex_unlock(&fp->lock);
		return -EFAULT;
	}
	return 0;
}

static int ioc_submit(struct vugpu_file *fp, struct vg_ctx *c, void __user *uarg)
{
	struct vugpu_submit a;
	u32 *words;
	u64 seq;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.count || a.count > VUGPU_SUBMIT_MAX_DWORDS || (a.flags & ~VUGPU_SUBMIT_FENCE_IRQ))
		return -EINVAL;
	words = kvmalloc_array(a.count, sizeof(u32), GFP_KERNEL);
	if (!words)
		return -ENOMEM;
	if (copy_from_user(words, u64_to_user_ptr(a.words), (size_t)a.count * 4)) {
		kvfree(words);
		return -EFAULT;
	}
	mutex_lock(&fp->lock);
	for (;;) {
		ret = vg_ctx_submit(c, words, a.count, a.flags, &seq);
		if (ret != -EBUSY)
			break;
		/* ring full: wait for the oldest submission in flight */
		ret = vugpu_wait_fence(c, seq, VG_WAIT_RETIRE_MS, true);
		if (ret)
			break;
	}
	mutex_unlock(&fp->lock);
	kvfree(words);
	if (ret)
		return ret == -EINTR ? -ERESTARTSYS : ret;
	a.seq = seq;
	return copy_to_user(uarg, &a, sizeof(a)) ? -EFAULT : 0;
}

/* size: sizeof(struct vugpu_wait), or the 48 bytes of uapi 1 (no error.reason) */
_Static_assert(offsetof(struct vugpu_wait, err) + offsetof(struct vugpu_error, reason) == 48,
	       "VUGPU_IOC_WAIT_V1 is struct vugpu_wait up to error.reason");
static int ioc_wait(struct vugpu_file *fp, struct vg_ctx *c, void __user *uarg, size_t size)
{
	struct vugpu_wait a;
	int ret;

	memset(&a, 0, sizeof(a));
	if (copy_from_user(&a, uarg, size))
		return -EFAULT;
	if (a.seq > READ_ONCE(c->seq))
		return -EINVAL; /* never submitted: would never pass */
	ret = vugpu_wait_fence(c, a.seq, a.timeout_ms, true);
	if (ret == -EINTR)
		return -ERESTARTSYS;
	/* err is filled in every case: a fence that passed may be followed by a failure (described,
	 * not reported: that is for the wait or submission it concerns) */
	vg_ctx_error(c, &a.err);
	if (copy_to_user(uarg, &a, size))
		return -EFAULT;
	return ret;
}

static long vugpu_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct vugpu_file *fp = f->private_data;
	struct vugpu_dev *vd = fp->vd;
	void __user *uarg = (void __user *)arg;
	struct vg_ctx *c;
	long ret;

	if (cmd == VUGPU_IOC_INFO) {
		struct vugpu_info info;

		mutex_lock(&vd->files_lock);
		if (vd->dead) {
			mutex_unlock(&vd->files_lock);
			return -ENODEV;
		}
		mutex_lock(&vd->core.os.dlock);
		vg_dev_info(&vd->core, &info);
		mutex_unlock(&vd->core.os.dlock);
		mutex_unlock(&vd->files_lock);
		return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
	}
	if (cmd == VUGPU_IOC_PROG_INFO) {
		struct vugpu_prog_info pi;

		/* read at probe and constant afterwards: no device access, no lock beyond liveness */
		mutex_lock(&vd->files_lock);
		if (vd->dead) {
			mutex_unlock(&vd->files_lock);
			return -ENODEV;
		}
		vg_dev_prog_info(&vd->core, &pi);
		mutex_unlock(&vd->files_lock);
		return copy_to_user(uarg, &pi, sizeof(pi)) ? -EFAULT : 0;
	}

	/* `use` keeps the context alive for the whole call (device removal takes it for writing) */
	down_read(&fp->use);
	if (READ_ONCE(vd->dead)) {
		ret = -ENODEV;
		goto out;
	}
	if (cmd == VUGPU_IOC_CTX_CREATE) {
		ret = ioc_ctx_create(fp, uarg);
		goto out;
	}
	c = READ_ONCE(fp->ctx);
	if (!c) {
		ret = -ENXIO; /* no context yet */
		goto out;
	}
	switch (cmd) {
	case VUGPU_IOC_WAIT:
	case VUGPU_IOC_WAIT_V1:
		/* sleeps without fp->lock: submissions may go on */
		ret = ioc_wait(fp, c, uarg, _IOC_SIZE(cmd));
		break;
	case VUGPU_IOC_MEM_ALLOC:
		ret = ioc_mem_alloc(fp, c, uarg);
		break;
	case VUGPU_IOC_MEM_FREE:
		ret = ioc_mem_free(fp, c, uarg);
		break;
	case VUGPU_IOC_HOST_REGISTER:
		ret = ioc_host_register(fp, c, uarg);
		break;
	case VUGPU_IOC_SUBMIT:
		ret = ioc_submit(fp, c, uarg);
		break;
	default:
		ret = -ENOTTY;
	}
out:
	up_read(&fp->use);
	return ret;
}

/*
 * mmap of a VRAM buffer through BAR1: the offset is the buffer's mmap_offset (its VRAM
 * address), the range must lie inside one of this file's buffers. map_lock is held across the
 * check and the remap, and a free removes the range under it before zapping: a mapping of
 * freed VRAM cannot be created.
 */
static int vugpu_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct vugpu_file *fp = f->private_data;
	struct vugpu_dev *vd = fp->vd;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct vugpu_map *m;
	int ret = -EINVAL;

	if (READ_ONCE(vd->dead))
		return -ENODEV;
	if (off + len < off || off + len > vd->bar1_size)
		return -EINVAL;
	mutex_lock(&fp->map_lock);
	list_for_each_entry(m, &fp->maps, node) {
		if (off >= m->addr && off + len <= m->addr + m->size) {
			vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
			vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
			ret = io_remap_pfn_range(vma, vma->vm_start, (vd->bar1_start + off) >> PAGE_SHIFT, len,
						 vma->vm_page_prot);
			break;
		}
	}
	mutex_unlock(&fp->map_lock);
	return ret;
}

static const struct file_operations vugpu_fops = {
	.owner = THIS_MODULE,
	.open = vugpu_open,
	.release = vugpu_release,
	.unlocked_ioctl = vugpu_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = vugpu_mmap,
};

/* ---- PCI ---- */

static void vugpu_free_irqs(struct vugpu_dev *vd)
{
	int i;

	for (i = 0; i < vd->num_vectors; i++)
		if (vd->vec[i].requested)
			free_irq(vd->vec[i].irq, &vd->vec[i]);
	if (vd->num_vectors > 0)
		pci_free_irq_vectors(vd->pdev);
	vd->num_vectors = 0;
}

static int vugpu_setup_irqs(struct vugpu_dev *vd)
{
	struct pci_dev *pdev = vd->pdev;
	int ret, i;

	ret = pci_alloc_irq_vectors(pdev, VG_NUM_VECTORS, VG_NUM_VECTORS, PCI_IRQ_MSIX);
	if (ret < 0) {
		dev_err(&pdev->dev, "MSI-X with %d vectors: %d\n", VG_NUM_VECTORS, ret);
		return ret;
	}
	vd->num_vectors = ret;
	for (i = 0; i < vd->num_vectors; i++) {
		struct vugpu_vector *v = &vd->vec[i];

		v->vd = vd;
		v->index = i;
		v->irq = pci_irq_vector(pdev, i);
		ret = request_irq(v->irq, vugpu_irq, 0, DRV_NAME, v);
		if (ret)
			return ret;
		v->requested = true;
	}
	return 0;
}

static int vugpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vugpu_dev *vd;
	struct vg_dev *d;
	int ret;

	vd = kzalloc(sizeof(*vd), GFP_KERNEL);
	if (!vd)
		return -ENOMEM;
	kref_init(&vd->ref);
	mutex_init(&vd->files_lock);
	INIT_LIST_HEAD(&vd->files);
	vd->pdev = pdev;
	vd->index = ida_alloc(&vugpu_ida, GFP_KERNEL);
	if (vd->index < 0) {
		ret = vd->index;
		kfree(vd);
		return ret;
	}
	pci_set_drvdata(pdev, vd);
	d = &vd->core;
	d->os.dev = &pdev->dev;
	spin_lock_init(&d->os.lock);
	mutex_init(&d->os.dlock);
	d->wake = vugpu_wake;
	d->wait = vugpu_core_wait;
	d->bo_release = vugpu_bo_release;

	ret = pcim_enable_device(pdev);
	if (ret)
		goto err;
	ret = pcim_request_all_regions(pdev, DRV_NAME);
	if (ret)
		goto err;
	pci_set_master(pdev);
	if (!(pci_resource_flags(pdev, 0) & IORESOURCE_MEM) || !(pci_resource_flags(pdev, 1) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, 0) < (16u << 20)) {
		dev_err(&pdev->dev, "unexpected BARs\n");
		ret = -ENODEV;
		goto err;
	}
	d->os.bar0 = pcim_iomap(pdev, 0, 0);
	vd->bar1_start = pci_resource_start(pdev, 1);
	vd->bar1_size = pci_resource_len(pdev, 1);
	d->os.bar1 = devm_ioremap_wc(&pdev->dev, vd->bar1_start, vd->bar1_size);
	if (!d->os.bar0 || !d->os.bar1) {
		ret = -ENOMEM;
		goto err;
	}
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err;

	if (pv < 0 || pv > 2) {
		dev_warn(&pdev->dev, "pv=%d out of range, using 0\n", pv);
		pv = 0;
	}
	if (pv) {
		vd->pv_cpu = dma_alloc_coherent(&pdev->dev, VG_PV_AREA_BYTES, &vd->pv_dma, GFP_KERNEL);
		if (!vd->pv_cpu) {
			ret = -ENOMEM;
			goto err;
		}
		d->pv_area = vd->pv_cpu;
		d->pv_area_bus = vd->pv_dma;
		d->pv_area_slots = VG_PV_AREA_SLOTS_WANT;
		d->pv_request = pv;
	}

	ret = vugpu_setup_irqs(vd);
	if (ret)
		goto err_irq;
	ret = vg_dev_init(d);
	if (ret)
		goto err_irq;
	vd->core_up = true;
	if (d->vram_size > vd->bar1_size) {
		dev_err(&pdev->dev, "VRAM (%llu MiB) larger than BAR1 (%pa)\n",
			(unsigned long long)(d->vram_size >> 20), &vd->bar1_size);
		ret = -ENODEV;
		goto err_core;
	}

	snprintf(vd->name, sizeof(vd->name), "vugpu%d", vd->index);
	vd->misc.minor = MISC_DYNAMIC_MINOR;
	vd->misc.name = vd->name;
	vd->misc.fops = &vugpu_fops;
	vd->misc.parent = &pdev->dev;
	vd->misc.mode = 0666;
	ret = misc_register(&vd->misc);
	if (ret)
		goto err_core;
	dev_info(&pdev->dev, "/dev/%s: %llu MiB VRAM, %u channels, %d MSI-X vectors, pv=%d\n", vd->name,
		 (unsigned long long)(d->vram_size >> 20), d->chan_count, vd->num_vectors, d->pv_mode);
	return 0;

err_core:
	vg_dev_fini(d);
	vd->core_up = false;
err_irq:
	vugpu_free_irqs(vd);
	if (vd->pv_cpu)
		dma_free_coherent(&pdev->dev, VG_PV_AREA_BYTES, vd->pv_cpu, vd->pv_dma);
err:
	pci_set_drvdata(pdev, NULL);
	kref_put(&vd->ref, vugpu_dev_release);
	return ret;
}

static void vugpu_remove(struct pci_dev *pdev)
{
	struct vugpu_dev *vd = pci_get_drvdata(pdev);
	struct vugpu_file *fp;

	misc_deregister(&vd->misc);
	/* files still open (unbind through sysfs): stop their contexts and drop their mappings */
	mutex_lock(&vd->files_lock);
	WRITE_ONCE(vd->dead, true);
	list_for_each_entry(fp, &vd->files, node) {
		wake_up_all(&fp->wq); /* waiters see `dead` and leave */
		down_write(&fp->use);
		mutex_lock(&fp->lock);
		unmap_mapping_range(fp->filp->f_mapping, 0, 0, 1);
		vugpu_file_teardown(fp);
		mutex_unlock(&fp->lock);
		up_write(&fp->use);
	}
	mutex_unlock(&vd->files_lock);
	if (vd->core_up)
		vg_dev_fini(&vd->core);
	vugpu_free_irqs(vd);
	if (vd->pv_cpu)
		dma_free_coherent(&pdev->dev, VG_PV_AREA_BYTES, vd->pv_cpu, vd->pv_dma);
	dev_info(&pdev->dev, "removed\n");
	kref_put(&vd->ref, vugpu_dev_release);
}

static const struct pci_device_id vugpu_ids[] = {
	{ PCI_DEVICE(VG_PCI_VENDOR, VG_PCI_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, vugpu_ids);

static struct pci_driver vugpu_driver = {
	.name = DRV_NAME,
	.id_table = vugpu_ids,
	.probe = vugpu_probe,
	.remove = vugpu_remove,
};
module_pci_driver(vugpu_driver);

MODULE_DESCRIPTION("vugpu GPU driver (channels, GPU address spaces, fences; docs/hw-spec.md)");
MODULE_LICENSE("GPL");
