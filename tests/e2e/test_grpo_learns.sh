#!/usr/bin/env bash
# Learning check of the online stack: `cpt run examples/grpo_arithmetic.toml` (trainer + 1 cpt-rollout + 1 cpt-reward +
# a private redis-server) starting from examples/models/tiny-arith-sft, for its first STEPS steps. The mean training
# reward of the last N steps must exceed that of the first N steps by MIN_GAIN, within MAX_SECONDS; the held-out
# greedy accuracy (val/accuracy, 100 questions never trained on) is printed before and after, and must not drop.
# Sized to what it asserts: the reward rises within the first ~40 steps and then holds (over 300 steps the gain of
# the last 30 over the first 30 is no larger than that of steps 81-100 over 1-20), so 100 steps suffice.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
STEPS=${STEPS:-100}
N=${N:-20}
MIN_GAIN=${MIN_GAIN:-0.02}
MAX_SECONDS=${MAX_SECONDS:-900}
T=$(mktemp -d /tmp/cpt-grpo-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$SRC"
start=$(date +%s)
"$BUILD/cpt" run examples/grpo_arithmetic.toml run.dir="$T/run" train.steps="$STEPS" run.progress_every_s=30 > "$T/log" 2>&1 || {
  cat "$T/log"; tail -n 30 "$T/run/logs/"*.log; exit 1; }
secs=$(( $(date +%s) - start ))
M="$T/run/metrics.jsonl"
# reward/mean per step, in step order
grep -o '"step":[0-9]*,[^}]*"reward/mean":[-0-9.e]*' "$M" | sed -E 's/"step":([0-9]+),.*"reward\/mean":([-0-9.e]+)/\1 \2/' \
  | sort -n > "$T/reward"
steps=$(wc -l < "$T/reward")
[ "$steps" -eq "$STEPS" ] || { echo "FAIL: $steps steps logged, not $STEPS"; cat "$T/log"; exit 1; }
first=$(head -n "$N" "$T/reward" | awk '{s += $2} END {printf "%.4f", s / NR}')
last=$(tail -n "$N" "$T/reward" | awk '{s += $2} END {printf "%.4f", s / NR}')
val=$(grep -o '"val/accuracy":[-0-9.e]*' "$M" | cut -d: -f2 | tr '\n' ' ')
val0=$(echo $val | awk '{print $1}')
val1=$(echo $val | awk '{print $NF}')
echo "test_grpo_learns: $steps steps in ${secs}s; mean reward first $N steps $first, last $N steps $last (need +$MIN_GAIN," \
  "margin $(awk -v a="$first" -v b="$last" -v g="$MIN_GAIN" 'BEGIN { printf "%.4f", b - a - g }'));"
echo "  val/accuracy along the run: $val"
awk -v a="$first" -v b="$last" -v g="$MIN_GAIN" 'BEGIN { exit !(b - a >= g) }' || { echo "FAIL: reward gain $first -> $last < $MIN_GAIN"; exit 1; }
awk -v a="$val0" -v b="$val1" 'BEGIN { exit !(b >= a) }' || { echo "FAIL: val/accuracy fell $val0 -> $val1"; exit 1; }
[ "$secs" -le "$MAX_SECONDS" ] || { echo "FAIL: took ${secs}s > ${MAX_SECONDS}s"; exit 1; }
# every group trained once, versions published and the final checkpoint written
gps=$(grep -E '^groups_per_step *=' examples/grpo_arithmetic.toml | awk '{print $3}')
trained=$(grep -o '"groups/trained":[0-9]*' "$M" | tail -1 | cut -d: -f2)
[ "$trained" = $((steps * gps)) ] || { echo "FAIL: $trained groups trained in $steps steps of $gps"; exit 1; }
test -s "$T/run/checkpoints/latest" || { echo "FAIL: no final checkpoint"; exit 1; }
ls "$T/run/weights/"v*.safetensors > /dev/null || { echo "FAIL: no weight versions"; exit 1; }
echo "test_grpo_learns: ok"
