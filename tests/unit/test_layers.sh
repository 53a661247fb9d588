#!/usr/bin/env bash
# The source tree keeps its layers (docs/architecture.md): no include up the layers, no loop of folders, no circle
# of files (scripts/check_layers.py). The one circle allowed is rollout's engine trio while its rewrite lands.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
python3 "$SRC/scripts/check_layers.py" "$SRC" --allow-circle rollout/cuda_engine,rollout/engine,rollout/gen_engine
