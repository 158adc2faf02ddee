#!/bin/sh
# Guest entry point of the application layer (vugpu.run=/opt/vugpu/vkapp.sh, vugpu.args=<cmd>,…):
# loads the GPU driver (pv=N with --pv N), mounts the application image (the read-only disk that
# scripts/setup.sh's vkapp step builds: a Debian trixie userland with the Khronos loader,
# vulkaninfo, the validation layers, Node and node-llama-cpp, and the models; or the offline
# bundle's tar of Node, llama.cpp and the libraries they need, which has only llama and worker)
# and runs one
# command in it, chrooted, with the initramfs's /opt/vugpu (the Vulkan driver, this runner)
# bound in. Commands:
#   vulkaninfo [args]        vulkaninfo with the vugpu ICD
#   llama <model> <gpu> <n>  llama-run.ts: greedy tokens of /opt/models/<model>.gguf (gpu: vulkan|cpu)
#   worker <model> <gpu> <ctx>
#                            llama-worker.ts: one llama.cpp process that generates on request;
#                            the requests come on the second serial port (/dev/ttyS1: the host
#                            drives when the next generation runs), one JSON line each, and it
#                            ends at ^D there; answers are VUGPU-LLAMA_WORKER records
#   sh <script>              any command line in the image (':' for spaces)
#   suite <n>                the driver's checks in one boot: vulkaninfo --summary, the full
#                            vulkaninfo under the validation layer, llama tiny on vulkan (n
#                            tokens), vkfft-check; a VUGPU-CHECK record for each
# Each prints VUGPU-* records around its output; the exit status is the command's.
KO=/opt/vugpu/vugpu.ko
pv=0
if [ "$1" = --pv ]; then pv=$2; shift 2; fi
if ! insmod "$KO" pv="$pv" 2>/tmp/insmod.err; then
  echo "VUGPU-ERROR {\"error\":\"insmod vugpu.ko failed: $(tr '\n"' ' ' </tmp/insmod.err)\"}"
  exit 1
fi
for m in virtio_blk squashfs; do
  insmod /opt/vugpu/kmod/$m.ko 2>/tmp/insmod.err || { echo "VUGPU-ERROR {\"error\":\"insmod $m failed\"}"; exit 1; }
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
A=/app
mkdir -p $A
# The image is a squashfs (scripts/setup.sh) or, from the offline bundle on a GPU host, a tar
# (the bundle's bin/vugpu-vkapp: ustar magic at byte 257), unpacked into RAM.
if [ "$(dd if=/dev/vda bs=1 skip=257 count=5 2>/dev/null)" = ustar ]; then
  { mount -t tmpfs -o mode=755 tmpfs $A && tar -x -f /dev/vda -C $A && mkdir -p $A/dev $A/proc $A/sys $A/tmp $A/root $A/opt/vugpu; } ||
    { echo "VUGPU-ERROR {\"error\":\"cannot unpack the application image\"}"; exit 1; }
else
  mount -t squashfs -o ro /dev/vda $A || { echo "VUGPU-ERROR {\"error\":\"cannot mount the application image\"}"; exit 1; }
fi
mount --bind /dev $A/dev
mount -t proc proc $A/proc
mount -t sysfs sysfs $A/sys
mount -t tmpfs tmpfs $A/tmp
mount -t tmpfs tmpfs $A/root
mount --bind /opt/vugpu $A/opt/vugpu
echo "VUGPU-PHASE {\"phase\":\"app-ready\",\"pv\":$pv}"
export HOME=/root PATH=/opt/node/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The vugpu ICD (guest/vulkan) is the only driver the loader sees.
export VK_DRIVER_FILES=/opt/vugpu/vugpu_icd.json VK_ICD_FILENAMES=/opt/vugpu/vugpu_icd.json
cmd=$1
shift
case "$cmd" in
  vulkaninfo) chroot $A vulkaninfo "$@" ;;
  llama) chroot $A node /opt/vugpu/llama-run.ts --modules /opt/llama --model "/opt/models/$1.gguf" --gpu "$2" --tokens "$3" --record ;;
  worker)
    # canonical mode (a request is a line, ^D ends the input), no echo back to the host
    stty -F /dev/ttyS1 -echo icanon || { echo "VUGPU-ERROR {\"error\":\"no second serial port for the worker's requests\"}"; false; } &&
      chroot $A node /opt/vugpu/llama-worker.ts --modules /opt/llama --model "/opt/models/$1.gguf" --gpu "$2" --ctx "$3" --record </dev/ttyS1 ;;
  sh) chroot $A /bin/sh -c "$(echo "$*" | tr ':' ' ')" ;;
  suite)
    fails=0
    chroot $A vulkaninfo --summary >/tmp/summary 2>&1
    r=$?
    cat /tmp/summary
    ok=false; [ $r = 0 ] && grep -q 'vugpu' /tmp/summary && ok=true
    [ $ok = true ] || fails=$((fails + 1))
    echo "VUGPU-CHECK {\"check\":\"vulkaninfo-summary\",\"ok\":$ok,\"rc\":$r}"
    VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation chroot $A vulkaninfo >/tmp/full 2>&1
    r=$?
    n=$(grep -c 'Validation Error' /tmp/full)
    grep 'Validation Error' /tmp/full | head -5
    ok=false; [ $r = 0 ] && [ "$n" = 0 ] && grep -q 'VK_LAYER_KHRONOS_validation' /tmp/full && ok=true
    [ $ok = true ] || fails=$((fails + 1))
    echo "VUGPU-CHECK {\"check\":\"vulkaninfo-validation\",\"ok\":$ok,\"rc\":$r,\"validationErrors\":$n,\"lines\":$(wc -l </tmp/full)}"
    chroot $A node /opt/vugpu/llama-run.ts --modules /opt/llama --model /opt/models/tiny.gguf --gpu vulkan --tokens "$1" --record || fails=$((fails + 1))
    chroot $A /opt/vugpu/vkfft-check || fails=$((fails + 1))
    [ $fails = 0 ] ;;
  *) echo "VUGPU-ERROR {\"error\":\"unknown vkapp command $cmd\"}"; false ;;
esac
rc=$?
echo "VUGPU-PHASE {\"phase\":\"app-done\",\"rc\":$rc}"
exit $rc
