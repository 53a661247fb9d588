#!/usr/bin/env bash
# Exact resume: 20 SFT steps straight, and 10 steps + resume + 10 steps, give bitwise-identical weights and
# optimizer state (CPU, 2 fixed threads, tiny random model). Then a run whose newest checkpoint is corrupted
# resumes from the previous good one (with an error naming the file) and still ends bitwise identical.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
TRAIN="$BUILD/cpt-train"
T=$(mktemp -d /tmp/cpt-sft-resume-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
export OMP_NUM_THREADS=2

# 48 addition examples, prompt/completion
for i in $(seq 0 47); do
  a=$(( (i * 37) % 50 )); b=$(( (i * 11 + 7) % 50 ))
  printf '{"prompt": "%d+%d=", "completion": "%d"}\n' "$a" "$b" $((a + b))
done > "$T/train.jsonl"
head -8 "$T/train.jsonl" > "$T/eval.jsonl"

cat > "$T/job.toml" <<TOML
[run]
seed = 7
[model]
init = "random"
arch = "qwen2"
hidden_size = 32
intermediate_size = 64
num_layers = 2
num_heads = 4
num_kv_heads = 2
[tokenizer]
path = "$SRC/examples/tiny-tokenizer"
[data]
train = "$T/train.jsonl"
eval = "$T/eval.jsonl"
chat_template = "none"
[train]
steps = 20
tokens_per_micro_batch = 64
grad_accum = 2
max_seq_len = 32
threads = 2
eval_every = 5
[optim]
lr = 3e-3
warmup_steps = 3
schedule = "cosine"
weight_decay = 0.1
[checkpoint]
keep_last = 3
TOML

"$TRAIN" "$T/job.toml" run.dir="$T/a" 2> "$T/a.log"
"$TRAIN" "$T/job.toml" run.dir="$T/b" train.max_steps_this_run=10 2> "$T/b1.log"
test -f "$T/b/checkpoints/step-10/manifest.json"
test ! -e "$T/b/checkpoints/step-20"
"$TRAIN" "$T/job.toml" run.dir="$T/b" 2> "$T/b2.log"
grep -q "resumed from .*step-10" "$T/b2.log" || { echo "FAIL: run b did not resume from step-10"; cat "$T/b2.log"; exit 1; }

for f in model/model.safetensors optimizer.safetensors; do
  cmp "$T/a/checkpoints/step-20/$f" "$T/b/checkpoints/step-20/$f" ||
    { echo "FAIL: $f differs between the straight run and the resumed run"; exit 1; }
done
# train.resume=false on a folder with checkpoints: refused before any training, its metrics untouched (it would
# reach step 20 again and be refused at the save, after all its training)
cp "$T/a/metrics.jsonl" "$T/a-metrics.before"
rc=0; "$TRAIN" "$T/job.toml" run.dir="$T/a" train.resume=false 2> "$T/a-restart.log" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: train.resume=false on a used folder ran"; cat "$T/a-restart.log"; exit 1; }
grep -q "train.resume = false, but .*checkpoints holds checkpoints up to step 20 (latest)" "$T/a-restart.log" ||
  { echo "FAIL: no refusal naming the latest step"; cat "$T/a-restart.log"; exit 1; }
! grep -q "sft step" "$T/a-restart.log" || { echo "FAIL: it trained before refusing"; exit 1; }
cmp -s "$T/a/metrics.jsonl" "$T/a-metrics.before" || { echo "FAIL: the refused run rewrote metrics.jsonl"; exit 1; }
# an eval example with an empty prompt that train.eval_generate would decode from: refused at load, before training
{ head -1 "$T/eval.jsonl"; echo '{"prompt": "", "completion": "5"}'; } > "$T/eval_empty.jsonl"
rc=0; "$TRAIN" "$T/job.toml" run.dir="$T/e" data.eval="$T/eval_empty.jsonl" train.eval_generate=2 2> "$T/e.log" || rc=$?
[ "$rc" -ne 0 ] && grep -q "eval_empty.jsonl: example 2 (of those kept) has an empty prompt" "$T/e.log" ||
  { echo "FAIL: an empty eval prompt was not refused at load (rc $rc)"; cat "$T/e.log"; exit 1; }
! grep -q "sft step" "$T/e.log" || { echo "FAIL: it trained before refusing the eval data"; exit 1; }
# data.max_records reads at most that many records of each data file
"$TRAIN" "$T/job.toml" run.dir="$T/m" data.max_records=5 train.steps=1 2> "$T/m.log" ||
  { echo "FAIL: data.max_records=5"; cat "$T/m.log"; exit 1; }
grep -q "sft: 5 train examples (.*), 5 eval examples" "$T/m.log" ||
  { echo "FAIL: data.max_records=5 not applied: $(grep 'sft: ' "$T/m.log")"; exit 1; }
# the straight run learned something (the test would be vacuous on a model that does not move)
first=$(grep -m1 -o 'loss [0-9.]*' "$T/a.log" | awk '{print $2}')
last=$(grep 'sft step 20/20 |' "$T/a.log" | grep -o 'loss [0-9.]*' | awk '{print $2}')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || { echo "FAIL: loss did not fall ($first -> $last)"; exit 1; }

# corrupt newest checkpoint: refused, the previous good one is used, and the result is still exact
"$TRAIN" "$T/job.toml" run.dir="$T/c" train.max_steps_this_run=10 checkpoint.every=5 2> "$T/c1.log"
test -f "$T/c/checkpoints/step-5/manifest.json"
printf 'garbage' | dd of="$T/c/checkpoints/step-10/model/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
"$TRAIN" "$T/job.toml" run.dir="$T/c" checkpoint.every=5 2> "$T/c2.log"
grep -q "checkpoint refused: .*step-10/model/model.safetensors.*corrupt" "$T/c2.log" ||
  { echo "FAIL: no refusal message"; cat "$T/c2.log"; exit 1; }
grep -q "resumed from .*step-5 " "$T/c2.log" || { echo "FAIL: did not resume from step-5"; cat "$T/c2.log"; exit 1; }
cmp "$T/a/checkpoints/step-20/model/model.safetensors" "$T/c/checkpoints/step-20/model/model.safetensors" ||
  { echo "FAIL: resuming from the older checkpoint did not reproduce the straight run"; exit 1; }
# retention kept the last 3
n=$(ls -d "$T/c/checkpoints"/step-* | wc -l)
[ "$n" -eq 3 ] || { echo "FAIL: $n checkpoints kept, expected 3"; ls "$T/c/checkpoints"; exit 1; }
# metrics were written with the documented keys
grep -q '"train/loss"' "$T/a/metrics.jsonl" && grep -q '"eval/loss"' "$T/a/metrics.jsonl" &&
  grep -q '"perf/train_tok_s"' "$T/a/metrics.jsonl" || { echo "FAIL: metrics keys missing"; exit 1; }
# run c reached step 10, then resumed from step 5: the lost attempt's lines past step 5 were removed, no step twice
python3 - "$T/c/metrics.jsonl" <<'PY'
import collections, json, sys
seen = collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("train/loss", "eval/loss"):
        if k in r:
            seen[(k, r["step"])] += 1
twice = sorted(x for x, n in seen.items() if n > 1)
if twice or ("train/loss", 20) not in seen:
    sys.exit(f"FAIL: metrics.jsonl after a resume: repeated {twice}, keys {sorted(seen)}")
PY
# SIGUSR1 (Slurm's preemption warning): finish the step, checkpoint, exit 3; a restart completes the run
"$TRAIN" "$T/job.toml" run.dir="$T/d" train.steps=100000 train.log_every=1 2> "$T/d.log" &
pid=$!
for _ in $(seq 1 600); do grep -q 'sft step 2/' "$T/d.log" 2>/dev/null && break; sleep 0.1; done
# a second trainer on the same run folder is refused while the first runs, and leaves its metrics alone
lines=$(wc -l < "$T/d/metrics.jsonl")
if "$TRAIN" "$T/job.toml" run.dir="$T/d" 2> "$T/d-second.log"; then
  echo "FAIL: a second trainer on a busy run folder ran"; cat "$T/d-second.log"; exit 1
fi
grep -q "locked by another trainer (pid $pid)" "$T/d-second.log" ||
  { echo "FAIL: no refusal naming the first trainer"; cat "$T/d-second.log"; exit 1; }
[ "$(wc -l < "$T/d/metrics.jsonl")" -ge "$lines" ] || { echo "FAIL: the refused trainer rewrote metrics.jsonl"; exit 1; }
kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 3 ] || { echo "FAIL: exit status $rc after SIGUSR1, expected 3"; cat "$T/d.log"; exit 1; }
grep -q "stopping at step .* on signal" "$T/d.log" || { echo "FAIL: no stop message"; exit 1; }
ls "$T/d/checkpoints" | grep -q '^step-[0-9]' || { echo "FAIL: no checkpoint after SIGUSR1"; exit 1; }
# the stop lands wherever the run had got to (tiny steps are fast): finish 5 steps past it
stopped=$(grep -o 'stopping at step [0-9]*' "$T/d.log" | awk '{print $4}')
end=$((stopped + 5))
"$TRAIN" "$T/job.toml" run.dir="$T/d" train.steps=$end 2> "$T/d2.log"
grep -q "resumed from .*step-$stopped " "$T/d2.log" || { echo "FAIL: did not resume from step-$stopped"; exit 1; }
test -f "$T/d/checkpoints/step-$end/manifest.json" || { echo "FAIL: the run after SIGUSR1 did not finish"; exit 1; }
echo "test_sft_resume: ok (20 straight == 10 + 10 == 10 + corrupt + 5 + 15, loss $first -> $last)"
