#!/usr/bin/env bash
# Data parallel in SFT and DPO, the parts a machine without GPUs can check: one rank (the default) trains as before
# and never loads NCCL; two CPU ranks announced only by CPT_RANK / CPT_WORLD_SIZE (not started by mpirun or srun)
# are refused with the reason; a bad bootstrap name is refused by the config. (CPU ranks under mpirun:
# test_dp_cpu_ranks.sh.)
# (Two ranks with NCCL need two GPUs: docs/data-parallel.md says what was run where.)
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-dp-XXXXXX)
trap 'rm -rf "$T"' EXIT
source "$SRC/tests/e2e/tiny_sft.sh"
tiny_sft_config "$T" 16 3
fail() { echo "FAIL: $*" >&2; exit 1; }

# NAME CONFIG [k=v ...]: one explicit rank gives the same weights as no variables and never mentions NCCL; two
# CPU ranks without a launcher are refused with the reason and write no checkpoint
check_ranks() {
  local name=$1
  shift
  "$BUILD/cpt-train" "$@" run.dir="$T/$name-a" 2> "$T/$name-a.log" || { cat "$T/$name-a.log"; fail "$name: one rank failed"; }
  CPT_RANK=0 CPT_WORLD_SIZE=1 "$BUILD/cpt-train" "$@" run.dir="$T/$name-b" 2> "$T/$name-b.log" ||
    { cat "$T/$name-b.log"; fail "$name: one explicit rank failed"; }
  cmp "$T/$name-a/checkpoints/step-3/model/model.safetensors" "$T/$name-b/checkpoints/step-3/model/model.safetensors" ||
    fail "$name: one explicit rank changed the result"
  if grep -qi nccl "$T/$name-b.log"; then cat "$T/$name-b.log"; fail "$name: one rank mentioned NCCL"; fi
  local rc=0
  CPT_RANK=0 CPT_WORLD_SIZE=2 timeout 60 "$BUILD/cpt-train" "$@" run.dir="$T/$name-c" 2> "$T/$name-c.log" || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: two CPU ranks were accepted"
  grep -E -q 'CPU ranks \(CPT_WORLD_SIZE=2\) are started by .mpirun -n N. or .srun --mpi=pmix -n N.' \
    "$T/$name-c.log" || { cat "$T/$name-c.log"; fail "$name: no reason given"; }
  [ ! -e "$T/$name-c/checkpoints/latest" ] || fail "$name: a refused run wrote a checkpoint"
}

check_ranks sft "$T/j.toml"
# DPO with several micro-batches a step
check_ranks dpo "$SRC/examples/dpo_arithmetic.toml" train.steps=3 train.tokens_per_micro_batch=400 train.threads=1 \
  checkpoint.every=0 tokenizer.path="$SRC/examples/tiny-tokenizer" \
  data.train="$SRC/examples/data/arithmetic_pref_train.jsonl" data.eval="$SRC/examples/data/arithmetic_pref_eval.jsonl"
# an unknown bootstrap: a config error naming the key
rc=0
"$BUILD/cpt-train" "$T/j.toml" run.dir="$T/d" train.dp_bootstrap=mpi 2> "$T/d.log" || rc=$?
[ "$rc" -ne 0 ] && grep -q "train.dp_bootstrap" "$T/d.log" || { cat "$T/d.log"; fail "bad bootstrap accepted"; }
echo "test_dp_config: ok"
