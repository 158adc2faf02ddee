#!/usr/bin/env bash
# llama.cpp for the guest Vulkan driver's checks: node-llama-cpp 3.21.1 as npm ships it, with only
# the prebuilt Vulkan build (and the small CPU-only build, the reference backend) — not the
# ~538 MB of CUDA builds its optional dependencies would pull. Installed once into
# ${VUGPU_CACHE:-/var/cache/vugpu}/llama, stamped by this script's content; prints that directory.
# What is not needed at run time (the llama.cpp source bundle) is removed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VUGPU_CACHE:-/var/cache/vugpu}
DIR=$CACHE/llama
VERSION=3.21.1
key=$(sha256sum "$0" | cut -c1-16)
if [[ -f $DIR/.stamp && $(<"$DIR/.stamp") == "$key" && -f $DIR/node_modules/node-llama-cpp/package.json ]]; then
  echo "$DIR"
  exit 0
fi
command -v npm >/dev/null || { echo "llama-deps: npm is needed to install node-llama-cpp" >&2; exit 2; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.llama.lock"
flock 9
rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
echo '{"name":"vugpu-llama","private":true}' >"$DIR.tmp/package.json"
# --ignore-scripts: its postinstall would try to download or build a binary; the prebuilt
# packages are all it needs (getLlama({ build: "never" })).
(cd "$DIR.tmp" && npm install --no-audit --no-fund --omit=optional --ignore-scripts --loglevel=error \
  "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64-vulkan@$VERSION" "@node-llama-cpp/linux-x64@$VERSION" >&2)
rm -f "$DIR.tmp/node_modules/node-llama-cpp/llama/gitRelease.bundle"
echo "$key" >"$DIR.tmp/.stamp"
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "$DIR"
