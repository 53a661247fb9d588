#!/bin/bash
# On the GPU machine: the attention checks against the CPU (test_cuda_attention), its timings, and PyTorch's flash
# SDPA at the same shapes for comparison. Built here first with
#   tests/gpu/run_on_device.sh build build-attn .carry-attn tests/gpu/test_cuda_attention.c
# then run there (through the device tool, carrying .carry-attn) as: tests/gpu/attention_on_device.sh [.carry-attn]
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.carry-attn}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
eval "$(tests/gpu/run_on_device.sh env)"
rc=0
CPT_CUDA_BENCH=${CPT_CUDA_BENCH:-1} LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/test_cuda_attention" || rc=$?
if [ "${ATTN_TORCH:-1}" = 1 ]; then python3 bench/attention_torch.py || true; fi
exit $rc
