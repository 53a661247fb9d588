#!/usr/bin/env bash
# `cpt preflight`: a good config prints every check and `preflight: ok`; each bad thing is named, every problem of a
# config with several is listed, and the exit status is non-zero.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-preflight-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
n=0
sft=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
     data.eval=examples/data/arithmetic_rl_eval.jsonl)
grpo=(examples/sft_arithmetic.toml algo.type=grpo data.train=examples/data/arithmetic_rl_train.jsonl
      data.eval= reward.type=math)

good() { # NAME ARGS...: exit 0 and `preflight: ok`
  local name=$1; shift
  "$CPT" preflight "$@" > "$T/out" 2>&1 || { cat "$T/out"; fail "$name: preflight failed"; }
  tail -1 "$T/out" | grep -q '^preflight: ok' || { cat "$T/out"; fail "$name: no 'preflight: ok'"; }
  n=$((n + 1))
}
bad() { # NAME PATTERN ARGS...: non-zero exit, the FAIL line matches PATTERN, no 'preflight: ok'
  local name=$1 pat=$2; shift 2
  if "$CPT" preflight "$@" > "$T/out" 2>&1; then cat "$T/out"; fail "$name: preflight passed"; fi
  grep -Eq "$pat" "$T/out" || { cat "$T/out"; fail "$name: no line matching '$pat'"; }
  grep -q '^preflight: ok' "$T/out" && fail "$name: printed ok"
  grep -Eq '^preflight: [0-9]+ problems?$' "$T/out" || { cat "$T/out"; fail "$name: no problem count"; }
  n=$((n + 1))
}

good "sft example" "${sft[@]}"
grep -q "ok    data       data.train: .*1000 rl_prompt records" "$T/out" || { cat "$T/out"; fail "data line"; }
grep -q "ok    resources" "$T/out" || fail "no resources line"
good "grpo" "${grpo[@]}"
# the KL default of online runs (trainer/online_defaults.h): GRPO proper loads a reference at 0.001, Dr. GRPO none
grep -q "ok    roles      grpo: trainer, 1 rollout, 1 reward, reference (kl_beta 0.001)" "$T/out" ||
  { cat "$T/out"; fail "grpo: no reference at the default kl_beta 0.001"; }
good "dr_grpo" "${grpo[@]}" algo.variant=dr_grpo
grep -q "ok    roles      grpo: trainer, 1 rollout, 1 reward$" "$T/out" || { cat "$T/out"; fail "dr_grpo: a reference"; }
grep -q "ok    queue      private redis-server" "$T/out" || fail "no queue line for grpo"
grep -q "ok    reward     math" "$T/out" || fail "no reward line for grpo"

# an HF model folder: one SFT step of a tiny model, exported
OMP_NUM_THREADS=1 "$BUILD/cpt-train" "${sft[@]}" run.dir="$T/tiny" train.steps=1 train.eval_generate=0 \
  train.threads=1 model.hidden_size=32 model.intermediate_size=64 train.eval_max_examples=4 2> "$T/tiny.log" ||
  { cat "$T/tiny.log"; fail "tiny model"; }
"$CPT" export "$T/tiny/checkpoints/step-1" "$T/hf" > "$T/export.log" 2>&1 || { cat "$T/export.log"; fail "export"; }
good "hf folder" "${sft[@]}" model.init=load model.path="$T/hf" tokenizer.path=
grep -q "ok    model      $T/hf: 2 layers, hidden 32, vocab" "$T/out" || { cat "$T/out"; fail "model line"; }
grep -q "ok    tokenizer  $T/hf" "$T/out" || { cat "$T/out"; fail "tokenizer from the model folder"; }
# a validation prompt longer than the model's context fails validation at its first run: refused up front, file:line
python3 -c "import json; print(json.dumps({'prompt': 'What is 1 + 1?', 'answer': '2'})); print(json.dumps({'prompt': 'What is ' + '9 + ' * 400 + '1?', 'answer': '3601'}))" > "$T/val.jsonl"
bad "long validation prompt" "FAIL  data .*validation.data: $T/val.jsonl:2: a prompt of [0-9]+ tokens is longer than the context" \
  "${grpo[@]}" model.init=load model.path="$T/hf" tokenizer.path= validation.data="$T/val.jsonl"
