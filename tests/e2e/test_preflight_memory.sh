#!/usr/bin/env bash
# `cpt preflight` prints the trainer's model-state memory for the configured shape (weights, gradients, master
# weights and AdamW moments, on the GPU or offloaded to the host) and refuses train.optimizer_offload where it cannot
# apply (a CPU trainer, train.zero = 1). Needs no GPU: the figures are arithmetic on the shape (the verdict against
# the GPU's and host's memory is unit-tested in tests/unit/test_train_memory.c, independent of this machine).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-preflight-mem-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sft=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
     data.eval=examples/data/arithmetic_rl_eval.jsonl)
q7=(model.hidden_size=3584 model.num_layers=28 model.num_heads=28 model.num_kv_heads=4 model.intermediate_size=18944
    model.vocab_size=152064 model.tie_word_embeddings=false)

has() { # NAME PATTERN ARGS...: the output holds a line matching PATTERN (preflight may pass or not)
  local name=$1 pat=$2; shift 2
  "$CPT" preflight "$@" > "$T/out" 2>&1 || true
  grep -Eq "$pat" "$T/out" || { cat "$T/out"; fail "$name: no line matching '$pat'"; }
}
bad() { # NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  if "$CPT" preflight "$@" > "$T/out" 2>&1; then cat "$T/out"; fail "$name: preflight passed"; fi
  grep -Eq "$pat" "$T/out" || { cat "$T/out"; fail "$name: no line matching '$pat'"; }
}

bad "cpu trainer" "FAIL  memory +train.optimizer_offload = true needs train.device = cuda" "${sft[@]}" \
  train.device=cpu train.optimizer_offload=true
bad "with zero" "FAIL  memory +train.optimizer_offload = true with train.zero = 1 is not supported" "${sft[@]}" \
  train.device=cuda train.optimizer_offload=true train.zero=1
has "7B plain" "memory +policy 7.62B params: GPU bf16 weights 14.2 GiB, fp32 grads 28.4 GiB, fp32 master 28.4 GiB \(GPU\), AdamW moments 56.7 GiB \(GPU\);" \
  "${sft[@]}" train.device=cuda "${q7[@]}"
has "7B offloaded" "memory +policy 7.62B params: .*fp32 master 28.4 GiB \(host, pinned\), AdamW moments 56.7 GiB \(host, pinned\), staging buffers 0.38 GiB \(GPU\);" \
  "${sft[@]}" train.device=cuda train.optimizer_offload=true "${q7[@]}"
has "3B" "memory +policy 3.09B params: GPU bf16 weights 5.7 GiB" "${sft[@]}" train.device=cuda model.hidden_size=2048 \
  model.num_layers=36 model.num_heads=16 model.num_kv_heads=2 model.intermediate_size=11008 model.vocab_size=151936
has "tiny offloaded" "ok    memory +policy 0.00B params: .*\(host, pinned\).*fits" "${sft[@]}" train.device=cuda \
  train.optimizer_offload=true
echo "test_preflight_memory: ok"
