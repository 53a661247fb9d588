#!/usr/bin/env bash
# Learning checks of OPD and PPO on their own targets, through `cpt run` with real rollout and reward workers:
#  - OPD (examples/opd_arithmetic.toml: a random student distilled from the SFT'd example model): the per-token
#    reverse KL to the teacher (loss/policy) falls: mean of the last 10 steps <= mean of the first 10 minus 1.0.
#  - PPO (examples/ppo_arithmetic.toml: policy + critic from the SFT'd example model): the training reward rises:
#    mean of the last 15 of 60 steps >= mean of the first 15 plus 0.02 (measured: 0.302 -> 0.351).
set -euo pipefail
bin=${CPT_BUILD:?}/cpt
T=$(mktemp -d /tmp/cpt-opd-ppo-XXXXXX)
trap 'rm -rf "$T"' EXIT

series_means() { # FILE KEY N: "first_mean last_mean" over the first and last N values of KEY
  python3 - "$@" <<'PY'
import json, sys
path, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = [r[key] for r in map(json.loads, filter(str.strip, open(path))) if r.get(key) is not None and "step" in r]
if len(v) < 2 * n: sys.exit(f"{key}: only {len(v)} values")
print(sum(v[:n]) / n, sum(v[-n:]) / n)
PY
}

"$bin" run examples/opd_arithmetic.toml run.dir="$T/opd" train.steps=60 validation.every_steps=0 \
  validation.before_training=false run.progress_every_s=30
read -r first last < <(series_means "$T/opd/metrics.jsonl" loss/policy 10)
echo "opd: reverse KL to the teacher, first 10 steps $first, last 10 steps $last"
python3 -c "import sys; sys.exit(0 if $last <= $first - 1.0 else 1)" || { echo "FAIL: OPD did not reduce the reverse KL"; exit 1; }

"$bin" run examples/ppo_arithmetic.toml run.dir="$T/ppo" train.steps=60 validation.every_steps=0 \
  validation.before_training=false run.progress_every_s=30
read -r first last < <(series_means "$T/ppo/metrics.jsonl" reward/mean 15)
echo "ppo: mean reward, first 15 steps $first, last 15 steps $last"
python3 -c "import sys; sys.exit(0 if $last >= $first + 0.02 else 1)" || { echo "FAIL: PPO did not raise the reward"; exit 1; }
echo "test_opd_ppo_learn: ok"