# a checkpoint step folder works as model.path too
good "checkpoint" "${sft[@]}" model.init=load model.path="$T/tiny/checkpoints/step-1"
# the test fixture's vocabulary (256) is smaller than the example tokenizer's
mkdir -p "$T/fixture"
cp tests/fixtures/model/qwen2_tied/config.json tests/fixtures/model/qwen2_tied/model.safetensors "$T/fixture/"
bad "tokenizer vs model" "FAIL  tokenizer .*the model's vocabulary only 256" "${sft[@]}" model.init=load \
  model.path="$T/fixture"

bad "config key" "FAIL  config .*no_such_key" "${sft[@]}" train.no_such_key=1
bad "config value" "FAIL  config .*algo.type" "${sft[@]}" algo.type=magic
bad "model folder" "FAIL  model .*$T/nothing: not a folder" "${sft[@]}" model.init=load model.path="$T/nothing"
mkdir -p "$T/broken"; echo '{"model_type": "qwen2", "hidden_size": ' > "$T/broken/config.json"
bad "config.json" "FAIL  model .*config.json" "${sft[@]}" model.init=load model.path="$T/broken"
mkdir -p "$T/noweights"; cp "$T/fixture/config.json" "$T/noweights/"
bad "no safetensors" "FAIL  model .*noweights.*weights" "${sft[@]}" model.init=load model.path="$T/noweights"
bad "tokenizer" "FAIL  tokenizer .*$T/tok" "${sft[@]}" tokenizer.path="$T/tok"
bad "small vocab" "FAIL  tokenizer .*vocabulary only 16" "${sft[@]}" model.vocab_size=16
bad "missing data" "FAIL  data .*data.train: .*$T/none.jsonl" "${sft[@]}" data.train="$T/none.jsonl"
printf '{"prompt": "1+1=", "answer": "2"}\n{"prompt": 5\n' > "$T/bad.jsonl"
bad "bad line" "FAIL  data .*bad.jsonl:2" "${sft[@]}" data.train="$T/bad.jsonl"
bad "format" "FAIL  data .*rl_prompt records; algo.type = dpo reads preference" "${sft[@]}" algo.type=dpo
bad "messages without template" "FAIL  data .*need a chat template" "${sft[@]}" data.train=examples/data/arithmetic_train.jsonl
bad "reward" "FAIL  reward .*reward.type = plugin" "${grpo[@]}" reward.type=plugin reward.plugin_path="$T/none.so"
bad "rollout role" "FAIL  roles .*at least one rollout worker" "${grpo[@]}" roles.rollout=0
bad "opd teacher" "FAIL  roles .*opd needs a teacher" "${grpo[@]}" algo.type=opd
CPT_REDIS_SERVER=$T/redis-server bad "redis-server" "FAIL  queue .*$T/redis-server: redis-server not found" "${grpo[@]}"
SLURM_CPUS_ON_NODE=2 bad "slurm cpus" "FAIL  resources .*ask 5 CPUs.*allocation has 2" "${grpo[@]}" --slurm \
  slurm.trainer_cpus=2 roles.rollout=2 slurm.max_satellites=0
# the same with satellites allowed (the default): the 3 workers beyond the allocation become satellite jobs
SLURM_CPUS_ON_NODE=2 good "slurm cpus, satellites" "${grpo[@]}" --slurm slurm.trainer_cpus=2 roles.rollout=2
grep -q "ok    resources .*3 workers go to satellite jobs" "$T/out" || { cat "$T/out"; fail "slurm cpus, satellites: no line"; }
SLURM_CPUS_ON_NODE=8 bad "slurm gpus" "FAIL  resources .*ask 1 GPUs.*allocation has 0" "${sft[@]}" --slurm \
  slurm.trainer_gpus=1
SLURM_JOB_CPUS_PER_NODE='4(x2)' SLURM_JOB_NUM_NODES=2 SLURM_GPUS_ON_NODE=1 good "slurm fits" "${sft[@]}" --slurm \
  slurm.trainer_cpus=4 slurm.trainer_tasks=2 slurm.trainer_gpus=1
