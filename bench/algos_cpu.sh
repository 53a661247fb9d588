#!/bin/bash
# Each online algorithm on the main job, on the CPU: the README's `./run.sh` run (examples/grpo_arithmetic.toml, the
# SFT'd 0.25M example model, 300 steps, RL prompts disjoint from the SFT data and from the 100 held-out questions)
# with the algorithm's documented settings (bench/rl_learning.sh's algo_overrides), over SEEDS, beside the same run
# at optim.lr = 0. Prints a markdown table: held-out greedy accuracy at step 0 and at the end (mean over seeds and
# each seed), the mean training reward of the first and last 30 steps, and wall time.
#
#   bench/algos_cpu.sh [BUILD]     (BUILD: a build folder with cpt, default build-cpu, else build)
#
# Knobs (env): ALGOS ("main dr_grpo dapo gspo ppo opd"; main is the job as shipped: GRPO with clip-higher and
# token-mean), SEEDS ("1 2"), STEPS (300), PAR (2: runs at a time, each trainer, rollout and reward on one thread),
# TEACHER_STEPS (1000), OUT (/tmp/cpt-algos), ASYNC ("": with "0 1 2" the job as shipped runs once in sync mode
# (0) and once per async.max_staleness, one run at a time whatever PAR, seed ASYNC_SEED (1): steps/s, and the wall
# time from the step-0 validation to the first validation at or above the sync run's final held-out accuracy;
# ALGOS= SEEDS= ASYNC="0 1 2" runs only those). OPD's teacher is the example model SFT'd further on its own SFT data
# (the task's sft split, scripts/make_example_model.sh --data-only) for TEACHER_STEPS at lr 1e-3; its held-out
# accuracy is printed; the student is the example model and the signal the reverse KL alone (no task reward).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-$([ -x build-cpu/cpt ] && echo build-cpu || echo build)}
ALGOS=${ALGOS-"main dr_grpo dapo gspo ppo opd"} SEEDS=${SEEDS-"1 2"} STEPS=${STEPS:-300} PAR=${PAR:-2}
TEACHER_STEPS=${TEACHER_STEPS:-1000} ASYNC=${ASYNC:-}
OUT=${OUT:-/tmp/cpt-algos} K=12 LR=1e-4
[ -x "$BUILD/cpt" ] || { echo "algos_cpu: no $BUILD/cpt (scripts/build.sh cpu)" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT"

overrides() { # the settings of docs/online.md for each, as bench/rl_learning.sh runs them
  case $1 in
  main | lr0) echo "" ;;
  grpo) echo "algo.variant=grpo algo.clip_eps_high=0.2 algo.kl_beta=-1 algo.loss_agg=seq-mean-token-mean" ;;
  dr_grpo) echo "algo.variant=dr_grpo algo.clip_eps_high=0.2 algo.kl_beta=0 algo.loss_agg_norm=$K" ;;
  dapo) echo "algo.dynamic_sampling=true algo.overlong_max_len=$K algo.overlong_buffer_len=$((K / 3))" ;;
  gspo) echo "algo.variant=gspo algo.kl_beta=0 algo.loss_agg=seq-mean-token-mean" ;;
  ppo) echo "algo.type=ppo algo.clip_eps_high=0.2 algo.kl_beta=0 critic.lr=1e-3" ;;
  opd) echo "algo.type=opd algo.kl_beta=0 algo.opd_task_weight=0 teacher.path=$OUT/teacher" ;;
  async0) echo "async.mode=sync" ;;
  async[1-9]) echo "async.mode=async async.max_staleness=${1#async}" ;;
  *) echo "algos_cpu: unknown algorithm '$1'" >&2; return 1 ;;
  esac
}

if [[ " $ALGOS " == *" opd "* ]]; then # the teacher: the example model trained further on its SFT data
  scripts/make_example_model.sh --data-only "$OUT/sft-data" "$BUILD" > /dev/null
  OMP_NUM_THREADS=2 "$BUILD/cpt-train" examples/sft_arithmetic.toml model.init=load \
    model.path=examples/models/tiny-arith1-sft tokenizer.path=examples/models/tiny-arith1-sft \
    run.dir="$OUT/teacher-sft" \
    data.train="$OUT/sft-data/train.jsonl" data.eval= train.steps="$TEACHER_STEPS" optim.lr=1e-3 optim.warmup_steps=20 \
    train.max_seq_len=32 train.tokens_per_micro_batch=1024 train.eval_every=0 train.eval_generate=0 checkpoint.every=0 \
    2> "$OUT/teacher-sft.log" || { tail -20 "$OUT/teacher-sft.log"; exit 1; }
  "$BUILD/cpt" export "$OUT/teacher-sft" "$OUT/teacher" > /dev/null
  for m in examples/models/tiny-arith1-sft "$OUT/teacher"; do
    "$BUILD/cpt" eval --model "$m" --data examples/data/arithmetic1_rl_eval.jsonl --reward math --chat-template none \
      --max-new-tokens 12 --json > "$OUT/eval.json" 2> "$OUT/eval.log" || { cat "$OUT/eval.log"; exit 1; }
    acc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["accuracy"])' "$OUT/eval.json")
    echo "algos_cpu: $m: held-out greedy accuracy $acc" >&2
  done
