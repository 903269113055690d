"""VRH-aware KV cache at Qwen2.5-VL-7B shape (28 layers, 28 heads, 4 KV heads; random bf16 weights) on one GPU:
peak CUDA memory and decode throughput per policy and budget, accuracy-free. Not run yet (no GPU where it was
written); run it as

    python benchmarks/gpu/bench_kv_cache_7b.py                                # 1288 px image (~2100 image tokens)
    python benchmarks/gpu/bench_kv_cache_7b.py --side 2016 --new-tokens 64 --json kv7b.json
    python benchmarks/gpu/bench_kv_cache_7b.py --device cpu --shape mid --side 448 --new-tokens 4   # smoke test

It is benchmarks/bench_kv_cache.py with GPU defaults: each configuration in a fresh process, claimed bytes beside
the cache's tensor bytes, torch.cuda.memory_allocated() held with the cache alive, the decode-phase peak over the
memory held right after prefill (reset_peak_memory_stats there), and ms per decode token. With 4 KV heads a
retrieval group serves 7 query heads, so keeping the groups of k heads keeps up to k groups of the 112.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_kv_cache import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    defaults = {"--device": "cuda", "--shape": "7b", "--side": "1288", "--new-tokens": "32"}
    for flag, value in defaults.items():
        if flag not in args:
            args += [flag, value]
    main(args)
