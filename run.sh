#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the example job on this machine.
# Extra arguments are config overrides (section.key=value).
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh release >/dev/null
config=${CPT_EXAMPLE:-examples/sft_arithmetic.toml}
exec build/cpt run "$config" "$@"
