#!/usr/bin/env bash
# The source tree keeps its layers (docs/architecture.md): no include up the layers, no loop of folders, no circle
# of files (scripts/check_layers.py).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
python3 "$SRC/scripts/check_layers.py" "$SRC"
