#!/usr/bin/env bash
# A GPU smoke test of bench/trl_grpo.py before its real run: both implementations (TRL's GRPOTrainer, then the plain
# PyTorch GRPO) for 2 steps on the example model examples/models/tiny-arith-sft (2 layers, 709-token tokenizer),
# then checks their outputs: 2 reward lines and the two val/accuracy lines in metrics.jsonl, summary.json naming
# the implementation asked; a failing implementation is reported (the log's tail) and the other still runs; the
# exit status is 1 if either failed. Seconds on one GPU. Run on the device, from the repository root, with the carried TRL:
#   PYTHONPATH=.carry-trl bash bench/trl_smoke.sh OUT_DIR
set -euo pipefail
OUT=${1:?usage: trl_smoke.sh OUT_DIR}
mkdir -p "$OUT"
failed=""
for impl in trl torch; do
  python3 bench/trl_grpo.py --model examples/models/tiny-arith-sft --prompts examples/data/arithmetic_rl_train.jsonl \
    --eval examples/data/arithmetic_rl_eval.jsonl --group-size 4 --prompts-per-step 8 --steps 2 --lr 1e-5 \
    --mini-batches 2 --clip-low 0.2 --clip-high 0.28 --temperature 1.0 --max-new-tokens 16 --seed 1 \
    --out "$OUT/$impl" --impl "$impl" > "$OUT/$impl.log" 2>&1 ||
    { echo "trl_smoke $impl: FAILED:"; tail -n 40 "$OUT/$impl.log"; failed+=" $impl"; continue; }
  python3 - "$OUT/$impl" "$impl" <<'PY' || failed+=" $impl"
import json, sys
out, impl = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
rew = [r for r in rows if "reward/mean" in r]
val = [r for r in rows if "val/accuracy" in r]
s = json.load(open(f"{out}/summary.json"))
assert [r["step"] for r in rew] == [1, 2], rows
assert [r["step"] for r in val] == [0, 2], rows
assert all(0 <= r["reward/mean"] <= 1 and r["time"] > 0 for r in rew), rew
assert s["impl"] == impl and s["train_s"] > 0 and s["wall_s"] >= s["train_s"], s
print(f"trl_smoke {impl}: ok: reward {[round(r['reward/mean'], 3) for r in rew]}, val {[r['val/accuracy'] for r in val]}, "
      f"train {s['train_s']:.1f}s, versions {s['versions']}, prompt ids vs cpt: {s['prompt_ids_match_cpt']}")
PY
done
[ -z "$failed" ] || { echo "trl_smoke: failed:$failed"; exit 1; }
