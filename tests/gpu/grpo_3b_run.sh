#!/bin/bash
# GRPO of the Qwen2.5-3B shape on one GPU, colocated (issue 24, third point): random weights, a synthetic prompt set,
# trainer (train.device = cuda, activation recomputation) and GPU rollout engine on GPU 0, weights over cuda_ipc,
# reward on the CPU. Reports steps/s, completion tokens/s, peak GPU memory (nvidia-smi sampled during the run) and
# where a step's time goes (the time/* keys of metrics.jsonl), into $OUT/grpo3b_summary.txt.
#
#   tests/gpu/grpo_3b_run.sh --cpu-smoke [BUILD]   here: the same flow at a tiny shape on the CPU, file transport
#   tests/gpu/grpo_3b_run.sh run CARRY             on the device: CARRY is the unpacked folder of
#                                                  `tests/gpu/device_all.sh build` (bin/, lib/, tokenizer-qwen3/);
#                                                  device_all.sh's stage grpo3b runs it
#
# Knobs (env): OUT (/tmp/cpt-grpo3b; emptied), BUDGET_S (400: seconds for the whole script; the GRPO run is ended
# when its steps are done or when it would pass BUDGET_S), GRPO_STEPS (40), PROMPTS (P, 16), GROUP_SIZE (G, 16),
# MAX_NEW (128), MICRO_TOKENS (8192), MINI_BATCHES (1: one optimizer update a step, so an offloaded update is paid
# once a step), MEM_FRACTION (0.9), OFFLOAD (auto: 1 on a GPU under 120,000 MiB; 1: train.optimizer_offload),
# MODE=cpu (run: the carried binaries at the smoke's shape, without a GPU), TOKENIZER (a tokenizer.json folder;
# default CARRY/tokenizer-qwen3, else .deps/tokenizer-qwen3/models, else the example tiny tokenizer, 709 ids: the
# summary says which).
#
# The model: cpt-train makes it (model.init = random with the model.* shape keys, one SFT step at lr 0, so the
# weights are the init drawn from run.seed), `cpt export --bf16` writes the HF folder, the run loads it
# (cuda_ipc needs model.path for the rollout engine). The vocabulary is the tokenizer's: with the Qwen tokenizer
# 151,669 ids (Qwen2.5's config pads to 151,936: 267 rows, 0.02% of the parameters, left out because a random model
# samples every id and the reward worker must decode them). cpt-train always writes a checkpoint at its end (fp32
# weights 12.3 GB + AdamW moments 24.7 GB): it is removed once exported, so the disk holds at most that plus the
# 6.2 GB export.
#
# Sampling: rollout.stop_on_eos = false, so every completion is MAX_NEW tokens (a random model would otherwise stop
# at random); the reward is `length` in characters (target 0), which differs between the samples of a group (the
# random tokens decode to different lengths), so every group has advantages and the backward does real work.
#
# GPU memory of the 3B shape (P = 3.09e9 parameters; H200: 139 GiB = 149 GB):
#   trainer: bf16 weights 6.2 GB + fp32 gradients 12.3 + fp32 master 12.3 + AdamW moments 24.7 = 55.5 GB (18 B a
#     parameter; train.optimizer_offload: 6 B, 18.5 GB, the master and moments in pinned host memory), + the two
#     cuda_ipc slots (bf16 weight versions the rollout copies from) 12.3 GB, + activations with train.recompute (each
#     layer's input, one layer's recomputed activations, the logits of a micro-batch of MICRO_TOKENS: 8192 x 151,669
#     x 4 B = 5.0 GB) about 10 GB: about 78 GB.
#   rollout: its own bf16 copy 6.2 GB + decoder workspace and logits (slots x vocab x 4 B: 0.16 GB) about 1 GB + the
#     paged KV cache. KV per token = 2 (K, V) x 36 layers x 2 KV heads x 128 x 2 B = 36.9 KB; the pool is capped at
#     every slot's full context, slots (G x P = 256) x rollout.max_len (prompt room 128 + MAX_NEW 128 = 256) =
#     65,536 positions = 2.4 GB.
#   total about 88 GB: fits with 60 GB to spare. rollout.gpu_memory_fraction (MEM_FRACTION) caps what the rollout may
#     fill, counted over the whole GPU (everything already allocated, the trainer's too, plus its pool): at 0.9 the
#     pool gets min(the cap above, 0.9 x 149 GB - used) = the cap, whichever process starts first.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$(pwd)
T_START=$(date +%s)

