#!/usr/bin/env bash
# Tokenizer encode speed, cpt beside HF tokenizers, same corpus, same documents, same thread counts.
#
#   bench/tokenizer_bench.sh build DIR   here: compiles bench/tokenizer_bench.c with the tokenizer sources into
#                                        DIR/tokenizer_bench and copies its non-libc shared libraries into DIR/lib
#                                        (the bench machine may lack libutf8proc & co.)
#   bench/tokenizer_bench.sh run DIR     on the bench machine (python3 with `tokenizers`): both sides for
#                                        THREADS (default "1 4 16") on the Qwen3 tokenizer, MB megabytes (default
#                                        20) of the parity corpus repeated; prints one line per measurement.
# The two sides print the same checksum (sum of ids mod 2^32) when they produced the same ids.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:?usage: tokenizer_bench.sh build|run DIR} dir=${2:?usage: tokenizer_bench.sh build|run DIR}
tok=.deps/tokenizer-qwen3/models/tokenizer.json
corpus=tests/fixtures/tokenizer/corpus.jsonl
case "$cmd" in
  build)
    mkdir -p "$dir/lib"
    srcs=(core/tokenizer_load.c core/tokenizer_pretok.c core/tokenizer_bpe.c core/tokenizer_encode.c
          core/tokenizer_decode.c core/error.c core/fs.c)
    cc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-format-truncation -fopenmp -I. bench/tokenizer_bench.c "${srcs[@]}" \
      $(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc) -lm -o "$dir/tokenizer_bench"
    ldd "$dir/tokenizer_bench" | awk '/=>/ {print $3}' | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]' |
      while read -r so; do cp -L "$so" "$dir/lib/"; done
    ls "$dir/lib"
    ;;
  run)
    export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    mb=${MB:-20}
    echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    python3 -c 'import tokenizers; print("# tokenizers", tokenizers.__version__)'
    for t in ${THREADS:-1 4 16}; do
      OMP_PROC_BIND=false "$dir/tokenizer_bench" --tokenizer "$tok" --corpus "$corpus" --mb "$mb" --threads "$t" --reps "${REPS:-3}"
      RAYON_NUM_THREADS=$t TOKENIZERS_PARALLELISM=true python3 bench/tokenizer_bench.py --tokenizer "$tok" \
        --corpus "$corpus" --mb "$mb" --reps "${REPS:-3}"
    done
    ;;
  *) echo "tokenizer_bench.sh: unknown command '$cmd' (build|run)" >&2; exit 2 ;;
esac
