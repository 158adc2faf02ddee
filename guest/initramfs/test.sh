#!/bin/sh
# Default guest program (no vugpu.run= given): report the PCI devices the guest sees.
for d in /sys/bus/pci/devices/*; do
  echo "VUGPU-PCI {\"slot\":\"${d##*/}\",\"vendor\":\"$(cat "$d/vendor")\",\"device\":\"$(cat "$d/device")\",\"class\":\"$(cat "$d/class")\"}"
done
