#!/usr/bin/env bash
# The TRL side-by-side run grades as cpt does: bench/cpt_math_reward.py (the Python math reward of
# bench/trl_grpo.py) must give every case of tests/fixtures/math_reward/cases.jsonl the score and answer_found that
# cpt's math reward gives it (tests/unit/test_reward_math_cases.c checks the file against the C functions).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
cd "$SRC"
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
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
