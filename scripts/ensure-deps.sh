#!/usr/bin/env bash
# Host prerequisites for vugpu: Debian packages, npm dependencies, the native addon.
# Idempotent and quiet when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
need_pkgs=()
for p in libopenblas-dev debootstrap g++ make python3 libvulkan-dev mesa-vulkan-drivers glslang-tools spirv-tools spirv-headers squashfs-tools vulkan-tools vulkan-validationlayers; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  echo "[vugpu] installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
stamp=node_modules/.vugpu-deps
if [[ ! -f $stamp || package.json -nt $stamp || package-lock.json -nt $stamp ]]; then
  echo "[vugpu] npm ci"
  npm ci --no-audit --no-fund
  touch "$stamp"
fi
if [[ ! -f build/Release/vugpu_native.node ]] || [[ -n "$(find native binding.gyp -newer build/Release/vugpu_native.node -print -quit)" ]]; then
  echo "[vugpu] building native addon"
  npm run --silent build:addon >/dev/null
fi
bash scripts/build-spirv.sh  # built-in kernels' GPU forms and guest sample programs (incremental)
