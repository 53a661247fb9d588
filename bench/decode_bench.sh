#!/bin/bash
# GPU decode: correctness test and throughput bench in one device run (see docs/performance.md, "GPU decode").
#
#   bench/decode_bench.sh build [BUILD] [DIR]   here: link tests/gpu/test_cuda_decode.c and bench/decode_bench.c
#                                                against BUILD (default build-decode) into DIR (default .carry-decode)
#   bench/decode_bench.sh run [DIR] [--no-test] [--no-bench] [--no-torch]
#                                                on the GPU machine: the test, the engine bench, transformers' generate
#                                                (env: HF_NEW, HF_NEW_B1 new tokens, HF_CACHE dynamic|static, *_TIMEOUT,
#                                                BENCH_SET base|b1)
#   bench/decode_bench.sh profile [DIR]          on the GPU machine (Firecracker, where ncu reads counters): time of
#                                                every kernel of 0.5B decode steps at batch 1 and 64, per-kernel summary
#                                                (env PROFILE_ARGS, default --defaults; PROFILE_SHAPE 0.5b|1.5b;
#                                                PROFILE_BATCHES, default "1 64")
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
build)
    tests/gpu/run_on_device.sh build "${2:-build-decode}" "${3:-.carry-decode}" tests/gpu/test_cuda_decode.c \
        bench/decode_bench.c
    ;;
run)
    dir=${2:-.carry-decode}
    shift $(( $# < 2 ? $# : 2 ))
    test=1 torch=1 bench=1
    for a in "$@"; do
        case $a in --no-test) test=0 ;; --no-torch) torch=0 ;; --no-bench) bench=0 ;; esac
    done
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
    eval "$(tests/gpu/run_on_device.sh env)"
    export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
    out=${OUT:-/tmp}
    rc=0
    if [ $test = 1 ]; then
        timeout ${TEST_TIMEOUT:-150} "$dir/test_cuda_decode" 2>&1 | tee "$out/test_cuda_decode.log"
        rc=${PIPESTATUS[0]}
        echo "test_cuda_decode rc=$rc"
        if [ $rc != 0 ]; then # a fault in a kernel test would hide the engine's checks: the kernel checks alone
            CPT_TEST_KERNELS_ONLY=1 timeout ${TEST_TIMEOUT:-150} "$dir/test_cuda_decode" > "$out/test_cuda_decode_kernels.log" 2>&1
            echo "test_cuda_decode kernel checks alone rc=$? ($(grep -c 'CHECK failed' "$out/test_cuda_decode_kernels.log") failed checks)"
        fi
    fi
    # BENCH_SET base (default): the decoder as the product runs it (the kernels are its own choice); b1: batches 1
    # and 4 only. The old binaries' variants are gone (dev/cuda/README.md); --defaults stays for their command lines.
    set=${BENCH_SET:-base}
    if [ $bench = 1 ] && [ "$set" != b1 ]; then
        timeout ${BENCH_TIMEOUT:-120} "$dir/decode_bench" --defaults 2>&1 | tee -a "$out/decode_bench.log"
    fi
    if [ $bench = 1 ] && [ "$set" = b1 ]; then
        echo "== decode_bench --defaults --batches 1,4" | tee -a "$out/decode_bench.log"
        timeout ${BENCH_TIMEOUT:-120} "$dir/decode_bench" --defaults --batches 1,4 2>&1 | tee -a "$out/decode_bench.log"
    fi
    if [ $torch = 1 ]; then
        PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-300} python3 bench/decode_torch.py --shapes ${HF_SHAPES:-1.5b,0.5b} --new ${HF_NEW:-512} --new-b1 ${HF_NEW_B1:-128} --cache ${HF_CACHE:-dynamic} 2>&1 | grep -v Warning |
            tee "$out/decode_torch.log"
    fi
    echo "== summary =="
    grep -h "RESULT" "$out"/decode_bench.log "$out"/decode_torch.log 2>/dev/null
    [ $test = 1 ] && sed -n '/== GPU decode summary ==/,$p' "$out/test_cuda_decode.log"
    exit $rc
    ;;
profile)
    dir=${2:-.carry-decode}
    eval "$(tests/gpu/run_on_device.sh env)"
    export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
    out=${OUT:-/tmp}
    shape=${PROFILE_SHAPE:-0.5b}
    for b in ${PROFILE_BATCHES:-1 64}; do
        # the warm-up and timed runs of 16 new tokens; graphs off so every kernel is its own launch
        timeout ${PROFILE_TIMEOUT:-240} ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum \
            "$dir/decode_bench" --shapes "$shape" --batches $b --prompt 256 --new 16 --no-graphs ${PROFILE_ARGS:---defaults} 2>&1 |
            tee "$out/decode_profile_${shape}_b$b.log" | grep -E "RESULT|^ +[a-z_]+.*\(|gpu__time_duration" | head -80
    done
    ;;
*) echo "usage: $0 build [BUILD] [DIR] | run [DIR] [--no-test] [--no-bench] [--no-torch] | profile [DIR]" >&2; exit 2 ;;
esac
