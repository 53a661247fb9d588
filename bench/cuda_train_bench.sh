#!/bin/bash
# CUDA train-step bench: cpt (bench/cuda_train_bench.c) beside PyTorch + transformers (bench/cuda_train_bench.py)
# on the same GPU, Qwen2.5-0.5B and -1.5B shapes, 2048-token sequences (8 and 4 per step).
#
#   bench/cuda_train_bench.sh build [BUILD] [DIR]   here: link the cpt side against BUILD's libraries into DIR
#                                                  (default build-cuda, .carry-bench) with the shared libraries
#   bench/cuda_train_bench.sh run [DIR] [--torch-only]   on the GPU machine: both sides, both shapes, one table
#
# On the device machine, in one call:  bench/cuda_train_bench.sh run .carry-bench   (carry .carry-bench)
# The cpt processes build their random host weights while PyTorch runs, and touch the GPU only when told to, so the
# runs never share the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

build() {
    local bdir=$1 dir=$2
    # cuda_runtime_api.h for cudaMemGetInfo; run_on_device.sh's gcc line reads CPATH.
    CPATH=/usr/local/cuda/include${CPATH:+:$CPATH} \
        tests/gpu/run_on_device.sh build "$bdir" "$dir" bench/cuda_train_bench.c
}

run() {
    local dir=$1 torch_only=${2:-}
    local log
    log=$(mktemp -d)
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader || true
    eval "$(tests/gpu/run_on_device.sh env)"
    # only for cpt: the carried libstdc++ may be older than the one python's torch needs
    local ldp="$dir/lib:${LD_LIBRARY_PATH:-}"
    local shapes=(0.5b 1.5b) pids=()
    if [ -z "$torch_only" ]; then
        for s in "${shapes[@]}"; do
            LD_LIBRARY_PATH="$ldp" "$dir/cuda_train_bench" --shape "$s" --wait-file "$log/go-$s" \
                >"$log/cpt-$s.txt" 2>&1 &
            pids+=($!)
        done
    fi
    PYTHONUNBUFFERED=1 python3 bench/cuda_train_bench.py | tee "$log/torch.txt" || echo "torch side failed"
    if [ -z "$torch_only" ]; then
        for i in "${!shapes[@]}"; do
            touch "$log/go-${shapes[$i]}"
            wait "${pids[$i]}" || echo "cpt ${shapes[$i]} failed"
            cat "$log/cpt-${shapes[$i]}.txt"
        done
    fi
    echo
    printf '%-5s %-13s %9s %9s %6s %9s %8s\n' shape side step_ms tok/s MFU peak_GiB loss
    for s in "${shapes[@]}"; do
        for f in "$log/torch.txt" "$log/cpt-$s.txt"; do
            [ -f "$f" ] || continue
            grep -E "^(torch|cpt) shape=$s " "$f" | awk '{
                side = $1; step = tok = mfu = peak = loss = "-";
                for (i = 2; i <= NF; i++) {
                    split($i, kv, "=");
                    if (kv[1] == "mode") side = side "/" kv[2];
                    else if (kv[1] == "step_ms") step = kv[2];
                    else if (kv[1] == "tokens_per_s") tok = kv[2];
                    else if (kv[1] == "mfu") mfu = kv[2];
                    else if (kv[1] == "peak_alloc_gib" || kv[1] == "peak_gib") peak = kv[2];
                    else if (kv[1] == "loss" || kv[1] == "loss_last") loss = kv[2];
                }
                printf "%-5s %-13s %9s %9s %6s %9s %8s\n", "'"$s"'", side, step, tok, mfu, peak, loss }'
        done
    done
    if [ -n "${OUT:-}" ]; then cp "$log"/*.txt "$OUT"/ 2>/dev/null || true; fi
    rm -rf "$log"
}

case "${1:-}" in
build) build "${2:-build-cuda}" "${3:-.carry-bench}" ;;
run) run "${2:-.carry-bench}" "${3:-}" ;;
*) echo "usage: $0 build [BUILD] [DIR] | run [DIR] [--torch-only]" >&2; exit 2 ;;
esac
