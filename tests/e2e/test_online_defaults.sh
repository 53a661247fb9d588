#!/usr/bin/env bash
# The online defaults under `cpt run` (which hands the trainer the resolved config, every key written out):
# algo.kl_beta = -1 (its default) on GRPO proper loads the reference at 0.001, and train.mini_batches = 2 takes two
# optimizer updates a step, the second measured against the step's starting weights (docs/online.md "Defaults").
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-online-defaults-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T"
# the example is DAPO-style (clip-higher) with kl_beta = 0: back to GRPO proper and the default KL weight
"$BUILD/cpt" run "${GRPO_ARGS[@]}" train.steps=3 train.threads=1 algo.clip_eps_high=0.2 algo.kl_beta=-1 \
  train.mini_batches=2 run.dir="$T/run" 2> "$T/run.log" || { cat "$T/run.log"; fail "grpo run"; }
grep -q "^kl_beta = -1" "$T/run/config.toml" || fail "the resolved config does not keep kl_beta = -1"
python3 - "$T/run/metrics.jsonl" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train/optimizer_steps" in r: rows[r["step"]] = r
if sorted(rows) != [1, 2, 3]: sys.exit(f"FAIL: steps {sorted(rows)}")
opt = [rows[s]["train/optimizer_steps"] for s in (1, 2, 3)]
if opt != [2, 4, 6]: sys.exit(f"FAIL: train/optimizer_steps {opt}, expected [2, 4, 6]")
# the reference is loaded and weighs in: the last update of every step has moved off it
for s in (1, 2, 3):
    if not rows[s].get("loss/kl", 0) > 0 or not rows[s].get("kl", 0) > 0:
        sys.exit(f"FAIL: step {s}: kl {rows[s].get('kl')}, loss/kl {rows[s].get('loss/kl')} (no reference at the default?)")
    if abs(rows[s]["loss/kl"] - 0.001 * rows[s]["kl"]) > 1e-6 * max(1, rows[s]["kl"]):
        sys.exit(f"FAIL: step {s}: loss/kl {rows[s]['loss/kl']} is not 0.001 x kl {rows[s]['kl']}")
    if rows[s]["ratio/mean"] == 1 and rows[s]["ratio/max"] == 1:
        sys.exit(f"FAIL: step {s}: the second update's ratio is exactly 1")
print("test_online_defaults: optimizer steps", opt, "| kl", [f"{rows[s]['kl']:.3g}" for s in (1, 2, 3)],
      "| ratio/max", [round(rows[s]["ratio/max"], 4) for s in (1, 2, 3)])
PY
echo "test_online_defaults: ok"
