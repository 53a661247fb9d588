#!/usr/bin/env bash
# sbatch/grpo_4gpu.sh as typed on a node without GPUs: the one line the script's header documents for a CPU-only node,
# run exactly as written with overrides after it and no CONFIG, trains GRPO to the end on a real single-node Slurm.
# The roles follow the allocation (3 tasks x 1 CPU: trainer, one rollout and one reward worker, each step on 1 CPU
# with --gres=none), the job log says where each role ran, and every group is trained once.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=12 G=4
line=$(grep -m1 -o 'sbatch --gres=none [^#]*sbatch/grpo_4gpu.sh' sbatch/grpo_4gpu.sh) ||
  fail "sbatch/grpo_4gpu.sh documents no CPU-only line (sbatch --gres=none ...)"
read -r -a cmd <<< "$line"
# GRPO_ARGS without its CONFIG: the script's default config, overridden
overrides=("${GRPO_ARGS[@]:1}" train.steps=$STEPS train.groups_per_step=$G run.dir="$T/job")
out=$("${cmd[@]}" "${overrides[@]}") || fail "$line: $out"
job=${out##* }
[[ $job =~ ^[0-9]+$ ]] || fail "no job id in '$out'"
log="$PWD/cpt-grpo-$job.log" # the script's --output, in the submit directory
trap 'cp "$log" "$T/job.log" 2>/dev/null || true; rm -f "$log"; slurm_cleanup' EXIT
echo "submitted: $line ${overrides[*]:0:2} ... -> job $job"
wait_job_done "$job" 400
cp "$log" "$T/job.log"
grep -q 'cpt: devices: trainer cpu, rollout cpu, reward cpu; weights over file' "$log" || fail "no devices line"
grep -q 'ok    weights    weights.transport = file (auto)' "$log" || fail "no auto transport in preflight"
grep -q 'ok    resources  roles ask 3 CPUs, 0 GPUs' "$log" || fail "the roles did not follow the allocation (3 x 1 CPU)"
grep -q "cpt-sched: run finished: $T/job" "$log" || fail "the run did not finish"
grep -q '^device = "cpu"' "$T/job/config.toml" || fail "RUN_DIR/config.toml holds no resolved device"
grep -q '^transport = "file"' "$T/job/config.toml" || fail "RUN_DIR/config.toml holds no resolved transport"
# the reward steps get no GPU: the OPD teacher's and the reward model's auto are written down as the CPU
python3 -c 'import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
assert c["teacher"]["device"] == "cpu" and c["reward"]["model_device"] == "cpu", (c["teacher"], c["reward"])' \
  "$T/job/config.toml" || fail "teacher.device / reward.model_device not resolved to the CPU under Slurm"
summary=$(check_groups "$T/job" $STEPS $G) || fail "exactly-once: $summary"
echo "test_sbatch_cpu_line: ok ($line, $STEPS steps; $summary)"
