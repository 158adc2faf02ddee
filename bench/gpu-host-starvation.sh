#!/usr/bin/env bash
# One `device` call on a GPU host: bench:starvation (bench/starvation.ts) from the offline bundle
# (scripts/bundle.sh, carried as build/vugpu-bundle.tar.xz) on its Node and addon, with
# `--engine auto` and `--engine vulkan` → $OUT/<device>-auto.json, <device>-vulkan.json and logs.
# The client is build/starvation/starvation-client-static when carried (a GPU host may have no
# compiler): gcc -static, as bench/starvation.ts builds it, with -static. Arguments go to
# bench/starvation.ts (e.g. --seconds 6).
set -uo pipefail
. "$(dirname "$0")/lib/gpu-host.sh" starvation
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
[ -e node_modules ] || ln -s "$B/node_modules" node_modules
mkdir -p build/Release && ln -sf "$B/build/Release/vugpu_native.node" build/Release/vugpu_native.node
[ -e build/spirv ] || ln -s "$B/build/spirv" build/spirv
CLIENT=()
[[ -x build/starvation/starvation-client-static ]] && CLIENT=(--client build/starvation/starvation-client-static)
for engine in auto vulkan; do
  ( . "$B/libexec/vugpu-env.sh" && timeout 280 "$B/node/bin/node" bench/starvation.ts --engine "$engine" "${CLIENT[@]}" --out "$engine" "$@" 2>&1 |
    grep -v '"level":30' | tail -40 ) >"$OUT/starvation-$engine.log" 2>&1
done
cp bench/results/starvation/*.json "$OUT/" 2>/dev/null
ls -la "$OUT"
exit 0
