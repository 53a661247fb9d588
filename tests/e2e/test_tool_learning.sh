#!/usr/bin/env bash
# RL learns to use the tool, and only with it: `cpt run examples/grpo_tool.toml` (trainer, rollout, reward and
# cpt-env workers, a private redis-server) for STEPS steps from examples/models/tiny-tool-sft, whose greedy answers
# never call the calculator at the start. With env.type = calculator the held-out greedy accuracy (val/accuracy,
# tool calls answered in-process) must rise from <= 0.05 to >= MIN_ACC and most greedy answers must call the tool
# (val/tool_use); the same run without the tool (env.type = none, rollout.stop = ["</tool_call>"]: a sample that
# calls ends there) must stay <= 0.05. bench/tool_learning.sh is the full
# comparison (3 seeds, an lr-0 control; docs/env.md).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
STEPS=${STEPS:-20}
MIN_ACC=${MIN_ACC:-0.5}
T=$(mktemp -d /tmp/cpt-tool-learn-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$SRC"
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
metric() { { grep -o "\"$1\":[-0-9.e]*" "$2" || true; } | cut -d: -f2; }
run() { # NAME [overrides]: prints "val_start val_end tool_use_end seconds"
  local name=$1 start=$(date +%s)
  shift
  "$BUILD/cpt" run examples/grpo_tool.toml run.dir="$T/$name" train.steps="$STEPS" validation.every_steps="$STEPS" \
    run.progress_every_s=600 "$@" > "$T/$name.log" 2>&1 || { cat "$T/$name.log"; tail -n 30 "$T/$name/logs/"*.log; exit 1; }
  local M=$T/$name/metrics.jsonl u
  u=$(metric val/tool_use "$M" | tail -1)
  echo "$(metric val/accuracy "$M" | head -1) $(metric val/accuracy "$M" | tail -1) ${u:-absent} $(( $(date +%s) - start ))"
}
read -r a0 a1 u1 s1 < <(run tool)
echo "test_tool_learning: with the tool, $STEPS steps in ${s1}s: val/accuracy $a0 -> $a1, val/tool_use $u1"
read -r b0 b1 v1 s2 < <(run none env.type=none 'rollout.stop=["</tool_call>"]')
echo "test_tool_learning: without it, $STEPS steps in ${s2}s: val/accuracy $b0 -> $b1 (tool use $v1)"
at_most() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x <= y) }'; }
at_most "$a0" 0.05 || fail "the start answers $a0 right greedily; the test expects it not to use the tool yet"
at_most "$MIN_ACC" "$a1" || fail "with the tool val/accuracy ends at $a1 < $MIN_ACC"
at_most 0.8 "$u1" || fail "with the tool only $u1 of the greedy answers call it"
at_most "$b1" 0.05 || fail "without the tool val/accuracy ends at $b1 > 0.05"
[ "$v1" = absent ] || fail "val/tool_use logged in a run without a tool"
echo "test_tool_learning: ok"
