#!/usr/bin/env bash
# vugpu guest tooling setup: a QEMU with vfio-user-pci, a guest kernel, and an initramfs with
# the guest programs. Idempotent; everything is cached in ${VUGPU_CACHE:-/var/cache/vugpu}.
#
# Steps (each skipped when its stamp matches a hash of its inputs):
#   host     debootstrap on the host (only when the rootfs must be built)
#   rootfs   Debian trixie minbase + kernel, headers, busybox, gcc (+ QEMU 11.x from trixie-backports
#            unless the system QEMU already has vfio-user-pci)
#   kernel   vmlinux extracted from the trixie vmlinuz (PVH entry: boots under TCG and KVM)
#   guest    every guest/<component>/ with a Makefile or build.sh, built inside the rootfs
#            (kernel modules against the matching headers, static user programs)
#   spirv    the guest programs' SPIR-V modules, compiled on the host (scripts/build-spirv.sh)
#   initramfs busybox + guest/initramfs/init + the components' outputs + /programs, packed with busybox cpio
#   manifest $CACHE/manifest.json, read by src/vm/ (how to run QEMU, kernel, initramfs, release)
#
# The guest component hook is documented in guest/README.md.
# Environment: VUGPU_CACHE (cache dir), VUGPU_QEMU (a qemu-system-x86_64 to use instead),
# VUGPU_MIRROR (Debian mirror), VUGPU_SETUP_VERBOSE=1 (stream step logs).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VUGPU_CACHE:-/var/cache/vugpu}
MIRROR=${VUGPU_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
ROOTFS=$CACHE/rootfs
STAMPS=$CACHE/stamps
LOGS=$CACHE/logs
# Bump when the way an artefact is produced changes (part of every step's key).
RECIPE=3

# shellcheck source=scripts/lib.sh
source "$REPO/scripts/lib.sh"

[[ $(id -u) == 0 ]] || die "setup needs root (debootstrap, chroot, mounts)"
mkdir -p "$CACHE" "$STAMPS" "$LOGS"

# One setup at a time per cache (npm test runs it from several shells).
exec 9>"$CACHE/.setup.lock"
if ! flock -n 9; then
  say "waiting for another setup holding $CACHE/.setup.lock"
  flock 9
fi
trap 'unmount_all' EXIT
trap 'exit 130' INT TERM

T_START=$(now)

# ---------------------------------------------------------------- QEMU choice
qemu_has_vfio_user() { # $@ = command prefix running qemu-system-x86_64
  timeout 20 "$@" -device help 2>/dev/null | grep -q '"vfio-user-pci"'
}
SYSTEM_QEMU=""
if [[ -n ${VUGPU_QEMU:-} ]]; then
  qemu_has_vfio_user "$VUGPU_QEMU" || die "VUGPU_QEMU=$VUGPU_QEMU has no vfio-user-pci device"
  SYSTEM_QEMU=$VUGPU_QEMU
elif command -v qemu-system-x86_64 >/dev/null && qemu_has_vfio_user qemu-system-x86_64; then
  SYSTEM_QEMU=$(command -v qemu-system-x86_64)
fi

# ---------------------------------------------------------------- rootfs
PKGS_BACKPORTS=(qemu-system-x86)
# libdw1t64 must come from backports too: qemu pulls libelf1t64 from backports, and pahole (needed by
# the headers) wants a matching libdw; without it apt reports "held broken packages".
PKGS_MAIN=(linux-image-amd64 linux-headers-amd64 busybox-static cpio zstd gcc libc6-dev make libdw1t64/trixie-backports
  # the guest Vulkan driver's build and the application layer (vkapp step): the Khronos loader,
  # vulkaninfo, the validation layers, and VkFFT with FFTW for the second application
  libvulkan-dev libvulkan1 vulkan-tools vulkan-validationlayers libvkfft-dev glslang-dev spirv-tools libfftw3-dev)
[[ -n $SYSTEM_QEMU ]] && PKGS_BACKPORTS=()
ROOTFS_KEY=$(printf '%s\n' "$RECIPE" "$SUITE" "$MIRROR" "${PKGS_BACKPORTS[*]}" "${PKGS_MAIN[*]}" | hash_stdin)

build_rootfs() {
  local tmp=$CACHE/rootfs.new
  if ! command -v debootstrap >/dev/null; then
    timed "apt-get install debootstrap (host)" run_logged host-apt bash -c 'DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap'
  fi
  safe_rm "$tmp"
  timed "debootstrap --variant=minbase $SUITE" run_logged debootstrap \
    debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR"
  cat >"$tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
deb $MIRROR $SUITE-backports main
EOF
  # Never start services inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"; chmod +x "$tmp/usr/sbin/policy-rc.d"
  mount_chroot "$tmp"
  local env=(env DEBIAN_FRONTEND=noninteractive INITRD=No)
  timed "apt-get update (chroot)" run_logged apt-update chroot "$tmp" apt-get update -qq
  if ((${#PKGS_BACKPORTS[@]})); then
    timed "install ${PKGS_BACKPORTS[*]} from $SUITE-backports" run_logged apt-qemu \
      chroot "$tmp" "${env[@]}" apt-get install -y -q --no-install-recommends -t "$SUITE-backports" "${PKGS_BACKPORTS[@]}"
  fi
  timed "install kernel, headers, busybox, toolchain" run_logged apt-main \
    chroot "$tmp" "${env[@]}" apt-get install -y -q --no-install-recommends "${PKGS_MAIN[@]}"
  chroot "$tmp" apt-get clean
  # The distro initrd is never used (we boot our own initramfs).
  rm -f "$tmp"/boot/initrd.img-*
  unmount_all
  safe_rm "$ROOTFS"
  mv "$tmp" "$ROOTFS"
}

step rootfs "$ROOTFS_KEY" build_rootfs "$ROOTFS/usr/bin/busybox"

# ---------------------------------------------------------------- kernel
KREL=$(kernel_release "$ROOTFS")
[[ -n $KREL ]] || die "no kernel with matching headers in $ROOTFS (looked for /boot/vmlinuz-* + /usr/src/linux-headers-*)"
VMLINUX=$CACHE/vmlinux-$KREL
KERNEL_KEY=$( { echo "$RECIPE"; stat -c '%n %s %Y' "$ROOTFS/boot/vmlinuz-$KREL"; hash_files "$REPO" scripts/extract-vmlinux.sh; } | hash_stdin)
build_kernel() {
  bash "$REPO/scripts/extract-vmlinux.sh" "$ROOTFS/boot/vmlinuz-$KREL" "$VMLINUX.tmp" "$ROOTFS"
  mv "$VMLINUX.tmp" "$VMLINUX"
}
step kernel "$KERNEL_KEY" build_kernel "$VMLINUX"

# ---------------------------------------------------------------- guest components
GUEST_STAGE=$CACHE/guest-out          # what the components produced, laid out as in the initramfs
BUILD_IN_CHROOT=/var/tmp/vugpu-build  # component sources are copied here inside the rootfs
mapfile -t GUEST_FILES < <(guest_source_files "$REPO")
GUEST_KEY=$( { echo "$RECIPE $KREL"; hash_files "$REPO" "${GUEST_FILES[@]}" scripts/build-guest.sh; } | hash_stdin)
build_guest() {
  local build=$ROOTFS$BUILD_IN_CHROOT
  safe_rm "$build"; mkdir -p "$build"
  # Copy the sources (never build in the repo: outputs would be root-owned and kernel-specific).
  printf '%s\0' "${GUEST_FILES[@]}" | tar -C "$REPO" --null -T - -cf - | tar -C "$build" -xf -
  cp "$REPO/scripts/build-guest.sh" "$build/build-guest.sh"
  mount_chroot "$ROOTFS"
  run_logged guest-build chroot "$ROOTFS" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    KREL="$KREL" KDIR="/usr/src/linux-headers-$KREL" \
    sh "$BUILD_IN_CHROOT/build-guest.sh" "$BUILD_IN_CHROOT/guest" "$BUILD_IN_CHROOT/out" ||
    die "guest build failed (full log: $LOGS/guest-build.log)"
  unmount_all
  safe_rm "$GUEST_STAGE"
  mv "$build/out" "$GUEST_STAGE"
  safe_rm "$build"
  sed 's/^/    /' "$GUEST_STAGE/.built" 2>/dev/null || true
}
step guest "$GUEST_KEY" build_guest "$GUEST_STAGE/.built"

# ---------------------------------------------------------------- guest programs (SPIR-V)
# The sample programs (guest/programs/*.comp) and the built-ins' GPU forms
# (native/shaders/builtins/*.comp), compiled on the host by scripts/build-spirv.sh (glslang is a
# host tool, not in the rootfs) and shipped as /programs/<name>.spv and /programs/builtins/<name>.spv.
SPIRV_STAGE=$CACHE/spirv-out
mapfile -t SPIRV_FILES < <(spirv_source_files "$REPO")
SPIRV_KEY=$( { echo "$RECIPE"; glslangValidator --version 2>/dev/null | head -1;
  hash_files "$REPO" "${SPIRV_FILES[@]}" scripts/build-spirv.sh; } | hash_stdin)
build_spirv() {
  local src name dst
  command -v glslangValidator >/dev/null && command -v spirv-val >/dev/null ||
    die "glslangValidator/spirv-val missing (scripts/ensure-deps.sh installs glslang-tools, spirv-tools)"
  run_logged spirv bash "$REPO/scripts/build-spirv.sh" || die "SPIR-V build failed (full log: $LOGS/spirv.log)"
  safe_rm "$SPIRV_STAGE.new"
  mkdir -p "$SPIRV_STAGE.new/programs/builtins"
  # only modules whose source still exists (build/spirv may hold stale ones)
  for src in "${SPIRV_FILES[@]}"; do
    [[ $src == *.comp ]] || continue
    case $src in
      guest/programs/*.comp) dst=programs ;;
      native/shaders/builtins/*.comp) dst=programs/builtins ;;
      *) continue ;;
    esac
    name=$(basename "$src" .comp)
    cp "$REPO/build/spirv/${src%.comp}.spv" "$SPIRV_STAGE.new/$dst/$name.spv"
  done
  (cd "$SPIRV_STAGE.new" && find . -name '*.spv' | sort) >"$SPIRV_STAGE.new/.built"
  safe_rm "$SPIRV_STAGE"
  mv "$SPIRV_STAGE.new" "$SPIRV_STAGE"
  say "  $(wc -l <"$SPIRV_STAGE/.built") modules in /programs"
}
step spirv "$SPIRV_KEY" build_spirv "$SPIRV_STAGE/.built"

# ---------------------------------------------------------------- kernel modules for the initramfs
# The application layer is a disk (virtio-blk, squashfs); the guest kernel has both as modules and
# the initramfs has no module loading of its own, so the two .ko files ship decompressed.
KMOD_STAGE=$CACHE/kmod-out
KMODS=(kernel/drivers/block/virtio_blk.ko.xz kernel/fs/squashfs/squashfs.ko.xz)
KMOD_KEY=$(printf '%s\n' "$RECIPE" "$KREL" "${KMODS[@]}" | hash_stdin)
build_kmod() {
  local m
  safe_rm "$KMOD_STAGE.new"
  mkdir -p "$KMOD_STAGE.new/opt/vugpu/kmod"
  for m in "${KMODS[@]}"; do
    xz -dc "$ROOTFS/usr/lib/modules/$KREL/$m" >"$KMOD_STAGE.new/opt/vugpu/kmod/$(basename "$m" .xz)"
  done
  touch "$KMOD_STAGE.new/.built"
  safe_rm "$KMOD_STAGE"
  mv "$KMOD_STAGE.new" "$KMOD_STAGE"
}
step kmod "$KMOD_KEY" build_kmod "$KMOD_STAGE/.built"

# ---------------------------------------------------------------- initramfs
INITRAMFS=$CACHE/initramfs.cpio.gz
INIT_KEY=$( { echo "$GUEST_KEY $SPIRV_KEY $KMOD_KEY"; hash_files "$REPO" guest/initramfs/init guest/initramfs/test.sh scripts/mkinitramfs.sh;
  stat -c '%s %Y' "$ROOTFS/bin/busybox"; } | hash_stdin)
build_initramfs() {
  bash "$REPO/scripts/mkinitramfs.sh" "$ROOTFS/bin/busybox" "$REPO/guest/initramfs" "$GUEST_STAGE" "$INITRAMFS.tmp" "$SPIRV_STAGE" "$KMOD_STAGE"
  mv "$INITRAMFS.tmp" "$INITRAMFS"
  say "  $(du -h "$INITRAMFS" | cut -f1) $INITRAMFS"
}
step initramfs "$INIT_KEY" build_initramfs "$INITRAMFS"

# ---------------------------------------------------------------- application layer (vkapp)
# A read-only disk image the guest mounts to run unmodified applications (guest/vkapp/vkapp.sh):
# the rootfs's trixie userland (loader, vulkaninfo, validation layers, VkFFT) without what only
# building needs, the pinned Node, node-llama-cpp's prebuilt Vulkan and CPU builds
# (scripts/llama-deps.sh) and the generated models. Too large for the initramfs, which every
# guest loads into RAM; a disk is read on demand.
VKAPP=$CACHE/vkapp.squashfs
NODE_BIN=$(readlink -f "$REPO/node_modules/.bin/node")
VKAPP_KEY=$( { echo "$RECIPE $ROOTFS_KEY"; "$NODE_BIN" --version; hash_files "$REPO" scripts/llama-deps.sh bench/lib/gguf.ts; } | hash_stdin)
build_vkapp() {
  local stage=$CACHE/vkapp.stage llama
  command -v mksquashfs >/dev/null || die "mksquashfs missing (scripts/ensure-deps.sh installs squashfs-tools)"
  llama=$(bash "$REPO/scripts/llama-deps.sh") || die "installing node-llama-cpp failed"
  safe_rm "$stage"
  # hard links, not copies: the stage only ever loses or gains whole files
  cp -al "$ROOTFS" "$stage"
  rm -rf "$stage"/usr/lib/modules "$stage"/usr/src "$stage"/boot "$stage"/usr/share/qemu "$stage"/usr/share/doc \
    "$stage"/var/cache/apt "$stage"/var/lib/apt/lists "$stage"/usr/bin/qemu-* "$stage"/usr/lib/x86_64-linux-gnu/qemu \
    "$stage"$BUILD_IN_CHROOT
  mkdir -p "$stage"/opt/vugpu "$stage"/opt/node/bin "$stage"/opt/models
  cp -al "$llama" "$stage/opt/llama"
  cp "$NODE_BIN" "$stage/opt/node/bin/node"
  # the tiny model in F32: its greedy tokens are the same on llama.cpp's CPU and Vulkan backends
  "$NODE_BIN" "$REPO/bench/lib/gguf.ts" --shape tiny --type f32 --seed 1 --out "$stage/opt/models/tiny.gguf"
  run_logged vkapp mksquashfs "$stage" "$VKAPP.tmp" -noappend -comp zstd -quiet -no-progress ||
    die "building the application image failed (full log: $LOGS/vkapp.log)"
  safe_rm "$stage"
  mv "$VKAPP.tmp" "$VKAPP"
  say "  $(du -h "$VKAPP" | cut -f1) $VKAPP"
}
step vkapp "$VKAPP_KEY" build_vkapp "$VKAPP"

# ---------------------------------------------------------------- manifest
write_manifest() {
  local argv_json env_json version
  if [[ -n $SYSTEM_QEMU ]]; then
    argv_json=$(json_array "$SYSTEM_QEMU")
    env_json='{}'
    version=$("$SYSTEM_QEMU" --version | head -1)
  else
    # Run the rootfs's QEMU with the rootfs's own dynamic loader and libraries instead of chroot:
    # no mounts at run time, and socket/kernel/memfd paths are the host's own (no path aliasing).
    local ld=$ROOTFS/usr/lib64/ld-linux-x86-64.so.2 libpath
    libpath=$(rootfs_library_path "$ROOTFS")
    argv_json=$(json_array "$ld" --library-path "$libpath" "$ROOTFS/usr/bin/qemu-system-x86_64" -L "$ROOTFS/usr/share/qemu" -L "$ROOTFS/usr/share/seabios")
    env_json=$(printf '{"QEMU_MODULE_DIR":%s}' "$(json_string "$ROOTFS/usr/lib/x86_64-linux-gnu/qemu")")
    version=$(env QEMU_MODULE_DIR="$ROOTFS/usr/lib/x86_64-linux-gnu/qemu" "$ld" --library-path "$libpath" \
      "$ROOTFS/usr/bin/qemu-system-x86_64" --version | head -1)
    local probe_argv=("$ld" --library-path "$libpath" "$ROOTFS/usr/bin/qemu-system-x86_64")
    qemu_has_vfio_user env QEMU_MODULE_DIR="$ROOTFS/usr/lib/x86_64-linux-gnu/qemu" "${probe_argv[@]}" ||
      die "the rootfs QEMU ($version) does not list vfio-user-pci"
  fi
  local programs
  programs=$( { (cd "$GUEST_STAGE" && find . -type f ! -name '.built'); (cd "$SPIRV_STAGE" && find . -type f ! -name '.built'); } |
    sed 's/^\.//' | sort | json_array_stdin)
  cat >"$CACHE/manifest.json.tmp" <<EOF
{
  "format": 1,
  "qemu": { "argv": $argv_json, "env": $env_json, "version": $(json_string "$version"),
            "source": "$([[ -n $SYSTEM_QEMU ]] && echo system || echo rootfs)" },
  "kernel": $(json_string "$VMLINUX"),
  "initramfs": $(json_string "$INITRAMFS"),
  "kernelRelease": $(json_string "$KREL"),
  "rootfs": $(json_string "$ROOTFS"),
  "vkapp": $(json_string "$VKAPP"),
  "guestFiles": $programs,
  "keys": { "rootfs": "$ROOTFS_KEY", "guest": "$GUEST_KEY", "initramfs": "$INIT_KEY" }
}
EOF
  mv "$CACHE/manifest.json.tmp" "$CACHE/manifest.json"
}
MANIFEST_KEY=$( { echo "$RECIPE $ROOTFS_KEY $KERNEL_KEY $INIT_KEY $VKAPP_KEY $SYSTEM_QEMU"; hash_files "$REPO" scripts/setup.sh scripts/lib.sh; } | hash_stdin)
step manifest "$MANIFEST_KEY" write_manifest "$CACHE/manifest.json"

say "ready in $(elapsed "$T_START") s: $CACHE/manifest.json"
