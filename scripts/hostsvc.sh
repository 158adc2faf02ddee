#!/usr/bin/env bash
# A real systemd (and libvirtd) for the service tests: the project's trixie rootfs
# ($VUGPU_CACHE/rootfs, made by setup.sh) booted as a container — systemd as PID 1 of new pid,
# mount, uts, ipc and cgroup namespaces, on a throwaway overlay (the cached rootfs is never
# written). Needs root and cgroup2 (no host systemd, no systemd-nspawn). Facts and traps:
# ../shared/notes/hostsvc.md.
#
#   hostsvc.sh layer          build or reuse the cached package layer $CACHE/hostsvc (libvirt,
#                             the addon's libraries): an overlay upper dir over the rootfs
#   hostsvc.sh start DIR      boot a container whose state lives in DIR (created; must not exist
#                             or be empty); prints the host pid of its init; the checkout is
#                             bind-mounted read-only at /opt/vugpu, the cache at its own path
#   hostsvc.sh exec DIR CMD…  run CMD inside (all namespaces, the container's root), PATH set
#   hostsvc.sh stop DIR       power it off (SIGKILL after 20 s), remove its cgroup and DIR
#
# Callers that boot QEMU or containers hold /tmp/vugpu-qemu.lock (this script takes no lock).
set -euo pipefail

REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
CACHE=${VUGPU_CACHE:-/var/cache/vugpu}
ROOTFS=$CACHE/rootfs
LAYER=$CACHE/hostsvc
STAMPS=$CACHE/stamps
LOGS=$CACHE/logs
# Bump when the layer's recipe changes.
LAYER_RECIPE=1
LAYER_PKGS=(libvirt-daemon-system libvirt-clients libopenblas0-pthread)
CGROOT=/sys/fs/cgroup/unified
[[ -f $CGROOT/cgroup.procs ]] || CGROOT=/sys/fs/cgroup

# shellcheck source=scripts/lib.sh
source "$REPO/scripts/lib.sh"

[[ $(id -u) == 0 ]] || die "hostsvc.sh needs root (mounts, namespaces)"
trap 'unmount_all' EXIT

layer() {
  [[ -x $ROOTFS/usr/lib/systemd/systemd ]] || die "no systemd in $ROOTFS: run scripts/setup.sh first"
  mkdir -p "$STAMPS" "$LOGS"
  local key
  key=$( { echo "$LAYER_RECIPE ${LAYER_PKGS[*]}"; cat "$STAMPS/rootfs" 2>/dev/null; } | hash_stdin)
  exec 8>"$CACHE/.hostsvc.lock"
  flock 8
  step hostsvc-layer "$key" build_layer "$LAYER/upper/usr/sbin/libvirtd"
}

build_layer() {
  local tmp=$LAYER.new
  safe_rm "$tmp"
  mkdir -p "$tmp/upper" "$tmp/work" "$tmp/mnt"
  mount_one -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/mnt"
  mount_chroot "$tmp/mnt"
  # Name resolution for apt inside the chroot (the rootfs has no resolv.conf of its own).
  cp -L /etc/resolv.conf "$tmp/mnt/etc/resolv.conf"
  local env=(env DEBIAN_FRONTEND=noninteractive)
  timed "apt-get update (layer)" run_logged hostsvc-apt-update chroot "$tmp/mnt" apt-get update -qq
  timed "install ${LAYER_PKGS[*]}" run_logged hostsvc-apt chroot "$tmp/mnt" "${env[@]}" \
    apt-get install -y -q --no-install-recommends "${LAYER_PKGS[@]}"
  chroot "$tmp/mnt" apt-get clean
  rm -f "$tmp/mnt/etc/resolv.conf"
  unmount_all
  safe_rm "$LAYER"
  mkdir -p "$LAYER"
  mv "$tmp/upper" "$LAYER/upper"
  safe_rm "$tmp"
}

