#!/usr/bin/env bash
# One short device session for the 7B-shape figures (random bf16 weights, one CUDA GPU), each part under its own time
# limit so a slow part cannot take the others' results: the capture exactness check (float32, 4 layers), the capture
# time / memory benchmark (all 28 layers) and the VRH-aware KV cache benchmark. Results go to $OUT.
# Needs transformers 5.25 beside the machine's torch: carried as wheels in .whl (benchmarks/RESULTS.md says how).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-.}
PY=${PYTHON:-python3}
export PYTHONPATH="${PYTHONPATH:-}:$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
    > "$OUT/gpu.txt" 2>&1
timeout "${T_CHECK:-120}" $PY benchmarks/gpu/check_capture_7b.py --device cuda --layers 4 --side 644 \
    > "$OUT/check_capture_7b.txt" 2>&1; echo "check rc=$?" >> "$OUT/gpu.txt"
timeout "${T_CAPTURE:-180}" $PY benchmarks/bench_capture.py --device cuda --shape 7b --sizes 448,896,1288 --reps 5 \
    --threads 8 --json "$OUT/bench_capture_7b.json" > "$OUT/bench_capture_7b.txt" 2>&1
echo "capture rc=$?" >> "$OUT/gpu.txt"
timeout "${T_KV:-210}" $PY benchmarks/gpu/bench_kv_cache_7b.py --budgets 1,0.5,0.25,0.1 \
    --json "$OUT/bench_kv_cache_7b.json" > "$OUT/bench_kv_cache_7b.txt" 2>&1
echo "kv rc=$?" >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
