#!/usr/bin/env bash
# run_fuzzer.sh FUZZER CORPUS SECONDS: replays the committed corpus (every input once: the regression half), then
# fuzzes for SECONDS (CPT_FUZZ_SECONDS in the environment overrides) starting from it; new inputs go to a scratch
# folder so the run never rewrites the tree. A crash leaves its input in /tmp/cpt-fuzz-NAME-* and fails.
set -euo pipefail
fuzzer=$1 corpus=$2 secs=${CPT_FUZZ_SECONDS:-$3}
[ -n "$(ls -A "$corpus" 2>/dev/null)" ] || { echo "run_fuzzer.sh: no corpus in $corpus" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
artifacts="${TMPDIR:-/tmp}/cpt-fuzz-$(basename "$fuzzer")-"
"$fuzzer" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts" "$corpus"
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts" "$scratch" "$corpus"
