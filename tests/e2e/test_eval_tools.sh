#!/usr/bin/env bash
# `cpt eval` with env.type answers tool calls in-process, so held-out accuracy counts tool use: the tool-learning
# start model (examples/models/tiny-tool-sft) calls the calculator in about half of its sampled answers and copies
# the observation, so with env.type = calculator it answers a clear share right, and without the tool (a call then
# gets no observation; the model must invent one) almost none. The JSON report carries tool_use and tool_calls
# only with tools.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
cd "$SRC"
fail() { echo "FAIL: $*" >&2; exit 1; }
ev() {
  OMP_NUM_THREADS=1 "$BUILD/cpt" eval --model examples/models/tiny-tool-sft --data examples/data/multiply2_rl_eval.jsonl \
    --reward math --chat-template none --max-new-tokens 64 --samples 4 --temperature 1 --max-records 25 --json "$@"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get(sys.argv[1], "absent"))' "$1"; }
with=$(ev env.type=calculator) || fail "cpt eval with env.type=calculator failed"
without=$(ev) || fail "cpt eval without tools failed"
echo "with the calculator: $with"
echo "without: $without"
acc=$(field accuracy <<< "$with") use=$(field tool_use <<< "$with") env=$(field env <<< "$with")
acc0=$(field accuracy <<< "$without") use0=$(field tool_use <<< "$without")
[ "$env" = calculator ] || fail "env is '$env', want calculator"
awk -v u="$use" 'BEGIN { exit !(u >= 0.25 && u <= 0.75) }' || fail "tool_use $use: the model calls in about half"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.25) }' || fail "accuracy with the tool $acc < 0.25"
awk -v a="$acc0" 'BEGIN { exit !(a <= 0.05) }' || fail "accuracy without the tool $acc0 > 0.05"
[ "$use0" = absent ] || fail "tool_use reported without tools: $use0"
# a record cpt eval cannot render: the error names the file and the line
T=$(mktemp -d /tmp/cpt-eval-tools-XXXXXX)
trap 'rm -rf "$T"' EXIT
bad_eval="$T/bad_eval.jsonl"
printf '{"prompt": "1+1=", "answer": "2"}\n{"prompt": [{"role": "user", "content": "hi"}], "answer": "1"}\n' \
  > "$bad_eval"
if "$BUILD/cpt" eval --model examples/models/tiny-arith-sft --data "$bad_eval" --reward math --max-new-tokens 2 \
  --chat-template none 2> "$T/bad_eval.err" > /dev/null; then fail "an unrenderable record was evaluated"; fi
grep -q "$bad_eval: line 2: a messages prompt needs a chat template" "$T/bad_eval.err" ||
  fail "the error does not name the file and line: $(cat "$T/bad_eval.err")"
echo "test_eval_tools: ok (accuracy $acc0 without the tool, $acc with it; tool use $use)"
