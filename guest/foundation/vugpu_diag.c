// SPDX-License-Identifier: GPL-2.0
/*
 * vugpu foundation diagnostic driver.
 *
 * Binds the vugpu PCI function (1de5:6b75) and exposes what the foundation tests need from
 * inside the guest: BAR0 register access, BAR0/BAR1 mmap for user-space latency and bandwidth
 * measurement, a DMA loopback through the PDIAG block (docs/diag-block.md) using a coherent
 * buffer, and per-vector MSI-X interrupt counts. One /dev/vugpu-diag<N> per device.
 *
 * It is a test driver, not the GPU driver (guest/driver): it touches no engine block.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/interrupt.h>
#include <linux/miscdevice.h>
#include <linux/dma-mapping.h>
#include <linux/uaccess.h>
#include <linux/mutex.h>
#include <linux/kref.h>
#include <linux/idr.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/io.h>

#include "vugpu_diag.h"

#define DRV_NAME "vugpu-diag"
/* The DMA buffer: the register block allows up to 1 MiB per transfer. */
#define DMA_BUF_SIZE VUGPU_DMA_MAX_LEN

struct vugpu_vector {
	struct vugpu_diag *dev;
	atomic64_t count;
	int index;
	int irq;
	bool requested;
};

struct vugpu_diag {
	struct pci_dev *pdev;
	struct kref ref;          /* probe + one per open file */
	struct mutex lock;        /* serialises register sequences and guards `dead` */
	bool dead;                /* device removed: file operations fail with -ENODEV */
	int index;
	char name[24];
	struct miscdevice misc;
	void __iomem *bar0;
	resource_size_t bar0_size;
	resource_size_t bar1_size;
	void *dma_buf;
	dma_addr_t dma_handle;
	u32 dma_size;
	int num_vectors;
	struct vugpu_vector vec[VUGPU_NUM_VECTORS];
};

static DEFINE_IDA(vugpu_ida);

static void vugpu_release(struct kref *ref)
{
	struct vugpu_diag *d = container_of(ref, struct vugpu_diag, ref);

	ida_free(&vugpu_ida, d->index);
	kfree(d);
}

static inline u32 rd(struct vugpu_diag *d, u32 off)
{
	return ioread32(d->bar0 + off);
}

static inline void wr(struct vugpu_diag *d, u32 off, u32 val)
{
	iowrite32(val, d->bar0 + off);
}

static irqreturn_t vugpu_irq(int irq, void *arg)
{
	struct vugpu_vector *v = arg;

	/*
	 * One message per event (edge semantics, hw-spec §2): count it, then acknowledge our own
	 * PMC_INTR bit (W1C). Other vectors' bits are left to their handlers.
	 */
	atomic64_inc(&v->count);
	iowrite32(BIT(v->index), v->dev->bar0 + VUGPU_PMC_INTR);
	return IRQ_HANDLED;
}

static struct vugpu_diag *file_dev(struct file *f)
{
	return f->private_data;
}

static int vugpu_open(struct inode *inode, struct file *f)
{
	/* misc_open() stored the miscdevice in private_data. */
	struct vugpu_diag *d = container_of(f->private_data, struct vugpu_diag, misc);

	kref_get(&d->ref);
	f->private_data = d;
	return 0;
}

static int vugpu_close(struct inode *inode, struct file *f)
{
	kref_put(&file_dev(f)->ref, vugpu_release);
	return 0;
}

static bool reg_ok(struct vugpu_diag *d, u32 off)
{
	return !(off & 3) && off <= d->bar0_size - 4;
}

static long vugpu_dma(struct vugpu_diag *d, struct vugpu_diag_dma *a)
{
	u8 *buf = d->dma_buf;
	u32 i;

	if (a->len == 0 || a->len > d->dma_size)
		return -EINVAL;
	if (a->direction == VUGPU_DMA_TO_VRAM) {
		vugpu_pattern(buf, a->len, a->seed);
	} else if (a->direction == VUGPU_DMA_FROM_VRAM) {
		/* Poison, so stale bytes cannot pass for a transfer that did not happen. */
		for (i = 0; i < a->len; i++)
			buf[i] = (u8)~i;
	} else {
		return -EINVAL;
	}
	/* Device reads of a coherent buffer need no sync; order the CPU stores before the doorbell. */
	wmb();
	wr(d, VUGPU_DIAG_DMA_ADDR_LO, lower_32_bits(d->dma_handle));
	wr(d, VUGPU_DIAG_DMA_ADDR_HI, upper_32_bits(d->dma_handle));
	wr(d, VUGPU_DIAG_DMA_LEN, a->len);
	wr(d, VUGPU_DIAG_DMA_VRAM_OFF, a->vram_offset);
	wr(d, VUGPU_DIAG_DMA_CTRL, a->direction);
	/* The transfer completes before the CTRL write is answered; this read is ordered after it. */
	a->status = rd(d, VUGPU_DIAG_DMA_STATUS);
	a->error = rd(d, VUGPU_DIAG_DMA_ERROR);
	a->device_fnv = rd(d, VUGPU_DIAG_DMA_FNV);
	rmb();
	a->buffer_fnv = vugpu_fnv1a(buf, a->len);
	a->mismatches = 0;
	a->first_mismatch = 0xffffffffu;
	if (a->direction == VUGPU_DMA_FROM_VRAM) {
		u8 *want = kvmalloc(a->len, GFP_KERNEL);

		if (!want)
			return -ENOMEM;
		vugpu_pattern(want, a->len, a->seed);
		for (i = 0; i < a->len; i++) {
			if (buf[i] != want[i]) {
				if (!a->mismatches)
					a->first_mismatch = i;
				a->mismatches++;
			}
		}
		kvfree(want);
	}
	return 0;
}