fi

for a in $ALGOS; do overrides "$a" > /dev/null || exit 2; done # a typo fails before any run
runs=()
[ -z "$ALGOS" ] || for a in $ALGOS lr0; do for s in $SEEDS; do runs+=("$a:$s"); done; done
one() { # ALGO:SEED
  local a=${1%%:*} s=${1##*:} t0
  local extra ov
  ov=$(overrides "$a") || return 1
  read -r -a extra <<< "$ov"
  [ "$a" = lr0 ] && extra+=(optim.lr=0)
  t0=$(date +%s.%N)
  "$BUILD/cpt" run examples/grpo_arithmetic.toml run.dir="$OUT/$a-$s" run.seed="$s" train.steps="$STEPS" \
    "${extra[@]}" > "$OUT/$a-$s.log" 2>&1 || { echo "algos_cpu: $a seed $s failed (see $OUT/$a-$s.log)" >&2; return 1; }
  python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0" > "$OUT/$a-$s.wall"
  echo "algos_cpu: $a seed $s done in $(cat "$OUT/$a-$s.wall") s" >&2
}
pids=()
wait_all() { # a run that failed fails the bench (its log is named above)
  local p rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  return $rc
}
for r in "${runs[@]}"; do
  one "$r" &
  pids+=($!)
  [ "${#pids[@]}" -lt "$PAR" ] || wait_all
done
wait_all
for a in $ASYNC; do one "async$a:${ASYNC_SEED:-1}"; done # alone on the machine: their wall times are compared

[ -z "$ASYNC" ] || python3 - "$OUT" "$ASYNC" "${ASYNC_SEED:-1}" <<'PY'
import json, os, sys
out, levels, seed = sys.argv[1], sys.argv[2].split(), sys.argv[3]
def curve(name):
    rows = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
    val = [(r["step"], r["val/accuracy"], r["time"]) for r in rows if "val/accuracy" in r]
    steps = [r for r in rows if "reward/mean" in r]
    sps = (len(steps) - 1) / (steps[-1]["time"] - steps[0]["time"]) if len(steps) > 1 else float("nan")
    return val, sps
goal = curve(f"async0-{seed}")[0][-1][1]
print(f"| run | steps/s | held-out accuracy by validation (step: accuracy) "
      f"| wall s to {goal:.2f} from the step-0 validation | run wall s |")
print("| --- | ---: | --- | ---: | ---: |")
for lv in levels:
    val, sps = curve(f"async{lv}-{seed}")
    reach = next((t - val[0][2] for s, a, t in val if a >= goal), None)
    name = "sync" if lv == "0" else f"async, max_staleness {lv}"
    wall = float(open(os.path.join(out, f"async{lv}-{seed}.wall")).read())
    print(f"| {name} | {sps:.2f} | {' '.join(f'{s}:{a:.2f}' for s, a, _ in val)} | "
          f"{'not reached' if reach is None else f'{reach:.0f}'} | {wall:.0f} |")
PY
[ -n "$ALGOS" ] || exit 0

python3 - "$OUT" "$ALGOS lr0" "$SEEDS" <<'PY'
import json, os, statistics, sys
out, algos, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| algorithm | held-out accuracy, step 0 -> end (mean; per seed) | gain "
      "| reward, first 30 -> last 30 steps | wall s |")
print("| --- | --- | ---: | --- | ---: |")
for a in algos:
    acc0, acc1, r0, r1, walls, per = [], [], [], [], [], []
    for s in seeds:
        d = os.path.join(out, f"{a}-{s}")
        rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
        val = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
        rew = [r["reward/mean"] for r in rows if "reward/mean" in r]
        acc0.append(val[0]); acc1.append(val[-1]); per.append(f"{val[0]:.2f} -> {val[-1]:.2f}")
        r0.append(statistics.mean(rew[:30])); r1.append(statistics.mean(rew[-30:]))
        walls.append(float(open(os.path.join(out, f"{a}-{s}.wall")).read()))
    m = statistics.mean
    print(f"| {a} | {m(acc0):.3f} -> {m(acc1):.3f} ({'; '.join(per)}) | {m(acc1) - m(acc0):+.3f} | "
          f"{m(r0):.3f} -> {m(r1):.3f} | {m(walls):.0f} |")
PY
