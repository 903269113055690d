#!/usr/bin/env bash
# Packed head-set evaluation on one CUDA GPU at Qwen2.5-VL-7B shape (random weights): exactness check (float32,
# 4 layers, the real width), then the benchmark (bf16, all 28 layers, ~17 GB of weights) at M = 4, 8, 16, 32 on
# 640x480 and 1280x960 images. About 6 minutes on an H200. Results go to $OUT (default: current folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
$PY benchmarks/gpu/bench_pack_7b.py --check --layers 4 --sizes 640x480 --packs 4,32 --reps 1 --new-tokens 24 \
    --json "$OUT/check_pack_7b.json" | tee "$OUT/check_pack_7b.txt"
$PY benchmarks/gpu/bench_pack_7b.py --sizes 640x480,1280x960 --packs 4,8,16,32 --reps 2 --new-tokens 32 \
    --json "$OUT/bench_pack_7b.json" | tee "$OUT/bench_pack_7b.txt"
