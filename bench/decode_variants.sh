#!/bin/bash
# Batch-1/4 decode of several builds side by side in one device call (A/B of a kernel change, old and new binaries).
#
#   bench/decode_variants.sh DIR LABEL=SUBDIR:ARGS ...
#
# DIR holds lib/ and one decode_bench per SUBDIR (. for DIR itself); each LABEL runs SUBDIR/decode_bench --defaults
# ARGS --batches ${BATCHES:-1,4} (ARGS: decode_bench options, '+' for spaces), the whole list ${ROUNDS:-2} times in turn
# (drift shows as a difference between rounds). One line a run: label, shape, batch, decode tok/s, % roofline,
# graph-replay step ms. Logs in $OUT (default /tmp).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
eval "$(tests/gpu/run_on_device.sh env)"
export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || true
for round in $(seq "${ROUNDS:-2}"); do
    for v in "$@"; do
        label=${v%%=*} rest=${v#*=}
        sub=${rest%%:*} args=${rest#*:}
        timeout "${BENCH_TIMEOUT:-100}" "$dir/$sub/decode_bench" --defaults ${args//+/ } --batches "${BATCHES:-1,4}" \
            > "$out/variant_${label}_$round.log" 2>&1
        rc=$?
        grep RESULT "$out/variant_${label}_$round.log" | sed -E 's/.*shape=([^ ]*) batch=([^ ]*) .*decode_tok_s=([^ ]*) .*roofline_pct=([^ ]*) .*gpu_step_ms=([^ ]*) .*/\1 b\2 \3 tok\/s \4% step \5 ms/' |
            sed "s/^/r$round $label /"
        [ $rc = 0 ] || echo "r$round $label rc=$rc: $(tail -2 "$out/variant_${label}_$round.log")"
    done
done
