#!/usr/bin/env bash
# Sharded weights (issue 24): a checkpoint whose model exceeds export.max_shard_size is written as
# model-0000K-of-0000N.safetensors shards + model.safetensors.index.json, resumes, and `cpt export` writes the same
# (its default: the run's export.max_shard_size; --max-shard-size overrides, one shard is today's model.safetensors).
# The index is checked against the Hugging Face format in python (json only); `cpt generate` gives the same output
# with the same log-probabilities from the sharded and the single-file folder; a bad size or a bad path is refused
# with nothing left behind.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-export-shards-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sft=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl data.eval= train.eval_generate=0
     train.threads=1 model.hidden_size=32 model.intermediate_size=64 model.num_layers=1 model.num_heads=2
     model.num_kv_heads=1 export.max_shard_size=20KB run.dir="$T/run")
OMP_NUM_THREADS=1 "$BUILD/cpt-train" "${sft[@]}" train.steps=1 2> "$T/train.log" || { cat "$T/train.log"; fail "train"; }
ck="$T/run/checkpoints/step-1"
[ -f "$ck/model/model.safetensors.index.json" ] || fail "checkpoint model not sharded: $(ls "$ck/model")"
[ ! -e "$ck/model/model.safetensors" ] || fail "checkpoint has both model.safetensors and shards"
# resume from the sharded checkpoint: one more step
OMP_NUM_THREADS=1 "$BUILD/cpt-train" "${sft[@]}" train.steps=2 2> "$T/train2.log" || { cat "$T/train2.log"; fail "resume"; }
grep -q "resum" "$T/train2.log" || { cat "$T/train2.log"; fail "no resume from the sharded checkpoint"; }
[ -f "$T/run/checkpoints/step-2/model/model.safetensors.index.json" ] || fail "step 2 not sharded"

"$CPT" export "$ck" "$T/sharded" 2> "$T/e1.log" || { cat "$T/e1.log"; fail "export (run default)"; }
"$CPT" export "$ck" "$T/single" --max-shard-size 5GB 2> "$T/e2.log" || { cat "$T/e2.log"; fail "export 5GB"; }
"$CPT" export "$ck" "$T/bytes" --max-shard-size=30000 2> "$T/e3.log" || { cat "$T/e3.log"; fail "export bytes"; }
[ -f "$T/single/model.safetensors" ] && [ ! -e "$T/single/model.safetensors.index.json" ] || fail "5GB: not one file"

python3 - "$T/sharded" "$T/bytes" "$ck/model" "$T/single" <<'PY'
# The index format of transformers' save_pretrained (huggingface_hub's split_state_dict_into_shards): a json object
# {"metadata": {"total_size": int}, "weight_map": {tensor: file}}; files named model-XXXXX-of-YYYYY.safetensors,
# numbered 1..N; every tensor of every shard listed once, in the shard that holds it; total_size the sum of the
# tensors' bytes; each shard at most the limit unless it holds a single larger tensor.
import json, os, re, struct, sys
def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h
def check(d, limit):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    assert set(idx) == {"metadata", "weight_map"}, idx.keys()
    total = idx["metadata"]["total_size"]
    assert isinstance(total, int), total
    wm = idx["weight_map"]
    files = sorted(set(wm.values()))
    n = len(files)
    assert n >= 2, files
    assert files == ["model-%05d-of-%05d.safetensors" % (i, n) for i in range(1, n + 1)], files
    seen, size = {}, 0
    for fn in files:
        h = header(os.path.join(d, fn))
        shard_bytes = 0
        for name, t in h.items():
            assert name not in seen, f"{name} in two shards"
            seen[name] = fn
            b, e = t["data_offsets"]
            shard_bytes += e - b
        assert shard_bytes <= limit or len(h) == 1, (fn, shard_bytes, limit)
        size += shard_bytes
    assert seen == wm, "weight_map differs from the shards' contents"
    assert total == size, (total, size)
    return wm, total
a = check(sys.argv[1], 20000)
b = check(sys.argv[2], 30000)
c = check(sys.argv[3], 20000)
single = header(os.path.join(sys.argv[4], "model.safetensors"))
assert set(single) == set(a[0]) and a[1] == sum(t["data_offsets"][1] - t["data_offsets"][0] for t in single.values())
assert a == c, "export and checkpoint shards differ"
print(f"index ok: {len(a[0])} tensors, {len(set(a[0].values()))} shards, total_size {a[1]}")
PY

# the same model from either folder: same tokens, same log-probabilities
gen=(--prompt "12+34=" --max-new-tokens 8 --greedy --json --no-eos --device cpu)
"$CPT" generate --model "$T/sharded" "${gen[@]}" > "$T/g1.json" 2> "$T/g1.log" || { cat "$T/g1.log"; fail "generate sharded"; }
"$CPT" generate --model "$T/single" "${gen[@]}" > "$T/g2.json" 2> "$T/g2.log" || { cat "$T/g2.log"; fail "generate single"; }
[ -s "$T/g1.json" ] && cmp -s "$T/g1.json" "$T/g2.json" || { cat "$T/g1.json" "$T/g2.json"; fail "generate differs"; }

# refused: a bad size (nothing written), a folder that cannot be created (nothing left)
if "$CPT" export "$ck" "$T/bad" --max-shard-size 5XB 2> "$T/bad.log"; then fail "5XB accepted"; fi
grep -q 'unknown unit "XB"' "$T/bad.log" || { cat "$T/bad.log"; fail "no message for 5XB"; }
[ ! -e "$T/bad" ] || fail "5XB left $T/bad"
# a bad export.max_shard_size stops the trainer at its start, naming the key
if "$BUILD/cpt-train" "${sft[@]}" export.max_shard_size=5XB train.steps=3 2> "$T/bad3.log"; then fail "5XB trained"; fi
grep -q 'config key export.max_shard_size: size "5XB"' "$T/bad3.log" || { cat "$T/bad3.log"; fail "no message for the key"; }
[ ! -d "$T/run/checkpoints/step-3" ] || fail "5XB: trained anyway"
touch "$T/file"
if "$CPT" export "$ck" "$T/file/sub/out" --max-shard-size 20KB 2> "$T/bad2.log"; then fail "bad path accepted"; fi
grep -q "$T/file" "$T/bad2.log" || { cat "$T/bad2.log"; fail "bad path: message names no path"; }
[ -z "$(ls "$T" | grep -v -E '^(run|sharded|single|bytes|file|.*\.(log|json))$')" ] || fail "left over: $(ls "$T")"
echo "test_export_shards: ok ($(ls "$T/sharded" | grep -c '^model-') shards)"
