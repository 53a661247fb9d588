#!/usr/bin/env bash
# train.device = "cuda" end to end: examples/sft_arithmetic.toml (a tiny random Qwen2-style model) trained for
# STEPS steps on the CPU and on the GPU from the same seed and data must reach held-out losses within REL_TOL of
# each other (bf16 on the GPU), below the untrained ln(709) = 6.56. Then the GPU run's checkpoint (weights + AdamW
# state written from the device) is resumed for EXTRA more steps twice: on the GPU, and on the CPU from a copy of
# the run folder; both must resume at step STEPS, finish, and agree within REL_TOL.
# CPT_BUILD names the folder with cpt and cpt-train (ctest sets it); CUDA_DEVICE the GPU (default 0);
# GPU_DEVICE=cpu runs the "GPU" side on the CPU too (a check of this script on a machine without a GPU).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
STEPS=${STEPS:-200}
EXTRA=${EXTRA:-40}
REL_TOL=${REL_TOL:-0.1}
GPU_DEVICE=${GPU_DEVICE:-cuda}
T=$(mktemp -d /tmp/cpt-train-cuda-XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

"$BUILD/cpt" data gen arithmetic --format rl --split train --n 20000 --seed 1 > "$T/train.jsonl"
"$BUILD/cpt" data gen arithmetic --format rl --split eval --n 200 --seed 2 > "$T/eval.jsonl"
common=(data.train="$T/train.jsonl" data.eval="$T/eval.jsonl" tokenizer.path="$SRC/examples/tiny-tokenizer"
        train.eval_generate=0 train.eval_every=0 train.threads=0 train.cuda_device="${CUDA_DEVICE:-0}")

# run NAME DEVICE STEPS: trains (or resumes) $T/NAME, prints the final eval loss
run() {
    local name=$1 dev=$2 steps=$3 start
    start=$(date +%s.%N)
    "$BUILD/cpt-train" "$SRC/examples/sft_arithmetic.toml" run.dir="$T/$name" train.device="$dev" \
        train.steps="$steps" "${common[@]}" 2> "$T/$name.log" || { cat "$T/$name.log" >&2; exit 1; }
    local done_line
    done_line=$(grep 'sft done: step' "$T/$name.log" | tail -1)
    [ -n "$done_line" ] || { echo "FAIL: $name: no 'sft done' line" >&2; tail -5 "$T/$name.log" >&2; exit 1; }
    local step el
    step=$(echo "$done_line" | grep -o 'step [0-9]*' | awk '{print $2}')
    el=$(echo "$done_line" | grep -o 'eval loss [0-9.]*' | awk '{print $3}')
    [ "$step" = "$steps" ] || { echo "FAIL: $name stopped at step $step, not $steps" >&2; exit 1; }
    printf '%s\t%s\n' "$el" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
}

close() { awk -v a="$1" -v b="$2" -v t="$REL_TOL" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * b) }'; }

read -r cpu_loss cpu_s < <(run cpu cpu "$STEPS")
read -r gpu_loss gpu_s < <(run gpu "$GPU_DEVICE" "$STEPS")
[ "$GPU_DEVICE" != cuda ] || grep -q 'on CUDA device' "$T/gpu.log" || { echo "FAIL: the GPU run did not place its model on the GPU"; exit 1; }
echo "sft $STEPS steps: eval loss cpu $cpu_loss (${cpu_s}s), $GPU_DEVICE $gpu_loss (${gpu_s}s)"
close "$gpu_loss" "$cpu_loss" || { echo "FAIL: cuda eval loss $gpu_loss vs cpu $cpu_loss (tolerance $REL_TOL)"; exit 1; }
awk -v e="$gpu_loss" 'BEGIN { exit !(e < 6.0) }' || { echo "FAIL: the GPU run did not learn ($gpu_loss)"; exit 1; }

cp -r "$T/gpu" "$T/gpu_on_cpu"
read -r r_gpu _ < <(run gpu "$GPU_DEVICE" $((STEPS + EXTRA)))
read -r r_cpu _ < <(run gpu_on_cpu cpu $((STEPS + EXTRA)))
for n in gpu gpu_on_cpu; do
    grep -q "resumed from .* at step $STEPS" "$T/$n.log" || { echo "FAIL: $n did not resume at step $STEPS"; exit 1; }
done
echo "resume of the GPU checkpoint for $EXTRA steps: eval loss on cuda $r_gpu, on cpu $r_cpu"
close "$r_gpu" "$r_cpu" || { echo "FAIL: resumed losses differ: cuda $r_gpu, cpu $r_cpu"; exit 1; }
echo "test_train_cuda: ok"
