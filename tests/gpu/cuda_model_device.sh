#!/bin/bash
# On the GPU machine: the CUDA model test (tests/gpu/test_cuda_model.c) and `cpt forward --device cuda` against
# `cpt forward` on the CPU for every model fixture (logits, logprobs, entropy, loss, gradients; relative L2).
# Build here first:
#   tests/gpu/run_on_device.sh build build-model .carry-model tests/gpu/test_cuda_model.c
#   cp build-model/cpt .carry-model/ (and its shared libraries into .carry-model/lib, as run_on_device.sh does)
# then run this with .carry-model carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.carry-model}
eval "$(tests/gpu/run_on_device.sh env)"
export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
rc=0
"$dir/test_cuda_model" || rc=1
out=$(mktemp -d)
for fx in qwen2_tied qwen2_untied qwen3 llama3; do
    m=tests/fixtures/model/$fx
    "$dir/cpt" forward --model "$m" --input "$m/expected.safetensors" --out "$out/$fx.cpu.safetensors" --grads || rc=1
    "$dir/cpt" forward --model "$m" --input "$m/expected.safetensors" --out "$out/$fx.cuda.safetensors" --grads --device cuda || rc=1
done
python3 - "$out" <<'PY' || rc=1
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        s, e = v['data_offsets']; d[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32)
    return d
bad = 0
print("cpt forward --device cuda vs cpu (relative L2)")
for fx in ['qwen2_tied', 'qwen2_untied', 'qwen3', 'llama3']:
    c = load(f'{sys.argv[1]}/{fx}.cpu.safetensors'); g = load(f'{sys.argv[1]}/{fx}.cuda.safetensors')
    worst = {}
    for k in c:
        r = float(np.linalg.norm(g[k] - c[k]) / (np.linalg.norm(c[k]) + 1e-30)); fam = 'grad' if k.startswith('grad.') else k
        tol = 5e-2 if fam == 'grad' else 2e-2
        if not np.isfinite(r) or r > tol: bad += 1; print('FAIL', fx, k, r)
        worst[fam] = max(worst.get(fam, 0), r)
    print(f'  {fx:13s} ' + ', '.join(f'{k} {v:.2e}' for k, v in worst.items()))
sys.exit(1 if bad else 0)
PY
rm -rf "$out"
echo "cuda_model_device: rc=$rc"
exit $rc
