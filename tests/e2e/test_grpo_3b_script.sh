#!/usr/bin/env bash
# tests/gpu/grpo_3b_run.sh (GRPO of the Qwen2.5-3B shape colocated, issue 24) in its --cpu-smoke form: the random
# model (cpt-train model.init = random, one step at lr 0) -> cpt export --bf16 -> `cpt run examples/grpo_gpu.toml`
# with the script's overrides, at a tiny shape on the CPU, so the device stage cannot rot between sessions. Checks
# the steps, that no completion stopped early (rollout.stop_on_eos = false), that the length reward gives groups a
# spread (advantages), that the random model samples near-uniformly, and the summary's table.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-grpo-3b-script-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
OUT="$T/run" tests/gpu/grpo_3b_run.sh --cpu-smoke "$BUILD" > "$T/log" 2>&1 || { cat "$T/log"; fail "the flow failed"; }
grep -q "grpo_3b_run --cpu-smoke: ok" "$T/log" || fail "no ok line"
M="$T/run/grpo/metrics.jsonl"
python3 - "$M" "$T/run/export/config.json" <<'PY' || fail "metrics or model"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "reward/mean" in r]
cfg = json.load(open(sys.argv[2]))
assert len(steps) == 3, f"{len(steps)} steps, want 3"
assert steps[-1]["version"] == 3, steps[-1]["version"]
assert all(r["response_len/mean"] == 16 for r in steps), [r["response_len/mean"] for r in steps]
assert all(r["reward/std"] > 0 for r in steps), [r["reward/std"] for r in steps]
assert all(r["grad_norm"] > 0 for r in steps), [r["grad_norm"] for r in steps]
# the learner's split of time/train: each part measured, together within it
for r in steps:
    parts = [r["time/logprob"], r["time/backward"], r["time/optimizer"]]
    assert all(p > 0 for p in parts) and sum(parts) <= r["time/train"], (parts, r["time/train"])
assert cfg["num_key_value_heads"] == 2 and cfg["tie_word_embeddings"] is True, cfg
# a random model samples near-uniformly: the entropy is within 0.1 nat of log(vocab)
assert abs(steps[-1]["entropy"] - math.log(cfg["vocab_size"])) < 0.1, (steps[-1]["entropy"], cfg["vocab_size"])
PY
S="$T/run/grpo3b_summary.txt"
grep -q "^GRPO, cpu, tokenizer .*; G 4 x P 2, max_new_tokens 16, steps done" "$S" || fail "no header line"
grep -q "^steady state (steps 2..3): [0-9.]* steps/s" "$S" || fail "no steady-state line"
for part in "time/wait_scored" "time/train" "time/logprob" "time/backward" "time/optimizer" "time/weight_sync"; do
  grep -E -q "^\| [-a-zA-Z +,]+ \($part\) \| [0-9.]+ \| [0-9.]+% \|" "$S" || fail "no table row for $part"
done
grep -q "^random model: cpt-train" "$S" || fail "no model timing line"
echo "test_grpo_3b_script: ok ($(grep '^steady state' "$S"))"
