#!/usr/bin/env bash
# One `device` call on the GPU host that re-validates a build there (issues 13 and 14): from the
# offline bundle with QEMU (scripts/bundle.sh --with-qemu, carried as build/vugpu-bundle.tar.xz),
#   1. bench/programs.ts (this checkout's, on the bundle's Node and addon) → programs/<device>.json/.svg, programs.log;
#   2. bench/gpu-host-suite.sh: the twin's 14 benchmarks at --large and the sample programs through
#      `serve --engine vulkan` in pt, fv, fv with the kernels as programs, two clients, and the
#      CPU engine → suite-logs.tgz (bench/gpu-host-summary.ts turns it into gpu-host-suite/<device>.json);
#   3. bench/gpu-host-guests.ts --large: stock QEMU guests (TCG) through vugpu on the GPU — sample
#      programs, program attacks, the suite, the hostile suite beside a co-tenant and a canary →
#      gpu-host-guests.json/.log.
#   4. bench/device-lost.ts: real device losses (an injected GPU page fault) under three
#      channels' work, recovered → device-lost/<device>.json, device-lost.log. Last: a fault must not disturb the rest.
# glslangValidator (bench:programs compiles new SGEMM variants) comes xz-packed in .dev/ when the
# host has none. At most 8 files come back from $OUT: the logs of step 2 travel as one archive.
set -uo pipefail
. "$(dirname "$0")/lib/gpu-host.sh" validate
if ! command -v glslangValidator >/dev/null && [[ -f .dev/glslangValidator.xz ]]; then
  xz -dc .dev/glslangValidator.xz >"$T/glslangValidator" && chmod +x "$T/glslangValidator" && export PATH=$T:$PATH
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
# bench:programs from this checkout (it uses test/ helpers the bundle leaves out) on the bundle's
# Node, packages, addon and SPIR-V.
[ -e node_modules ] || ln -s "$B/node_modules" node_modules
mkdir -p build/Release && ln -sf "$B/build/Release/vugpu_native.node" build/Release/vugpu_native.node
[ -e build/spirv ] || ln -s "$B/build/spirv" build/spirv
( . "$B/libexec/vugpu-env.sh" && timeout 240 "$B/node/bin/node" bench/programs.ts 2>&1 | grep -v '"level":30' | tail -60 ) >"$OUT/programs.log" 2>&1
f=$(ls -t bench/results/programs/*.json 2>/dev/null | head -1) && cp "$f" "${f%.json}.svg" "$OUT/" 2>/dev/null
S=$T/suite-out && mkdir -p "$S"
OUT=$S VUGPU_BUNDLE=${VUGPU_BUNDLE:-build/vugpu-bundle.tar.xz} timeout 200 bash bench/gpu-host-suite.sh >"$S/run.log" 2>&1
tar -czf "$OUT/suite-logs.tgz" -C "$S" .
( . "$B/libexec/vugpu-env.sh" && timeout 280 "$B/node/bin/node" "$B/bench/gpu-host-guests.ts" --large --out "$OUT" ) >"$OUT/guests-run.log" 2>&1
( . "$B/libexec/vugpu-env.sh" && timeout 120 "$B/node/bin/node" bench/device-lost.ts 2>&1 | grep -v '"level":30' | tail -40 ) >"$OUT/device-lost.log" 2>&1
f=$(ls -t bench/results/device-lost/*.json 2>/dev/null | head -1) && cp "$f" "$OUT/" 2>/dev/null
ls -la "$OUT"
exit 0
