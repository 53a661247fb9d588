#!/usr/bin/env bash
# run_fuzzer.sh FUZZER CORPUS SECONDS: fuzz for SECONDS starting from the committed corpus; new inputs go to a
# scratch folder so the run never rewrites the tree. A crash leaves its input in /tmp/cpt-fuzz-NAME-* and fails.
set -euo pipefail
fuzzer=$1 corpus=$2 secs=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="${TMPDIR:-/tmp}/cpt-fuzz-$(basename "$fuzzer")-" "$scratch" "$corpus"
