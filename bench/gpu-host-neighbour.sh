#!/usr/bin/env bash
# bench:neighbour on the GPU host (issue 34's "the same scenario on the H200 host with --engine
# vulkan and auto, in one call"), through the `device` tool: from the offline bundle
# (scripts/bundle.sh, carried as build/vugpu-bundle.tar.xz; no QEMU needed) the bundle's own
# bench/neighbour.ts on its Node, addon, SPIR-V and static twin (twin/vugpu-programs-host): one
# `serve` (fv, two VMs) per engine, VM b's NOPs back to back beside VM a's endless program.
# Results in $OUT: neighbour/<device>.json (commit it as bench/results/neighbour/<device>.json)
# and neighbour.log. Extra arguments go to bench/neighbour.ts (e.g. --watchdog-ms 3000).
set -uo pipefail
. "$(dirname "$0")/lib/gpu-host.sh" neighbour
mkdir -p "$OUT/neighbour"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/neighbour.log"
[ -x "$B/twin/vugpu-programs-host" ] || { echo "the bundle has no twin/vugpu-programs-host: rebuild it (scripts/bundle.sh)" | tee -a "$OUT/neighbour.log"; exit 1; }
( . "$B/libexec/vugpu-env.sh" && timeout 240 "$B/node/bin/node" "$B/bench/neighbour.ts" --engine vulkan,auto "$@" 2>&1 |
  grep -v '"level":30' ) | tee -a "$OUT/neighbour.log"
cp "$B"/bench/results/neighbour/*.json "$OUT/neighbour/" 2>/dev/null
ls -la "$OUT" "$OUT/neighbour"
exit 0