static long vugpu_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct vugpu_diag *d = file_dev(f);
	void __user *uarg = (void __user *)arg;
	long ret = 0;

	mutex_lock(&d->lock);
	if (d->dead) {
		ret = -ENODEV;
		goto out;
	}
	switch (cmd) {
	case VUGPU_DIAG_IOC_INFO: {
		struct vugpu_diag_info info = {
			.bar0_size = d->bar0_size,
			.bar1_size = d->bar1_size,
			.dma_addr = d->dma_handle,
			.dma_size = d->dma_size,
			.num_vectors = d->num_vectors,
		};

		if (copy_to_user(uarg, &info, sizeof(info)))
			ret = -EFAULT;
		break;
	}
	case VUGPU_DIAG_IOC_READ32:
	case VUGPU_DIAG_IOC_WRITE32: {
		struct vugpu_diag_reg r;

		if (copy_from_user(&r, uarg, sizeof(r))) {
			ret = -EFAULT;
			break;
		}
		if (!reg_ok(d, r.offset)) {
			ret = -EINVAL;
			break;
		}
		if (cmd == VUGPU_DIAG_IOC_WRITE32) {
			wr(d, r.offset, r.value);
			break;
		}
		r.value = rd(d, r.offset);
		if (copy_to_user(uarg, &r, sizeof(r)))
			ret = -EFAULT;
		break;
	}
	case VUGPU_DIAG_IOC_DMA: {
		struct vugpu_diag_dma a;

		if (copy_from_user(&a, uarg, sizeof(a))) {
			ret = -EFAULT;
			break;
		}
		ret = vugpu_dma(d, &a);
		if (!ret && copy_to_user(uarg, &a, sizeof(a)))
			ret = -EFAULT;
		break;
	}
	case VUGPU_DIAG_IOC_IRQ_COUNTS: {
		struct vugpu_diag_irq_counts c = {};
		int i;

		for (i = 0; i < VUGPU_NUM_VECTORS; i++)
			c.count[i] = atomic64_read(&d->vec[i].count);
		if (copy_to_user(uarg, &c, sizeof(c)))
			ret = -EFAULT;
		break;
	}
	default:
		ret = -ENOTTY;
	}
out:
	mutex_unlock(&d->lock);
	return ret;
}

/* mmap: offset 0 maps BAR0 (uncached), VUGPU_MMAP_BAR1 maps BAR1 (write-combining). */
static int vugpu_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct vugpu_diag *d = file_dev(f);
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	int bar, ret = 0;
	u64 base;

	if (off >= VUGPU_MMAP_BAR1) {
		bar = 1;
		base = off - VUGPU_MMAP_BAR1;
		vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
	} else {
		bar = 0;
		base = off;
		vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	}
	mutex_lock(&d->lock);
	if (d->dead) {
		ret = -ENODEV;
	} else if (base + len < base || base + len > pci_resource_len(d->pdev, bar)) {
		ret = -EINVAL;
	} else {
		vm_flags_set(vma, VM_IO | VM_DONTEXPAND | VM_DONTDUMP);
		ret = io_remap_pfn_range(vma, vma->vm_start,
					 (pci_resource_start(d->pdev, bar) + base) >> PAGE_SHIFT,
					 len, vma->vm_page_prot);
	}
	mutex_unlock(&d->lock);
	return ret;
}

static const struct file_operations vugpu_fops = {
	.owner = THIS_MODULE,
	.open = vugpu_open,
	.release = vugpu_close,
	.unlocked_ioctl = vugpu_ioctl,
	.mmap = vugpu_mmap,
};

