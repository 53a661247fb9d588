#!/usr/bin/env bash
# `cpt preflight` refuses a model whose head size the GPU kernels do not take when the run would put it on the GPU
# (train.device = cuda: the trainer; rollout.device = cuda: the GPU engine of an online run), naming the supported
# sizes, and accepts it on the CPU. Needs no GPU: the check is on the shape alone.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-preflight-hd-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sft=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
     data.eval=examples/data/arithmetic_rl_eval.jsonl)
grpo=("${sft[@]}" algo.type=grpo data.eval= reward.type=math)
msg='head_dim 24 is not supported on the GPU \(supported: 8, 16, 32, 64, 80, 96, 128, 256\)'

good() { # NAME ARGS...
  local name=$1; shift
  "$CPT" preflight "$@" > "$T/out" 2>&1 || { cat "$T/out"; fail "$name: preflight failed"; }
  tail -1 "$T/out" | grep -q '^preflight: ok' || { cat "$T/out"; fail "$name: no 'preflight: ok'"; }
}
bad() { # NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  if "$CPT" preflight "$@" > "$T/out" 2>&1; then cat "$T/out"; fail "$name: preflight passed"; fi
  grep -Eq "$pat" "$T/out" || { cat "$T/out"; fail "$name: no line matching '$pat'"; }
}

# a random model of 4 heads: hidden 96 gives head_dim 24, hidden 320 gives 80
bad "trainer, 24" "FAIL  model +train.device = cuda: $msg" "${sft[@]}" model.hidden_size=96 train.device=cuda
good "trainer, 80" "${sft[@]}" model.hidden_size=320 train.device=cuda
good "cpu, 24" "${sft[@]}" model.hidden_size=96
bad "engine, 24" "FAIL  model +rollout.device = cuda: $msg" "${grpo[@]}" model.hidden_size=96 rollout.device=cuda
good "engine, 96" "${grpo[@]}" model.hidden_size=384 rollout.device=cuda
good "sft ignores rollout.device" "${sft[@]}" model.hidden_size=96 rollout.device=cuda
# the GPU engine's group limit: 34 query heads over 2 kv heads
bad "engine, group 17" "FAIL  model +rollout.device = cuda: .*34 query heads over 2 kv heads" "${grpo[@]}" \
  model.hidden_size=1088 model.num_heads=34 model.num_kv_heads=2 rollout.device=cuda
# a Hugging Face folder whose config.json says head_dim 24
mkdir -p "$T/hd24"
cp tests/fixtures/model/qwen3/model.safetensors "$T/hd24/"
sed 's/"head_dim": 32/"head_dim": 24/' tests/fixtures/model/qwen3/config.json > "$T/hd24/config.json"
grep -q '"head_dim": 24' "$T/hd24/config.json" || fail "fixture edit"
bad "hf folder, 24" "FAIL  model +train.device = cuda: $msg" "${sft[@]}" model.init=load model.path="$T/hd24" \
  train.device=cuda
echo "test_preflight_head_dim: ok"
