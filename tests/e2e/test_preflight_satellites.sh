#!/usr/bin/env bash
# Preflight of satellite settings (`cpt preflight CONFIG --slurm`, in a simulated 3-CPU allocation):
#  - roles beyond the allocation are fine when satellite jobs can take them (slurm.max_satellites), named as such,
#    and a failure when they cannot;
#  - slurm.satellite_warn_s at or above slurm.satellite_time would make every satellite hand back as it starts: refused,
#    as is a satellite_time Slurm would not take; a short time with the warning below it passes.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
fail() { echo "FAIL: $*" >&2; exit 1; }
pre() { SLURM_JOB_CPUS_PER_NODE=3 SLURM_NTASKS=3 "$BUILD/cpt" preflight examples/grpo_arithmetic.toml roles.rollout=3 \
        roles.reward=1 "$@" --slurm 2>&1 || true; }
out=$(pre)
grep -q "ok    resources  roles ask 5 CPUs, 0 GPUs; the allocation has 3 CPUs, 0 GPUs: 2 workers go to satellite jobs" \
  <<< "$out" || fail "satellite overflow not accepted: $out"
out=$(pre slurm.max_satellites=1)
grep -q "FAIL  resources  the roles ask 5 CPUs" <<< "$out" || fail "overflow beyond slurm.max_satellites accepted: $out"
out=$(pre slurm.satellite_time=1)
grep -q "FAIL  slurm      slurm.satellite_warn_s = 60 is not below slurm.satellite_time = 1 (60 s)" <<< "$out" ||
  fail "warn_s >= satellite_time accepted: $out"
out=$(pre slurm.satellite_time=5:00 slurm.satellite_warn_s=60)
grep -q "FAIL  slurm" <<< "$out" && fail "5:00 with a 60 s warning refused: $out"
grep -q "^preflight: ok" <<< "$out" || fail "5:00 with a 60 s warning: $out"
out=$(pre slurm.satellite_time=2h)
grep -q 'FAIL  slurm      slurm.satellite_time = "2h" is not a Slurm time' <<< "$out" || fail "2h accepted: $out"
echo "OK: satellite overflow, satellite_time and satellite_warn_s checked by preflight"
