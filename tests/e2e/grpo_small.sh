# Sourced by the GRPO run tests (not a test): the GRPO example shrunk to a tiny random model so a run of a few dozen
# steps takes about a minute on 2 cores; sync mode, so every step is answered by the current weights.
# grpo_supported: 0 when this build's cpt-train trains grpo (the online trainer has landed).
GRPO_ARGS=(examples/grpo_arithmetic.toml model.init=random model.arch=qwen2 model.hidden_size=32
  model.intermediate_size=64 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1
  model.max_position_embeddings=128 tokenizer.path=examples/tiny-tokenizer async.mode=sync rollout.group_size=4
  train.groups_per_step=4 sampling.max_new_tokens=8 validation.data= checkpoint.every=2 checkpoint.keep_last=3
  run.progress_every_s=2)
grpo_supported() {
  local out
  out=$(timeout 10 "$BUILD/cpt-train" "${GRPO_ARGS[@]}" run.dir="$1/probe" 2>&1 || true)
  ! echo "$out" | grep -q 'is not trained by this command'
}
# The final checkpoint's trainer state: exactly-once bookkeeping (trainer/online_book.h). Every group id comes from
# the data cursor and is trained once or kept outstanding, so a finished run of S steps of G groups has its cursor
# S * G past the start and nothing outstanding.
check_groups() { # RUN_DIR STEPS GROUPS_PER_STEP
  local st="$1/checkpoints/step-$2/trainer_state.json"
  [ -f "$st" ] || { echo "no final checkpoint $st" >&2; return 1; }
  python3 - "$st" "$2" "$3" "$1/metrics.jsonl" <<'PY'
import json, sys
st = json.load(open(sys.argv[1])); steps, g = int(sys.argv[2]), int(sys.argv[3])
out = st.get("outstanding_group_ids", [])
cur = st["data_cursor"]
rows = {}
for line in open(sys.argv[4]):
    try: r = json.loads(line)
    except ValueError: continue
    if isinstance(r, dict) and isinstance(r.get("step"), int) and "groups/trained" in r:
        rows[r["step"]] = r
dyn = max((r.get("groups/dynamic_dropped", 0) for r in rows.values()), default=0)
consumed = cur["epoch"] * 1000 + cur["index"]  # examples/data/arithmetic_rl_train.jsonl: 1000 prompts an epoch
if out: sys.exit(f"{len(out)} groups outstanding at the end: {out[:5]}")
if sorted(rows) != list(range(1, steps + 1)): sys.exit(f"metrics steps {sorted(rows)[:5]}..: not 1..{steps}")
if dyn == 0 and consumed != steps * g:
    sys.exit(f"data cursor at {consumed}, expected {steps} steps x {g} groups = {steps * g}")
print(f"groups: cursor {consumed} = {steps} x {g}, 0 outstanding, "
      f"duplicates dropped {sum(r.get('groups/duplicates', 0) for r in rows.values())}")
PY
}
