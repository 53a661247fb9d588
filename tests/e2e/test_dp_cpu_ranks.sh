#!/usr/bin/env bash
# Trainer ranks on the CPU through Open MPI (issue 21): SFT with 2 ranks under mpirun equals 1 rank with the same
# global batch (grad_accum 2) to fp32 rounding, while a different batch is far off (the check is not vacuous); DPO
# with 2 ranks equals 1 rank;
# `cpt run` with slurm.trainer_tasks=2 starts the ranks under mpirun as one supervised trainer (rank 1 logs to
# logs/trainer.rank1.log) and ends bitwise equal to the direct mpirun run; a Ctrl-C stops both ranks at the same
# step with a checkpoint and --resume finishes; kill -9 of `cpt run` leaves no rank behind; preflight refuses online
# methods with trainer ranks (not supported yet) with the reason.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so not built (no MPI found by cmake)"; exit 77; }
T=$(mktemp -d /tmp/cpt-dp-cpu-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
source "$SRC/tests/e2e/tiny_sft.sh"
tiny_sft_config "$T" 64 4 $'[optim]\nlr = 1e-3'

# 1. two ranks = one rank with the same global batch
"$BUILD/cpt-train" "$T/j.toml" run.dir="$T/one" train.grad_accum=2 2> "$T/one.log" || { cat "$T/one.log"; fail "one rank"; }
"$BUILD/cpt-train" "$T/j.toml" run.dir="$T/half" 2> "$T/half.log" || { cat "$T/half.log"; fail "one rank, half batch"; }
"${mpi[@]}" "$BUILD/cpt-train" "$T/j.toml" run.dir="$T/two" > "$T/two.log" 2>&1 || { cat "$T/two.log"; fail "two ranks"; }
grep -q "data parallel rank 1/2 on the CPU (Open MPI" "$T/two.log" || { cat "$T/two.log"; fail "rank 1 did not join over MPI"; }
d_same=$(maxdiff "$(model "$T/one" 4)" "$(model "$T/two" 4)")
d_other=$(maxdiff "$(model "$T/one" 4)" "$(model "$T/half" 4)")
echo "2 ranks vs 1 rank (grad_accum 2): max |dw| $d_same; vs another batch: $d_other"
python3 -c "import sys; s, o = $d_same, $d_other; sys.exit(0 if s < 1e-6 and o > 1e-4 else 1)" ||
  fail "2 ranks differ from 1 rank by $d_same (another batch: $d_other)"

# DPO: the step's pairs are split over the ranks, so two ranks equal one rank with the same config
dpo=("$SRC/examples/dpo_arithmetic.toml" train.steps=3 train.tokens_per_micro_batch=400 train.threads=1
     checkpoint.every=0 tokenizer.path="$SRC/examples/tiny-tokenizer" data.eval=
     data.train="$SRC/examples/data/arithmetic_pref_train.jsonl" optim.lr=1e-3)
"$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/dpo1" 2> "$T/dpo1.log" || { cat "$T/dpo1.log"; fail "dpo, one rank"; }
"$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/dpo1b" optim.lr=5e-4 2> "$T/dpo1b.log" || { cat "$T/dpo1b.log"; fail "dpo, lr"; }
"${mpi[@]}" "$BUILD/cpt-train" "${dpo[@]}" run.dir="$T/dpo2" > "$T/dpo2.log" 2>&1 || { cat "$T/dpo2.log"; fail "dpo, two ranks"; }
dpo_same=$(maxdiff "$(model "$T/dpo1" 3)" "$(model "$T/dpo2" 3)")
dpo_other=$(maxdiff "$(model "$T/dpo1" 3)" "$(model "$T/dpo1b" 3)")
echo "dpo: 2 ranks vs 1 rank: max |dw| $dpo_same; vs half the learning rate: $dpo_other"
python3 -c "import sys; s, o = $dpo_same, $dpo_other; sys.exit(0 if s < 1e-6 and o > 1e-4 else 1)" ||
  fail "dpo: 2 ranks differ from 1 rank by $dpo_same (half the lr: $dpo_other)"

# 2. cpt run with two trainer ranks: one supervised trainer, rank logs, the same weights as the direct run
"$BUILD/cpt" run "$T/j.toml" run.dir="$T/run" slurm.trainer_tasks=2 2> "$T/run.log" || { cat "$T/run.log"; fail "cpt run, 2 ranks"; }
grep -q "ok    ranks .*2 CPU trainer ranks over Open MPI, started by mpirun" "$T/run.log" || { cat "$T/run.log"; fail "preflight line"; }
grep -q "run finished" "$T/run.log" || fail "no 'run finished'"
grep -q "data parallel rank 0/2 on the CPU" "$T/run/logs/trainer.log" || fail "rank 0 not in trainer.log"
grep -q "data parallel rank 1/2 on the CPU" "$T/run/logs/trainer.rank1.log" || fail "rank 1 not in trainer.rank1.log"
if grep -q "rank 1/2" "$T/run/logs/trainer.log"; then fail "rank 1 wrote into trainer.log"; fi
cmp "$(model "$T/two" 4)" "$(model "$T/run" 4)" || fail "cpt run with 2 ranks differs from the direct mpirun run"

# 3. Ctrl-C mid-run: both ranks stop at the same step with a checkpoint; --resume finishes
"$BUILD/cpt" run "$T/j.toml" run.dir="$T/stop" slurm.trainer_tasks=2 train.steps=100000 2> "$T/stop.log" &
pid=$!; pids+=("$pid")
for _ in $(seq 1 300); do grep -q '"step":5[,}]' "$T/stop/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/stop.log"; fail "SIGINT: exit status $rc, expected 3"; }
s0=$(grep -o 'stopping at step [0-9]*' "$T/stop/logs/trainer.log" | awk '{print $4}')
s1=$(grep -o 'stopping at step [0-9]*' "$T/stop/logs/trainer.rank1.log" | awk '{print $4}')
[ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "ranks stopped at different steps: '$s0' and '$s1'"
[ "$(cat "$T/stop/checkpoints/latest")" = "step-$s0" ] || fail "latest is not step-$s0"
"$BUILD/cpt" run --resume "$T/stop" train.steps=$((s0 + 2)) 2> "$T/resume.log" || { cat "$T/resume.log"; fail "--resume"; }
[ -f "$(model "$T/stop" $((s0 + 2)))" ] || fail "--resume did not reach step $((s0 + 2))"
grep -q "resumed from .*step-$s0" "$T/stop/logs/trainer.rank1.log" || fail "rank 1 did not resume from step-$s0"

# 4. kill -9 of the launcher: every rank dies with it
"$BUILD/cpt" run "$T/j.toml" run.dir="$T/kill" slurm.trainer_tasks=2 train.steps=100000 2> "$T/kill.log" &
pid=$!; pids+=("$pid")
for _ in $(seq 1 300); do [ "$(pgrep -f "cpt-train $T/kill/config.toml" | wc -l)" -ge 2 ] && break; sleep 0.1; done
[ "$(pgrep -f "cpt-train $T/kill/config.toml" | wc -l)" -ge 2 ] || fail "the two ranks never started"
kill -9 "$pid"
for _ in $(seq 1 50); do pgrep -f "$T/kill/config.toml" > /dev/null || break; sleep 0.1; done
if pgrep -f "$T/kill/config.toml" > /dev/null; then fail "ranks outlived the launcher: $(pgrep -af "$T/kill/config.toml")"; fi

# 5. online methods with trainer ranks: accepted (rank 0 owns the queue, the others follow; test_grpo_ranks.sh)
rc=0
"$BUILD/cpt" preflight "$SRC/examples/grpo_arithmetic.toml" slurm.trainer_tasks=2 > "$T/pf.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] && grep -q "ok    ranks .*2 CPU trainer ranks over Open MPI" "$T/pf.log" ||
  { cat "$T/pf.log"; fail "grpo with 2 trainer ranks was not accepted"; }
# ... but not cuda_ipc from a rank 0 that is not on the announced train.cuda_device
"$BUILD/cpt" preflight "$SRC/examples/grpo_arithmetic.toml" slurm.trainer_tasks=2 train.device=cuda rollout.device=cuda \
  weights.transport=cuda_ipc train.cuda_device=1 > "$T/pf.log" 2>&1 && fail "cuda_ipc from trainer rank 0 on GPU 0 was accepted"
grep -q "FAIL  ranks .*weights.transport = cuda_ipc announces train.cuda_device = 1" "$T/pf.log" ||
  { cat "$T/pf.log"; fail "cuda_ipc with trainer ranks: no reason given"; }
# GPU ranks on a machine without enough GPUs: refused before anything starts
if [ ! -e /dev/nvidia1 ]; then
  rc=0
  "$BUILD/cpt" preflight "$T/j.toml" slurm.trainer_tasks=2 train.device=cuda > "$T/pf2.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && grep -q "FAIL  ranks .*2 GPU trainer ranks need a GPU each" "$T/pf2.log" ||
    { cat "$T/pf2.log"; fail "2 GPU ranks without 2 GPUs were not refused"; }
fi
echo "test_dp_cpu_ranks: ok (2 ranks = 1 rank to $d_same, dpo $dpo_same; stop at step $s0 on both ranks, resumed)"
