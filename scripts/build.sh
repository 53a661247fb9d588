#!/usr/bin/env bash
# build.sh [release|sanitize]: configures and builds into build/ or build-sanitize/.
#   release   the normal build (CUDA where nvcc is found)
#   cpu       the same without CUDA, in build-cpu/ (test.sh on a machine without a GPU)
#   sanitize  clang, CPU only, ASan+UBSan everywhere and libFuzzer harnesses: the unit and integration tests run
#             under the sanitizers and the fuzzers replay their corpus and fuzz, from one build (line tables only:
#             what the sanitizers' reports need, and the build is a fifth quicker than with full debug info)
#             (`fuzz` is the same build under its former name)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
jobs=$(nproc)
case "$kind" in
  release)       dir=build;          flags=() ;;
  cpu)           dir=build-cpu;      flags=(-DCPT_CUDA=OFF) ;;
  sanitize|fuzz) dir=build-sanitize; flags=(-DCPT_FUZZ=ON -DCPT_CUDA=OFF -DCMAKE_C_COMPILER=clang
                                           -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only") ;;
  *) echo "build.sh: unknown kind '$kind' (release|cpu|sanitize)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" -- --no-print-directory -s
echo "$dir"
