#!/usr/bin/env bash
# bench/decode_bench's --cpu mode, the flow the GPU runs at issue 23's shapes, on the tiny shape: the batch lines, and
# the GRPO rollout shape (prompts x samples) shared and unshared: each prompt prefilled once when shared and once per
# sample when not, every sample back, every KV block free, lengths spread by the stop ids around their target; bad
# arguments refused with exit 2.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${CPT_BUILD:-$SRC/build}
B=$BUILD/bench/decode_bench
[ -x "$B" ] || { echo "FAIL: $B not built"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
field() { grep -o " $2=[^ ]*" <<< "$1" | head -1 | cut -d= -f2; }

"$B" --cpu --shapes tiny --batches 1,4 --prompt 8 --new 16 > "$T/batch.log"
[ "$(grep -c '^RESULT shape=tiny' "$T/batch.log")" = 2 ] || fail "two RESULT lines: $(cat "$T/batch.log")"
for b in 1 4; do
  l=$(grep "^RESULT shape=tiny batch=$b " "$T/batch.log")
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$(field "$l" decode_tok_s)" ||
    fail "batch $b: decode_tok_s $(field "$l" decode_tok_s)"
done

P=6 G=8 NEW=96 MEAN=16
"$B" --cpu --shapes tiny --grpo $P,$G --prompt 24 --new $NEW --mean-new $MEAN --slots 16 > "$T/grpo.log"
cat "$T/grpo.log"
sh=$(grep 'mode=shared' "$T/grpo.log") un=$(grep 'mode=unshared' "$T/grpo.log")
[ "$(field "$sh" prefills)" = $P ] || fail "shared: prefills $(field "$sh" prefills), want $P (one per prompt)"
[ "$(field "$sh" shared_prefills)" = $((P * G - P)) ] || fail "shared: shared_prefills $(field "$sh" shared_prefills)"
[ "$(field "$sh" prefill_tokens)" = $((P * 24)) ] || fail "shared: prefill_tokens $(field "$sh" prefill_tokens)"
[ "$(field "$un" prefills)" = $((P * G)) ] || fail "unshared: prefills $(field "$un" prefills), want $((P * G))"
[ "$(field "$un" prefill_tokens)" = $((P * G * 24)) ] || fail "unshared: prefill_tokens $(field "$un" prefill_tokens)"
for l in "$sh" "$un"; do
  [ "$(field "$l" samples)" = $((P * G)) ] || fail "samples $(field "$l" samples)"
  kv=$(field "$l" kv_free)
  [ "${kv%/*}" = "${kv#*/}" ] && [ "${kv%/*}" -gt 0 ] || fail "KV blocks free at the end: $kv"
  # geometric lengths around MEAN, cut at NEW: the mean within a factor 2, most stopped early, some not at once
  python3 - "$(field "$l" mean_len)" "$(field "$l" stopped_frac)" "$MEAN" <<'PY' || fail "length spread: $l"
import sys
m, s, want = map(float, sys.argv[1:])
sys.exit(0 if want / 2 <= m <= want * 2 and 0.8 <= s <= 1.0 else 1)
PY
done
grep -q 'shared/unshared samples/s' "$T/grpo.log" || fail "no ratio line"

# refusals: an unknown shape, a malformed --grpo, a zero prompt
for args in "--cpu --shapes 9b" "--cpu --shapes tiny --grpo 0,4" "--cpu --shapes tiny --prompt 0"; do
  rc=0
  # shellcheck disable=SC2086
  "$B" $args > "$T/bad.log" 2>&1 || rc=$?
  [ $rc = 2 ] || fail "decode_bench $args: exit $rc, want 2: $(cat "$T/bad.log")"
done
grep -q "unknown shape '9b'" <("$B" --cpu --shapes 9b 2>&1 || true) || fail "the unknown shape is not named"
echo "test_decode_bench_cpu: ok"
