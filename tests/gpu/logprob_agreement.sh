#!/bin/bash
# Train-inference logprob agreement on the GPU (issue 22): how far the trainer's recomputed token logprobs are from
# the rollout's behaviour logprobs, per token, with the agree/* metrics of every online step (trainer/online_agree.h:
# sync mode, so every group is of the trainer's weights and the gap is numerics alone). For each model shape cpt
# first trains the model with SFT from random weights on the synthetic arithmetic task (a trained model has the
# confident, large logits where bf16 rounding shows), exports it, then runs a few GRPO steps of examples/grpo_gpu.toml
# once per case and prints one line per case. Run it before and after a change to the logits' precision: the same
# command gives both figures.
#
#   tests/gpu/logprob_agreement.sh --cpu-smoke [BUILD]   here: the same flow on the CPU with a tiny model (fp32 on
#                                                        both sides: every gap below 1e-4)
#   tests/gpu/logprob_agreement.sh build BUILD DIR       here: binaries, libraries and redis-server into DIR (the
#                                                        same folder as tests/gpu/grpo_gpu_run.sh build)
#   tests/gpu/logprob_agreement.sh run DIR               on the device machine
#
# A case is SHAPE:TRAINER:ROLLOUT, each side cuda or cpu. cuda:cuda is what a GPU run sees; cpu:cuda isolates the
# GPU rollout's error (the CPU trainer is fp32 throughout), cuda:cpu the GPU trainer's. Both sides off by the same
# amount show as a small cuda:cuda gap beside large one-sided gaps (and tis_weight/mean near 1 tells nothing then).
# Shapes: 63m (hidden 768, 10 layers: grpo_gpu_run.sh's model), 0.5b (Qwen2.5-0.5B's shape with the tiny tokenizer).
# Knobs (env): CASES (default "63m:cuda:cuda 63m:cpu:cuda 63m:cuda:cpu 0.5b:cuda:cuda"), STEPS (GRPO steps a case,
# 3), GROUPS_PER_STEP (8, of 16 completions each), SFT_STEPS_63M (300), SFT_STEPS_05B (150), GRPO_LR (2e-5), OUT
# (runs/logprob-agreement).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$(pwd)

with_marker() { sed 's/"answer":"\([^"]*\)"/"answer":"#### \1"/'; }

shape_args() { # SHAPE: the model.* keys of a random model of that shape
  case $1 in
  63m) echo model.hidden_size=768 model.intermediate_size=2048 model.num_layers=10 model.num_heads=12 model.num_kv_heads=4 ;;
  0.5b) echo model.hidden_size=896 model.intermediate_size=4864 model.num_layers=24 model.num_heads=14 model.num_kv_heads=2 ;;
  tiny) echo model.hidden_size=32 model.intermediate_size=64 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1 ;;
  *) echo "unknown shape $1 (63m, 0.5b, tiny)" >&2; return 1 ;;
  esac
}

# sft BIN OUT SHAPE: $OUT/SHAPE/export, trained with SFT on the GPU (the tiny shape: a few steps on the CPU)
sft() {
  local bin=$1 out=$2 shape=$3 d=$2/$3 args
  [ -d "$d/export" ] && return 0
  mkdir -p "$d"
  read -ra args <<< "$(shape_args "$shape")"
  case $shape in
  63m) args+=(train.device=cuda train.steps="${SFT_STEPS_63M:-300}" optim.lr=1e-3 train.tokens_per_micro_batch=16384) ;;
  0.5b) args+=(train.device=cuda train.steps="${SFT_STEPS_05B:-150}" optim.lr=3e-4 train.tokens_per_micro_batch=16384) ;;
  tiny) args+=(train.steps=40 train.threads=1) ;;
  esac
  "$bin/cpt-train" examples/sft_arithmetic.toml run.dir="$d/sft" data.train="$out/data/train.jsonl" \
    data.eval="$out/data/eval.jsonl" tokenizer.path=examples/tiny-tokenizer train.eval_every=0 train.eval_generate=0 \
    train.log_every=50 checkpoint.every=0 "${args[@]}" 2> "$d/sft.log" || { tail -30 "$d/sft.log"; return 1; }
  grep -E "sft done|params" "$d/sft.log" | tail -2 | sed "s/^/  $shape: /" || true
  "$bin/cpt" export "$d/sft" "$d/export" > "$d/export.log" 2>&1 || { cat "$d/export.log"; return 1; }
}