static void vugpu_free_irqs(struct vugpu_diag *d)
{
	int i;

	if (d->num_vectors > 0)
		wr(d, VUGPU_PMC_INTR_EN, 0);
	for (i = 0; i < d->num_vectors; i++)
		if (d->vec[i].requested)
			free_irq(d->vec[i].irq, &d->vec[i]);
	if (d->num_vectors > 0)
		pci_free_irq_vectors(d->pdev);
	d->num_vectors = 0;
}

static int vugpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vugpu_diag *d;
	int ret, i;

	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d)
		return -ENOMEM;
	kref_init(&d->ref);
	mutex_init(&d->lock);
	d->pdev = pdev;
	d->index = ida_alloc(&vugpu_ida, GFP_KERNEL);
	if (d->index < 0) {
		ret = d->index;
		kfree(d);
		return ret;
	}
	pci_set_drvdata(pdev, d);

	ret = pcim_enable_device(pdev);
	if (ret)
		goto err;
	ret = pcim_request_all_regions(pdev, DRV_NAME);
	if (ret)
		goto err;
	pci_set_master(pdev);
	d->bar0_size = pci_resource_len(pdev, 0);
	d->bar1_size = pci_resource_len(pdev, 1);
	if (d->bar0_size < VUGPU_DIAG_IRQ_COUNT + 4 || !(pci_resource_flags(pdev, 1) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "unexpected BARs: BAR0 %pa, BAR1 %pa\n", &d->bar0_size, &d->bar1_size);
		ret = -ENODEV;
		goto err;
	}
	d->bar0 = pcim_iomap(pdev, 0, 0);
	if (!d->bar0) {
		ret = -ENOMEM;
		goto err;
	}

	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err;
	d->dma_size = DMA_BUF_SIZE;
	d->dma_buf = dma_alloc_coherent(&pdev->dev, d->dma_size, &d->dma_handle, GFP_KERNEL);
	if (!d->dma_buf) {
		ret = -ENOMEM;
		goto err;
	}

	ret = pci_alloc_irq_vectors(pdev, VUGPU_NUM_VECTORS, VUGPU_NUM_VECTORS, PCI_IRQ_MSIX);
	if (ret < 0) {
		dev_err(&pdev->dev, "MSI-X with %d vectors: %d\n", VUGPU_NUM_VECTORS, ret);
		goto err_dma;
	}
	d->num_vectors = ret;
	for (i = 0; i < d->num_vectors; i++) {
		struct vugpu_vector *v = &d->vec[i];

		v->dev = d;
		v->index = i;
		v->irq = pci_irq_vector(pdev, i);
		ret = request_irq(v->irq, vugpu_irq, 0, DRV_NAME, v);
		if (ret)
			goto err_irq;
		v->requested = true;
	}
	/* Sources send their vector only while enabled here (hw-spec §2). */
	wr(d, VUGPU_PMC_INTR, 0xf);
	wr(d, VUGPU_PMC_INTR_EN, (1u << d->num_vectors) - 1);

	snprintf(d->name, sizeof(d->name), "vugpu-diag%d", d->index);
	d->misc.minor = MISC_DYNAMIC_MINOR;
	d->misc.name = d->name;
	d->misc.fops = &vugpu_fops;
	d->misc.parent = &pdev->dev;
	d->misc.mode = 0600;
	ret = misc_register(&d->misc);
	if (ret)
		goto err_irq;
	dev_info(&pdev->dev, "/dev/%s: BAR0 %pa, BAR1 %pa, %d MSI-X vectors, DMA buffer at %pad\n",
		 d->name, &d->bar0_size, &d->bar1_size, d->num_vectors, &d->dma_handle);
	return 0;

err_irq:
	vugpu_free_irqs(d);
err_dma:
	dma_free_coherent(&pdev->dev, d->dma_size, d->dma_buf, d->dma_handle);
err:
	/* pcim_* resources are released by devres after a failed probe. */
	pci_set_drvdata(pdev, NULL);
	kref_put(&d->ref, vugpu_release);
	return ret;
}

static void vugpu_remove(struct pci_dev *pdev)
{
	struct vugpu_diag *d = pci_get_drvdata(pdev);

	misc_deregister(&d->misc);
	mutex_lock(&d->lock);
	d->dead = true; /* open files now get -ENODEV; existing user mappings are theirs to drop */
	mutex_unlock(&d->lock);
	vugpu_free_irqs(d);
	dma_free_coherent(&pdev->dev, d->dma_size, d->dma_buf, d->dma_handle);
	kref_put(&d->ref, vugpu_release);
}

static const struct pci_device_id vugpu_ids[] = {
	{ PCI_DEVICE(VUGPU_PCI_VENDOR, VUGPU_PCI_DEVICE) },
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

MODULE_DESCRIPTION("vugpu foundation diagnostic driver (BAR/DMA/MSI-X tests)");
MODULE_LICENSE("GPL");
