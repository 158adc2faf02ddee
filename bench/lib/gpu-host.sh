# The start every bench/gpu-host-*.sh shares, sourced with a name: `. "$(dirname "$0")/lib/gpu-host.sh" NAME`.
# One `device` call on a GPU host brings the offline bundle (scripts/bundle.sh, carried as
# build/vugpu-bundle.tar.xz, or $VUGPU_BUNDLE) and gives back what is left in $OUT: make $OUT,
# work from the checkout's root, and unpack the bundle afresh into T=/tmp/vugpu-NAME, as B=$T/vugpu-bundle
# (a bundle that does not unpack ends the script).
OUT=${OUT:-/tmp/vugpu-out}
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
T=/tmp/vugpu-$1
rm -rf "$T" && mkdir -p "$T" && tar -xJf "${VUGPU_BUNDLE:-build/vugpu-bundle.tar.xz}" -C "$T" || exit 1
B=$T/vugpu-bundle