# $1 bin dir, $2 out dir, $3 "gpu" or "cpu", $4 tokenizer folder
flow() {
  local bin=$1 out=$2 mode=$3 tok=$4
  local g=${GROUP_SIZE:-16} p=${PROMPTS:-16} max_new=${MAX_NEW:-128} steps=${GRPO_STEPS:-40}
  rm -rf "$out"
  mkdir -p "$out/data"
  "$bin/cpt" data gen arithmetic --format rl --split sft --n 64 --seed 1 > "$out/data/init.jsonl"
  # GRPO's prompts: the rl split; steps x P of them are used (the CPU needs few: the trainer tokenizes them all)
  "$bin/cpt" data gen arithmetic --format rl --split rl --n "$([ "$mode" = gpu ] && echo 20000 || echo 200)" --seed 3 \
    > "$out/data/grpo.jsonl"
  local shape=() init=() grpo=()
  if [ "$mode" = gpu ]; then
    shape=(model.hidden_size=2048 model.num_layers=36 model.num_heads=16 model.num_kv_heads=2
           model.intermediate_size=11008 model.max_position_embeddings=32768 model.rope_theta=1000000)
    init=(train.device=cuda train.recompute=true)
    grpo=(train.device=cuda rollout.device=cuda weights.transport=cuda_ipc train.recompute=true
          rollout.gpu_memory_fraction="${MEM_FRACTION:-0.9}" train.tokens_per_micro_batch="${MICRO_TOKENS:-8192}"
          train.mini_batches="${MINI_BATCHES:-1}")
    # OFFLOAD=auto: a GPU under 120,000 MiB (an 80 GB H100) cannot hold the plain trainer's ~78 GB beside the rollout
    local off=${OFFLOAD:-auto} mib
    if [ "$off" = auto ]; then
      mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -1)
      off=0
      [ -n "$mib" ] && [ "$mib" -lt 120000 ] && off=1
    fi
    if [ "$off" = 1 ]; then
      grpo+=(train.optimizer_offload=true)
      echo "optimizer state: pinned host memory (train.optimizer_offload)" > "$out/offload.txt"
    else
      echo "optimizer state: on the GPU" > "$out/offload.txt"
    fi
  else
    shape=(model.hidden_size=64 model.num_layers=2 model.num_heads=4 model.num_kv_heads=2 model.intermediate_size=128
           model.max_position_embeddings=512)
    init=(train.device=cpu train.threads=1)
    grpo=(train.device=cpu rollout.device=cpu weights.transport=file rollout.threads=1 train.threads=1
          train.tokens_per_micro_batch=2048)
    g=${GROUP_SIZE:-4} p=${PROMPTS:-2} max_new=${MAX_NEW:-16} steps=${GRPO_STEPS:-3}
  fi
  # the random model: one SFT step at lr 0 (the init itself), then its export
  local t0 t1 t2
  t0=$(date +%s.%N)
  "$bin/cpt-train" examples/sft_arithmetic.toml run.dir="$out/init" data.train="$out/data/init.jsonl" data.eval= \
    tokenizer.path="$tok" model.init=random model.arch=qwen2 model.tie_word_embeddings=true "${shape[@]}" \
    train.steps=1 optim.lr=0 optim.warmup_steps=0 train.tokens_per_micro_batch=256 train.max_seq_len=32 \
    train.log_every=1 train.eval_every=0 train.eval_generate=0 checkpoint.every=0 "${init[@]}" \
    2> "$out/init.log" || { tail -30 "$out/init.log"; return 1; }
  t1=$(date +%s.%N)
  "$bin/cpt" export "$out/init" "$out/export" --bf16 > /dev/null
  rm -rf "$out/init/checkpoints"
  t2=$(date +%s.%N)
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print("model:", {k: c.get(k) for k in (
      "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
      "vocab_size", "tie_word_embeddings")})' "$out/export/config.json" | tee "$out/model.txt"
  awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "random model: cpt-train (init + 1 step + checkpoint) %.1f s, \
cpt export --bf16 %.1f s\n", b - a, c - b }' | tee -a "$out/model.txt"

  # sync: each step's groups are made by the newest weights, so a step is generate -> score -> train -> sync
  local args=(run.dir="$out/grpo" model.path="$out/export" tokenizer.path="$tok" data.train="$out/data/grpo.jsonl"
    train.steps="$steps" train.groups_per_step="$p" rollout.group_size="$g" rollout.slots=$((g * p))
    rollout.max_len=$((128 + max_new)) train.max_seq_len=$((128 + max_new)) sampling.max_new_tokens="$max_new"
    sampling.temperature=1.0 rollout.stop_on_eos=false reward.type=length reward.length_unit=chars
    reward.length_target=0 reward.length_penalty=0.001 reward.length_max_penalty=1000
    validation.every_steps=0 validation.before_training=false optim.lr=1e-6 "${grpo[@]}")
  local t3 pid
  t3=$(date +%s.%N)
  "$bin/cpt" run examples/grpo_gpu.toml "${args[@]}" > "$out/grpo.log" 2>&1 &
  pid=$!
  RUN_PID=$pid
  # sample the GPU's memory (whole device and per process) each second while the run lives; end the run when its
  # steps are in metrics.jsonl (its final checkpoint, 37 GB, is not part of the figures) or the budget is near
  local deadline=$((T_START + ${BUDGET_S:-400} - 25)) ended="steps done"
  : > "$out/gpu_mem.csv"
  while kill -0 "$pid" 2> /dev/null; do
    if command -v nvidia-smi > /dev/null; then
      local now
      now=$(date +%s)
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | sed "s/^/$now,gpu,all,/" \
        >> "$out/gpu_mem.csv" || true
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2> /dev/null |
        sed "s/, /,/g; s/^/$now,proc,/" >> "$out/gpu_mem.csv" || true
    fi
    if [ -f "$out/grpo/metrics.jsonl" ] && [ "$(grep -c '"reward/mean"' "$out/grpo/metrics.jsonl")" -ge "$steps" ]; then
      break
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      ended="ended at the budget (BUDGET_S)"
      break
    fi
    sleep 1
  done
  local t4 rc=0
  t4=$(date +%s.%N)
  if kill -0 "$pid" 2> /dev/null; then
    kill -9 "$pid" 2> /dev/null || true # every process of the run dies with the launcher (PR_SET_PDEATHSIG)
    wait "$pid" 2> /dev/null || true
    # the next stage wants the GPU empty: wait (at most 30 s) until no process holds GPU memory
    for _ in $(seq 30); do
      [ -n "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null)" ] || break
      sleep 1
    done
  else
    wait "$pid" || rc=$?
  fi
  RUN_PID=
  rm -rf "$out/grpo/checkpoints"
  if [ ! -f "$out/grpo/metrics.jsonl" ] || [ "$(grep -c '"reward/mean"' "$out/grpo/metrics.jsonl")" -lt 2 ]; then
    echo "GRPO run: fewer than 2 steps (cpt run status $rc, $ended)"
    tail -40 "$out/grpo.log"
    tail -n 30 "$out/grpo/logs/"*.log 2> /dev/null || true
    return 1
  fi
  {
    echo "GRPO, $mode, tokenizer $tok; G $g x P $p, max_new_tokens $max_new, $ended"
    cat "$out/model.txt"
    cat "$out/offload.txt" 2> /dev/null || true
    summary "$out" "$t3" "$t4" "$g"
  } | tee "$out/grpo3b_summary.txt"
}

