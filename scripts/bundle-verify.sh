#!/usr/bin/env bash
# Proves a bundle (scripts/bundle.sh) runs with nothing of this machine: unpacks it into an empty
# tmpfs inside a root filesystem that has no Node, no npm, no OpenBLAS and no Vulkan, in a private
# mount namespace (nothing is mounted for anyone else), and runs there with `env -i
# PATH=/usr/bin:/bin` and an empty HOME:
#   bin/vugpu --help, bin/vugpu --bundle-info (every file intact, every library resolves),
#   bin/vugpu-twin --list, bin/vugpu-smoke in pt and in fv (serve --engine native + the twin),
#   the Vulkan driver's libraries (twin/vulkan/), with --with-llama the Vulkan prebuilt's
#   libraries and bench/llama.ts's flag check,
#   and with --boot, when the bundle carries QEMU, a guest: vugpu demo --no-native.
#
#   scripts/bundle-verify.sh [--rootfs DIR] [--logs DIR] [--benches a,b] [--boot] ARCHIVE
#
# The root is --rootfs, else $VUGPU_CACHE/bundle-verify/noble (an Ubuntu 24.04 minbase, made once
# with `scripts/bundle-verify.sh --make-noble`: debootstrap, ~2 min), else setup's Debian trixie
# rootfs ($VUGPU_CACHE/rootfs; it has gcc but no Node, OpenBLAS or Vulkan). Needs root.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VUGPU_CACHE:-/var/cache/vugpu}
NOBLE=$CACHE/bundle-verify/noble
ROOT= LOGS= BENCHES=nop,mmul,fmmul,cpy,backprop,hotspot BOOT=0 ARCHIVE=
say() { printf '[bundle-verify] %s\n' "$*"; }
die() { printf '[bundle-verify] error: %s\n' "$*" >&2; exit 1; }
while (($#)); do
  case $1 in
    --rootfs) ROOT=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --benches) BENCHES=$2; shift 2 ;;
    --boot) BOOT=1; shift ;;
    --make-noble)
      # Ubuntu's archive key is not packaged in Debian 12: the signature cannot be checked here;
      # this root is only a test fixture for the bundle and never runs anything of its own.
      mkdir -p "$(dirname "$NOBLE")"; rm -rf "$NOBLE.new"
      debootstrap --no-check-gpg --variant=minbase noble "$NOBLE.new" http://archive.ubuntu.com/ubuntu \
        /usr/share/debootstrap/scripts/jammy
      rm -rf "$NOBLE"; mv "$NOBLE.new" "$NOBLE"; say "made $NOBLE"; exit 0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown argument $1" ;;
    *) ARCHIVE=$1; shift ;;
  esac
done
[[ -f $ARCHIVE ]] || die "no archive ${ARCHIVE:-given} (scripts/bundle.sh writes build/vugpu-bundle.tar.xz)"
ARCHIVE=$(readlink -f "$ARCHIVE")
[[ $(id -u) == 0 ]] || die "needs root (unshare -m, chroot)"
if [[ -z $ROOT ]]; then
  if [[ -x $NOBLE/usr/bin/env ]]; then ROOT=$NOBLE; elif [[ -x $CACHE/rootfs/usr/bin/env ]]; then ROOT=$CACHE/rootfs
  else die "no root filesystem: scripts/bundle-verify.sh --make-noble, or --rootfs DIR"; fi
fi
[[ -x $ROOT/usr/bin/env && -d $ROOT/tmp && -d $ROOT/proc && -d $ROOT/dev ]] || die "$ROOT is not a root filesystem"
LOGS=${LOGS:-$(mktemp -d /tmp/vugpu-bundle-verify.XXXXXX)}
mkdir -p "$LOGS"; LOGS=$(readlink -f "$LOGS")
say "root $ROOT ($(. "$ROOT/etc/os-release"; echo "$PRETTY_NAME")), logs $LOGS"

# QEMU guests are serialized machine-wide (HELPERS.md); take the lock only when booting one.
LOCK=()
((BOOT)) && LOCK=(flock /tmp/vugpu-qemu.lock)

