#!/bin/bash
# Every GPU check and bench of cpt in one device call (device time is scarce: one call, one carry folder).
#
#   tests/gpu/device_all.sh build [BUILD] [DIR]    here: BUILD (default build-dev) configured and built with CUDA
#                                                  when it is not current, every GPU test/bench program linked
#                                                  against it, the cpt binaries and redis-server, with
#                                                  their shared libraries, this machine's Slurm and munge
#                                                  (tests/gpu/slurm_carry.sh), into DIR (default .carry-all,
#                                                  git-ignored)
#                                                  and packed as .carry-pack/NAME.txz (carry that: the tool's limit
#                                                  is 64 MiB with the working tree)
#   tests/gpu/device_all.sh run DIR|TXZ STAGE...   on the device: the stages named, each under a timeout, each log
#                                                  in $OUT/<stage>.log; a summary line per stage at the end
#
# BUDGET_S=N: the stages share N seconds (set it a little under the device call's timeout_s).
# Stages (in the order given): ops model train attn trainbench trainprof xport generate ab decode decoderl decodetorch
# decodeprof decodeprof15 grpo grpo3b
# grpo_lrX_sftY[_file|_cpuroll|_cputrain] slurm grpo_slurm agree decodetest zero offload offloadbench exportcheck
# learn.
# grpo3b: GRPO of the Qwen2.5-3B shape (random weights) on the GPU, colocated (tests/gpu/grpo_3b_run.sh run);
# grpo3b_summary.txt comes back in $OUT, its logs, metrics and nvidia-smi samples in extra.tgz.
# decoderl: decode_bench at issue 23's shapes (0.5B-7B at batch 1/64/256, the GRPO rollout shape, 4k and 16k
# contexts); decodetest: test_cuda_decode alone (the engine against the CPU one, KV preemption included); zero:
# ZeRO-1 on the GPU (test_zero_cuda); offload: train.optimizer_offload against the plain device AdamW (test_offload_cuda);
# offloadbench: a train step of the 3B shape plain and offloaded and of the 7B shape offloaded (cuda_train_bench);
# exportcheck: transformers loads the committed export fixtures, plain and sharded
# (tests/fixtures/make_export_check.py; its output comes back as $OUT/export_logits.safetensors to commit).
# learn: the learning benchmark of issue 22 (bench/rl_learning.sh run: SFT of a ~136M model, GRPO at LR and at lr 0
# over 3 seeds, held-out accuracy before/after; its knobs as env, LEARN_BUDGET_S its budget); learn_summary.md and
# .json come back in $OUT, the runs' logs and metrics in extra.tgz.
# agree: train-inference logprob agreement (tests/gpu/logprob_agreement.sh: agree/* per case, trainer and rollout
# each on cuda or cpu; CASES as there); its metrics come back in extra.tgz.
# slurm: the carried Slurm starts and runs sbatch, srun --mpi=pmix and a --gres=gpu:1 job (slurm_device.sh check);
# grpo_slurm: sbatch sbatch/grpo_4gpu.sh on one GPU with a requeue mid-run (grpo_slurm_run.sh). Issue 21 asks:
#   tests/gpu/device_all.sh run .carry-pack/.carry-all.txz slurm grpo_slurm
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

PROGS="tests/gpu/test_cuda_ops.c tests/gpu/test_cuda_model.c tests/gpu/test_cuda_attention.c tests/gpu/test_cuda_decode.c
tests/gpu/test_nccl_dp.c tests/gpu/test_weight_transports.c tests/gpu/test_zero_cuda.c tests/gpu/test_offload_cuda.c
bench/cuda_train_bench.c
bench/decode_bench.c"

