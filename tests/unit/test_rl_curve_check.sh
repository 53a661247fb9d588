#!/usr/bin/env bash
# bench/rl_curve_check.py (cpt's training-reward curve against TRL's, tenth by tenth) on made-up curves whose
# answers are known: 20 steps (two steps a tenth), TRL seeds at 0.3 / 0.5 flat, cpt's seed 1 at 0.4 in the first half
# and 0.6 in the second (inside TRL's range in 5 of 10 tenths), lr 0 at seed 1 flat 0.25 (so cpt's gain over it is
# +0.15 then +0.35, and TRL's gain over the lr-0 mean 0.25 is +0.15 for the seeds' mean); and the refusals.
set -euo pipefail
T=$(mktemp -d /tmp/cpt-curve-check-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { # DIR STEPS R_FIRST_HALF R_SECOND_HALF
  mkdir -p "$1"
  python3 -c 'import json, sys
n, a, b = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
print(json.dumps({"step": 0, "val/accuracy": 0.3}))
for s in range(1, n + 1):
    print(json.dumps({"step": s, "reward/mean": a if s <= n // 2 else b}))' "$2" "$3" "$4" > "$1/metrics.jsonl"
}
O=$T/out
run "$O/runs/lr-s1" 20 0.4 0.6
run "$O/runs/lr0-s1" 20 0.25 0.25
run "$O/runs/algo-grpo" 20 0.9 0.9 # not an arm of the comparison: ignored
run "$O/trl-s1" 24 0.3 0.3         # TRL ran longer: only the common 20 steps count
run "$O/trl-s2" 20 0.5 0.5
echo "# summary" > "$T/md"
python3 bench/rl_curve_check.py "$O" --md "$T/md" > "$T/out.txt" || fail "exit $?"
cmp -s "$T/out.txt" <(tail -n +2 "$T/md") || fail "--md did not append what it printed"
grep -q "^# summary$" "$T/md" || fail "--md overwrote the file"
grep -q "over steps 1-20 " "$T/out.txt" || fail "the common steps: $(grep '^## ' "$T/out.txt")"
grep -q "^| 1-2 | 0.400 \[0.300, 0.500\] | 0.400 | yes | 0.250 |$" "$T/out.txt" || fail "first tenth: $(cat "$T/out.txt")"
grep -q "^| 19-20 | 0.400 \[0.300, 0.500\] | 0.600 | no | 0.250 |$" "$T/out.txt" || fail "last tenth"
grep -q "^cpt's seed mean inside TRL's seed range: lr 5 of 10 tenths\.$" "$T/out.txt" || fail "the count"
grep -q "sampled reward over every lr-0 step is 0.250 (20 steps" "$T/out.txt" || fail "the lr-0 level"
grep -q "^| 1-2 | +0.150 \[+0.050, +0.250\] | +0.150 |$" "$T/out.txt" || fail "the gains, first tenth"
grep -q "^| 19-20 | +0.150 \[+0.050, +0.250\] | +0.350 |$" "$T/out.txt" || fail "the gains, last tenth"
! grep -q "0.900" "$T/out.txt" || fail "an algo run was taken for an arm"
# a shuffled arm gets its own columns
run "$O/runs/shuf-s1" 20 0.35 0.35
python3 bench/rl_curve_check.py "$O" > "$T/out2.txt"
grep -q "^| 1-2 | 0.400 \[0.300, 0.500\] | 0.400 | yes | 0.350 | yes | 0.250 |$" "$T/out2.txt" || fail "shuf arm"
grep -q "lr 5 of 10 tenths; shuf 10 of 10 tenths" "$T/out2.txt" || fail "shuf count"
# nothing to compare: exit 2 with a message naming the folder
rc=0
python3 bench/rl_curve_check.py "$T/none" > /dev/null 2> "$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "$T/none: no TRL run" "$T/err" || fail "an empty folder: rc $rc, $(cat "$T/err")"
rm -r "$O"/trl-s*
rc=0
python3 bench/rl_curve_check.py "$O" > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "no TRL run: rc $rc"
rc=0
python3 bench/rl_curve_check.py > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "no arguments: rc $rc"
echo "test_rl_curve_check: ok"
