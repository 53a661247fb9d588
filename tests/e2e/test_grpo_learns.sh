#!/usr/bin/env bash
# Learning check of the main job: `cpt run examples/grpo_arithmetic.toml` (trainer + 1 cpt-rollout + 1 cpt-reward +
# a private redis-server) from examples/models/tiny-arith1-sft, all its steps, on prompts the SFT never saw. Asserts
# the issue's bar against the run's own numbers: the mean training reward of the last N steps at least MIN_GAIN
# above that of the first N, and the held-out greedy accuracy (val/accuracy, 100 questions never trained on) at the
# end at least MIN_VAL_GAIN above its value before training. With CONTROL=1 the same run at
# optim.lr = 0 (same seeds) follows, and must gain less than half of each: the gains come from the updates.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
N=${N:-30}
MIN_GAIN=${MIN_GAIN:-0.15}
MIN_VAL_GAIN=${MIN_VAL_GAIN:-0.15}
CONTROL=${CONTROL:-0}
MAX_SECONDS=${MAX_SECONDS:-600}
T=$(mktemp -d /tmp/cpt-grpo-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$SRC"
STEPS=$(awk '/^\[/{sec=$0} sec=="[train]" && $1=="steps"{print $3}' examples/grpo_arithmetic.toml)

# run NAME [overrides...]: prints "reward_first reward_last val_first val_last steps seconds"
run() {
  local name=$1; shift
  local start=$(date +%s)
  "$BUILD/cpt" run examples/grpo_arithmetic.toml run.dir="$T/$name" run.progress_every_s=60 "$@" > "$T/$name.log" 2>&1 || {
    cat "$T/$name.log"; tail -n 30 "$T/$name/logs/"*.log; exit 1; }
  local secs=$(( $(date +%s) - start )) M="$T/$name/metrics.jsonl"
  grep -o '"step":[0-9]*,[^}]*"reward/mean":[-0-9.e]*' "$M" |
    sed -E 's/"step":([0-9]+),.*"reward\/mean":([-0-9.e]+)/\1 \2/' | sort -n > "$T/$name.reward"
  local val=$(grep -o '"val/accuracy":[-0-9.e]*' "$M" | cut -d: -f2 | tr '\n' ' ')
  echo "$(head -n "$N" "$T/$name.reward" | awk '{s += $2} END {printf "%.4f", s / NR}')" \
       "$(tail -n "$N" "$T/$name.reward" | awk '{s += $2} END {printf "%.4f", s / NR}')" \
       "$(echo $val | awk '{print $1}')" "$(echo $val | awk '{print $NF}')" "$(wc -l < "$T/$name.reward")" "$secs"
  echo "  $name: val/accuracy along the run: $val" >&2
}
gain() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
at_least() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }

read -r r0 r1 v0 v1 steps secs < <(run learn)
rg=$(gain "$r0" "$r1") vg=$(gain "$v0" "$v1")
echo "test_grpo_learns: $steps steps in ${secs}s; mean reward first $N steps $r0, last $N $r1 (+$rg, need +$MIN_GAIN);" \
  "val/accuracy $v0 -> $v1 (+$vg, need +$MIN_VAL_GAIN)"
[ "$steps" -eq "$STEPS" ] || { echo "FAIL: $steps steps logged, not $STEPS"; exit 1; }
at_least "$rg" "$MIN_GAIN" || { echo "FAIL: reward gain $r0 -> $r1 < $MIN_GAIN"; exit 1; }
at_least "$vg" "$MIN_VAL_GAIN" || { echo "FAIL: val/accuracy gain $v0 -> $v1 < $MIN_VAL_GAIN"; exit 1; }
[ "$secs" -le "$MAX_SECONDS" ] || { echo "FAIL: took ${secs}s > ${MAX_SECONDS}s"; exit 1; }
# every group trained once, versions published and the final checkpoint written
M="$T/learn/metrics.jsonl"
gps=$(grep -E '^groups_per_step *=' examples/grpo_arithmetic.toml | awk '{print $3}')
trained=$(grep -o '"groups/trained":[0-9]*' "$M" | tail -1 | cut -d: -f2)
[ "$trained" = $((steps * gps)) ] || { echo "FAIL: $trained groups trained in $steps steps of $gps"; exit 1; }
test -s "$T/learn/checkpoints/latest" || { echo "FAIL: no final checkpoint"; exit 1; }
ls "$T/learn/weights/"v*.safetensors > /dev/null || { echo "FAIL: no weight versions"; exit 1; }

if [ "$CONTROL" = 1 ]; then
  read -r c0 c1 w0 w1 csteps csecs < <(run control optim.lr=0)
  cg=$(gain "$c0" "$c1") wg=$(gain "$w0" "$w1")
  echo "test_grpo_learns: control optim.lr=0, $csteps steps in ${csecs}s: reward $c0 -> $c1 (+$cg), val/accuracy" \
    "$w0 -> $w1 (+$wg)"
  [ "$w0" = "$v0" ] || { echo "FAIL: the control starts from val/accuracy $w0, the run from $v0"; exit 1; }
  at_least "$(awk -v g="$rg" 'BEGIN { print g / 2 }')" "$cg" || { echo "FAIL: the lr-0 control gains reward too (+$cg)"; exit 1; }
  at_least "$(awk -v g="$vg" 'BEGIN { print g / 2 }')" "$wg" || { echo "FAIL: the lr-0 control gains accuracy too (+$wg)"; exit 1; }
fi
echo "test_grpo_learns: ok"
