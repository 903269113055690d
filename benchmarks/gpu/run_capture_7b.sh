#!/usr/bin/env bash
# Capture on one CUDA GPU at Qwen2.5-VL-7B shape (random weights): exactness check (float32, 4 layers), then the
# time / memory benchmark (bf16, all 28 layers, ~17 GB of weights) at growing image sizes. ~5 minutes on an H200.
# Results go to $OUT (default: current folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
$PY benchmarks/gpu/check_capture_7b.py --device cuda --layers 4 --side 644 | tee "$OUT/check_capture_7b.txt"
$PY benchmarks/bench_capture.py --device cuda --shape 7b --sizes 448,644,896,1288 --reps 10 --threads 8 \
    --json "$OUT/bench_capture_7b.json" | tee "$OUT/bench_capture_7b.txt"
