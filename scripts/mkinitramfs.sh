#!/usr/bin/env bash
# Packs the guest initramfs: static busybox (every applet symlinked into /bin), the init scripts
# from guest/initramfs/, and the guest components' outputs (already laid out as in the image).
# Usage: mkinitramfs.sh <busybox binary> <guest/initramfs dir> <component output dir> <out.cpio.gz>
#                       [<more staged trees, laid out as in the image>...]
set -euo pipefail
busybox=$1 initdir=$2 stage=$3 out=$4
shift 4
root=$(mktemp -d /tmp/vugpu-initramfs.XXXXXX)
trap 'rm -rf --one-file-system "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,root,etc,opt/vugpu,usr}
ln -s bin "$root/sbin"; ln -s ../bin "$root/usr/bin"; ln -s ../bin "$root/usr/sbin"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
done
# The kernel opens /dev/console for init before devtmpfs is mounted.
mknod -m 600 "$root/dev/console" c 5 1
mknod -m 666 "$root/dev/null" c 1 3
install -m 755 "$initdir/init" "$root/init"
[[ -f $initdir/test.sh ]] && install -m 755 "$initdir/test.sh" "$root/test.sh"
for tree in "$stage" "$@"; do
  (cd "$tree" && tar --exclude=./.built -cf - .) | tar -C "$root" -xf -
done
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc 2>/dev/null) | gzip -6 >"$out"