rc=0
"${LOCK[@]}" unshare -m --propagation private bash -s -- "$ARCHIVE" "$ROOT" "$LOGS" "$BENCHES" "$BOOT" <<'INNER' || rc=$?
set -euo pipefail
archive=$1 root=$2 logs=$3 benches=$4 boot=$5
mount -t tmpfs -o size=2g,mode=1777 tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
[[ -d $root/sys ]] && mount --rbind /sys "$root/sys"   # the launcher's KVM probe reads /sys/module
mkdir -p "$root/tmp/logs" "$root/tmp/home" "$root/tmp/u"
mount --bind "$logs" "$root/tmp/logs"
tar -xJf "$archive" -C "$root/tmp/u"
B=/tmp/u/vugpu-bundle
jail() { chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp/home TMPDIR=/tmp "$@"; }
fail=0
check() { # $1 = name, rest = command in the jail
  local name=$1; shift
  if jail "$@" >"$root/tmp/logs/$name.txt" 2>&1; then echo "  ok      $name"; else echo "  FAILED  $name (exit $?):"; tail -n 15 "$root/tmp/logs/$name.txt" | sed 's/^/    /'; fail=1; fi
}
echo "  inside: $(jail sh -c 'command -v node || echo "no node"; command -v npm || echo "no npm"' | tr '\n' ' '); foreign libraries in the root: $(jail sh -c 'ls /usr/lib/x86_64-linux-gnu /usr/lib64 2>/dev/null | grep -E "openblas|gfortran|vulkan|EGL|GLdispatch" | tr "\n" " "' || true)"
check help sh -c "$B/bin/vugpu --help 2>&1 | grep -q '^usage:' && $B/bin/vugpu --help"
check bundle-info "$B/bin/vugpu" --bundle-info
check twin-list "$B/bin/vugpu-twin" --list
check smoke-pt "$B/bin/vugpu-smoke" --engine native --mode pt --benches "$benches" --out /tmp/logs
check smoke-fv "$B/bin/vugpu-smoke" --engine native --mode fv --benches "$benches" --out /tmp/logs
grep -h '^  [a-z0-9]* *\(ok\|FAILED\)' "$root/tmp/logs/smoke-pt.txt" "$root/tmp/logs/smoke-fv.txt" 2>/dev/null | sed 's/^/    /' || true
if [[ -f $root$B/twin/vulkan/libvulkan_vugpu.so ]]; then
  # the vugpu Vulkan driver for host processes: everything it links resolves in a bare root
  check vulkan-driver sh -c "ldd $B/twin/vulkan/libvulkan_vugpu.so && ! ldd $B/twin/vulkan/libvulkan_vugpu.so | grep 'not found'"
fi
if [[ -d $root$B/llama/node_modules/node-llama-cpp ]]; then
  # --with-llama: the Vulkan prebuilt's libraries resolve with the bundle's lib/ (its Vulkan
  # loader), and bench:llama loads (a bad flag: one sentence, exit 2)
  lb=$B/llama/node_modules/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan
  check llama-libs sh -c "B=$B; . $B/libexec/vugpu-env.sh; for f in $lb/*.node $lb/*.so; do ldd \$f | grep 'not found' && exit 1; done; echo resolved"
  check llama-bench sh -c "$B/bin/vugpu-node $B/bench/llama.ts --bogus 2>&1; test \$? = 2"
fi
if [[ -f $root$B/guest/manifest.template.json ]]; then
  # The QEMU exactly as src/vm runs it: the manifest the launcher wrote, loaded by src/vm/manifest.ts.
  check qemu-manifest "$B/bin/vugpu-node" -e "import('$B/src/vm/manifest.ts').then((m) => {
    const x = m.loadManifest(); console.log(JSON.stringify(x, null, 1));
    const r = require('child_process').spawnSync(x.qemu.argv[0], [...x.qemu.argv.slice(1), '--version'],
      { env: { ...process.env, ...x.qemu.env }, encoding: 'utf8' });
    console.log(r.stdout, r.stderr); process.exit(r.status === 0 && /QEMU emulator/.test(r.stdout) ? 0 : 1); })"
  if [[ $boot == 1 ]]; then
    check boot-demo "$B/bin/vugpu" demo --no-native --only nop,mmul,backprop --repeat 1 --no-json
  fi
fi
exit $fail
INNER
((rc == 0)) && say "PASSED (logs in $LOGS)" || say "FAILED (logs in $LOGS)"
exit $rc
