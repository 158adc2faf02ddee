# Helpers for scripts/setup.sh (sourced; bash). Expects CACHE, STAMPS, LOGS to be set.

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# timed "description" cmd...: one progress line per sub-step, with its wall time.
timed() {
  local desc=$1 t0; shift
  t0=$(now)
  say "  $desc ..."
  "$@"
  say "  $desc: done in $(elapsed "$t0") s"
}

# run_logged name cmd...: output goes to $LOGS/name.log (streamed too with VUGPU_SETUP_VERBOSE=1);
# on failure the tail of the log is shown.
run_logged() {
  local name=$1 log=$LOGS/$1.log rc=0; shift
  if [[ ${VUGPU_SETUP_VERBOSE:-0} == 1 ]]; then
    "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  else
    "$@" >"$log" 2>&1 || rc=$?
  fi
  if ((rc != 0)); then
    printf '[setup] command failed (exit %d): %s\n' "$rc" "$*" >&2
    tail -n 40 "$log" | sed 's/^/    | /' >&2
    printf '[setup] full log: %s\n' "$log" >&2
    return "$rc"
  fi
}

# step name key fn [outputs...]: run fn unless the stamp holds key and every output exists.
step() {
  local name=$1 key=$2 fn=$3 t0 out; shift 3
  local stamp=$STAMPS/$name
  if [[ -f $stamp && $(<"$stamp") == "$key" ]]; then
    local missing=0
    for out in "$@"; do [[ -e $out ]] || missing=1; done
    if ((missing == 0)); then
      say "$name: cached (${key:0:12})"
      return 0
    fi
  fi
  rm -f "$stamp"
  t0=$(now)
  say "$name: building (${key:0:12})"
  "$fn"
  echo "$key" >"$stamp"
  say "$name: done in $(elapsed "$t0") s"
}

hash_stdin() { sha256sum | cut -c1-64; }

# hash_files repo relpath...: content hash of files (names included), order-independent.
hash_files() {
  local repo=$1; shift
  (cd "$repo" && for f in "$@"; do [[ -f $f ]] && printf '%s %s\n' "$(sha256sum <"$f" | cut -c1-64)" "$f"; done) |
    sort | hash_stdin
}

# The guest component sources: everything in guest/<component>/ except the init scripts and build outputs
# (git's ignore rules when this is a checkout).
guest_source_files() {
  local repo=$1
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$repo" ls-files -co --exclude-standard -- guest
  else
    (cd "$repo" && find guest -type f ! -name '*.o' ! -name '*.ko' ! -name '*.mod*' ! -name '.*.cmd')
  fi | grep '^guest/[^/]*/' | grep -v '^guest/initramfs/' | while IFS= read -r f; do [[ -f $repo/$f ]] && echo "$f"; done | sort -u
}

# Sources of the SPIR-V modules the image ships (scripts/build-spirv.sh compiles them): the
# shaders and their includes.
spirv_source_files() {
  local repo=$1
  (cd "$repo" && find guest/programs native/shaders -type f \( -name '*.comp' -o -name '*.glsl' \) 2>/dev/null) | LC_ALL=C sort
}

# ---------------------------------------------------------------- mounts
# Every mount made here is recorded and undone by unmount_all (trap EXIT in setup.sh).
MOUNTED=()
mount_one() { # mount args... ; last arg is the mount point
  local target=${*: -1}
  # Already mounted: left by a run that was SIGKILLed (setup holds the cache lock, so no live
  # setup owns it). Adopt it so that it is unmounted on exit like our own.
  mountpoint -q "$target" || mount "$@"
  MOUNTED+=("$target")
}
mount_chroot() {
  local root=$1
  mount_one -t proc proc "$root/proc"
  mount_one --bind /dev "$root/dev"
  mkdir -p "$root/dev/pts"
  mount_one --bind /dev/pts "$root/dev/pts"
  mount_one --bind /sys "$root/sys"
  # /sys must not carry host submounts (cgroup, debugfs...) into the chroot.
  mount --make-rslave "$root/sys" 2>/dev/null || true
}
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null ||
      printf '[setup] WARNING: could not unmount %s\n' "${MOUNTED[i]}" >&2
  done
  MOUNTED=()
}

# Mount points at or below a path (deepest first), from this process's mount table.
mounts_under() {
  local p
  p=$(realpath -m "$1")
  awk -v p="$p" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

# safe_rm dir: rm -rf that first unmounts anything mounted below dir (e.g. left by a killed run)
# and refuses to proceed while a mount remains: rm -rf through a bind mount would delete host files.
safe_rm() {
  local dir=$1 m
  [[ -e $dir ]] || return 0
  for m in $(mounts_under "$dir"); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  if [[ -n $(mounts_under "$dir") ]]; then
    die "refusing to delete $dir: still mounted below it: $(mounts_under "$dir" | tr '\n' ' ')"
  fi
  rm -rf --one-file-system "$dir"
}

# ---------------------------------------------------------------- rootfs facts
# The newest kernel in the rootfs that has matching headers.
kernel_release() {
  local root=$1 k rel
  for k in "$root"/boot/vmlinuz-*; do
    [[ -f $k ]] || continue
    rel=${k##*/vmlinuz-}
    [[ -d $root/usr/src/linux-headers-$rel ]] && echo "$rel"
  done | sort -V | tail -n 1
}

# The rootfs's library search path (its ld.so.conf.d, made absolute on the host).
rootfs_library_path() {
  local root=$1 dirs=() d real seen=" "
  while IFS= read -r d; do
    [[ -d $root$d ]] || continue
    real=$(realpath "$root$d")
    [[ $seen == *" $real "* ]] && continue
    seen+="$real "
    dirs+=("$real")
  done < <(cat "$root"/etc/ld.so.conf.d/*.conf 2>/dev/null | sed 's/#.*//' | awk '$1 ~ /^\// { print $1 }'
           printf '%s\n' /usr/lib/x86_64-linux-gnu /usr/lib)
  local IFS=:
  echo "${dirs[*]}"
}

# ---------------------------------------------------------------- JSON
json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
json_array() {
  local out="" s
  for s in "$@"; do out+="${out:+, }$(json_string "$s")"; done
  printf '[%s]' "$out"
}
json_array_stdin() { local a=(); mapfile -t a; json_array "${a[@]}"; }
