#!/bin/bash
# The CUDA op checks on a machine other than the one that built them (the lent GPU machine has no -dev packages).
#
#   tests/gpu/run_on_device.sh build [BUILD] [DIR]  here: link tests/gpu/test_cuda_ops.c against BUILD's libcpt_lib.a
#                                                 and libcpt_cuda.a (default build-cuda) into DIR (default
#                                                 .helpers-cuda-carry) and copy the shared libraries it needs to DIR/lib
#   tests/gpu/run_on_device.sh run [DIR]          on the GPU machine: the op table, op timings, the PyTorch timings
set -euo pipefail
cd "$(dirname "$0")/../.."

build() {
    local bdir=$1 dir=$2
    mkdir -p "$dir/lib"
    # shellcheck disable=SC2046
    gcc -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -fopenmp -I. \
        -o "$dir/test_cuda_ops" tests/gpu/test_cuda_ops.c "$bdir/libcpt_lib.a" "$bdir/libcpt_cuda.a" \
        $(pkg-config --libs hiredis msgpack jansson libpcre2-8 libutf8proc pmix) \
        -L/usr/local/cuda/lib64 -lcudart_static -lstdc++ -lpthread -ldl -lrt -lm
    # everything but the C library and the loader (the GPU machine has its own, newer ones)
    for lib in $(ldd "$dir/test_cuda_ops" | awk '/=> \// {print $3}' | grep -v -E '/lib(c|m|dl|pthread|rt)\.so|ld-linux'); do
        cp -L "$lib" "$dir/lib/"
    done
    echo "built $dir/test_cuda_ops; libs: $(ls "$dir/lib" | tr '\n' ' ')"
}

run() {
    local dir=$1
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
    if [ -z "${CPT_CUBLASLT_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13 '; then
        CPT_CUBLASLT_LIB=$(find /usr/local /opt -name 'libcublasLt.so.13' 2>/dev/null | head -1)
        export CPT_CUBLASLT_LIB
        echo "cuBLASLt: ${CPT_CUBLASLT_LIB:-not found}"
    fi
    local rc=0
    CPT_CUDA_BENCH=1 LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/test_cuda_ops" || rc=$?
    python3 bench/cuda_ops_torch.py || true
    return $rc
}

case "${1:-}" in
build) build "${2:-build-cuda}" "${3:-.helpers-cuda-carry}" ;;
run) run "${2:-.helpers-cuda-carry}" ;;
*) echo "usage: $0 build [BUILD] [DIR] | run [DIR]" >&2; exit 2 ;;
esac
