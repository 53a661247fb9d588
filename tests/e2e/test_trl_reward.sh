#!/usr/bin/env bash
# The TRL side-by-side run grades as cpt does: bench/cpt_math_reward.py (the Python math reward of
# bench/trl_grpo.py) must give every case of tests/fixtures/math_reward/cases.jsonl the score and answer_found that
# cpt's math reward gives it (tests/unit/test_reward_math_cases.c checks the file against the C functions).
# Then bench/trl_grpo.py compiles and its --check (no torch) passes on the example model and data, with the prompt
# ids from `cpt tokenize`, and refuses a record without an answer; its early stop answers SIGTERM and a time budget.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
cd "$SRC"
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
T=$(mktemp -d /tmp/cpt-trl-reward-XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 - <<'PY'
import json, sys
sys.path.insert(0, "bench")
import cpt_math_reward as M
n = bad = correct = 0
for k, line in enumerate(open("tests/fixtures/math_reward/cases.jsonl"), 1):
    c = json.loads(line)
    got = M.grade(c["completion"], c["answer"])
    want = (c["score"], c["found"])
    n += 1
    correct += got[0]
    if got != want:
        bad += 1
        print(f"line {k}: completion {c['completion']!r} gold {c['answer']!r}: python {got}, cpt {want}")
print(f"test_trl_reward: {n} cases, {correct} correct, {bad} differ from cpt")
sys.exit(1 if bad or n < 900 else 0)
PY

python3 -m py_compile bench/trl_grpo.py bench/cpt_math_reward.py bench/trl_import_scan.py
ARGS=(--model examples/models/tiny-arith-sft --prompts examples/data/arithmetic_rl_train.jsonl
  --eval examples/data/arithmetic_rl_eval.jsonl --group-size 8 --prompts-per-step 16 --steps 50 --lr 1e-5
  --mini-batches 4 --clip-low 0.2 --clip-high 0.28 --temperature 1.0 --max-new-tokens 64 --seed 1 --out "$T/out")
CPT_ARG=()
[ -x "$BUILD/cpt" ] && CPT_ARG=(--cpt "$BUILD/cpt")
python3 bench/trl_grpo.py "${ARGS[@]}" "${CPT_ARG[@]}" --check > "$T/check.json"
python3 - "$T/check.json" "${#CPT_ARG[@]}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["check"] == "ok" and r["prompts"] == 1000 and r["eval"] == 100, r
assert [s["reward"] for s in r["samples"][:3]] == [1.0, 0.0, 0.0], r["samples"][:3]
assert r["completions_per_update"] == 32 and r["model"]["eos_token_id"] == 708, r
if int(sys.argv[2]):
    ids = r["first_prompt_ids_cpt"]
    assert isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids), ids
print(f"test_trl_reward: --check ok, cpt prompt ids {r['first_prompt_ids_cpt']}")
PY
printf '{"prompt": "What is 1 + 1?"}\n' > "$T/bad.jsonl"
if python3 bench/trl_grpo.py "${ARGS[@]/examples\/data\/arithmetic_rl_train.jsonl/$T/bad.jsonl}" --check \
    > "$T/bad.out" 2>&1; then
  echo "FAIL: --check accepted a record without an answer" >&2; exit 1
fi
grep -q "bad.jsonl:1: field 'answer': missing" "$T/bad.out" || { cat "$T/bad.out"; exit 1; }
# a SIGTERM (what `timeout` sends) or a spent --time-budget stops training early instead of killing the run
python3 - <<'PY'
import os, signal, sys, time
sys.path.insert(0, "bench")
import trl_grpo
s = trl_grpo.Stop(0)
s.start()
assert s() is None
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.05)
assert s() == "SIGTERM", s()
b = trl_grpo.Stop(0.05)
b.start()
assert b() is None
time.sleep(0.1)
assert b() == "time budget 0.05s", b()
PY
echo "test_trl_reward: ok"
