#!/usr/bin/env bash
# How bench/results/engine-vulkan/<device>.json is made on a GPU host (the H100, through the `device`
# tool): unpack the offline bundle (Node, runtime packages, Debian 12's Vulkan loader + glvnd;
# scripts/bundle.sh) and run this checkout's bench with the addon and SPIR-V built here
# (carried: build/vugpu-bundle.tar.xz, build/Release/vugpu_native.node, build/spirv). First the
# cuBLAS anchor (PyTorch on the host), then bench:engine --engine vulkan (device memory, the
# default on a discrete GPU), then the zero-copy import path for the comparison. Results: $OUT.
set -uo pipefail
. "$(dirname "$0")/lib/gpu-host.sh" bundle-x
mkdir -p "$OUT/import"
[ -e node_modules ] || ln -s "$B/node_modules" node_modules
. "$B/libexec/vugpu-env.sh"
NODE=$B/node/bin/node
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
$NODE -e "import('./src/native.ts').then(({native}) => console.log(JSON.stringify(native.vulkanDevices())))" 2>&1
timeout 150 python3 bench/cublas-sgemm.py "$OUT/cublas.json" 1024 4096 8192 2>&1 | tee "$OUT/cublas.log"
timeout 330 "$NODE" bench/engine.ts --engine vulkan --cublas "$OUT/cublas.json" --out "$OUT/engine-vulkan.json" 2>&1 |
  grep -v '"level":30' | tee "$OUT/bench.log"
VUGPU_VK_MEMORY=import timeout 100 "$NODE" bench/engine.ts --engine vulkan --sizes 1024,4096 --where vram --nops 500 \
  --cublas "$OUT/cublas.json" --out "$OUT/import/engine-vulkan.json" 2>&1 | grep -v '"level":30' | tee "$OUT/import/bench.log"
rm -f "$OUT/import/engine-vulkan.svg"
exit 0
