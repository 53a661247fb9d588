#!/usr/bin/env bash
# ZeRO-1 in the online trainer (issue 24, train.zero = 1 with trainer ranks under `cpt run`): GRPO on two CPU ranks
# with sharded AdamW moments ends where two ranks without ZeRO end (sync mode, same seeds), each rank holds half the
# optimizer state, and a checkpoint holds one optimizer file per rank. The checkpoint re-shards on resume: at one
# rank and at three it continues to the same weights as at two; a train.zero = 0 checkpoint continues with ZeRO the
# same as without; train.zero = 0 on a ZeRO checkpoint is refused with the reason. PPO shards its critic too.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
command -v mpirun > /dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so not built (no MPI found by cmake)"; exit 77; }
T=$(mktemp -d /tmp/cpt-zero-online-XXXXXX)
trap '[ -n "${KEEP_T:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source tests/e2e/grpo_small.sh
source tests/e2e/tiny_sft.sh # model, maxdiff
export OMP_NUM_THREADS=1
make_tiny_model "$T"
args=("${GRPO_ARGS[@]}" train.steps=4 checkpoint.every=2 train.threads=1 train.log_every=1)
run() { # DIR ARGS...: a fresh run
  local d=$1; shift
  "$CPT" run "${args[@]}" run.dir="$T/$d" "$@" 2> "$T/$d.log" || { cat "$T/$d.log" "$T/$d/logs/trainer"*.log; fail "$d"; }
}
resume() { # FROM TO ARGS...: a copy of FROM's run folder, resumed to step 6
  local from=$1 d=$2; shift 2
  cp -r "$T/$from" "$T/$d"
  "$CPT" run --resume "$T/$d" train.steps=6 "$@" 2> "$T/$d.log" || { cat "$T/$d.log" "$T/$d/logs/trainer"*.log; fail "$d"; }
}
near() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }

# 1. two ranks, with and without ZeRO-1
run two slurm.trainer_tasks=2
run twoz slurm.trainer_tasks=2 train.zero=1
grep -q "ZeRO-1 rank 1/2" "$T/twoz/logs/"trainer*.log || fail "rank 1 did not shard its optimizer"
check_groups "$T/twoz" 4 4 > /dev/null || fail "exactly-once counts of the ZeRO run"
d=$(maxdiff "$(model "$T/two" 4)" "$(model "$T/twoz" 4)")
moved=$(maxdiff "$(model "$T/two" 2)" "$(model "$T/two" 4)")
echo "2 ranks: ZeRO-1 vs plain max |dw| $d (the weights moved $moved from step 2 to 4)"
near "$d" 1e-6 && near "1e3 * $d" "$moved" || fail "ZeRO-1 ends $d away from plain data parallel (moved $moved)"
ck=$T/twoz/checkpoints/step-4
[ -f "$ck/optimizer-rank-0-of-2.safetensors" ] && [ -f "$ck/optimizer-rank-1-of-2.safetensors" ] &&
  [ ! -e "$ck/optimizer.safetensors" ] || { ls "$ck"; fail "the checkpoint does not hold one optimizer file per rank"; }
ls -a "$T/twoz/checkpoints" | grep -q '^\.zero-step' && fail "a staging folder was left behind"
full=$(stat -c %s "$T/two/checkpoints/step-4/optimizer.safetensors")
half=$(stat -c %s "$ck/optimizer-rank-0-of-2.safetensors")
echo "optimizer file: $full bytes without ZeRO, $half bytes a rank with it"
[ $((2 * half)) -lt $((full + 4096)) ] || fail "the shard ($half bytes) is not half the whole ($full bytes)"

# 2. the 2-rank ZeRO checkpoint resumed at 2, 1 and 3 ranks
resume twoz z2 slurm.trainer_tasks=2
resume twoz z1 slurm.trainer_tasks=1
resume twoz z3 slurm.trainer_tasks=3
grep -q "re-sharded the policy optimizer state of .*step-4 (the shards of 2 ranks) for 1 ranks" "$T/z1/logs/trainer.log" ||
  fail "no re-shard line at 1 rank"
[ "$(cat "$T/z3/logs/"trainer*.log | grep -c "re-sharded the policy optimizer state .* for 3 ranks")" = 3 ] ||
  fail "not every one of 3 ranks re-sharded"
