# Sourced by the bundle's bin/* launchers (scripts/bundle.sh copies it to libexec/) with B set to
# the bundle's root. Makes the bundle self-contained on a bare glibc host:
#   LD_LIBRARY_PATH  the bundle's lib/ first (OpenBLAS + gfortran for the addon; Debian 12's
#                    Vulkan loader and glvnd, which the addon dlopens), then the NVIDIA driver's own
#                    directories when they exist
#   VK_DRIVER_FILES  the NVIDIA ICD when it exists and no ICD was chosen (VK_DRIVER_FILES or the
#                    older VK_ICD_FILENAMES): the loader would not look under /usr/local/nvidia
#   VUGPU_CACHE      when the bundle carries QEMU (--with-qemu): a manifest.json naming the bundle's
#                    QEMU, kernel and initramfs where the bundle was unpacked (src/vm/manifest.ts)
# VUGPU_NVIDIA_ROOT (default /usr/local/nvidia) says where the driver lives.

vugpu_path_add() { # $1 = variable value, $2 = dir, $3 = front|back → new value on stdout
  case ":$1:" in
    *":$2:"*) printf '%s' "$1" ;;
    *) if [ -z "$1" ]; then printf '%s' "$2"; elif [ "$3" = front ]; then printf '%s:%s' "$2" "$1"; else printf '%s:%s' "$1" "$2"; fi ;;
  esac
}

LD_LIBRARY_PATH=$(vugpu_path_add "${LD_LIBRARY_PATH:-}" "$B/lib" front)
VUGPU_NVIDIA_ROOT=${VUGPU_NVIDIA_ROOT:-/usr/local/nvidia}
for vugpu_d in "$VUGPU_NVIDIA_ROOT/lib64" "$VUGPU_NVIDIA_ROOT/lib"; do
  [ -d "$vugpu_d" ] && LD_LIBRARY_PATH=$(vugpu_path_add "$LD_LIBRARY_PATH" "$vugpu_d" back)
done
export LD_LIBRARY_PATH
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -z "${VK_ICD_FILENAMES:-}" ] &&
   [ -f "$VUGPU_NVIDIA_ROOT/share/vulkan/icd.d/nvidia_icd.json" ]; then
  export VK_DRIVER_FILES="$VUGPU_NVIDIA_ROOT/share/vulkan/icd.d/nvidia_icd.json"
fi
if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$VUGPU_NVIDIA_ROOT/share/glvnd/egl_vendor.d/10_nvidia.json" ]; then
  export __EGL_VENDOR_LIBRARY_FILENAMES="$VUGPU_NVIDIA_ROOT/share/glvnd/egl_vendor.d/10_nvidia.json"
fi

# QEMU manifest: the template names paths as @BUNDLE@/…; write the real one once per location.
# Beside the template when the bundle is writable, else in a per-user directory under TMPDIR.
if [ -z "${VUGPU_CACHE:-}" ] && [ -f "$B/guest/manifest.template.json" ]; then
  case $B in
    *'"'* | *'\'* | *'
'*) echo "vugpu: the bundle's path ($B) cannot go into JSON: QEMU is not configured" >&2 ;;
    *)
      vugpu_esc=$(printf '%s' "$B" | sed 's/[&|]/\\&/g')
      for vugpu_c in "$B/guest" "${TMPDIR:-/tmp}/vugpu-bundle-$(id -u)"; do
        mkdir -p "$vugpu_c" 2>/dev/null || continue
        if sed "s|@BUNDLE@|$vugpu_esc|g" "$B/guest/manifest.template.json" >"$vugpu_c/manifest.json.$$" 2>/dev/null; then
          if cmp -s "$vugpu_c/manifest.json.$$" "$vugpu_c/manifest.json"; then rm -f "$vugpu_c/manifest.json.$$"
          else mv -f "$vugpu_c/manifest.json.$$" "$vugpu_c/manifest.json"; fi
          export VUGPU_CACHE="$vugpu_c"
          break
        fi
        rm -f "$vugpu_c/manifest.json.$$"
      done
      ;;
  esac
fi
unset vugpu_d vugpu_c vugpu_esc
VUGPU_NODE="$B/node/bin/node"