grep -q "allocation has 8 CPUs, 2 GPUs" "$T/out" || { cat "$T/out"; fail "allocation not parsed"; }
# (a build without CUDA names that instead of train.device)
bad "weights transport" "FAIL  weights .*cuda_ipc.*(train.device = \"cpu\"|CUDA)" "${grpo[@]}" weights.transport=cuda_ipc
# several problems at once: all listed
bad "several" "preflight: 3 problems" "${sft[@]}" data.train="$T/none.jsonl" tokenizer.path="$T/tok" \
  model.init=load model.path="$T/nothing"
[ "$(grep -c '^  FAIL' "$T/out")" -eq 3 ] || { cat "$T/out"; fail "not every problem was listed"; }

# OPD: the teacher in the reward workers, where teacher.device puts it (auto: the CPU on a machine without a GPU)
if [ -z "$(nvidia-smi -L 2> /dev/null)" ]; then
  good "opd" "${grpo[@]}" algo.type=opd teacher.path="$T/hf"
  grep -q "ok    roles      opd: trainer, 1 rollout, 1 reward, teacher in the reward workers on the CPU$" "$T/out" ||
    { cat "$T/out"; fail "opd: no teacher on the CPU in the roles line"; }
  good "opd teacher cuda" "${grpo[@]}" algo.type=opd teacher.path="$T/hf" teacher.device=cuda
  grep -q "teacher in the reward workers on the trainer's GPU (teacher.device)$" "$T/out" ||
    { cat "$T/out"; fail "opd, teacher.device = cuda: not on the GPU in the roles line"; }
  grep -q "warn  devices    teacher.device = cuda, but this process sees no GPU" "$T/out" ||
    { cat "$T/out"; fail "opd, teacher.device = cuda: no warning that no GPU is seen"; }
  # the GPUs a machine shows are not all idle when the teacher takes one: no "every role runs on the CPU"
  CUDA_VISIBLE_DEVICES=0 good "opd teacher cuda, the other roles cpu" "${grpo[@]}" algo.type=opd teacher.path="$T/hf" \
    teacher.device=cuda train.device=cpu rollout.device=cpu
  ! grep -q "every role runs on the CPU" "$T/out" || { cat "$T/out"; fail "opd, teacher on the GPU: every role on the CPU"; }
  CUDA_VISIBLE_DEVICES=0 good "opd teacher cpu, the other roles cpu" "${grpo[@]}" algo.type=opd teacher.path="$T/hf" \
    teacher.device=cpu train.device=cpu rollout.device=cpu
  grep -q "warn  devices    this machine shows 1 GPU, but every role runs on the CPU" "$T/out" ||
    { cat "$T/out"; fail "opd, every role on the CPU: no warning"; }
fi
SLURM_CPUS_ON_NODE=8 bad "opd teacher cuda under slurm" "FAIL  devices .*teacher.device = cuda, but a Slurm job's reward" \
  "${grpo[@]}" --slurm algo.type=opd teacher.path="$T/hf" teacher.device=cuda
SLURM_CPUS_ON_NODE=8 bad "reward model cuda under slurm" \
  "FAIL  devices .*reward.model_device = cuda, but a Slurm job's reward" "${grpo[@]}" --slurm reward.model_path="$T/hf" \
  reward.model_device=cuda
SLURM_CPUS_ON_NODE=8 bad "teacher and reward model cuda under slurm" "preflight: 2 problems" "${grpo[@]}" --slurm \
  algo.type=opd teacher.path="$T/hf" teacher.device=cuda reward.model_path="$T/hf" reward.model_device=cuda
grep -q "FAIL  devices    teacher.device = cuda, but a Slurm job's reward" "$T/out" &&
  grep -q "FAIL  devices    reward.model_device = cuda, but a Slurm job's reward" "$T/out" ||
  { cat "$T/out"; fail "both keys on cuda under Slurm: not a FAIL line for each"; }
echo "test_run_preflight: ok ($n configs checked)"
