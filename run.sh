#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the local GRPO example on this machine
# (a private redis-server, the trainer, a rollout worker and a reward worker as local processes, CPU when there is
# no GPU), then plots its metrics. Extra arguments are config overrides (section.key=value).
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh release >/dev/null
config=${CPT_EXAMPLE:-examples/grpo_arithmetic.toml}
run_dir=$(build/cpt config show "$config" "$@" | awk '/^\[/{sec=$0} sec=="[run]" && $1=="dir"{gsub(/"/,"",$3); print $3}')
build/cpt run "$config" "$@"
build/cpt plot "$run_dir"
echo "metrics: $run_dir/metrics.jsonl; plots: $run_dir/plots/"
