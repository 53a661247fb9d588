#!/usr/bin/env bash
# DPO learning check (label e2e): `cpt train examples/dpo_arithmetic.toml` (a tiny random qwen2 model, 800
# arithmetic preference pairs, 100 steps of 16 pairs, 2 threads) must raise the held-out chosen-minus-rejected
# margin (eval/dpo_margin: beta * difference of log-ratios to the reference, 100 held-out pairs) from 0 to at least
# 0.3 and the held-out preference accuracy to at least 0.6, within 600 s on 2 cores (measured: margin 0 -> 0.73,
# accuracy 0.73, in 85 s on a shared 2-core machine). docs/dpo.md.
set -euo pipefail
BUILD=${CPT_BUILD:-build}
SRC=${CPT_SRC:-.}
cd "$SRC"
RUN=$(mktemp -d /tmp/cpt-dpo-e2e-XXXXXX)
trap 'rm -rf "$RUN"' EXIT
# the committed pairs are what scripts/make_pref_data.py makes
python3 scripts/make_pref_data.py --split train --n 2000 --seed 1 | cmp - examples/data/arithmetic_pref_train.jsonl
python3 scripts/make_pref_data.py --split eval --n 200 --seed 2 | cmp - examples/data/arithmetic_pref_eval.jsonl
start=$(date +%s)
status=0
timeout 600 "$BUILD/cpt" train examples/dpo_arithmetic.toml run.dir="$RUN" data.max_records=800 \
    dpo.eval_max_pairs=100 train.steps=100 train.eval_every=50 > "$RUN/train.log" 2>&1 || status=$?
grep -E "eval|error" "$RUN/train.log" || true
elapsed=$(( $(date +%s) - start ))
if [ "$status" -ne 0 ]; then
    echo "FAIL: cpt train exited $status"; tail -5 "$RUN/train.log"; exit 1
fi
python3 - "$RUN/metrics.jsonl" "$elapsed" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in rows if "eval/dpo_margin" in r]
if len(ev) < 2:
    sys.exit("FAIL: fewer than two eval/dpo_margin records in metrics.jsonl")
first, last = ev[0], ev[-1]
print("held-out margin %.4f -> %.4f, accuracy %.3f -> %.3f, logp margin %.3f -> %.3f in %s s" % (
    first["eval/dpo_margin"], last["eval/dpo_margin"], first["eval/dpo_accuracy"], last["eval/dpo_accuracy"],
    first["eval/logp_margin"], last["eval/logp_margin"], sys.argv[2]))
ok = abs(first["eval/dpo_margin"]) < 1e-6 and last["eval/dpo_margin"] >= 0.3 and last["eval/dpo_accuracy"] >= 0.6
print("PASS" if ok else "FAIL: want margin 0 -> >= 0.3 and accuracy >= 0.6")
sys.exit(0 if ok else 1)
PY
