#!/usr/bin/env bash
# Data parallel in SFT and DPO, the parts a machine without GPUs can check: one rank (the default) trains as before
# and never loads NCCL; two ranks on the CPU are refused with the reason; a bad bootstrap name is refused by the
# config.
# (Two ranks with NCCL need two GPUs: docs/data-parallel.md says what was run where.)
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-dp-XXXXXX)
trap 'rm -rf "$T"' EXIT
for i in $(seq 0 15); do printf '{"prompt": "%d+1=", "completion": "%d"}\n' "$i" $((i + 1)); done > "$T/t.jsonl"
cat > "$T/j.toml" <<TOML
[model]
init = "random"
hidden_size = 32
intermediate_size = 64
num_layers = 1
num_heads = 4
[tokenizer]
path = "$SRC/examples/tiny-tokenizer"
[data]
train = "$T/t.jsonl"
chat_template = "none"
[train]
steps = 3
tokens_per_micro_batch = 64
max_seq_len = 32
threads = 1
TOML
# one rank, explicit: same weights as without the variables
"$BUILD/cpt-train" "$T/j.toml" run.dir="$T/a" 2> "$T/a.log"
CPT_RANK=0 CPT_WORLD_SIZE=1 "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/b" 2> "$T/b.log"
cmp "$T/a/checkpoints/step-3/model/model.safetensors" "$T/b/checkpoints/step-3/model/model.safetensors" ||
  { echo "FAIL: one explicit rank changed the result"; exit 1; }
if grep -qi nccl "$T/b.log"; then echo "FAIL: one rank mentioned NCCL"; cat "$T/b.log"; exit 1; fi
# two ranks on the CPU: refused, with the reason
rc=0
CPT_RANK=0 CPT_WORLD_SIZE=2 timeout 60 "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/c" 2> "$T/c.log" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: two CPU ranks were accepted"; exit 1; }
# (a build without CUDA refuses already for the missing NCCL)
grep -E -q 'data parallel over 2 ranks needs train.device = "cuda"|2 ranks need NCCL, but cpt was built without CUDA' "$T/c.log" ||
  { echo "FAIL: no reason given"; cat "$T/c.log"; exit 1; }
# an unknown bootstrap: a config error naming the key
rc=0
"$BUILD/cpt-train" "$T/j.toml" run.dir="$T/d" train.dp_bootstrap=mpi 2> "$T/d.log" || rc=$?
[ "$rc" -ne 0 ] && grep -q "train.dp_bootstrap" "$T/d.log" || { echo "FAIL: bad bootstrap accepted"; cat "$T/d.log"; exit 1; }
# DPO (several micro-batches a step): the same three checks
dpo=("$SRC/examples/dpo_arithmetic.toml" train.steps=3 train.tokens_per_micro_batch=400 train.threads=1
     checkpoint.every=0 tokenizer.path="$SRC/examples/tiny-tokenizer"
     data.train="$SRC/examples/data/arithmetic_pref_train.jsonl" data.eval="$SRC/examples/data/arithmetic_pref_eval.jsonl")
"$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/e" 2> "$T/e.log" || { cat "$T/e.log"; exit 1; }
CPT_RANK=0 CPT_WORLD_SIZE=1 "$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/f" 2> "$T/f.log" || { cat "$T/f.log"; exit 1; }
cmp "$T/e/checkpoints/step-3/model/model.safetensors" "$T/f/checkpoints/step-3/model/model.safetensors" ||
  { echo "FAIL: dpo: one explicit rank changed the result"; exit 1; }
if grep -qi nccl "$T/f.log"; then echo "FAIL: dpo: one rank mentioned NCCL"; cat "$T/f.log"; exit 1; fi
rc=0
CPT_RANK=0 CPT_WORLD_SIZE=2 timeout 60 "$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/g" 2> "$T/g.log" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: dpo: two CPU ranks were accepted"; exit 1; }
grep -E -q 'data parallel over 2 ranks needs train.device = "cuda"|2 ranks need NCCL, but cpt was built without CUDA' "$T/g.log" ||
  { echo "FAIL: dpo: no reason given"; cat "$T/g.log"; exit 1; }
[ ! -e "$T/g/checkpoints/latest" ] || { echo "FAIL: dpo: a refused run wrote a checkpoint"; exit 1; }
echo "test_dp_config: ok"
