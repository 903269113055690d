#!/usr/bin/env bash
# DPO on the demo model (protocol: docs/experiments/dpo_demo.md). Writes into ${OUT:-runs/dpo} (git-ignored).
# About 15-20 min on one core. Then: python docs/experiments/dpo_demo.py ${OUT:-runs/dpo}
set -euo pipefail
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1
OUT=${OUT:-runs/dpo}
mkdir -p "$OUT"
args() {  # model_args of a demo checkpoint, fed as `vrh-lmms demo` feeds it
python - "$1" <<'PY'
import sys
from pathlib import Path
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import demo_model_args
print(demo_model_args(Path(sys.argv[1]), DemoSpec.load(sys.argv[1])))
PY
}
scenes() {  # VRH_SYNTH_CONFIG for n scenes from id start
python - "$1" "$2" <<'PY'
import sys
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import synth_config
from vrh_lmms.base.paths import assets_path
print(synth_config(DemoSpec.load(assets_path() / "demo_model"), int(sys.argv[1]), int(sys.argv[2])))
PY
}
MODEL=$(python -c 'from vrh_lmms.base.paths import assets_path; print(assets_path() / "demo_model")')
GEN=(--tasks vrh_synth_grounding --gen-kwargs max_new_tokens=16 --batch-size 25)

[ -f "$OUT/heads.json" ] || VRH_SYNTH_CONFIG=$(scenes 32 0) vrh-lmms discover --model vrh_qwen25 \
    --model_args "$(args "$MODEL")" "${GEN[@]:0:4}" --limit -1 --output "$OUT/heads.json"
# pairs: baseline, top-5 and random-5 outside layer 0 on pair scenes 1000-1999
VRH_SYNTH_CONFIG=$(scenes 1000 1000) vrh-lmms sweep --model vrh_qwen25 --model_args "$(args "$MODEL")" "${GEN[@]}" \
    --heads-file "$OUT/heads.json" --k 5 --random-seeds 2 --random-skip-layer0 --output "$OUT/pair_sweep"
for cfg in top5 random5_s0; do
    [ -f "$OUT/pairs_$cfg.jsonl" ] || vrh-lmms dpo-pairs "$OUT/pair_sweep" --config "$cfg" --chosen baseline \
        --output "$OUT/pairs_$cfg.jsonl"
done
N=$(wc -l < "$OUT/pairs_random5_s0.jsonl")
echo "pairs per arm: $N"
EVAL=$(scenes 300 100000)
evaluate() {  # baseline and top-5 on the evaluation scenes
    [ -f "$2/sweep.json" ] && return 0
    VRH_SYNTH_CONFIG=$EVAL vrh-lmms sweep --model vrh_qwen25 --model_args "$(args "$1")" "${GEN[@]}" \
        --heads-file "$OUT/heads.json" --k 5 --no-random --output "$2"
}
evaluate "$MODEL" "$OUT/eval_before"
for recipe in paper:2e-7 explore:5e-5; do
    name=${recipe%%:*}; lr=${recipe#*:}
    for arm in top5 random5_s0; do
        for seed in 0 1; do
            ckpt="$OUT/ckpt_${name}_${arm}_s$seed"
            [ -f "$ckpt/dpo_train.json" ] || vrh-lmms dpo-train "$OUT/pairs_$arm.jsonl" --model-dir "$MODEL" \
                --output "$ckpt" --max-pairs "$N" --lr "$lr" --epochs 4 --batch-size 8 --seed "$seed" \
                --image-position after_prompt
            evaluate "$ckpt" "$OUT/eval_${name}_${arm}_s$seed"
        done
    done
done
