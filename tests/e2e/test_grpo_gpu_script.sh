#!/usr/bin/env bash
# tests/gpu/grpo_gpu_run.sh (the GRPO run of the README, made on a GPU) in its --cpu-smoke form: the same SFT ->
# export -> `cpt run examples/grpo_gpu.toml` flow and summary on the CPU with a tiny model and the file transport,
# so the script and the example config cannot rot between device sessions. Checks the steps, the weight versions
# handed over, and that the summary printed its figures.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-grpo-gpu-script-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
OUT="$T/run" tests/gpu/grpo_gpu_run.sh --cpu-smoke "$BUILD" > "$T/log" 2>&1 || { cat "$T/log"; fail "the flow failed"; }
grep -q "grpo_gpu_run --cpu-smoke: ok" "$T/log" || fail "no ok line"
M="$T/run/grpo/metrics.jsonl"
steps=$(grep -c '"reward/mean"' "$M")
[ "$steps" = 3 ] || fail "$steps GRPO steps logged, want 3"
[ "$(grep -o '"version":[0-9]*' "$M" | tail -1 | cut -d: -f2)" = 3 ] || fail "the last step did not train version 3"
grep -q "^SFT + export: .* s;  GRPO (cpt run, incl. start-up): .* s, 3 steps" "$T/log" || fail "no timing line"
grep -q "^val/accuracy: " "$T/log" || fail "no validation line"
grep -E -q "^ +3- +3: [0-9.]+ +entropy [0-9.]+" "$T/log" || fail "no reward curve row for step 3"
echo "test_grpo_gpu_script: ok ($(grep '^SFT + export' "$T/log"))"