grep -q "re-sharded" "$T/z2/logs/"trainer*.log && fail "the same world size re-sharded"
for r in z1 z3; do
  check_groups "$T/$r" 6 4 > /dev/null || fail "exactly-once counts of $r"
  dr=$(maxdiff "$(model "$T/z2" 6)" "$(model "$T/$r" 6)")
  echo "resumed at ${r#z} rank(s) vs 2: max |dw| $dr at step 6"
  near "$dr" 1e-5 || fail "resumed at ${r#z} rank(s): $dr away from 2 ranks"
done

# 3. a train.zero = 0 checkpoint resumed with ZeRO-1, and the other way round refused
resume two p2 slurm.trainer_tasks=2
resume two pz2 slurm.trainer_tasks=2 train.zero=1
grep -q "re-sharded the policy optimizer state .*(optimizer.safetensors (train.zero = 0)) for 2 ranks" \
  "$T/pz2/logs/trainer.log" || fail "no re-shard line from optimizer.safetensors"
dp=$(maxdiff "$(model "$T/p2" 6)" "$(model "$T/pz2" 6)")
echo "train.zero = 0 checkpoint continued with ZeRO-1 vs without: max |dw| $dp"
near "$dp" 1e-6 || fail "continuing with ZeRO-1 differs by $dp"
cp -r "$T/twoz" "$T/bad"
if "$CPT" run --resume "$T/bad" train.steps=6 train.zero=0 slurm.trainer_tasks=2 2> "$T/bad.log"; then
  fail "train.zero = 0 resumed a ZeRO checkpoint"
fi
grep -q "written with train.zero = 1 by 2 ranks .*resume with train.zero = 1, at any number of ranks" \
  "$T/bad/logs/trainer.log" || { cat "$T/bad.log" "$T/bad/logs/trainer.log"; fail "unclear refusal"; }

# 4. PPO: the critic's optimizer sharded too, its checkpoint with one file per rank; resumed at one rank
ppo=(examples/ppo_arithmetic.toml "${GRPO_ARGS[@]:1}" critic.path= train.threads=1 train.steps=4 checkpoint.every=2
     train.log_every=1)
"$CPT" run "${ppo[@]}" slurm.trainer_tasks=2 run.dir="$T/ppo" 2> "$T/ppo.log" ||
  { cat "$T/ppo.log" "$T/ppo/logs/trainer"*.log; fail "ppo"; }
"$CPT" run "${ppo[@]}" slurm.trainer_tasks=2 train.zero=1 run.dir="$T/ppoz" 2> "$T/ppoz.log" ||
  { cat "$T/ppoz.log" "$T/ppoz/logs/trainer"*.log; fail "ppo, ZeRO-1"; }
grep -q "the critic's sharded too" "$T/ppoz/logs/trainer.log" || fail "the critic's optimizer was not sharded"
[ -f "$T/ppoz/critic/checkpoints/step-4/optimizer-rank-1-of-2.safetensors" ] || fail "no critic shard in the checkpoint"
dpp=$(maxdiff "$(model "$T/ppo" 4)" "$(model "$T/ppoz" 4)")
dpc=$(maxdiff "$(model "$T/ppo/critic" 4)" "$(model "$T/ppoz/critic" 4)")
echo "ppo, 2 ranks: ZeRO-1 vs plain max |dw| policy $dpp, critic $dpc"
near "$dpp" 1e-6 && near "$dpc" 1e-6 || fail "ppo with ZeRO-1 differs: policy $dpp, critic $dpc"
"$CPT" run --resume "$T/ppoz" train.steps=6 slurm.trainer_tasks=1 2> "$T/ppoz1.log" ||
  { cat "$T/ppoz1.log" "$T/ppoz/logs/trainer"*.log; fail "ppo resumed at one rank"; }
grep -q "re-sharded the critic optimizer state" "$T/ppoz/logs/trainer.log" || fail "the critic was not re-sharded"
check_groups "$T/ppoz" 6 4 > /dev/null || fail "exactly-once counts of the resumed ppo run"
echo "test_zero_online: ok (2 ranks ZeRO-1 vs plain $d; resumed at 1 and 3 ranks; zero=0 -> 1 $dp; ppo $dpp / $dpc)"
