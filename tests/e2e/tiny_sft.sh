# Sourced by the data-parallel tests (not a test): tiny_sft_config DIR N STEPS [OPTIM] writes DIR/t.jsonl (N
# "i+1=" -> "i+1" examples) and DIR/j.toml, an SFT config of a random 1-layer, hidden-32 model on them with the
# example tokenizer, STEPS steps of 64-token micro-batches on one thread; OPTIM: extra TOML (an [optim] section).
# SRC must be set (the repository root). Also for the two-rank runs: `mpi` (mpirun of 2 CPU ranks, allowed as root),
# model RUN STEP (the checkpoint's model file) and maxdiff A B (max |a - b| over the F32 tensors of two
# safetensors files).
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -n 2 --oversubscribe --bind-to none)
model() { echo "$1/checkpoints/step-$2/model/model.safetensors"; }
maxdiff() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        s, e = v['data_offsets']; assert v['dtype'] == 'F32', v['dtype']
        out[k] = struct.unpack('<%df' % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
print(max(abs(x - y) for k in a for x, y in zip(a[k], b[k])))
PY
}
tiny_sft_config() {
  local dir=$1 n=$2 steps=$3 optim=${4:-}
  for i in $(seq 0 $((n - 1))); do printf '{"prompt": "%d+1=", "completion": "%d"}\n' "$i" $((i + 1)); done > "$dir/t.jsonl"
  cat > "$dir/j.toml" <<TOML
[model]
init = "random"
hidden_size = 32
intermediate_size = 64
num_layers = 1
num_heads = 4
[tokenizer]
path = "$SRC/examples/tiny-tokenizer"
[data]
train = "$dir/t.jsonl"
chat_template = "none"
${optim}
[train]
steps = $steps
tokens_per_micro_batch = 64
max_seq_len = 32
threads = 1
TOML
}
