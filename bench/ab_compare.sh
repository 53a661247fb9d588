#!/bin/bash
# Two builds side by side in one GPU call: the decode and train-step benches of an old and a new build, alternated
# (A B A B) so that clock drift hits both alike. For refactors that must not change speed (docs/performance.md).
#
#   bench/ab_compare.sh OLD_DIR NEW_DIR     on the GPU machine; each DIR is a tests/gpu/device_all.sh build folder
#                                          (or its .txz). Prints every RESULT / cpt line tagged old|new, then a
#                                          table of new/old ratios of the means.
# env: AB_REPS (default 2), AB_SHAPES (default 0.5b,1.5b), AB_BATCHES (default 1,64,256), AB_TRAIN_SHAPES
# (default "0.5b"), AB_NEW (new tokens, default 256).
set -uo pipefail
cd "$(dirname "$0")/.."
unpack() {
    local d=$1
    if [ "${d%.txz}" != "$d" ]; then
        mkdir -p /tmp/ab-carry
        tar xJf "$d" -C /tmp/ab-carry
        d=/tmp/ab-carry/$(basename "$d" .txz)
    fi
    (cd "$d" && pwd)
}
old=$(unpack "$1") new=$(unpack "$2")
eval "$(tests/gpu/run_on_device.sh env)"
log=$(mktemp)
for r in $(seq "${AB_REPS:-2}"); do
    for side in old new; do
        d=$old; [ $side = new ] && d=$new
        LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}" timeout 200 "$d/decode_bench" --defaults \
            --shapes "${AB_SHAPES:-0.5b,1.5b}" --batches "${AB_BATCHES:-1,64,256}" --new "${AB_NEW:-256}" 2>&1 |
            grep '^RESULT' | sed "s/^/$side rep=$r /" | tee -a "$log"
        for s in ${AB_TRAIN_SHAPES:-0.5b}; do
            LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}" timeout 200 "$d/cuda_train_bench" --shape "$s" --steps 6 \
                --warmup 2 2>&1 | grep '^cpt shape=.*step_ms' | sed "s/^/$side rep=$r /" | tee -a "$log"
        done
    done
done
echo "== new/old (means over reps)"
python3 - "$log" <<'PY'
import re, sys, collections
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side = line.split()[0]
    kv = dict(re.findall(r'(\w+)=([^\s]+)', line))
    if 'decode_tok_s' in kv:
        v[(f"decode {kv['shape']} b{kv['batch']} tok/s", side)].append(float(kv['decode_tok_s']))
    elif 'step_ms' in kv:
        v[(f"train {kv['shape']} step_ms", side)].append(float(kv['step_ms']))
for name in sorted({k[0] for k in v}):
    o, n = v.get((name, 'old')), v.get((name, 'new'))
    if o and n:
        mo, mn = sum(o) / len(o), sum(n) / len(n)
        print(f"{name:32s} old {mo:10.1f} new {mn:10.1f} new/old {mn / mo:6.3f}")
PY
rm -f "$log"
