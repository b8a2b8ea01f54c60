#!/usr/bin/env bash
# On the GPU host: run the batch that `benchmarks/gpu_seed.py prepare` packed into .gpu/.
# Needs only python3 with NumPy (and torch, for CUDA-event timing and the vendor baselines).
set -uo pipefail
work=/tmp/tensortune-gpu
rm -rf "$work" && mkdir -p "$work/site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" .gpu/*.whl || exit 1
tar xzf .gpu/tvm-runtime.tgz -C "$work" && tar xzf .gpu/batch.tgz -C "$work" || exit 1
export PYTHONPATH="$work/site:$work/runtime" TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>/dev/null
# stop well inside the device's limit; what was measured by then is kept (results are appended)
timeout "${GPU_SEED_LIMIT_S:-450}" python3 "$work/batch/runner.py" "$work/batch" --timeout 20
status=$?
cp "$work/batch/results.jsonl" "${OUT:-.}/gpu_seed_results.jsonl"
exit $status
