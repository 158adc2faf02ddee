#!/usr/bin/env bash
# Extracts the ELF vmlinux from a Debian (zstd-compressed) bzImage. The ELF is booted through its
# PVH entry (CONFIG_PVH=y), which works under TCG and under KVM variants whose emulator cannot run
# the bzImage decompressor.
# Usage: extract-vmlinux.sh <vmlinuz> <out> [<rootfs with zstd>]
set -euo pipefail
in=$1 out=$2 rootfs=${3:-}
off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$in" | head -n 1 | cut -d: -f1 || true)
[[ -n $off ]] || { echo "extract-vmlinux: no zstd frame in $in" >&2; exit 1; }
if command -v zstd >/dev/null; then zstd_cmd=(zstd); else zstd_cmd=(chroot "$rootfs" zstd); fi
# zstd complains about the data trailing the frame; the output is complete anyway (checked below).
tail -c +"$((off + 1))" "$in" | "${zstd_cmd[@]}" -dcq >"$out" 2>/dev/null || true
if [[ $(head -c 4 "$out" | od -An -tx1 | tr -d ' \n') != 7f454c46 ]] || (( $(stat -c %s "$out") < 8000000 )); then
  echo "extract-vmlinux: $out is not a plausible vmlinux ELF" >&2; exit 1
fi
