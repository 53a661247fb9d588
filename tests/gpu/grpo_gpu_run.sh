#!/bin/bash
# A GRPO run on one GPU (issue 9): cpt first trains a 63M-parameter model with SFT on the synthetic arithmetic task,
# exports it, then runs examples/grpo_gpu.toml with `cpt run` (trainer and GPU rollout engine colocated on GPU 0,
# weights over cuda_ipc, reward on the CPU) and prints steps/s, tokens/s and the reward curve.
#
#   tests/gpu/grpo_gpu_run.sh --cpu-smoke [BUILD]   here: the same flow on the CPU with a tiny model, file transport,
#                                                   a few steps (catches typos before device time is spent)
#   tests/gpu/grpo_gpu_run.sh build BUILD DIR       here: cpt binaries, their shared libraries and redis-server (+ its
#                                                   libraries) into DIR (git-ignored .carry-*), for the device tool
#   tests/gpu/grpo_gpu_run.sh run DIR               on the device machine (no -dev packages, no redis-server there)
#
# Knobs (env): SFT_STEPS (300: short of memorising, so GRPO has room), SFT_LR (1e-3), GRPO_STEPS (300), GRPO_LR (2e-5),
# TRANSPORT (cuda_ipc; file works too), ROLLOUT_DEVICE / TRAIN_DEVICE (cuda; cpu needs TRANSPORT=file), GRPO_EXTRA
# (more key=value overrides of the GRPO run, e.g. train.zero=1), OUT (runs/gpu-grpo).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$(pwd)
BINS="cpt cpt-train cpt-rollout cpt-reward cpt-queue cpt-sched cpt-scale"

with_marker() { sed 's/"answer":"\([^"]*\)"/"answer":"#### \1"/'; }

# SFT (random init) -> export -> GRPO. $1 bin dir, $2 out dir, $3 "gpu" or "cpu"
flow() {
  local bin=$1 out=$2 mode=$3
  rm -rf "$out"
  mkdir -p "$out/data"
  "$bin/cpt" data gen arithmetic --format rl --split sft --n 30000 --seed 1 | with_marker > "$out/data/train.jsonl"
  "$bin/cpt" data gen arithmetic --format rl --split eval --n 200 --seed 2 | with_marker > "$out/data/eval.jsonl"
  # GRPO's prompts: the rl split, which shares no question with the SFT data's sft split (scripts/check_splits.py)
  "$bin/cpt" data gen arithmetic --format rl --split rl --n 20000 --seed 3 > "$out/data/grpo.jsonl"
  local sft=() grpo=()
  if [ "$mode" = gpu ]; then
    sft=(train.device=cuda model.hidden_size=768 model.intermediate_size=2048 model.num_layers=10 model.num_heads=12
         model.num_kv_heads=4 train.steps="${SFT_STEPS:-300}" train.tokens_per_micro_batch=16384 optim.lr="${SFT_LR:-1e-3}"
         train.log_every=100 train.eval_every=0 train.eval_generate=200)
    grpo=(train.steps="${GRPO_STEPS:-300}" weights.transport="${TRANSPORT:-cuda_ipc}" optim.lr="${GRPO_LR:-2e-5}"
          rollout.device="${ROLLOUT_DEVICE:-cuda}" train.device="${TRAIN_DEVICE:-cuda}"
          validation.every_steps=50)
  else
    sft=(train.steps=40 train.log_every=10 train.eval_every=0 train.eval_generate=20 train.threads=1)
    grpo=(train.device=cpu rollout.device=cpu weights.transport=file train.steps=3 train.groups_per_step=4
          rollout.group_size=4 rollout.slots=16 train.tokens_per_micro_batch=2048 validation.every_steps=0
          validation.before_training=false rollout.threads=1 train.threads=1)
  fi
  local t0 t1 t2
  t0=$(date +%s.%N)
  "$bin/cpt-train" examples/sft_arithmetic.toml run.dir="$out/sft" data.train="$out/data/train.jsonl" \
    data.eval="$out/data/eval.jsonl" tokenizer.path=examples/tiny-tokenizer train.eval_max_new_tokens=12 \
    checkpoint.every=0 "${sft[@]}" 2> "$out/sft.log" || { tail -30 "$out/sft.log"; return 1; }
  grep -E "sft done|exact|params" "$out/sft.log" | tail -3 || true
  "$bin/cpt" export "$out/sft" "$out/export" > /dev/null
  t1=$(date +%s.%N)
  "$bin/cpt" run examples/grpo_gpu.toml run.dir="$out/grpo" model.path="$out/export" data.train="$out/data/grpo.jsonl" \
    "${grpo[@]}" ${GRPO_EXTRA:-} > "$out/grpo.log" 2>&1 || {
    tail -40 "$out/grpo.log"; tail -n 30 "$out/grpo/logs/"*.log 2>/dev/null; return 1; }
  t2=$(date +%s.%N)
  summary "$out" "$t0" "$t1" "$t2" "$([ "$mode" = gpu ] && echo 16 || echo 4)"
}

