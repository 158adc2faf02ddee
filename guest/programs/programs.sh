#!/bin/sh
# Guest entry point of the program checks (vugpu.run=/bin/sh, vugpu.args=/opt/vugpu/programs.sh,…):
#   programs.sh [--pv N] [vugpu-programs options]   one vugpu-programs run (see run.c)
#   programs.sh suite [--pv N] [--repeat N]         the guest program suite: the samples (N rounds),
#       --check-limits, a short spin and one past the loop limit, then the benchmarks that launch
#       kernels, as programs (vugpu-bench --programs /programs/builtins)
#   programs.sh attacker [--endless N] [hostile.sh attack options]   the isolation scenario's
#       attacker (test/integration/neighbour.test.ts): the endless program N times (default 2)
#       through the driver, then the driver let go and the program attacks from no driver
#       (hostile.sh attack --only baseline:programs:legit-after plus the options given)
# Loads the driver first (vugpu.ko, module parameter pv). vugpu.args splits on commas: --only
# lists use ':'. Exit status: failed runs.
KO=/opt/vugpu/vugpu.ko
RUN=/opt/vugpu/vugpu-programs
BENCH=/opt/vugpu/vugpu-bench
KERNEL_BENCHES="nop loop madd mmul fmadd fmmul backprop bfs hotspot lud srad srad2"
suite=0
pv=0
repeat=1
endless=
if [ "$1" = suite ]; then
  suite=1
  shift
elif [ "$1" = attacker ]; then
  endless=2
  shift
  if [ "$1" = --endless ]; then
    endless=$2
    shift 2
  fi
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --pv) pv=$2; shift 2 ;;
    --repeat) [ $suite = 1 ] || break; repeat=$2; shift 2 ;;
    *) break ;;
  esac
done
if ! insmod "$KO" pv="$pv" 2>/tmp/insmod.err; then
  echo "VUGPU-ERROR {\"error\":\"insmod vugpu.ko failed: $(tr '\n"' ' ' </tmp/insmod.err)\"}"
  exit 1
fi
echo "VUGPU-PHASE {\"phase\":\"driver-loaded\",\"pv\":$pv}"
if [ -n "$endless" ]; then
  $RUN --endless "$endless"
  rc=$?
  echo "VUGPU-PHASE {\"phase\":\"endless-done\",\"rc\":$rc}"
  # vugpu-hostile unbinds the device from vugpu.ko itself
  /bin/sh /opt/vugpu/hostile.sh attack --only baseline:programs:legit-after "$@"
  exit $((rc + $?))
fi
if [ $suite = 0 ]; then
  $RUN "$@"
  rc=$?
  echo "VUGPU-PHASE {\"phase\":\"programs-done\",\"rc\":$rc}"
  exit $rc
fi
fails=0
$RUN --repeat "$repeat" || fails=$((fails + 1))
$RUN --check-limits || fails=$((fails + 1))
$RUN --spin 1000 || fails=$((fails + 1))
$RUN --spin 4294967295 || fails=$((fails + 1))
for b in $KERNEL_BENCHES; do
  $BENCH "$b" --programs /programs/builtins || fails=$((fails + 1))
done
echo "VUGPU-PHASE {\"phase\":\"programs-done\",\"failures\":$fails}"
exit $fails
