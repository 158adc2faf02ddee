#!/usr/bin/env python3
"""cuBLAS SGEMM anchor for bench/engine-vulkan.ts (run on a CUDA host, before it).

  python3 bench/cublas-sgemm.py OUT.json [n ...]      (default sizes 1024 4096 8192)

TF32 off (torch.backends.cuda.matmul.allow_tf32 = False: full f32, as FMMUL), operands in pinned
host memory. Per size: kernel only (operands resident), and with transfers — H2D of A and B,
the GEMM, D2H of C, synchronised — best and median of REPS. Also the pinned copy rates
(256 MiB each way) and both directions at once (two streams, 8 + 4 and 256 + 128 MiB). Prints one
line per size; writes OUT.json.
"""
import json
import sys
import time

import torch

REPS = 7


def timed(fn, reps=REPS):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    out.sort()
    return out[0], out[len(out) // 2]


def main():
    path = sys.argv[1]
    sizes = [int(x) for x in sys.argv[2:]] or [1024, 4096, 8192]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda')
    res = {'device': torch.cuda.get_device_name(0), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'allow_tf32': torch.backends.cuda.matmul.allow_tf32, 'sizes': []}
    # Pinned copy rates.
    nb = 256 << 20
    h = torch.empty(nb // 4, dtype=torch.float32).pin_memory()
    d = torch.empty(nb // 4, dtype=torch.float32, device=dev)
    b_h2d, _ = timed(lambda: d.copy_(h, non_blocking=True))
    b_d2h, _ = timed(lambda: h.copy_(d, non_blocking=True))
    res['pinnedH2DGBs'] = nb / b_h2d / 1e9
    res['pinnedD2HGBs'] = nb / b_d2h / 1e9
    print(f"pinned copies 256 MiB: H2D {res['pinnedH2DGBs']:.1f} GB/s, D2H {res['pinnedD2HGBs']:.1f} GB/s", flush=True)
    del h, d
    # Both directions at once (two streams), 8 MiB up with 4 down as a 1024^3 GEMM moves them and
    # 256 with 128: is the bus full duplex? (bench/vulkan-copy.c asks Vulkan's queues the same.)
    res['duplex'] = []
    for up_mb in (8, 256):
        hu = torch.ones(up_mb << 18).pin_memory()
        du = torch.empty(up_mb << 18, device=dev)
        hd = torch.empty(up_mb << 17).pin_memory()
        dd = torch.ones(up_mb << 17, device=dev)
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

        def up():
            with torch.cuda.stream(s1):
                du.copy_(hu, non_blocking=True)

        def down():
            with torch.cuda.stream(s2):
                hd.copy_(dd, non_blocking=True)
        tu, _ = timed(up, 20)
        td, _ = timed(down, 20)
        tb, _ = timed(lambda: (up(), down()), 20)
        row = {'upMiB': up_mb, 'downMiB': up_mb // 2, 'upUs': tu * 1e6, 'downUs': td * 1e6, 'bothUs': tb * 1e6}
        res['duplex'].append(row)
        print(f"pinned copies {up_mb} MiB up + {up_mb // 2} down: alone {row['upUs']:.0f} / {row['downUs']:.0f} us, "
              f"at once {row['bothUs']:.0f} us", flush=True)
        del hu, du, hd, dd
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        ha = (torch.rand(n, n, generator=g) * 2 - 1).pin_memory()
        hb = (torch.rand(n, n, generator=g) * 2 - 1).pin_memory()
        hc = torch.empty(n, n).pin_memory()
        da, db = ha.to(dev), hb.to(dev)
        dc = torch.empty(n, n, device=dev)
        kb, km = timed(lambda: torch.mm(da, db, out=dc))

        def full():
            da.copy_(ha, non_blocking=True)
            db.copy_(hb, non_blocking=True)
            torch.mm(da, db, out=dc)
            hc.copy_(dc, non_blocking=True)
        fb, fm = timed(full)
        flop = 2.0 * n ** 3
        row = {'n': n, 'kernelMs': kb * 1e3, 'kernelMedianMs': km * 1e3, 'kernelTflops': flop / kb / 1e12,
               'withTransfersMs': fb * 1e3, 'withTransfersMedianMs': fm * 1e3,
               'withTransfersTflops': flop / fb / 1e12}
        res['sizes'].append(row)
        print(f"cuBLAS SGEMM {n}^3 (TF32 off): kernel {row['kernelTflops']:.1f} TFLOP/s, "
              f"with pinned transfers {row['withTransfersTflops']:.1f} TFLOP/s ({fb * 1e3:.2f} ms)", flush=True)
        del ha, hb, hc, da, db, dc
        torch.cuda.empty_cache()
    with open(path, 'w') as f:
        json.dump(res, f, indent=2)


if __name__ == '__main__':
    main()