summary() {
  local out=$1 t0=$2 t1=$3 t2=$4
  python3 - "$out/grpo/metrics.jsonl" "$t0" "$t1" "$t2" "$5" <<'PY'
import json, sys
path, t0, t1, t2, group_size = sys.argv[1], *map(float, sys.argv[2:6])
rows = [json.loads(l) for l in open(path) if l.strip()]
steps = [r for r in rows if "reward/mean" in r]
val = [(r["step"], r["val/accuracy"]) for r in rows if "val/accuracy" in r]
def mean(k):
    v = [r[k] for r in steps if k in r]
    return sum(v) / len(v) if v else float("nan")
n = len(steps)
print(f"\nSFT + export: {t1 - t0:.1f} s;  GRPO (cpt run, incl. start-up): {t2 - t1:.1f} s, {n} steps, "
      f"{n / max(t2 - t1, 1e-9):.3f} steps/s")
# steady state: between the first and the last step's metric line (no start-up, no final validation)
span = steps[-1]["time"] - steps[0]["time"] if n > 1 else float("nan")
gen = sum(r["response_len/mean"] * (r["groups/trained"] - p["groups/trained"]) * group_size
          for p, r in zip(steps, steps[1:]))
print(f"steady state: {(n - 1) / span:.3f} steps/s, {gen / span:.0f} completion tokens/s generated (end to end), "
      f"perf/train_tok_s mean {mean('perf/train_tok_s'):.0f}, time/train mean {mean('time/train'):.4f} s, "
      f"time/weight_sync mean {mean('time/weight_sync'):.4f} s")
print("reward curve (steps: reward/mean, and the means of entropy, clip_frac, tis_weight, kl, grad_norm, "
      "over each tenth of the run):")
k = max(1, n // 10)
for i in range(0, n, k):
    chunk = steps[i:i + k]
    m = lambda key: sum(r.get(key, 0.0) for r in chunk) / len(chunk)
    print(f"  {chunk[0]['step']:5d}-{chunk[-1]['step']:5d}: {m('reward/mean'):.4f}   entropy {m('entropy'):.4f} "
          f"clip {m('clip_frac'):.4f} tis {m('tis_weight/mean'):.4f} kl {m('kl'):.2e} grad_norm {m('grad_norm'):.3f}")
print("val/accuracy:", " ".join(f"{s}:{a:.3f}" for s, a in val))
PY
}

case "${1:-}" in
--cpu-smoke)
  B=${2:-build}
  case $B in /*) ;; *) B=$SRC/$B ;; esac
  flow "$B" "${OUT:-/tmp/cpt-grpo-gpu-smoke}" cpu
  echo "grpo_gpu_run --cpu-smoke: ok"
  ;;
build)
  B=$2 D=$3
  mkdir -p "$D/bin" "$D/lib"
  for b in $BINS; do cp "$B/$b" "$D/bin/" && strip "$D/bin/$b"; done
  cp /usr/bin/redis-server "$D/bin/"
  for f in "$D"/bin/*; do
    for lib in $(ldd "$f" | awk '/=> \// {print $3}' | grep -v -E '/lib(c|m|dl|pthread|rt)\.so|ld-linux'); do
      cp -L "$lib" "$D/lib/"
    done
  done
  cp "$B/cpt-satellite.sh" "$D/bin/" # cpt-sched looks for it beside itself
  du -sh "$D"
  ;;
run)
  D=$(cd "$2" && pwd)
  eval "$(tests/gpu/run_on_device.sh carry-env "$D")"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
  flow "$D/bin" "${OUT:-$SRC/runs/gpu-grpo}" "${MODE:-gpu}" # MODE=cpu: check the carried binaries without a GPU
  ;;
*)
  sed -n '2,14p' "$0"
  exit 2
  ;;
esac
