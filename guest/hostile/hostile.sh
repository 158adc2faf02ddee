#!/bin/sh
# Guest entry point of the isolation tests (vugpu.run=/bin/sh, vugpu.args=/opt/vugpu/hostile.sh,...):
#   hostile.sh attack [vugpu-hostile options]   take the GPU without a driver and attack (no vugpu.ko)
#   hostile.sh flood-bursts [options]            bench/flood.ts's attacker: program module flood bursts
#   hostile.sh scan                              check that this VM's VRAM is all zeros
#   hostile.sh scan-suite [bench-suite options]  scan first, then the benchmark suite (loads vugpu.ko)
# vugpu.args splits on commas: --only lists use ':'.
BIN=/opt/vugpu/vugpu-hostile
cmd=$1
[ $# -gt 0 ] && shift
case "$cmd" in
  attack) exec $BIN attack "$@" ;;
  flood-bursts) exec $BIN flood-bursts "$@" ;;
  scan) exec $BIN scan ;;
  scan-suite)
    $BIN scan
    rc=$?
    /bin/sh /opt/vugpu/bench-suite.sh "$@"
    exit $((rc + $?)) ;;
  *) echo "VUGPU-ERROR {\"error\":\"hostile.sh: unknown command $cmd\"}"; exit 2 ;;
esac
