#!/bin/sh
# Runs INSIDE the setup rootfs (chroot; POSIX sh). Builds every guest component and collects the
# files it lists for the initramfs. Contract (see guest/README.md):
#   guest/<c>/build.sh   if present: run as `sh ./build.sh` in the component's directory, else
#   guest/<c>/Makefile   `make` in the component's directory;
#   both get KDIR (kernel headers matching the guest kernel) and KREL (its release) in the environment;
#   guest/<c>/initramfs.files  lines `<built file> [<path in the initramfs>]` (default path:
#                              /opt/vugpu/<basename>); '#' starts a comment.
# Usage: build-guest.sh <guest source dir> <output dir>
set -eu
src=$1 out=$2
: "${KDIR:?}" "${KREL:?}"
mkdir -p "$out"
: >"$out/.built"
jobs=$(nproc 2>/dev/null || echo 1)
for dir in "$src"/*/; do
  dir=${dir%/}
  c=${dir##*/}
  if [ -f "$dir/build.sh" ]; then
    echo "=== $c: build.sh"
    (cd "$dir" && KDIR=$KDIR KREL=$KREL sh ./build.sh) || { echo "=== $c: build.sh FAILED"; exit 1; }
  elif [ -f "$dir/Makefile" ]; then
    echo "=== $c: make"
    make -C "$dir" -j"$jobs" KDIR="$KDIR" KREL="$KREL" || { echo "=== $c: make FAILED"; exit 1; }
  else
    continue
  fi
  if [ ! -f "$dir/initramfs.files" ]; then
    echo "=== $c: no initramfs.files, nothing packed"
    continue
  fi
  sed 's/#.*//' "$dir/initramfs.files" | while read -r file dest; do
    [ -n "$file" ] || continue
    [ -n "$dest" ] || dest=/opt/vugpu/${file##*/}
    [ -e "$dir/$file" ] || { echo "=== $c: listed output $file was not built"; exit 1; }
    mkdir -p "$out$(dirname "$dest")"
    cp -a "$dir/$file" "$out$dest"
    echo "$c: $dest" >>"$out/.built"
  done
done
echo "=== built:"
cat "$out/.built"
