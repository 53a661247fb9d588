#!/usr/bin/env bash
# `cpt plot`: PNGs from a synthetic metrics.jsonl (default keys present, a resumed run's re-logged steps, a torn last
# line, held-out val/accuracy every 10 steps); the smoothed line's numbers in plots/<key>.tsv are the debiased EMA
# of the raw points, the held-out series is its own panel and not smoothed; --out, --keys and --smooth; a missing
# key or run directory is an error.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-plot-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
is_png() { # FILE WIDTH HEIGHT: the PNG signature, an IHDR of that size, and more than a blank image's bytes
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1: not a PNG"
  [ "$(dd if="$1" bs=1 skip=12 count=4 status=none)" = "IHDR" ] || fail "$1: no IHDR"
  w=$(dd if="$1" bs=1 skip=16 count=4 status=none | od -An -tu1 | awk '{print $1*16777216+$2*65536+$3*256+$4}')
  h=$(dd if="$1" bs=1 skip=20 count=4 status=none | od -An -tu1 | awk '{print $1*16777216+$2*65536+$3*256+$4}')
  [ "$w" -eq "$2" ] && [ "$h" -eq "$3" ] || fail "$1: ${w}x${h}, expected $2x$3"
  [ "$(stat -c %s "$1")" -gt 3000 ] || fail "$1: only $(stat -c %s "$1") bytes"
}

mkdir -p "$T/run"
for s in $(seq 1 40); do
  printf '{"step":%d,"time":%d,"reward/mean":%s,"kl":%s,"phase":"train"}\n' "$s" $((1700000000 + s)) \
    "$(awk -v s="$s" 'BEGIN { printf "%.4f", s / 40 }')" "$(awk -v s="$s" 'BEGIN { printf "%.5f", s / 4000 }')"
  [ $((s % 10)) -eq 0 ] && printf '{"step":%d,"val/accuracy":%s}\n' "$s" "$(awk -v s="$s" 'BEGIN { printf "%.2f", s / 100 }')"
done > "$T/run/metrics.jsonl"
# a resume from step 30 re-logs 31..40, then continues; the last line is torn
for s in $(seq 31 50); do printf '{"step":%d,"reward/mean":%s,"kl":null}\n' "$s" "$(awk -v s="$s" 'BEGIN { printf "%.4f", s / 50 }')"; done \
  >> "$T/run/metrics.jsonl"
printf '{"step":51,"reward/me' >> "$T/run/metrics.jsonl"

"$CPT" plot "$T/run" > "$T/out" 2> "$T/err" || { cat "$T/err"; fail "cpt plot failed"; }
is_png "$T/run/plots/overview.png" 1280 800
is_png "$T/run/plots/reward_mean.png" 640 400
is_png "$T/run/plots/kl.png" 640 400
is_png "$T/run/plots/val_accuracy.png" 640 400
grep -q "reward/mean: 50 points" "$T/err" || { cat "$T/err"; fail "reward/mean should have 50 points (resume dedup)"; }
grep -q "val/accuracy: 4 points" "$T/err" || { cat "$T/err"; fail "val/accuracy should have 4 points"; }
[ "$(ls "$T/run/plots" | wc -l)" -eq 7 ] || { ls "$T/run/plots"; fail "expected exactly 7 files (no temporaries)"; }
# the smoothed column: s = 0.9 s + 0.1 x, divided by 1 - 0.9^n, recomputed here from the raw column
awk -F'\t' '!/^#/ { n++; e = 0.9 * e + 0.1 * $2; w = 1 - 0.9 ^ n; d = $3 - e / w; if (d < 0) d = -d
  if (d > 1e-9) { print "row " n ": smoothed " $3 ", expected " e / w; bad = 1 } } END { exit bad || n != 50 }' \
  "$T/run/plots/reward_mean.tsv" || fail "reward_mean.tsv: smoothed column is not the debiased EMA of 50 points"
# a rising series: the smoothed line lags below the raw points at the end, and is above its first point
awk -F'\t' '!/^#/ { last = $0; if (!first) first = $3 } END { split(last, a, "\t"); exit !(a[3] < a[2] && a[3] > first) }' \
  "$T/run/plots/reward_mean.tsv" || fail "reward_mean.tsv: smoothed line does not lag a rising series"
# the held-out series is not smoothed: its own 4 points, both columns equal
[ "$(grep -vc '^#' "$T/run/plots/val_accuracy.tsv")" -eq 4 ] || fail "val_accuracy.tsv: expected 4 rows"
awk -F'\t' '!/^#/ && $2 != $3 { bad = 1 } END { exit bad }' "$T/run/plots/val_accuracy.tsv" || fail "val/accuracy was smoothed"
grep -q "^40	0.4" "$T/run/plots/val_accuracy.tsv" || { cat "$T/run/plots/val_accuracy.tsv"; fail "val/accuracy at step 40"; }
# --smooth 0: the smoothed column is the raw one
"$CPT" plot "$T/run" --smooth 0 > /dev/null 2>&1 || fail "--smooth 0 failed"
awk -F'\t' '!/^#/ && $2 != $3 { bad = 1 } END { exit bad }' "$T/run/plots/reward_mean.tsv" || fail "--smooth 0 still smoothed"
if "$CPT" plot "$T/run" --smooth 1 2> "$T/err"; then fail "--smooth 1 was accepted"; fi
grep -q "smooth is a weight" "$T/err" || { cat "$T/err"; fail "unclear --smooth error"; }

"$CPT" plot "$T/run" --out "$T/one.png" --keys kl > /dev/null 2>&1 || fail "--out --keys failed"
is_png "$T/one.png" 640 400

if "$CPT" plot "$T/run" --keys nothing/here 2> "$T/err"; then fail "a missing key was accepted"; fi
grep -q "no numeric key 'nothing/here'" "$T/err" || { cat "$T/err"; fail "unclear missing-key error"; }
if "$CPT" plot "$T/none" 2> "$T/err"; then fail "a missing run directory was accepted"; fi
grep -q "no metrics yet" "$T/err" || fail "unclear missing-run error"
mkdir -p "$T/other"; echo '{"step":1,"foo":2}' > "$T/other/metrics.jsonl"
if "$CPT" plot "$T/other" 2> "$T/err"; then fail "no default key: should fail"; fi
grep -q "name some with --keys" "$T/err" || fail "unclear no-default-key error"
# a key whose every value is null has nothing to draw: named, not a gnuplot error
echo '{"step":1,"kl":null,"reward/mean":0.5}' > "$T/other/metrics.jsonl"
if "$CPT" plot "$T/other" --keys kl 2> "$T/err"; then fail "an all-null key: should fail"; fi
grep -q "kl: no numeric values" "$T/err" || { cat "$T/err"; fail "unclear all-null error"; }
# two keys that map to one file name (a/b, a_b): each keeps its own picture and numbers
mkdir -p "$T/coll"
for i in 1 2 3; do echo "{\"step\":$i,\"a/b\":$i,\"a_b\":$((i * 100))}"; done > "$T/coll/metrics.jsonl"
"$CPT" plot "$T/coll" --keys a/b,a_b > /dev/null 2> "$T/err" || { cat "$T/err"; fail "colliding key names"; }
grep -q "^1	1	" "$T/coll/plots/a_b.tsv" && grep -q "^1	100	" "$T/coll/plots/a_b-2.tsv" &&
  [ -s "$T/coll/plots/a_b-2.png" ] || { ls "$T/coll/plots"; fail "a/b and a_b share a file"; }
echo "test_run_plot: ok (overview $(stat -c %s "$T/run/plots/overview.png") bytes)"
