# Sourced by the data-parallel tests (not a test): tiny_sft_config DIR N STEPS [OPTIM] writes DIR/t.jsonl (N
# "i+1=" -> "i+1" examples) and DIR/j.toml, an SFT config of a random 1-layer, hidden-32 model on them with the
# example tokenizer, STEPS steps of 64-token micro-batches on one thread; OPTIM: extra TOML (an [optim] section).
# SRC must be set (the repository root).
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
