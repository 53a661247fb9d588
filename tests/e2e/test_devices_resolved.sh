#!/usr/bin/env bash
# Devices by what a step sees (weights/devices.h): `cpt config show --resolved` prints the config with every auto
# replaced as `cpt run` (the GPUs this process sees) or cpt-sched (--slurm: slurm.*_gpus) would write it into
# RUN_DIR/config.toml; `cpt preflight` prints the resolved devices and the transport, warns about GPUs held but used by
# no role, and refuses a role on cuda whose Slurm step gets no GPU. Needs no GPU: Slurm's view is arithmetic.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-devices-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }
unset CUDA_VISIBLE_DEVICES SLURM_JOB_ID SLURM_GPUS_ON_NODE SLURM_JOB_GPUS SLURM_GPUS SLURM_STEP_GPUS
grpo=(examples/grpo_arithmetic.toml)
# value of KEY in [SECTION] of the TOML on stdin
val() { awk -v s="[$1]" -v k="$2" '/^\[/{sec=$0} sec==s && $1==k {gsub(/"/,"",$3); print $3}'; }

# the defaults are auto, and show without --resolved keeps them
"$CPT" config show "${grpo[@]}" > "$T/plain"
[ "$(val train device < "$T/plain")" = auto ] || fail "train.device default is not auto"
[ "$(val rollout device < "$T/plain")" = auto ] || fail "rollout.device default is not auto"
[ "$(val weights transport < "$T/plain")" = auto ] || fail "weights.transport default is not auto"

# Slurm's view: a GPU per worker -> nccl; the rollout beside the trainer on its GPU -> cuda_ipc; no GPUs -> file
"$CPT" config show --resolved --slurm "${grpo[@]}" slurm.trainer_gpus=1 slurm.rollout_gpus=1 > "$T/out" 2> "$T/err"
[ "$(val train device < "$T/out")" = cuda ] || fail "--slurm, gpus 1/1: train.device"
[ "$(val rollout device < "$T/out")" = cuda ] || fail "--slurm, gpus 1/1: rollout.device"
[ "$(val weights transport < "$T/out")" = nccl ] || fail "--slurm, gpus 1/1: transport"
grep -q 'devices: trainer cuda (GPU 0), rollout cuda (a GPU per worker), reward cpu; weights over nccl' "$T/err" ||
  fail "no devices line on stderr: $(cat "$T/err")"
"$CPT" config show --resolved --slurm "${grpo[@]}" slurm.trainer_gpus=1 slurm.rollout_gpus=0 rollout.device=cuda > "$T/out"
[ "$(val weights transport < "$T/out")" = cuda_ipc ] || fail "--slurm, one shared GPU: transport"
"$CPT" config show --resolved --slurm "${grpo[@]}" slurm.trainer_gpus=1 > "$T/out"
[ "$(val train device < "$T/out")/$(val rollout device < "$T/out")/$(val weights transport < "$T/out")" = cuda/cpu/file ] ||
  fail "--slurm, trainer GPU only: $(val train device < "$T/out")/$(val rollout device < "$T/out")"
"$CPT" config show --resolved --slurm "${grpo[@]}" slurm.trainer_gpus=1 slurm.rollout_gpus=1 weights.transport=file > "$T/out"
[ "$(val weights transport < "$T/out")" = file ] || fail "an explicit transport was not kept"
# the resolved text loads again as a config (what the roles read)
"$CPT" config show "$T/out" > /dev/null || fail "the resolved config does not load"

# the local view follows the GPUs this process sees (this build's: the resolved line says which)
"$CPT" config show --resolved "${grpo[@]}" > "$T/out" 2> "$T/err"
local_dev=$(val train device < "$T/out")
case "$local_dev" in cpu) want=file ;; cuda) want=cuda_ipc ;; *) fail "local train.device '$local_dev'" ;; esac
[ "$(val weights transport < "$T/out")" = "$want" ] || fail "local: transport $(val weights transport < "$T/out"), expected $want"

# preflight: the devices line and the transport, auto marked
"$CPT" preflight "${grpo[@]}" > "$T/out" 2>&1 || fail "preflight of the example failed"
grep -Eq "^  ok    devices    trainer $local_dev" "$T/out" || fail "no devices line"
grep -Eq "^  ok    weights    weights.transport = $want \(auto\)" "$T/out" || fail "no weights line with (auto)"

