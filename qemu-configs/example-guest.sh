#!/usr/bin/env bash
# Example: boot the vugpu test guest against a running vugpu server.
#   qemu-configs/example-guest.sh <socket> [guest program] [comma-separated args]
# e.g. qemu-configs/example-guest.sh /run/vugpu/gpu0.sock /opt/vugpu/foundation-test.sh --bench,20000
# Uses the QEMU, kernel and initramfs from `npm run setup` ($VUGPU_CACHE/manifest.json);
# replace QEMU=… / -kernel / -initrd with your own to attach any guest.
set -euo pipefail
sock=${1:?usage: $0 <socket> [guest program] [args]}
run=${2:-/test.sh}
args=${3:-}
manifest=${VUGPU_CACHE:-/var/cache/vugpu}/manifest.json
[[ -f $manifest ]] || { echo "no $manifest: run npm run setup first" >&2; exit 1; }
field() { python3 -c "import json,sys; m=json.load(open('$manifest')); print($1)"; }
mapfile -t QEMU < <(field "'\n'.join(m['qemu']['argv'])")
eval "$(field "'\n'.join('export %s=%s' % (k, v) for k, v in m['qemu']['env'].items())")"
mem=512M

exec timeout -s KILL 600 "${QEMU[@]}" \
  -accel tcg -cpu max -machine q35 -smp 1 -m "$mem" \
  -object memory-backend-memfd,id=mem,size="$mem",share=on -machine memory-backend=mem \
  -nographic -vga none -monitor none -serial stdio -no-reboot -net none \
  -kernel "$(field "m['kernel']")" -initrd "$(field "m['initramfs']")" \
  -append "console=ttyS0 panic=-1 quiet no_timer_check vugpu.run=$run${args:+ vugpu.args=$args}" \
  -device "{\"driver\":\"vfio-user-pci\",\"socket\":{\"path\":\"$sock\",\"type\":\"unix\"}}"
