#!/bin/sh
# Guest entry point for the foundation checks: load the diagnostic driver, then run the test
# program with the given arguments (e.g. --bench 20000). Booted with vugpu.run=/opt/vugpu/foundation-test.sh.
out=$(insmod /opt/vugpu/vugpu_diag.ko 2>&1)
rc=$?
out=$(echo "$out" | tr '"\\' "'/" | tr -d '\n')
if [ $rc -ne 0 ] || [ ! -e /dev/vugpu-diag0 ]; then
  echo "VUGPU-CHECK {\"check\":\"module-load\",\"ok\":false,\"rc\":$rc,\"detail\":\"$out\"}"
  for d in /sys/bus/pci/devices/*; do
    echo "VUGPU-PCI {\"slot\":\"${d##*/}\",\"vendor\":\"$(cat "$d/vendor")\",\"device\":\"$(cat "$d/device")\"}"
  done
  exit 1
fi
echo "VUGPU-CHECK {\"check\":\"module-load\",\"ok\":true}"
exec /opt/vugpu/foundation-test "$@"