summary() {
  local out=$1
  python3 - "$out/grpo/metrics.jsonl" "$out/gpu_mem.csv" "$2" "$3" "$4" <<'PY'
import json, sys
path, mem_csv = sys.argv[1], sys.argv[2]
t3, t4, group_size = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(path) if l.strip()]
steps = [r for r in rows if "reward/mean" in r]
n = len(steps)
print(f"GRPO (cpt run start to its end: steps done or the budget; no final checkpoint): {t4 - t3:.1f} s, {n} steps")
# steady state: from the first step's metric line to the last, N - 1 steps (no start-up, no first-step warm-up)
span = steps[-1]["time"] - steps[0]["time"]
gen = sum(r["response_len/mean"] * (r["groups/trained"] - p["groups/trained"]) * group_size
          for p, r in zip(steps, steps[1:]))
print(f"steady state (steps 2..{n}): {(n - 1) / span:.4f} steps/s, {span / (n - 1):.2f} s a step, "
      f"{gen / span:.0f} completion tokens/s (end to end), trainer {sum(r['perf/train_tok_s'] for r in steps[1:]) / (n - 1):.0f} "
      f"tokens/s in time/train, response_len/mean {sum(r['response_len/mean'] for r in steps) / n:.1f}")
print("where a step's time goes (means over steps 2..N; time/wait_scored: the trainer waiting for scored groups,")
print("generation + reward in sync mode; time/train: its three parts below and the objective; docs/online.md):")
print("| part | s a step | share |")
print("| --- | ---: | ---: |")
parts = [("generation + reward (time/wait_scored)", "time/wait_scored", 1), ("train (time/train)", "time/train", 1),
         ("- logprob forwards (time/logprob)", "time/logprob", 0),
         ("- backward with recomputation, clip (time/backward)", "time/backward", 0),
         ("- AdamW (time/optimizer)", "time/optimizer", 0),
         ("weight sync (time/weight_sync)", "time/weight_sync", 1)]
