#!/usr/bin/env bash
# bench/algos_cpu.sh (each online method on the main job, and sync against async) at the smallest scale, so the
# script cannot rot: OPD with its teacher made by a few SFT steps, GSPO, the lr-0 control, and the sync / async pair.
# Checks the tables' rows and that the lr-0 run ends exactly where it started (its weights never move); a misspelt
# algorithm is refused.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-algos-script-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
OUT="$T/out" ALGOS="gspo opd" SEEDS=1 STEPS=2 TEACHER_STEPS=3 ASYNC="0 1" bench/algos_cpu.sh "$BUILD" > "$T/log" 2>&1 ||
  { cat "$T/log"; fail "the bench failed"; }
grep -q "^algos_cpu: .*/teacher: held-out greedy accuracy [0-9.]*$" "$T/log" || { cat "$T/log"; fail "no teacher score"; }
for row in "| gspo | 0.100 -> " "| opd | 0.100 -> " "| lr0 | 0.100 -> 0.100 (0.10 -> 0.10) | +0.000 |" "| sync | " \
           "| async, max_staleness 1 | "; do
  grep -qF -- "$row" "$T/log" || { cat "$T/log"; fail "no row '$row'"; }
done
[ -f "$T/out/async1-1/metrics.jsonl" ] && grep -q '"async.mode": *"async"\|mode = "async"' "$T/out/async1-1/config.toml" ||
  { cat "$T/out/async1-1/config.toml" 2>/dev/null | head -30; fail "the async run did not run in async mode"; }
# a misspelt algorithm stops the bench before any run, not a run of the default recipe under its name
if OUT="$T/bad" ALGOS="grpo_typo" SEEDS=1 STEPS=2 bench/algos_cpu.sh "$BUILD" > "$T/bad.log" 2>&1; then
  fail "ALGOS=grpo_typo ran"
fi
grep -q "unknown algorithm 'grpo_typo'" "$T/bad.log" && [ ! -e "$T/bad/grpo_typo-1" ] || { cat "$T/bad.log"; fail "unclear refusal"; }
echo "test_algos_cpu_script: ok ($(grep -c '^| ' "$T/log") table lines)"
