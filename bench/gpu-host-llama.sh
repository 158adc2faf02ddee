#!/usr/bin/env bash
# One `device` call on the GPU host for issue 32: llama.cpp natively on the host's Vulkan driver
# against llama.cpp through the vugpu Vulkan driver in the native twin (`serve --engine vulkan`,
# fv), both from the offline bundle made with `scripts/bundle.sh --with-llama` (carried as
# build/vugpu-bundle.tar.xz, or VUGPU_BUNDLE). The bundle's Node runs its own bench/llama.ts;
# models (135m and 1b, q8_0) are written on the host. Usage, from the checkout's root:
#   bash bench/gpu-host-llama.sh [bench:llama arguments]     (default: --shapes 135m,1b --watchdog-ms 60000)
# VUGPU_ADDON=FILE and VUGPU_OVERLAY=DIR put a change under test over the bundle (below);
# VUGPU_BUNDLE_GUEST and VUGPU_UNPACKED split a bundle with QEMU over two calls (below).
# Writes under $OUT as it goes: llama.log (everything), llama-<device>.json (the result, also when
# the run was cut short: bench:llama rewrites it after every phase), env.txt (driver, GPU).
# Time: LLAMA_BUDGET_S (default 540) bounds the whole call; bench:llama gets what is left after
# unpacking and stops starting phases (--deadline-s) in time to write its result.
set -euo pipefail
OUT=${OUT:-/tmp/vugpu-out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${LLAMA_BUDGET_S:-540}
cd "$(dirname "$0")/.."
LOG=$OUT/llama.log
exec > >(tee -a "$LOG") 2>&1
say() { printf '[gpu-host-llama %3d s] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
ARCHIVE=${VUGPU_BUNDLE:-build/vugpu-bundle.tar.xz}
# VUGPU_UNPACKED=DIR: unpack into DIR (default /tmp/vugpu-llama), or with VUGPU_BUNDLE=none use
# the bundle an earlier call unpacked there (a machine kept warm between calls keeps it).
T=${VUGPU_UNPACKED:-/tmp/vugpu-llama}
B=$T/vugpu-bundle
if [[ $ARCHIVE == none ]]; then
  [[ -x $B/node/bin/node ]] || { say "VUGPU_BUNDLE=none but no bundle unpacked in $T (this machine was not the last call's)"; exit 1; }
  say "the bundle unpacked in $T"
else
  [[ -f $ARCHIVE ]] || { say "no bundle at $ARCHIVE (scripts/bundle.sh --with-llama)"; exit 1; }
  rm -rf "$T" && mkdir -p "$T"
  say "unpacking $ARCHIVE"
  timeout 120 tar -xJf "$ARCHIVE" -C "$T"
fi
# VUGPU_BUNDLE_GUEST: QEMU and the guest (scripts/bundle.sh --guest-apart), unpacked over it
if [[ -n ${VUGPU_BUNDLE_GUEST:-} ]]; then
  [[ -f $VUGPU_BUNDLE_GUEST ]] || { say "no archive at $VUGPU_BUNDLE_GUEST"; exit 1; }
  say "unpacking $VUGPU_BUNDLE_GUEST over it"
  timeout 120 tar -xJf "$VUGPU_BUNDLE_GUEST" -C "$T"
fi
# VUGPU_ADDON: an addon built since the bundle (a change under test), in place of the bundle's
[[ -n ${VUGPU_ADDON:-} ]] && cp "$VUGPU_ADDON" "$B/build/Release/vugpu_native.node" && say "addon: $VUGPU_ADDON"
# VUGPU_OVERLAY: a tree laid over the bundle's (src/, bench/, … of a change under test, or of an
# older commit for an A/B in the same call: `git archive REV src | tar -x -C DIR`)
if [[ -n ${VUGPU_OVERLAY:-} ]]; then
  [[ -d $VUGPU_OVERLAY ]] || { say "no overlay directory $VUGPU_OVERLAY"; exit 1; }
  cp -r "$VUGPU_OVERLAY"/. "$B"/ && say "overlay: $VUGPU_OVERLAY"
fi
[[ -d $B/llama/node_modules/node-llama-cpp ]] || { say "the bundle has no llama/ (build it with --with-llama)"; exit 1; }
[[ -f $B/twin/vulkan/vugpu_icd.json ]] || say "note: the bundle has no vugpu Vulkan driver: only the native side can run"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  grep -m1 'model name' /proc/cpuinfo || true
  nproc
  cat "$B/BUNDLE-INFO" 2>/dev/null || true
} >"$OUT/env.txt"
cat "$OUT/env.txt"

# The bundle's environment (its lib/ first, the NVIDIA ICD as the host's Vulkan driver).
. "$B/libexec/vugpu-env.sh"
export VUGPU_CACHE=${VUGPU_CACHE:-$T/cache}
mkdir -p "$T/models"
ARGS=("$@")
# program preparation of llama.cpp's large modules may outlast the default watchdog on a first load
((${#ARGS[@]})) || ARGS=(--shapes 135m,1b --watchdog-ms 60000)
# --sides …,guest: a TCG guest through vugpu (the bundle's QEMU), whose application disk is made
# here from the bundle's own Node and llama.cpp (bin/vugpu-vkapp).
SIDES=
for ((i = 0; i < ${#ARGS[@]}; i++)); do
  case ${ARGS[i]} in
    --sides) SIDES=${ARGS[i + 1]:-} ;;
    --sides=*) SIDES=${ARGS[i]#--sides=} ;;
  esac
done
if [[ ,$SIDES, == *,guest,* ]]; then
  [[ -x $B/bin/vugpu-vkapp ]] || { say "--sides guest needs a bundle made with --with-qemu --with-llama"; exit 1; }
  "$B/bin/vugpu-vkapp" || exit 1
  say "guest application disk made"
fi
LEFT=$(( BUDGET - ($(date +%s) - T0) - 20 ))
((LEFT > 60)) || { say "only $LEFT s left of LLAMA_BUDGET_S=$BUDGET"; exit 1; }
say "bench:llama ${ARGS[*]} (deadline ${LEFT} s)"
rc=0
# --deadline-s stops starting phases; timeout ends a phase that hangs past the budget (the
# result file then holds the phases before it). SIGTERM makes bench:llama kill its workers.
timeout -k 10 $(( LEFT + 10 )) "$VUGPU_NODE" "$B/bench/llama.ts" --model-dir "$T/models" \
  --deadline-s $(( LEFT - 30 )) --timeout-s 300 "${ARGS[@]}" || rc=$?
say "bench:llama exit $rc"
for f in "$B"/bench/results/llama/*.json; do
  [[ -f $f ]] && cp "$f" "$OUT/llama-$(basename "$f")"
done
ls -la "$OUT"
exit "$rc"