# `cpt run` says where the trainer runs and writes the resolved device into RUN_DIR/config.toml (a 1-step SFT run)
OMP_NUM_THREADS=1 "$CPT" run examples/sft_arithmetic.toml run.dir="$T/run" train.steps=1 \
  data.train=examples/data/arithmetic_rl_train.jsonl data.eval= train.eval_generate=0 train.threads=1 \
  model.hidden_size=32 model.intermediate_size=64 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1 \
  2> "$T/out" || fail "cpt run"
grep -q "^cpt: devices: trainer $local_dev\$" "$T/out" || fail "no 'cpt: devices: trainer $local_dev' line"
[ "$(val train device < "$T/run/config.toml")" = "$local_dev" ] || fail "RUN_DIR/config.toml: train.device not resolved"

# cpt eval and cpt generate take --device auto|cpu|cuda (auto is the default)
evargs=(--model examples/models/tiny-arith-sft --data examples/data/arithmetic_rl_eval.jsonl --reward math
        --max-records 2 --max-new-tokens 4 --json)
"$CPT" eval "${evargs[@]}" --device cpu > "$T/cpu.json" 2> "$T/out" || fail "cpt eval --device cpu"
"$CPT" eval "${evargs[@]}" > "$T/auto.json" 2> "$T/out" || fail "cpt eval (auto)"
[ "$local_dev" = cuda ] || cmp -s <(sed 's/"seconds":[^,}]*//' "$T/cpu.json") <(sed 's/"seconds":[^,}]*//' "$T/auto.json") ||
  fail "cpt eval: auto without a GPU differs from --device cpu"
st=0; "$CPT" eval "${evargs[@]}" --device gpu > /dev/null 2> "$T/out" || st=$?
[ "$st" -eq 2 ] && grep -q 'expected auto, cpu or cuda' "$T/out" || fail "cpt eval --device gpu: status $st"
st=0; "$CPT" generate --model examples/models/tiny-arith-sft --prompt "1+1=" --max-new-tokens 2 --device gpu \
  > /dev/null 2> "$T/out" || st=$?
[ "$st" -ne 0 ] && grep -q 'expected auto, cpu or cuda' "$T/out" || fail "cpt generate --device gpu: status $st"

# a GPU allocation left unused is a warning, not a problem
export SLURM_CPUS_ON_NODE=48 SLURM_GPUS_ON_NODE=4
"$CPT" preflight --slurm "${grpo[@]}" slurm.trainer_gpus=1 train.device=cpu > "$T/out" 2>&1 || fail "unused trainer GPU failed"
grep -q "warn  devices    slurm.trainer_gpus = 1, but train.device = cpu: the trainer's GPUs stay unused" "$T/out" ||
  fail "no warning for slurm.trainer_gpus with train.device = cpu"
grep -q '^preflight: ok (with warnings)' "$T/out" || fail "not ok with warnings"
"$CPT" preflight --slurm "${grpo[@]}" > "$T/out" 2>&1 || fail "all-CPU roles in a GPU job failed"
grep -q "warn  devices    the allocation holds 4 GPUs, but every role runs on the CPU" "$T/out" ||
  fail "no warning for an allocation's GPUs used by no role"
# a role on cuda whose step gets no GPU is a problem
if "$CPT" preflight --slurm "${grpo[@]}" train.device=cuda > "$T/out" 2>&1; then fail "cuda with no trainer GPU passed"; fi
grep -q "FAIL  devices    train.device = cuda, but slurm.trainer_gpus = 0" "$T/out" || fail "no FAIL for a GPU-less cuda step"
unset SLURM_GPUS_ON_NODE
"$CPT" preflight --slurm "${grpo[@]}" > "$T/out" 2>&1 || fail "a CPU job failed"
grep -q "warn  devices" "$T/out" && fail "a CPU job with CPU roles warned"
# outside Slurm, GPUs in CUDA_VISIBLE_DEVICES that no role uses (a build without CUDA, or roles set to cpu)
CUDA_VISIBLE_DEVICES=0,1 "$CPT" preflight "${grpo[@]}" train.device=cpu rollout.device=cpu > "$T/out" 2>&1 || fail "local cpu"
grep -q "warn  devices    this machine shows [0-9]* GPUs\?, but every role runs on the CPU" "$T/out" ||
  fail "no warning for visible GPUs used by no role"
echo "test_devices_resolved: ok (local view: $local_dev, $want)"
