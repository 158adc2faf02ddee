#!/usr/bin/env bash
# The programs and benchmark suite on a GPU host (issue 14's "what it must show", through the
# `device` tool): from the offline bundle, `vugpu serve --engine vulkan` driven by the native twin
# (the real driver core over vfio-user, no VM: the GPU host's /dev/kvm cannot run a stock guest):
#   pt and fv: the 14 GPUvm benchmarks at --large and the sample programs, every result verified;
#   fv: the kernels as SPIR-V programs (--programs);
#   fv: two clients at once (two VMs of one aggregator) — digests must equal the solo run's;
#   pt on the CPU engine (--engine native): the per-stage table CPU engine vs the GPU, same run.
# Logs (VUGPU-* records) go to $OUT; bench/gpu-host-summary.ts turns them into a table.
set -uo pipefail
OUT=${OUT:-/tmp/vugpu-out}
mkdir -p "$OUT"
T=/tmp/vugpu-suite && rm -rf "$T" && mkdir -p "$T"
tar -xJf "${VUGPU_BUNDLE:-build/vugpu-bundle.tar.xz}" -C "$T" || exit 1
B=$T/vugpu-bundle
ALL=nop,loop,madd,mmul,fmadd,fmmul,cpy,pincpy,backprop,bfs,hotspot,lud,srad,srad2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
smoke() { # name engine mode [bench args]
  local name=$1 engine=$2 mode=$3; shift 3
  timeout 150 "$B/bin/vugpu-smoke" --engine "$engine" --mode "$mode" --benches "$ALL" --timeout 140 --out "$T/$name" -- "$@" \
    >"$T/$name.out" 2>&1; echo "== $name: exit $?" | tee -a "$T/$name.out"
  cat "$T/$name.out" "$T/$name/twin-$engine-$mode.log" > "$OUT/$name.log" 2>/dev/null
  grep -h '"gpu engine created"\|level":[45]0' "$T/$name/serve-$engine-$mode.log" | head -20 >> "$OUT/$name.log"
}
# The CPU engine first, alone: run beside the GPU runs, its BLAS threads took the cores the GPU
# server's submission thread needs (pt fmmul Exec 333 ms on the H100 against 23 ms in fv after it).
smoke pt-native native pt --large
smoke pt-vulkan vulkan pt --large
smoke fv-vulkan vulkan fv --large
smoke fv-programs vulkan fv --large --programs "$B/build/spirv/native/shaders/builtins"
# Two clients at once in fv.
S=$T/two && mkdir -p "$S"
"$B/bin/vugpu" serve --engine vulkan --vm name=a,socket=$S/a.sock,mode=fv --vm name=b,socket=$S/b.sock,mode=fv >"$S/serve.log" 2>&1 &
spid=$!
for i in $(seq 100); do [ -S "$S/a.sock" ] && [ -S "$S/b.sock" ] && break; sleep 0.1; done
( for b in ${ALL//,/ }; do timeout 40 "$B/bin/vugpu-twin" --socket "$S/a.sock" "$b" --large; done ) >"$S/a.log" 2>&1 &
apid=$!
( for b in ${ALL//,/ }; do timeout 40 "$B/bin/vugpu-twin" --socket "$S/b.sock" "$b" --large; done ) >"$S/b.log" 2>&1
wait $apid; kill $spid 2>/dev/null; wait $spid 2>/dev/null
{ echo "== client a"; cat "$S/a.log"; echo "== client b"; cat "$S/b.log"; echo "== serve errors"; grep -h 'level":[45]0' "$S/serve.log" | head; } > "$OUT/two-clients.log"
exit 0
