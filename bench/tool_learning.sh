#!/usr/bin/env bash
# RL with a tool against RL without it (issue 25): examples/grpo_tool.toml (GRPO from examples/models/tiny-tool-sft on
# multiply-2digit, "What is 47 * 86?") over SEEDS, three ways each:
#   tool   env.type = calculator: a call gets the calculator's answer from the run's cpt-env worker
#   none   env.type = none with rollout.stop = ["</tool_call>"]: no tool; a sample that calls ends at its call
#   lr0    env.type = calculator at optim.lr = 0: the start, sampled the same way
# For every run: held-out greedy accuracy (val/accuracy: 200 questions of the eval split, never in SFT or RL, tool
# calls answered in-process as `cpt eval` does) before training and at the end, the share of those greedy answers
# that called the tool (val/tool_use), and the mean training reward of the first and last 5 steps. Then the final
# model's sampled held-out accuracy with the tool (`cpt eval`, temperature 1, 4 samples of the first 50 questions)
# and its tool use. Prints a table and each way's mean gain with its spread over the seeds; exits 1 unless the
# smallest gain with the tool is above the largest of the other two (the target: beyond the seed spread).
#   bench/tool_learning.sh                 (SEEDS="1 2 3", the config's steps; BUILD=build, KEEP=1 keeps the runs)
# Runs one at a time under nice, 1 OpenMP thread per process (the run's roles share the machine).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-${CPT_BUILD:-$SRC/build}}
SEEDS=${SEEDS:-"1 2 3"}
CONFIG=${CONFIG:-examples/grpo_tool.toml}
T=$(mktemp -d /tmp/cpt-tool-learning-XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$T"' EXIT
cd "$SRC"
export OMP_NUM_THREADS=1

# metric NAME FILE: the values of NAME, one per line, in step order
metric() { { grep -o "\"$1\":[-0-9.e]*" "$2" || true; } | cut -d: -f2; }
mean() { awk '{s += $1; n++} END {printf "%.3f", n ? s / n : 0}'; }
sampled() { # MODEL [env overrides]: "accuracy tool_use" sampled with the tool
  nice -n 10 "$BUILD/cpt" eval --model "$1" --data examples/data/multiply2_rl_eval.jsonl --reward math \
    --chat-template none --max-new-tokens 64 --samples 4 --temperature 1 --max-records 50 --json env.type=calculator |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.3f %.3f" % (r["accuracy"], r["tool_use"]))'
}

read -r s_acc s_use < <(sampled examples/models/tiny-tool-sft)
echo "start model (examples/models/tiny-tool-sft), sampled with the tool: accuracy $s_acc, tool use $s_use"
printf "%-5s %4s | %-14s | %-14s | %-14s | %-19s | %s\n" way seed "val acc" "val tool use" "reward 5/5" \
  "with tool: acc (use)" "seconds"
: > "$T/gains"
for seed in $SEEDS; do
  for way in tool none lr0; do
    case $way in
      tool) ov=() ;;
      none) ov=(env.type=none 'rollout.stop=["</tool_call>"]') ;;
      lr0) ov=(optim.lr=0) ;;
    esac
    dir=$T/$way-$seed start=$(date +%s)
    nice -n 10 "$BUILD/cpt" run "$CONFIG" run.dir="$dir" run.seed="$seed" run.progress_every_s=600 "${ov[@]}" \
      > "$T/$way-$seed.log" 2>&1 || { tail -n 20 "$T/$way-$seed.log" "$dir"/logs/*.log; exit 1; }
    secs=$(( $(date +%s) - start )) M=$dir/metrics.jsonl
    v0=$(metric val/accuracy "$M" | head -1) v1=$(metric val/accuracy "$M" | tail -1)
    u0=$(metric val/tool_use "$M" | head -1) u1=$(metric val/tool_use "$M" | tail -1)
    r0=$(metric reward/mean "$M" | head -5 | mean) r1=$(metric reward/mean "$M" | tail -5 | mean)
    read -r e_acc e_use < <(sampled "$dir")
    printf "%-5s %4s | %.3f -> %.3f | %5s -> %5s | %.3f -> %.3f | %.3f (%.2f) | %s\n" "$way" "$seed" "$v0" "$v1" \
      "${u0:--}" "${u1:--}" "$r0" "$r1" "$e_acc" "$e_use" "$secs"
    echo "$way $(awk -v a="$v0" -v b="$v1" 'BEGIN {printf "%.4f", b - a}')" >> "$T/gains"
  done
done
echo "held-out greedy accuracy gain (end - start) over seeds $SEEDS: mean [min, max]"
for way in tool none lr0; do
  awk -v w="$way" '$1 == w {s += $2; n++; if (n == 1 || $2 < lo) lo = $2; if (n == 1 || $2 > hi) hi = $2}
    END {printf "  %-5s %+.3f [%+.3f, %+.3f]\n", w, s / n, lo, hi}' "$T/gains"
done
awk '$1 == "tool" {if (!t++ || $2 < lo) lo = $2} $1 != "tool" {if (!o++ || $2 > hi) hi = $2}
  END {if (lo > hi) {printf "target met: the smallest gain with the tool (%+.3f) is above the largest without it or at lr 0 (%+.3f)\n", lo, hi; exit 0}
       printf "target NOT met: the smallest gain with the tool (%+.3f) <= the largest of the others (%+.3f)\n", lo, hi; exit 1}' "$T/gains"
