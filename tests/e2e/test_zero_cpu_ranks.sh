#!/usr/bin/env bash
# ZeRO-1 on CPU ranks (issue 24, train.zero = 1): SFT with 2 ranks and sharded AdamW moments equals 1 rank with the
# same global batch, and 2 ranks without ZeRO, to fp32 rounding (max |dw| printed), while another batch is far off;
# each rank holds half the optimizer state (bytes printed); a checkpoint holds one optimizer file per rank and
# resuming at 2 ranks is bitwise equal to the uninterrupted run; resuming at 1 rank re-shards the moments and goes
# on as at 2; resuming without ZeRO is refused with the reason. DPO shards too.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so not built (no MPI found by cmake)"; exit 77; }
T=$(mktemp -d /tmp/cpt-zero-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
source "$SRC/tests/e2e/tiny_sft.sh"
tiny_sft_config "$T" 64 4 $'[optim]\nlr = 1e-3\ngrad_clip = 0.5'
train1() { local d=$1; shift; "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/$d" "$@" 2> "$T/$d.log" || { cat "$T/$d.log"; fail "$d"; }; }
train2() { local d=$1; shift; "${mpi[@]}" "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/$d" "$@" > "$T/$d.log" 2>&1 || { cat "$T/$d.log"; fail "$d"; }; }

# 1. the same weights: 1 rank (grad_accum 2), 2 ranks, 2 ranks with ZeRO-1, 1 rank with ZeRO-1 (the copies path)
train1 one train.grad_accum=2
train1 half
train1 onez train.grad_accum=2 train.zero=1
train2 two
train2 twoz train.zero=1
grep -q "ZeRO-1 rank 1/2" "$T/twoz.log" || { cat "$T/twoz.log"; fail "rank 1 did not shard its optimizer"; }
d_one=$(maxdiff "$(model "$T/one" 4)" "$(model "$T/twoz" 4)")
d_two=$(maxdiff "$(model "$T/two" 4)" "$(model "$T/twoz" 4)")
d_onez=$(maxdiff "$(model "$T/one" 4)" "$(model "$T/onez" 4)")
d_other=$(maxdiff "$(model "$T/one" 4)" "$(model "$T/half" 4)")
echo "zero=1 2 ranks vs 1 rank: max |dw| $d_one; vs 2 ranks zero=0: $d_two; zero=1 1 rank vs zero=0: $d_onez; another batch: $d_other"
python3 -c "import sys; sys.exit(0 if max($d_one, $d_two, $d_onez) < 1e-6 and $d_other > 1e-4 else 1)" ||
  fail "ZeRO-1 differs: $d_one / $d_two / $d_onez (another batch: $d_other)"
# the global gradient norm (and so clipping) is the same
n1=$(grep -o '"grad_norm":[^,}]*' "$T/one/metrics.jsonl" | head -1); n2=$(grep -o '"grad_norm":[^,}]*' "$T/twoz/metrics.jsonl" | head -1)
echo "step 1 $n1 (1 rank) $n2 (ZeRO-1, 2 ranks)"
python3 -c "import sys; a, b = ${n1#*:}, ${n2#*:}; sys.exit(0 if abs(a - b) <= 1e-5 * a and a > 0.5 else 1)" ||
  fail "grad norms differ or clipping not exercised: $n1 vs $n2"

# 1b. a model whose size does not divide by the world size (42560 floats over 3 ranks: the last slice is padded)
mpi3=(mpirun -n 3 --oversubscribe --bind-to none)
for d in pad0 pad1; do
  "${mpi3[@]}" "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/$d" model.hidden_size=40 model.intermediate_size=63 \
    train.steps=2 train.zero=${d#pad} > "$T/$d.log" 2>&1 || { cat "$T/$d.log"; fail "$d, 3 ranks"; }
done
grep -q "ZeRO-1 rank 2/3: .*floats \[28374, 42561) of 42560" "$T/pad1.log" || { cat "$T/pad1.log"; fail "no padded slice"; }
d_pad=$(maxdiff "$(model "$T/pad0" 2)" "$(model "$T/pad1" 2)")
echo "3 ranks, padded slices: zero=1 vs zero=0 max |dw| $d_pad"
python3 -c "import sys; sys.exit(0 if $d_pad < 1e-6 else 1)" || fail "padded ZeRO-1 differs by $d_pad"

# 2. optimizer memory per rank halves
full=$(grep -o 'sft: optimizer state [0-9]* bytes' "$T/two.log" | head -1 | awk '{print $4}')
r0=$(grep -o 'ZeRO-1 rank 0/2: optimizer state [0-9]* bytes' "$T/twoz.log" | awk '{print $6}')
r1=$(grep -o 'ZeRO-1 rank 1/2: optimizer state [0-9]* bytes' "$T/twoz.log" | awk '{print $6}')
echo "optimizer state per rank: $full bytes without ZeRO, $r0 and $r1 bytes with ZeRO-1 on 2 ranks"
[ -n "$full" ] && [ -n "$r0" ] && [ "$r0" = "$r1" ] && [ $((2 * r0 - full)) -ge 0 ] && [ $((2 * r0 - full)) -le 8 ] ||
  fail "optimizer state does not halve: $full vs $r0 / $r1"
ck=$T/twoz/checkpoints/step-4
[ -f "$ck/optimizer-rank-0-of-2.safetensors" ] && [ -f "$ck/optimizer-rank-1-of-2.safetensors" ] &&
  [ ! -e "$ck/optimizer.safetensors" ] || { ls "$ck"; fail "the checkpoint does not hold one optimizer file per rank"; }
grep -q "optimizer-rank-1-of-2.safetensors" "$ck/manifest.json" || fail "the shard is not in the manifest"
ls -a "$T/twoz/checkpoints" | grep -q '^\.zero-step' && fail "a staging folder was left behind"

# 3. checkpoints at steps 2 and 4; step 4 removed, resumed from step 2: bitwise the uninterrupted run
train2 res train.zero=1 checkpoint.every=2
mv "$T/res/checkpoints/step-4" "$T/step4"
echo step-2 > "$T/res/checkpoints/latest"
train2 res train.zero=1
grep -q "resumed from .*step-2" "$T/res.log" || { cat "$T/res.log"; fail "did not resume from step-2"; }
cmp "$T/step4/model/model.safetensors" "$(model "$T/res" 4)" || fail "resumed weights differ from the uninterrupted run"
cmp "$(model "$T/twoz" 4)" "$(model "$T/res" 4)" || fail "checkpointing changed the weights"
for r in 0 1; do
  cmp "$T/step4/optimizer-rank-$r-of-2.safetensors" "$T/res/checkpoints/step-4/optimizer-rank-$r-of-2.safetensors" ||
    fail "resumed optimizer shard $r differs"
done
echo "resume at 2 ranks: bitwise equal to the uninterrupted run"

# 4. the 2-rank checkpoint resumed at 1 rank (grad_accum 2: the same global batch) continues as at 2 ranks (the
#    moments re-sharded); train.zero = 0 on a ZeRO checkpoint is refused with the reason
cp -r "$T/twoz" "$T/c2"
cp -r "$T/twoz" "$T/c1"
train2 c2 train.zero=1 train.steps=6
train1 c1 train.zero=1 train.steps=6 train.grad_accum=2
grep -q "re-sharded the sft optimizer state of .*step-4 (the shards of 2 ranks) for 1 ranks" "$T/c1.log" ||
  { cat "$T/c1.log"; fail "no re-shard line at 1 rank"; }
grep -q "was written by 2 ranks, this run has 1: a step trains on train.grad_accum x ranks micro-batches, now 2 x 1" \
  "$T/c1.log" || { cat "$T/c1.log"; fail "no note of the world size's change"; }
d_re=$(maxdiff "$(model "$T/c2" 6)" "$(model "$T/c1" 6)")
echo "2-rank ZeRO checkpoint continued at 1 rank vs at 2: max |dw| $d_re at step 6"
python3 -c "import sys; sys.exit(0 if $d_re < 1e-6 else 1)" || fail "re-sharded at 1 rank: $d_re away"
if "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/twoz" train.steps=6 2> "$T/bad2.log"; then fail "train.zero = 0 resumed a ZeRO checkpoint"; fi
grep -q "written with train.zero = 1 by 2 ranks.*resume with train.zero = 1, at any number of ranks" "$T/bad2.log" ||
  { cat "$T/bad2.log"; fail "unclear zero=0 error"; }
# 5. DPO: 2 ranks with ZeRO-1 equal 2 ranks without (micro-batches of 256 tokens: several a step; and of 2048: one,
#    so rank 1 has none and sends zeros), a shard per rank in the checkpoint
dpo=("$SRC/examples/dpo_arithmetic.toml" train.steps=3 tokenizer.path="$SRC/examples/tiny-tokenizer"
     data.train="$SRC/examples/data/arithmetic_pref_train.jsonl" data.eval= train.threads=1)
for mb in 256 2048; do
  for z in 0 1; do
    "${mpi[@]}" "$BUILD/cpt-train" "${dpo[@]}" train.tokens_per_micro_batch=$mb train.zero=$z run.dir="$T/dpo$mb-$z" \
      > "$T/dpo$mb-$z.log" 2>&1 || { cat "$T/dpo$mb-$z.log"; fail "dpo, micro-batch $mb, zero $z"; }
  done
  d_dpo=$(maxdiff "$(model "$T/dpo$mb-0" 3)" "$(model "$T/dpo$mb-1" 3)")
  echo "dpo, micro-batches of $mb tokens, 2 ranks: ZeRO-1 vs plain max |dw| $d_dpo"
  python3 -c "import sys; sys.exit(0 if $d_dpo < 1e-6 else 1)" || fail "dpo with ZeRO-1 differs by $d_dpo"
  grep -q "dpo: ZeRO-1 rank 1/2" "$T/dpo$mb-1.log" || { cat "$T/dpo$mb-1.log"; fail "dpo rank 1 did not shard"; }
  [ -f "$T/dpo$mb-1/checkpoints/step-3/optimizer-rank-1-of-2.safetensors" ] || fail "no dpo shard in the checkpoint"
done
echo "test_zero_cpu_ranks: ok (max |dw| $d_one vs 1 rank, $d_two vs 2 ranks; optimizer $full -> $r0 bytes a rank;" \
     "re-sharded 2 -> 1 rank $d_re; dpo $d_dpo)"