per = span / (n - 1)
known = 0.0
for name, key, top in parts:
    if not any(key in r for r in steps):
        continue
    v = sum(r.get(key, 0.0) for r in steps[1:]) / (n - 1)
    known += v if top else 0.0
    print(f"| {name} | {v:.3f} | {100 * v / per:.1f}% |")
print(f"| other (batching, acks, metrics) | {per - known:.3f} | {100 * (per - known) / per:.1f}% |")
print(f"| step (metrics line to line) | {per:.3f} | 100% |")
gpu, procs = 0, {}
for line in open(mem_csv):
    f = line.strip().split(",")
    if len(f) >= 4 and f[1] == "gpu":
        gpu = max(gpu, int(f[3]))
    elif len(f) >= 5 and f[1] == "proc":
        key = f"{f[3].split('/')[-1]} (pid {f[2]})"
        try:
            procs[key] = max(procs.get(key, 0), int(f[4]))
        except ValueError:
            pass
if gpu:
    print(f"peak GPU memory (nvidia-smi each second): {gpu} MiB = {gpu / 1024:.1f} GiB on the device")
    for k, v in sorted(procs.items()):
        print(f"  {k}: {v} MiB = {v / 1024:.1f} GiB")
else:
    print("peak GPU memory: not sampled (no nvidia-smi)")
last = steps[-1]
print(f"reward/mean first {steps[0]['reward/mean']:.4f} last {last['reward/mean']:.4f}; grad_norm last "
      f"{last.get('grad_norm', float('nan')):.4f}; entropy last {last.get('entropy', float('nan')):.4f}")
PY
}

RUN_PID=
cleanup() { [ -z "$RUN_PID" ] || kill -9 "$RUN_PID" 2> /dev/null || true; }
trap cleanup EXIT
trap 'exit 143' TERM INT

# the Qwen tokenizer when there is one (the carry's, or .deps here), else the example's
pick_tokenizer() {
  local t
  for t in "${TOKENIZER:-}" "${1:-}/tokenizer-qwen3" "$SRC/.deps/tokenizer-qwen3/models"; do
    [ -n "$t" ] && [ -f "$t/tokenizer.json" ] && { (cd "$t" && pwd); return; }
  done
  echo "$SRC/examples/tiny-tokenizer"
}

case "${1:-}" in
--cpu-smoke)
  B=${2:-build}
  case $B in /*) ;; *) B=$SRC/$B ;; esac
  flow "$B" "${OUT:-/tmp/cpt-grpo3b-smoke}" cpu "$(pick_tokenizer)"
  echo "grpo_3b_run --cpu-smoke: ok"
  ;;
run)
  D=$(cd "$2" && pwd)
  eval "$(tests/gpu/run_on_device.sh carry-env "$D")"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
  df -h /tmp | tail -1
  flow "$D/bin" "${OUT:-/tmp/cpt-grpo3b}" "${MODE:-gpu}" "$(pick_tokenizer "$D")" # MODE=cpu: the carry without a GPU
  ;;
*)
  sed -n '2,18p' "$0"
  exit 2
  ;;
esac
