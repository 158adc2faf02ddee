#!/usr/bin/env bash
# Compile every GLSL compute shader under native/shaders/ and guest/programs/ to SPIR-V:
#   <dir>/<name>.comp → build/spirv/<dir>/<name>.spv   (paths relative to the repository)
# with glslangValidator -V --target-env vulkan1.1, then check each module with spirv-val.
# Incremental: a module is rebuilt when it is missing or older than its source or any *.glsl
# include in the source's directory. Serialized with a lock so parallel test runs never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/spirv
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

built=0
while IFS= read -r -d '' src; do
  dst="$out/${src%.comp}.spv"
  dir=$(dirname "$src")
  if [[ -f $dst && ! $src -nt $dst ]] &&
     [[ -z "$(find "$dir" -maxdepth 1 -name '*.glsl' -newer "$dst" -print -quit)" ]]; then
    continue
  fi
  mkdir -p "$(dirname "$dst")"
  # Write beside the target and rename: a reader never sees a half-written module.
  if ! log=$(glslangValidator -V --target-env vulkan1.1 -o "$dst.tmp" "$src" 2>&1); then
    echo "$log" >&2
    rm -f "$dst.tmp"
    exit 1
  fi
  mv "$dst.tmp" "$dst"
  built=$((built + 1))
done < <(find native/shaders guest/programs -name '*.comp' -print0 2>/dev/null | sort -z)

n=0
while IFS= read -r -d '' spv; do
  spirv-val --target-env vulkan1.1 "$spv" || { echo "[vugpu] spirv-val refused $spv" >&2; exit 1; }
  n=$((n + 1))
done < <(find "$out" -name '*.spv' -print0 | sort -z)
((built == 0)) || echo "[vugpu] spirv: compiled $built, validated $n modules in $out"
