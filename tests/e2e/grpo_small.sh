# Sourced by the GRPO run tests (not a test): the GRPO example on a tiny model (one SFT step of a 1-layer, hidden-32
# model, exported as a Hugging Face folder by make_tiny_model), so a run of a few dozen steps takes about a minute
# on 2 cores; sync mode, so every step is answered by the current weights.
make_tiny_model() { # DIR: writes DIR/hf and adds model.path=DIR/hf to GRPO_ARGS
  OMP_NUM_THREADS=1 "$BUILD/cpt-train" examples/sft_arithmetic.toml run.dir="$1/tiny" train.steps=1 \
    data.train=examples/data/arithmetic_rl_train.jsonl data.eval= train.eval_generate=0 train.threads=1 \
    model.hidden_size=32 model.intermediate_size=64 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1 \
    2> "$1/tiny.log" || { cat "$1/tiny.log" >&2; return 1; }
  "$BUILD/cpt" export "$1/tiny/checkpoints/step-1" "$1/hf" > "$1/export.log" 2>&1 || { cat "$1/export.log" >&2; return 1; }
  GRPO_ARGS+=(model.path="$1/hf" tokenizer.path="$1/hf")
}
# The reward: a digit anywhere in the completion. A barely trained model writes one in some samples and not in
# others, so groups have a signal and the weights move every step (a test of equal weights is then not vacuous).
GRPO_ARGS=(examples/grpo_arithmetic.toml async.mode=sync rollout.group_size=8 train.groups_per_step=4
  sampling.max_new_tokens=16 validation.data= reward.type=format 'reward.format_regex=[0-9]' checkpoint.every=10
  checkpoint.keep_last=3 run.progress_every_s=2)
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
# groups/skipped: whole-run total of groups that failed past their retries (never trained, behind the cursor)
skipped = rows[max(rows)].get("groups/skipped", 0) if rows else 0
import os, tomllib  # an epoch: every prompt of the run's data.train once
with open(os.path.join(os.path.dirname(sys.argv[4]), "config.toml"), "rb") as f:
    per_epoch = sum(1 for l in open(tomllib.load(f)["data"]["train"]) if l.strip())
consumed = cur["epoch"] * per_epoch + cur["index"]
if out: sys.exit(f"{len(out)} groups outstanding at the end: {out[:5]}")
if sorted(rows) != list(range(1, steps + 1)): sys.exit(f"metrics steps {sorted(rows)[:5]}..: not 1..{steps}")
if dyn == 0 and consumed != steps * g + skipped:
    sys.exit(f"data cursor at {consumed}, expected {steps} steps x {g} groups + {skipped} skipped = {steps * g + skipped}")
# groups/duplicates: whole-run totals now (kept in the checkpoint); adding its rises also reads older per-process counts
dups, prev = 0, 0
for k in sorted(rows):
    d = rows[k].get("groups/duplicates", 0)
    dups += d - prev if d >= prev else d
    prev = d
print(f"groups: cursor {consumed} = {steps} x {g} + {skipped} skipped, 0 outstanding, duplicates dropped {dups}")
PY
}
# check_groups for a checkpoint that may hold groups issued but not trained (an async run issues ahead, and trains
# groups in the order they come; a run stopped mid-way): every id below the data cursor is trained once or
# outstanding, STEPS x G trained (groups/trained), none twice, none skipped.
check_groups_ahead() { # RUN_DIR STEPS GROUPS_PER_STEP
  python3 - "$1/checkpoints/step-$2/trainer_state.json" "$2" "$3" "$1/metrics.jsonl" <<'PY'
import json, sys
st = json.load(open(sys.argv[1])); steps, g = int(sys.argv[2]), int(sys.argv[3])
rows = {}
for line in open(sys.argv[4]):
    r = json.loads(line)
    if isinstance(r.get("step"), int) and "groups/trained" in r: rows[r["step"]] = r
if sorted(rows) != list(range(1, steps + 1)): sys.exit(f"metrics steps {sorted(rows)[:5]}..: not 1..{steps}")
last = rows[steps]
# [epoch, index]; the epoch's top 16 bits carry the attempt of a group issued again (trainer/online_book.h)
import os, tomllib  # an epoch: every prompt of the run's data.train once
with open(os.path.join(os.path.dirname(sys.argv[4]), "config.toml"), "rb") as f:
    per_epoch = sum(1 for l in open(tomllib.load(f)["data"]["train"]) if l.strip())
out = [(e & (2**48 - 1)) * per_epoch + i for e, i in st.get("outstanding_group_ids", [])]
cur = st["data_cursor"]["epoch"] * per_epoch + st["data_cursor"]["index"]
if last["groups/trained"] != steps * g: sys.exit(f"groups/trained {last['groups/trained']}, expected {steps * g}")
if last["groups/duplicates"] or last["groups/skipped"]: sys.exit(f"duplicates {last['groups/duplicates']}, skipped {last['groups/skipped']}")
if len(set(out)) != len(out) or any(i >= cur for i in out): sys.exit(f"outstanding ids {out} vs cursor {cur}")
if cur != steps * g + len(out): sys.exit(f"cursor {cur} != {steps * g} trained + {len(out)} outstanding")
print(f"groups: cursor {cur} = {steps * g} trained once + {len(out)} outstanding, 0 duplicates")
PY
}
