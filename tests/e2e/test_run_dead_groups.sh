#!/usr/bin/env bash
# Groups that can never be completed do not stall a run (docs/online.md "Failed groups"). A sync GRPO run on the
# tiny model whose data holds a prompt that crashes the reward plugin (examples/plugins/reward_poison_test.c), a
# prompt longer than the model's context (the rollout refuses it), one whose reward is 1e39 (over reward.max_abs),
# and one the trainer refuses (it fits the context but not train.max_seq_len). Each is issued 1 + queue.group_retries
# times, then skipped with the reason; the steps take other prompts from the data cursor and the run finishes:
# trained + skipped = issued, exactly. A second run with reward.max_abs raised trains on the 1e39 rewards (doubles
# end to end) instead of dying with "not finite".
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-dead-groups-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; tail -30 "$T/run.log" >&2 || true; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T" || fail "tiny model"
PLUGIN="$BUILD/plugins/libreward_poison_test.so"
[ -f "$PLUGIN" ] || fail "no $PLUGIN (build the reward_poison_test target)"

# 24 prompts in file order; 4 of the first 8 cannot be completed
python3 - "$T/data.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open("examples/data/arithmetic_rl_train.jsonl")][:24]
rows[1]["prompt"] = "POISON " + rows[1]["prompt"]                   # the plugin segfaults on it
rows[3]["prompt"] = "What is 1 + 1? " * 60 + rows[3]["prompt"]      # > 128 tokens: the model's context
rows[5]["prompt"] = "HUGE " + rows[5]["prompt"]                     # rewards 1e39
rows[7]["prompt"] = "What is 2 + 2? " * 5 + rows[7]["prompt"]       # < 128 tokens, > train.max_seq_len 48
with open(sys.argv[1], "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")
PY
STEPS=4 G=2
common=("${GRPO_ARGS[@]}" data.train="$T/data.jsonl" data.shuffle=false train.steps=$STEPS train.groups_per_step=$G
  reward.type=plugin reward.plugin_path="$PLUGIN" queue.group_retries=1 checkpoint.every=0)

# 1. the stalls: every failing group skipped after 2 attempts; before the fix the trainer waits at step 1 forever
R="$T/run"
timeout 300 "$CPT" run "${common[@]}" run.dir="$R" 'reward.plugin_config=crash_on=POISON;value=1e39;value_on=HUGE' \
  2> "$T/run.log" || fail "the run did not finish (status $?)"
TL="$R/logs/trainer.log"
[ -f "$TL" ] || TL="$T/run.log"
grep -q "run finished" "$T/run.log" || fail "no 'run finished'"
# preflight reported both kinds of over-long prompt, with the line and the token count
grep -Eq "warn +data +data.train: .*1 prompt longer than the rollout's context of 128 tokens \(first: line 4, [0-9]+ tokens\)" \
  "$T/run.log" || fail "preflight did not report the prompt longer than the context"
grep -Eq "warn +data +data.train: .*1 prompt of train.max_seq_len = 48 tokens or more \(first: line 8, [0-9]+ tokens\)" \
  "$T/run.log" || fail "preflight did not report the prompt longer than train.max_seq_len"
grep -q "grpo done: step $STEPS, version $STEPS, $((STEPS * G)) groups trained, 4 skipped" "$T/run.log" "$TL" ||
  fail "the summary does not say $((STEPS * G)) trained, 4 skipped: $(grep -h 'done:' "$T/run.log" "$TL")"
for why in "scoring failed" "exceeds the context" "exceeds reward.max_abs" "does not fit train.max_seq_len"; do
  grep -h "skipped after 2 failed attempts" "$T/run.log" "$TL" | grep -q "$why" || fail "no skip logged for: $why"
done
python3 - "$R" $STEPS $G <<'PY' || fail "exact counts"
import json, sys
run, steps, g = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(run + "/metrics.jsonl")]
last = [r for r in rows if r.get("step") == steps and "groups/skipped" in r][-1]
st = json.load(open(f"{run}/checkpoints/step-{steps}/trainer_state.json"))
cur = st["data_cursor"]["epoch"] * 24 + st["data_cursor"]["index"]
trained, skipped, failed = last["groups/trained"], last["groups/skipped"], last["groups/failed"]
assert trained == steps * g, f"trained {trained}"
assert skipped == 4 and failed == 8, f"skipped {skipped}, failed {failed}"
assert st.get("outstanding_group_ids", []) == [], f"outstanding {st.get('outstanding_group_ids')}"
assert cur == trained + skipped, f"issued {cur} != trained {trained} + skipped {skipped}"
print(f"trained {trained} + skipped {skipped} = issued {cur}; {failed} failed attempts")
PY

# 2. rewards of 1e39 allowed: trained as doubles (normalised per group), the run finishes
head -5 "$T/data.jsonl" | tail -4 > "$T/data2.jsonl"   # rows 1..4 of the first file: POISON (harmless here) ..
sed -n 6p "$T/data.jsonl" > "$T/huge.jsonl"
cat "$T/huge.jsonl" "$T/data2.jsonl" | grep -v "What is 1 + 1? What is 1 + 1?" > "$T/data3.jsonl"
R2="$T/run2"
timeout 300 "$CPT" run "${common[@]}" run.dir="$R2" data.train="$T/data3.jsonl" train.steps=1 reward.max_abs=1e40 \
  'reward.plugin_config=value=1e39;value_on=HUGE' 2> "$T/run2.log" ||
  { cp "$T/run2.log" "$T/run.log"; fail "the run with 1e39 rewards did not finish"; }
grep -Eq "ok +data +data.train: every prompt fits \(longest [0-9]+ tokens; context 128, train.max_seq_len 48\)" \
  "$T/run2.log" || { cp "$T/run2.log" "$T/run.log"; fail "preflight: no 'every prompt fits'"; }
python3 - "$R2" <<'PY' || fail "1e39 rewards"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
r = [x for x in rows if x.get("step") == 1 and "reward/mean" in x][-1]
assert r["groups/skipped"] == 0 and r["groups/trained"] == 2, r
assert 1e38 < r["reward/mean"] < 1e39, f"reward/mean {r['reward/mean']}"
print(f"1e39 rewards trained: reward/mean {r['reward/mean']:.3g}, loss {r['loss']}")
PY
echo "test_run_dead_groups: ok"
