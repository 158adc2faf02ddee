#!/bin/sh
# The guest side of the benchmark suite (vugpu.run=/opt/vugpu/bench-suite.sh).
#   bench-suite.sh [--pv N] [--only a:b:c] [--repeat N] [--checks] [--no-bench] [-- <vugpu-bench options>]
# Loads the driver (vugpu.ko, module parameter pv), runs each benchmark in its own process
# (one VUGPU-BENCH line each; --repeat runs each N times in a row) and, with --checks, the robustness checks (VUGPU-CHECK lines):
#   fault-reported   an MMU fault comes back to the process as an error with its address
#   kill-mid-kernel  a process SIGKILLed while its kernel runs releases everything
#   after-kill       the next process in the same guest passes
#   reload           rmmod + insmod, then a benchmark passes
#   unbind-busy      the driver is unbound (sysfs) while a process waits on a kernel: the process
#                    gets an error, not a hang; after bind a benchmark passes
# Exit status: number of failed runs and checks.
BIN=/opt/vugpu/vugpu-bench
KO=/opt/vugpu/vugpu.ko
ALL="nop loop madd mmul fmadd fmmul cpy pincpy backprop bfs hotspot lud srad srad2"
pv=0
only=""
repeat=1
checks=0
bench=1
while [ $# -gt 0 ]; do
  case "$1" in
    --pv) pv=$2; shift 2 ;;
    --only) only=$(echo "$2" | tr ':' ' '); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --checks) checks=1; shift ;;
    --no-bench) bench=0; shift ;;
    --) shift; break ;;
    *) echo "VUGPU-ERROR {\"error\":\"bench-suite: unknown argument $1\"}"; exit 2 ;;
  esac
done
fails=0

check() { # name ok(0/1) detail
  if [ "$2" = 1 ]; then ok=true; else ok=false; fails=$((fails + 1)); fi
  echo "VUGPU-CHECK {\"check\":\"$1\",\"ok\":$ok,\"detail\":\"$3\"}"
}

field() { # json key -> number
  echo "$1" | grep -o "\"$2\":[0-9]*" | head -1 | cut -d: -f2
}

load() {
  if ! insmod "$KO" pv="$pv" 2>/tmp/insmod.err; then
    echo "VUGPU-ERROR {\"error\":\"insmod vugpu.ko failed: $(tr '\n"' ' ' </tmp/insmod.err)\"}"
    return 1
  fi
  [ -c /dev/vugpu0 ] || { echo "VUGPU-ERROR {\"error\":\"no /dev/vugpu0 after insmod\"}"; return 1; }
}

load || exit 1
echo "VUGPU-PHASE {\"phase\":\"driver-loaded\",\"pv\":$pv}"
base=$($BIN info)
echo "$base"

if [ $bench = 1 ]; then
  for b in ${only:-$ALL}; do
    n=0
    while [ $n -lt "$repeat" ]; do
      $BIN "$b" "$@" || fails=$((fails + 1))
      n=$((n + 1))
    done
  done
fi

if [ $checks = 1 ]; then
  $BIN fault || fails=$((fails + 1))

  # SIGKILL in the middle of a kernel: LOOP for 4 s, killed after it started running
  $BIN loop --ms 4000 >/tmp/loop.out 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 100 ] && ! grep -q '"phase":"exec"' /tmp/loop.out; do sleep 0.1; i=$((i + 1)); done
  sleep 1
  running=0
  grep -q '"phase":"exec"' /tmp/loop.out && ! grep -q VUGPU-BENCH /tmp/loop.out && running=1
  kill -9 $pid
  wait $pid
  rc=$?
  after=$($BIN info)
  echo "$after"
  ok=0
  if [ $running = 1 ] && [ $rc = 137 ] && [ "$(field "$after" contexts)" = 0 ] &&
     [ "$(field "$after" channels_active)" = 0 ] &&
     [ "$(field "$after" vram_used)" = "$(field "$base" vram_used)" ]; then ok=1; fi
  check kill-mid-kernel $ok "rc $rc, kernel running $running, contexts $(field "$after" contexts), channels $(field "$after" channels_active), vram_used $(field "$after" vram_used) (before $(field "$base" vram_used))"
  out=$($BIN madd "$@")
  echo "$out"
  case "$out" in *'"ok":true'*) ok=1 ;; *) ok=0 ;; esac
  check after-kill $ok "madd in the same guest after the kill"

  ok=0
  if rmmod vugpu && load; then
    out=$($BIN madd "$@")
    echo "$out"
    case "$out" in *'"ok":true'*) ok=1 ;; esac
  fi
  check reload $ok "rmmod + insmod, then madd"

  bdf=""
  for d in /sys/bus/pci/drivers/vugpu/0000:*; do [ -e "$d" ] && bdf=${d##*/}; done
  $BIN loop --ms 3000 >/tmp/loop2.out 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 100 ] && ! grep -q '"phase":"exec"' /tmp/loop2.out; do sleep 0.1; i=$((i + 1)); done
  sleep 0.5
  ok=0
  err=""
  if [ -n "$bdf" ] && echo "$bdf" >/sys/bus/pci/drivers/vugpu/unbind; then
    wait $pid
    rc=$?
    err=$(grep -o '"error":"[A-Z_]*"' /tmp/loop2.out | cut -d'"' -f4)
    gone=1
    [ -e /dev/vugpu0 ] && gone=0
    if echo "$bdf" >/sys/bus/pci/drivers/vugpu/bind; then
      out=$($BIN madd "$@")
      echo "$out"
      case "$out" in *'"ok":true'*) [ $rc != 0 ] && [ "$err" = VG_ERROR_NO_DEVICE ] && [ $gone = 1 ] && ok=1 ;; esac
    fi
  else
    kill -9 $pid 2>/dev/null
    wait $pid
  fi
  check unbind-busy $ok "device $bdf unbound mid-kernel: process error ${err:-none} (rc ${rc:-?}); bound again, then madd"
fi

if [ $fails != 0 ]; then
  echo "--- kernel log (vugpu) ---"
  dmesg | grep -i -e vugpu -e 1de5 | tail -40
fi
echo "VUGPU-PHASE {\"phase\":\"suite-done\",\"failures\":$fails}"
exit $fails