build() {
    local b=$1 d=$2
    rm -rf "$d"
    # the libraries and binaries the programs link and carry: a half-made carry would only fail on the device
    cmake -S . -B "$b" -DCPT_CUDA=ON > /dev/null || return 1
    cmake --build "$b" -j "$(nproc)" -- --no-print-directory -s || return 1
    [ -f "$b/libcpt_cuda.a" ] || { echo "device_all: $b has no CUDA library (is nvcc found?)" >&2; return 1; }
    # shellcheck disable=SC2086
    CPATH=/usr/local/cuda/include${CPATH:+:$CPATH} tests/gpu/run_on_device.sh build "$b" "$d" $PROGS > /dev/null ||
        return 1
    tests/gpu/grpo_gpu_run.sh build "$b" "$d" > /dev/null || return 1
    tests/gpu/slurm_carry.sh "$d" || return 1
    # the Qwen tokenizer (git-ignored .deps) for the grpo3b stage's 151,669-id vocabulary
    if [ -f .deps/tokenizer-qwen3/models/tokenizer.json ]; then
        mkdir -p "$d/tokenizer-qwen3" && cp .deps/tokenizer-qwen3/models/tokenizer*.json "$d/tokenizer-qwen3/"
    fi
    for p in "$d"/test_* "$d"/*_bench; do strip "$p"; done
    # the device tool carries at most 64 MiB with the working tree: send the folder packed, xz with a dictionary
    # larger than the folder (the cpt binaries each hold the same CUDA fatbin: 152 MB -> 11 MB; gzip: 57 MB)
    mkdir -p .carry-pack
    tar cf - "$d" | xz -T1 -6 --lzma2=dict=192MiB > ".carry-pack/$(basename "$d").txz"
    du -sh "$d" ".carry-pack/$(basename "$d").txz"
}

stage() {
    local name=$1 limit=$2
    shift 2
    local t0 rc left
    t0=$(date +%s)
    # BUDGET_S (the call's own time limit, less a margin): a stage gets at most what is left, and none when under 10 s
    # is left, so the call ends with its logs instead of being killed with them
    if [ -n "${BUDGET_S:-}" ]; then
        left=$((BUDGET_S - (t0 - RUN_T0)))
        if [ "$left" -lt 10 ]; then
            SUMMARY+="$(printf '%-11s skipped (BUDGET_S spent)' "$name")"$'\n'
            return
        fi
        [ "$limit" -le "$left" ] || limit=$left
    fi
    echo "=== $name ($(date -u +%H:%M:%S))"
    OUT=$SUB timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    tail -n "${TAIL:-25}" "$OUT/$name.log"
    SUMMARY+="$(printf '%-11s rc=%-3s %4ss' "$name" "$rc" "$(($(date +%s) - t0))")"$'\n'
}

run() {
    local d=$1
    if [ "${d%.txz}" != "$d" ]; then # a packed folder (build's .carry-pack/NAME.txz): xz, or Python's lzma
        mkdir -p /tmp/cpt-carry
        if command -v xz > /dev/null; then
            tar xJf "$d" -C /tmp/cpt-carry
        else
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$d" /tmp/cpt-carry
        fi
        d=/tmp/cpt-carry/$(basename "$d" .txz)
    fi
    d=$(cd "$d" && pwd)
    shift
    OUT=${OUT:-/tmp/cpt-device}
    SUB=/tmp/cpt-device-extra # the stages' own files (their OUT)
    mkdir -p "$OUT" "$SUB"
    cp "$d/bin/cpt" "$d/bin/cpt-train" "$d/"
    eval "$(tests/gpu/run_on_device.sh env)"
    export LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1 OUT
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader || true
    SUMMARY=""
    RUN_T0=$(date +%s)
    for s in "$@"; do
        case $s in
        ops) stage ops 120 env CPT_CUDA_BENCH=1 "$d/test_cuda_ops" ;;
        model) stage model 150 tests/gpu/cuda_model_device.sh "$d" ;;
        train) stage train 180 env CPT_BUILD="$d/bin" tests/gpu/test_train_cuda.sh ;;
        attn) stage attn 120 tests/gpu/attention_on_device.sh "$d" ;;
        trainbench) stage trainbench 300 bench/cuda_train_bench.sh run "$d" ;;
        trainprof) stage trainprof 240 ncu --clock-control none --print-summary per-kernel \
            --metrics gpu__time_duration.sum "$d/cuda_train_bench" --shape 0.5b --steps 1 --warmup 1 ;;
        xport) stage xport 180 "$d/test_weight_transports" ;;
        decodetest) stage decodetest 180 "$d/test_cuda_decode" ;;
        zero) stage zero 120 "$d/test_zero_cuda" ;;
        offload) stage offload 120 "$d/test_offload_cuda" ;;
        offloadbench) # a train step of the 3B shape plain and offloaded, and of the 7B shape offloaded
            stage offloadbench 420 bash -c "for a in '3b' '3b --offload' '7b --offload'; do \
                \"$d/cuda_train_bench\" --shape \$a --recompute --steps 3 --warmup 1 || echo \"rc=\$? for \$a\"; done" ;;
        exportcheck) stage exportcheck 120 python3 tests/fixtures/make_export_check.py tests/fixtures/adamw/export \
            "$OUT/export_logits.safetensors" tests/fixtures/adamw/export_sharded ;;
        # the generate fixture through `cpt generate --device cuda`; OLD_DIR=another build folder (unpacked): the
        # same bytes from both
        generate) stage generate 150 tests/gpu/generate_device.sh "$d" "${OLD_DIR:-}" ;;
        # bench/ab_compare.sh against OLD_DIR (a build folder or .txz)
        ab) stage ab 420 bench/ab_compare.sh "${OLD_DIR:?ab needs OLD_DIR}" "$d" ;;
        decode) stage decode 420 env TEST_TIMEOUT=150 BENCH_TIMEOUT=100 BENCH_SET=base bench/decode_bench.sh run "$d" --no-torch ;;
        decoderl) # issue 23's shapes: decode tok/s and % of the roofline at 4 shapes, the GRPO rollout shape (32 prompts x
            # 16 samples, shared and unshared), long contexts at batch 64
            stage decoderl 540 bash -c "b=$d/decode_bench; \
                timeout 220 \$b --shapes 0.5b,1.5b,3b,7b --batches 1,64,256 --prompt 256 --new 256; \
                timeout 150 \$b --shapes 0.5b,1.5b --grpo 32,16 --prompt 256 --new 1024 --mean-new 400; \
                timeout 80 \$b --shapes 0.5b --batches 64 --prompt 4096 --new 128; \
                timeout 80 \$b --shapes 0.5b --batches 64 --prompt 16384 --new 128" ;;
        decodetorch) stage decodetorch 420 env TORCH_TIMEOUT=410 bench/decode_bench.sh run "$d" --no-test --no-bench ;;
        decodeprof) stage decodeprof 240 bench/decode_bench.sh profile "$d" ;;
        # 1.5B at batches 1 and 256: the defaults
        decodeprof15) stage decodeprof15 300 env PROFILE_SHAPE=1.5b PROFILE_BATCHES="1 256" PROFILE_TIMEOUT=140 \
            bench/decode_bench.sh profile "$d" ;;
        slurm) stage slurm 120 tests/gpu/slurm_device.sh check /tmp/cpt-slurm-check "$d"
            mkdir -p "$SUB/slurm" && cp /tmp/cpt-slurm-check/log/*.log "$SUB/slurm/" 2>/dev/null ;;
        grpo_slurm) # its OUT holds the cluster and the run; the logs and metrics come back in extra.tgz
            stage grpo_slurm 360 env OUT=/tmp/cpt-grpo-slurm tests/gpu/grpo_slurm_run.sh run "$d"
            mkdir -p "$SUB/grpo_slurm"
            cp /tmp/cpt-grpo-slurm/job.log /tmp/cpt-grpo-slurm/run/logs/*.log /tmp/cpt-grpo-slurm/run/metrics.jsonl \
               /tmp/cpt-grpo-slurm/run/config.toml /tmp/cpt-grpo-slurm/cluster/log/*.log "$SUB/grpo_slurm/" 2>/dev/null ;;
        agree) # its own OUT: the runs (SFT of each shape, then GRPO per case) stay off $OUT
            stage agree 540 env OUT=/tmp/cpt-agree tests/gpu/logprob_agreement.sh run "$d"
            mkdir -p "$SUB/agree"
            for m in /tmp/cpt-agree/*/*/metrics.jsonl; do
                [ -f "$m" ] && cp "$m" "$SUB/agree/$(basename "$(dirname "$(dirname "$m")")")-$(basename "$(dirname "$m")").jsonl"
            done ;;
        learn) # bench/rl_learning.sh: its own OUT (data, SFT, runs); BUDGET_S there is its own (LEARN_BUDGET_S,
            # default 470 s, less when this call's BUDGET_S leaves less); summary, logs and metrics in extra.tgz
            local lb=${LEARN_BUDGET_S:-470} left to r
            if [ -n "${BUDGET_S:-}" ]; then
                left=$((BUDGET_S - ($(date +%s) - RUN_T0) - 90))
                [ "$lb" -le "$left" ] || lb=$left
            fi
            stage learn 560 env OUT=/tmp/cpt-learn BUDGET_S="$lb" bench/rl_learning.sh run "$d"
            mkdir -p "$SUB/learn"
            cp /tmp/cpt-learn/learn_summary.* /tmp/cpt-learn/sft_stages.txt /tmp/cpt-learn/*.log /tmp/cpt-learn/*.json \
               /tmp/cpt-learn/runs/*.log /tmp/cpt-learn/runs/*.json /tmp/cpt-learn/runs/timing.txt "$SUB/learn/" 2>/dev/null
            for m in /tmp/cpt-learn/runs/*/metrics.jsonl /tmp/cpt-learn/trl-s*/metrics.jsonl; do
                [ -f "$m" ] && cp "$m" "$SUB/learn/$(basename "$(dirname "$m")").jsonl"
            done
            for r in /tmp/cpt-learn/runs/*/logs; do # each run's role logs (trainer, rollout, reward)
                [ -d "$r" ] || continue
                to=$SUB/learn/logs-$(basename "$(dirname "$r")")
                mkdir -p "$to" && cp "$r"/*.log "$to/" 2>/dev/null
            done
            for t in /tmp/cpt-learn/trl-s*/summary.json; do
                [ -f "$t" ] && cp "$t" "$SUB/learn/$(basename "$(dirname "$t")")_summary.json"
            done
            cp /tmp/cpt-learn/learn_summary.* "$OUT/" 2>/dev/null ;;
        grpo3b) # GRPO of the Qwen2.5-3B shape, colocated (tests/gpu/grpo_3b_run.sh): its own OUT (the model, 6 GB)
            # its BUDGET_S is its own (GRPO3B_BUDGET_S, default 400 s, less when this call's BUDGET_S leaves less):
            # it ends the GRPO run in time to write its summary
            local gb=${GRPO3B_BUDGET_S:-400} gleft
            if [ -n "${BUDGET_S:-}" ]; then
                gleft=$((BUDGET_S - ($(date +%s) - RUN_T0) - 10))
                [ "$gb" -le "$gleft" ] || gb=$gleft
            fi
            stage grpo3b 420 env OUT=/tmp/cpt-grpo3b BUDGET_S="$gb" tests/gpu/grpo_3b_run.sh run "$d"
            mkdir -p "$SUB/grpo3b"
            cp /tmp/cpt-grpo3b/grpo3b_summary.txt "$OUT/" 2>/dev/null
            cp /tmp/cpt-grpo3b/grpo3b_summary.txt /tmp/cpt-grpo3b/*.log /tmp/cpt-grpo3b/*.txt /tmp/cpt-grpo3b/gpu_mem.csv \
               /tmp/cpt-grpo3b/grpo/metrics.jsonl /tmp/cpt-grpo3b/grpo/config.toml /tmp/cpt-grpo3b/grpo/logs/*.log \
               "$SUB/grpo3b/" 2>/dev/null
            rm -rf /tmp/cpt-grpo3b/export ;; # 6 GB: the disk is shared with the later stages
        grpo | grpo_*) # grpo_lrX_sftY_file: GRPO_LR=X, SFT_STEPS=Y, TRANSPORT=file (each part optional; _cpuroll and _cputrain
            # put the rollout or the trainer on the CPU; _zero: train.zero=1, the sharded optimizer's GPU step; _valgpu:
            # validation.device=cuda, validation on the GPU engine). Its own OUT is the run folder (the script empties
            # it): keep it off $OUT, bring back the logs and metrics
            local kv=() part extra=
            for part in $(echo "${s#grpo}" | tr '_' ' '); do
                case $part in
                lr*) kv+=(GRPO_LR="${part#lr}") ;;
                sft*) kv+=(SFT_STEPS="${part#sft}") ;;
                file) kv+=(TRANSPORT=file) ;;
                cpuroll) kv+=(TRANSPORT=file ROLLOUT_DEVICE=cpu) ;;   # splits a GPU-engine fault from the rest
                cputrain) kv+=(TRANSPORT=file TRAIN_DEVICE=cpu) ;;
                zero) extra+=" train.zero=1" ;;
                valgpu) extra+=" validation.device=cuda" ;;
                esac
            done
            [ -z "$extra" ] || kv+=(GRPO_EXTRA="${extra# }")
            stage "$s" 400 env OUT="/tmp/cpt-$s" "${kv[@]}" tests/gpu/grpo_gpu_run.sh run "$d"
            mkdir -p "$SUB/$s"
            cp "/tmp/cpt-$s"/*.log "/tmp/cpt-$s/grpo/metrics.jsonl" "$SUB/$s/" 2>/dev/null ;;
        *) echo "unknown stage $s"; SUMMARY+="$s: unknown"$'\n' ;;
        esac
    done
    # the device tool brings back only a few files: the stage logs, and everything else in one archive
    tar czf "$OUT/extra.tgz" -C "$SUB" . 2>/dev/null
    echo "=== summary"
    printf '%s' "$SUMMARY"
}

case "${1:-}" in
build) build "${2:-build-dev}" "${3:-.carry-all}" || exit 1 ;;
run) shift; run "$@" ;;
*) sed -n '2,20p' "$0"; exit 2 ;;
esac
