#!/bin/bash
# GPU programs on a machine other than the one that built them (the lent GPU machine has no -dev packages).
#
#   tests/gpu/run_on_device.sh build BUILD DIR SRC.c...   here: link each SRC.c (a test or bench main) against BUILD's
#                                                        libcpt_lib.a and libcpt_cuda.a into DIR/<name>, and copy
#                                                        the shared libraries they need to DIR/lib
#   tests/gpu/run_on_device.sh env                       on the GPU machine: prints the exports that find cuBLASLt
#                                                        and NCCL there (eval it)
#   tests/gpu/run_on_device.sh carry-env DIR             the same, and those that run the cpt programs of a device
#                                                        folder DIR (its lib/ and bin/redis-server) (eval it)
#   tests/gpu/run_on_device.sh run [DIR]                 on the GPU machine: the op checks and timings (test_cuda_ops)
#
# Defaults: BUILD=build-cuda, DIR=.carry-gpu, SRC=tests/gpu/test_cuda_ops.c. DIR should be git-ignored (.carry-*)
# so the device tool can carry it.
set -euo pipefail
cd "$(dirname "$0")/../.."

build() {
    local bdir=$1 dir=$2
    shift 2
    [ $# -gt 0 ] || set -- tests/gpu/test_cuda_ops.c
    mkdir -p "$dir/lib"
    for src in "$@"; do
        local name
        name=$(basename "$src" .c)
        # shellcheck disable=SC2046
        gcc -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -DCPT_HAVE_CUDA=1 -fopenmp -I. \
            -o "$dir/$name" "$src" "$bdir/libcpt_lib.a" "$bdir/libcpt_cuda.a" \
            $(pkg-config --libs hiredis msgpack jansson libpcre2-8 libutf8proc pmix openssl) \
            -L/usr/local/cuda/lib64 -lcudart_static -lstdc++ -lpthread -ldl -lrt -lm
        # everything but the C library and the loader (the GPU machine has its own, newer ones)
        for lib in $(ldd "$dir/$name" | awk '/=> \// {print $3}' | grep -v -E '/lib(c|m|dl|pthread|rt)\.so|ld-linux'); do
            cp -L "$lib" "$dir/lib/"
        done
        echo "built $dir/$name"
    done
    echo "libs: $(ls "$dir/lib" | tr '\n' ' ')"
}

# cuBLASLt and NCCL are dlopen'ed; on the device image they live in CUDA's or python's folders.
device_env() {
    if [ -z "${CPT_CUBLASLT_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13 '; then
        echo "export CPT_CUBLASLT_LIB=$(find /usr/local /opt -name 'libcublasLt.so.13' 2>/dev/null | head -1)"
    fi
    if [ -z "${CPT_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
        echo "export CPT_NCCL_LIB=$(find /usr/local /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)"
    fi
    echo "export NCCL_NVLS_ENABLE=0"
}

run() {
    local dir=$1
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
    eval "$(device_env)"
    local rc=0
    CPT_CUDA_BENCH=1 LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/test_cuda_ops" || rc=$?
    python3 bench/cuda_ops_torch.py || true
    return $rc
}

case "${1:-}" in
build) shift; b=${1:-build-cuda}; d=${2:-.carry-gpu}; shift $(( $# < 2 ? $# : 2 )); build "$b" "$d" "$@" ;;
env) device_env ;;
carry-env)
    d=$(cd "${2:?carry-env needs the device folder}" && pwd)
    echo "export LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CPT_REDIS_SERVER=$d/bin/redis-server"
    device_env ;;
run) run "${2:-.carry-gpu}" ;;
*) echo "usage: $0 build [BUILD] [DIR] [SRC.c...] | env | carry-env DIR | run [DIR]" >&2; exit 2 ;;
esac
