#!/usr/bin/env bash
# build.sh [release|sanitize|fuzz]: configures and builds into build/, build-sanitize/ or build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
jobs=$(nproc)
case "$kind" in
  release)  dir=build;          flags=() ;;
  sanitize) dir=build-sanitize; flags=(-DCPT_SANITIZE=ON -DCPT_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug) ;;
  fuzz)     dir=build-fuzz;     flags=(-DCPT_FUZZ=ON -DCPT_CUDA=OFF -DCMAKE_C_COMPILER=clang) ;;
  *) echo "build.sh: unknown kind '$kind' (release|sanitize|fuzz)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" -- --no-print-directory -s
echo "$dir"