start() {
  local dir=$1
  [[ -d $LAYER/upper ]] || die "no package layer: run scripts/hostsvc.sh layer first"
  mkdir -p "$dir"
  [[ -z $(ls -A "$dir") ]] || die "$dir is not empty"
  dir=$(realpath "$dir")
  mkdir -p "$dir/upper" "$dir/work" "$dir/root"
  local name cg
  name=vugpu-ct-$(basename "$dir")
  cg=$CGROOT/$name
  mkdir -p "$cg"
  echo "$cg" >"$dir/cgroup"
  # Units that need a real console or hardware stay off.
  local etc=$dir/upper/etc/systemd/system
  mkdir -p "$etc"
  for u in console-getty.service getty@tty1.service serial-getty@ttyS0.service systemd-firstboot.service \
           systemd-networkd.service systemd-resolved.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer; do
    ln -sf /dev/null "$etc/$u"
  done
  echo "$name" >"$dir/hostname"
  # Everything is mounted inside the container's own mount namespace: it all goes with it.
  cat >"$dir/init.sh" <<INNER
set -e
mount --make-rprivate /
R=$dir/root
mount -t overlay overlay -o lowerdir=$LAYER/upper:$ROOTFS,upperdir=$dir/upper,workdir=$dir/work \$R
mkdir -p \$R/opt/vugpu \$R$CACHE
mount --bind $REPO \$R/opt/vugpu
mount -o remount,bind,ro \$R/opt/vugpu
mount --bind $CACHE \$R$CACHE
mount -o remount,bind,ro \$R$CACHE
mount -t proc proc \$R/proc
mount -t sysfs -o ro sysfs \$R/sys
mount -t cgroup2 cgroup2 \$R/sys/fs/cgroup
mount -t tmpfs -o mode=755 tmpfs \$R/run
mount -t tmpfs -o mode=1777 tmpfs \$R/tmp
mount -t tmpfs -o mode=755 tmpfs \$R/dev
for d in null zero full random urandom tty; do touch \$R/dev/\$d; mount --bind /dev/\$d \$R/dev/\$d; done
touch \$R/dev/console
mkdir -p \$R/dev/pts \$R/dev/shm \$R/dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts \$R/dev/pts
ln -s pts/ptmx \$R/dev/ptmx
mount -t tmpfs -o mode=1777 tmpfs \$R/dev/shm
ln -s /proc/self/fd \$R/dev/fd
cp $dir/hostname \$R/etc/hostname
hostname $name
exec env -i container=unshare TERM=dumb /usr/sbin/chroot \$R /usr/lib/systemd/systemd
INNER
  # In the fresh cgroup first: the cgroup namespace makes it the container's root.
  setsid bash -c "echo \$\$ >$cg/cgroup.procs; exec unshare --pid --mount --uts --ipc --cgroup --fork bash $dir/init.sh" \
    >"$dir/console.log" 2>&1 </dev/null &
  local outer=$! init="" i p mine
  mine=$(readlink /proc/self/ns/pid)
  # The init: the descendant of $outer that is PID 1 of another pid namespace (setsid and unshare
  # exec, or fork). Not just any descendant in another namespace: init.sh's own short-lived
  # commands (mount, cp) are there too, and one taken for the init is gone a moment later.
  for ((i = 0; i < 200; i++)); do
    for p in $(pgrep -P "$outer" 2>/dev/null) $(for q in $(pgrep -P "$outer" 2>/dev/null); do pgrep -P "$q"; done); do
      if [[ $(readlink "/proc/$p/ns/pid" 2>/dev/null) != "$mine" ]] &&
        [[ $(awk '/^NSpid:/ {print $NF}' "/proc/$p/status" 2>/dev/null) == 1 ]]; then init=$p; break; fi
    done
    [[ -z $init ]] || break
    sleep 0.05
  done
  [[ -n $init ]] || die "the container did not start (see $dir/console.log)"
  echo "$init" >"$dir/init.pid"
  echo "$outer" >"$dir/outer.pid"
  echo "$init"
}

init_of() {
  local dir=$1
  [[ -f $dir/init.pid ]] || die "$dir has no running container"
  cat "$dir/init.pid"
}

in_ct() {
  local dir=$1; shift
  local pid
  pid=$(init_of "$dir")
  nsenter -t "$pid" -m -u -i -p -C -r -w env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root TERM=dumb LANG=C.UTF-8 SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 "$@"
}

stop() {
  local dir=$1 pid cg i pids
  [[ -d $dir ]] || return 0
  dir=$(realpath "$dir")
  if [[ -f $dir/init.pid ]]; then
    pid=$(cat "$dir/init.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -s SIGRTMIN+4 "$pid" 2>/dev/null || true # systemd: poweroff
      for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  if [[ -f $dir/cgroup ]]; then
    cg=$(cat "$dir/cgroup")
    # Whatever is still in the container's cgroup goes too (a unit's leftovers, or an init this
    # script misidentified), then the cgroup tree.
    for ((i = 0; i < 50; i++)); do
      [[ -d $cg ]] || break
      pids=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
      [[ -n $pids ]] || break
      kill -9 $pids 2>/dev/null || true
      sleep 0.1
    done
    [[ -d $cg ]] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  fi
  # Nothing of the container is mounted on the host; refuse to delete through a mount anyway.
  [[ -z $(mounts_under "$dir") ]] || die "still mounted below $dir"
  rm -rf --one-file-system "$dir"
}

cmd=${1:-}
shift || true
case $cmd in
  layer) layer ;;
  start) [[ $# == 1 ]] || die "usage: hostsvc.sh start DIR"; start "$1" ;;
  exec) [[ $# -ge 2 ]] || die "usage: hostsvc.sh exec DIR CMD..."; d=$1; shift; in_ct "$d" "$@" ;;
  stop) [[ $# == 1 ]] || die "usage: hostsvc.sh stop DIR"; stop "$1" ;;
  *) die "usage: hostsvc.sh layer | start DIR | exec DIR CMD... | stop DIR" ;;
esac
