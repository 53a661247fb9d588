#!/bin/bash
# CPU train-step bench: cpt (bench/cpu_train_bench.c) beside PyTorch (bench/cpu_train_bench.py) on the same CPU,
# both limited to the same thread counts.
#
#   bench/cpu_train_bench.sh build [DIR]   compile the cpt side into DIR (default .helpers-model-carry) with the
#                                          project's flags, and copy the shared libraries it needs beside it
#   bench/cpu_train_bench.sh run [DIR] [THREADS...]   run both sides at each thread count (default 1 4)
#   bench/cpu_train_bench.sh [THREADS...]  build into a temp folder and run (needs gcc, torch, transformers)
set -euo pipefail
cd "$(dirname "$0")/.."

build() {
    local dir=$1
    mkdir -p "$dir/lib"
    local srcs
    srcs=$(ls kernels/cpu/*.c model/*.c core/error.c core/fs.c core/rng.c core/json_util.c core/safetensors.c \
        core/safetensors_write.c core/safetensors_convert.c core/checksum.c | grep -v '_main\.c$' | grep -v 'cmd_')
    # shellcheck disable=SC2086
    gcc -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -fopenmp -I. \
        -o "$dir/cpu_train_bench" bench/cpu_train_bench.c $srcs -ljansson -lm
    for lib in $(ldd "$dir/cpu_train_bench" | awk '/=> \// {print $3}' | grep -E 'jansson|gomp'); do
        cp -L "$lib" "$dir/lib/"
    done
    echo "built $dir/cpu_train_bench"
}

run() {
    local dir=$1
    shift
    local threads=("$@")
    [ ${#threads[@]} -gt 0 ] || threads=(1 4)
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores visible"
    for t in "${threads[@]}"; do
        OMP_NUM_THREADS=$t LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/cpu_train_bench"
        OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t python3 bench/cpu_train_bench.py "$t"
    done
}

case "${1:-}" in
build) build "${2:-.helpers-model-carry}" ;;
run)
    shift
    dir=${1:-.helpers-model-carry}
    shift || true
    run "$dir" "$@"
    ;;
*)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    build "$tmp"
    run "$tmp" "$@"
    ;;
esac
