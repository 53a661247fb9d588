#!/usr/bin/env bash
# queue_bench.sh [--n-scale F]: builds bench/queue_bench.c against the queue sources and runs it: cpt's client
# (encode + bounded add; read + decode + ack) beside redis-benchmark's XADD on the same private redis-server
# (unix socket, AOF everysec), 1 KB / 64 KB / 1 MB messages, one client each. Prints the machine and both figures.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-benchmark >/dev/null || { echo "queue_bench: redis-benchmark not found (apt-get install redis-tools)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-format-truncation -I. -o "$out/queue_bench" \
  bench/queue_bench.c queue/redis.c queue/redis_server.c queue/schema.c queue/seen.c queue/stream.c \
  core/error.c core/fs.c $(pkg-config --cflags --libs hiredis msgpack jansson) -lm -lpthread
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
echo "redis:   $(redis-server --version | cut -d' ' -f3)"
echo "command: bench/queue_bench.sh $*"
CPT_LOG=error "$out/queue_bench" "$@"