# grpo BIN OUT SHAPE TRAINER ROLLOUT: STEPS sync GRPO steps into $OUT/SHAPE/TRAINER-ROLLOUT
grpo() {
  local bin=$1 out=$2 shape=$3 tdev=$4 rdev=$5 run=$2/$3/$4-$5 transport=cuda_ipc extra=()
  [ "$tdev" = cuda ] && [ "$rdev" = cuda ] || transport=file
  [ "$shape" = tiny ] && extra+=(rollout.group_size=4 rollout.slots=16 train.tokens_per_micro_batch=2048
                                 rollout.threads=1 train.threads=1)
  rm -rf "$run"
  "$bin/cpt" run examples/grpo_gpu.toml run.dir="$run" model.path="$out/$shape/export" \
    data.train="$out/data/grpo.jsonl" async.mode=sync train.steps="${STEPS:-3}" train.groups_per_step="${GROUPS_PER_STEP:-8}" \
    optim.lr="${GRPO_LR:-2e-5}" train.device="$tdev" rollout.device="$rdev" weights.transport=$transport \
    validation.before_training=false validation.every_steps=0 "${extra[@]}" > "$run.log" 2>&1 || {
    tail -30 "$run.log"; tail -n 30 "$run/logs/"*.log 2>/dev/null; return 1; }
}

# report OUT CASE...: one line per case, over its steps: tokens compared, mean of agree/logprob_delta_mean, max of
# agree/logprob_delta_max, mean of agree/prob_delta_frac10, mean of tis_weight/mean; LIMIT (optional): fail when a
# case's max is not below it
report() {
  local out=$1
  shift
  python3 - "$out" "${LIMIT:-}" "$@" <<'PY'
import json, sys
out, limit, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{'case (shape:trainer:rollout)':30} {'steps':>5} {'tokens':>7} {'|d| mean':>10} {'|d| max':>10} "
      f"{'frac10':>8} {'tis_w':>8}")
bad = []
for c in cases:
    shape, t, r = c.split(":")
    rows = [json.loads(l) for l in open(f"{out}/{shape}/{t}-{r}/metrics.jsonl") if l.strip()]
    rows = [x for x in rows if "agree/tokens" in x]
    n = sum(x["agree/tokens"] for x in rows)
    if not rows or n == 0:
        bad.append(f"{c}: no agree/* figures"); continue
    w = [x for x in rows if x["agree/tokens"] > 0]
    mean = sum(x["agree/logprob_delta_mean"] * x["agree/tokens"] for x in w) / n
    mx = max(x["agree/logprob_delta_max"] for x in w)
    frac = sum(x["agree/prob_delta_frac10"] * x["agree/tokens"] for x in w) / n
    tis = sum(x.get("tis_weight/mean", float("nan")) for x in rows) / len(rows)
    print(f"{c:30} {len(rows):5d} {n:7d} {mean:10.3g} {mx:10.3g} {frac:8.4f} {tis:8.5f}")
    if limit and not mx < float(limit): bad.append(f"{c}: agree/logprob_delta_max {mx:.3g}, not below {limit}")
if bad: sys.exit("\n".join(bad))
PY
}

# flow BIN OUT CASE...
flow() {
  local bin=$1 out=$2 c shape
  shift 2
  rm -rf "$out"
  mkdir -p "$out/data"
  "$bin/cpt" data gen arithmetic --format rl --split sft --n 30000 --seed 1 | with_marker > "$out/data/train.jsonl"
  "$bin/cpt" data gen arithmetic --format rl --split eval --n 200 --seed 2 | with_marker > "$out/data/eval.jsonl"
  "$bin/cpt" data gen arithmetic --format rl --split rl --n 20000 --seed 3 > "$out/data/grpo.jsonl"
  for c in "$@"; do
    shape=${c%%:*}
    sft "$bin" "$out" "$shape"
    local t0=$SECONDS
    grpo "$bin" "$out" "$shape" "$(echo "$c" | cut -d: -f2)" "$(echo "$c" | cut -d: -f3)"
    echo "  $c: $((SECONDS - t0)) s"
  done
  report "$out" "$@"
}

case "${1:-}" in
--cpu-smoke)
  B=${2:-build}
  case $B in /*) ;; *) B=$SRC/$B ;; esac
  LIMIT=1e-4 flow "$B" "${OUT:-/tmp/cpt-logprob-agreement-smoke}" tiny:cpu:cpu
  echo "logprob_agreement --cpu-smoke: ok"
  ;;
build)
  tests/gpu/grpo_gpu_run.sh build "$2" "$3"
  ;;
run)
  D=$(cd "$2" && pwd)
  eval "$(tests/gpu/run_on_device.sh carry-env "$D")"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
  # shellcheck disable=SC2086
  flow "$D/bin" "${OUT:-$SRC/runs/logprob-agreement}" ${CASES:-63m:cuda:cuda 63m:cpu:cuda 63m:cuda:cpu 0.5b:cuda:cuda}
  ;;
*)
  sed -n '2,24p' "$0"
  exit 2
  ;;
esac
