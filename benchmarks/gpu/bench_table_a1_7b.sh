#!/usr/bin/env bash
# The Table A1 RefCOCO row on one GPU, in one command of at most ~9.2 minutes on an H200 (530 s of part limits
# plus set-up; random bf16 Qwen2.5-VL-7B weights at 640x480; benchmarks/gpu/bench_table_a1_7b.py says what each
# figure is). Three parts, each in its own process under its own time limit, so a slow compile in one cannot take
# the others' results: throughput (packed generate, 11 configurations, static vs dynamic decode, 1 and 64 docs per call, with the extrapolated row), decode
# ms/step at 1 / 64 / 704 rows, and prefill TFLOP/s + vision tower per image + host CPU per doc. Results in $OUT.
#
# The machine's transformers may be older than the project's: carry the project's as wheels in .whl (README of the
# device tool; e.g. `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux2014_x86_64 -d .whl transformers==5.25.0 huggingface_hub==<its pin>`); they are installed here if present.
# Dry run on CPU in seconds: python benchmarks/gpu/bench_table_a1_7b.py --tiny
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-.}
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="${PYTHONPATH:-}:$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
    > "$OUT/a1_env.txt" 2>&1
B="benchmarks/gpu/bench_table_a1_7b.py"
timeout "${T_THROUGHPUT:-250}" $PY $B --parts throughput --json "$OUT/a1_throughput.json" > "$OUT/a1_throughput.txt" 2>&1
echo "throughput rc=$?" >> "$OUT/a1_env.txt"
timeout "${T_DECODE:-200}" $PY $B --parts decode --json "$OUT/a1_decode.json" > "$OUT/a1_decode.txt" 2>&1
echo "decode rc=$?" >> "$OUT/a1_env.txt"
timeout "${T_PREFILL:-80}" $PY $B --parts prefill,vision,host --json "$OUT/a1_prefill.json" > "$OUT/a1_prefill.txt" 2>&1
echo "prefill rc=$?" >> "$OUT/a1_env.txt"
cat "$OUT/a1_env.txt"; grep -h -v Warning "$OUT"/a1_throughput.txt "$OUT"/a1_decode.txt "$OUT"/a1_prefill.txt | tail -40
