#!/usr/bin/env bash
# Issue 30 part 3: ranking-loss training on the demo model (protocol: docs/experiments/rank_train_demo.md).
# Usage: bash docs/experiments/rank_train_demo.sh [seeds...]   (default: 0); then
#        python docs/experiments/rank_train_demo.py runs/rank_train
set -euo pipefail
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1
OUT=${OUT:-runs/rank_train}
SEEDS=("${@:-0}")
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
HEADS="$OUT/heads.json"
[ -f "$HEADS" ] || VRH_SYNTH_CONFIG=$(scenes 32 0) vrh-lmms discover --model vrh_qwen25 \
    --model_args "$(args "$MODEL")" "${GEN[@]:0:4}" --limit -1 --output "$HEADS"
evaluate() {  # ranker (400 queries from scene 100000) and grounding (300 scenes from 100000)
    [ -f "$2/rank/rank.json" ] || vrh-lmms rank --model vrh_qwen25 --model_args "$(args "$1")" --data synth \
        --heads-file "$HEADS" --k 5 --random-seeds 10 --limit 400 --candidates 4 --output "$2/rank"
    [ -f "$2/grounding/sweep.json" ] || VRH_SYNTH_CONFIG=$(scenes 300 100000) vrh-lmms sweep --model vrh_qwen25 \
        --model_args "$(args "$1")" "${GEN[@]}" --heads-file "$HEADS" --k 5 --no-random --output "$2/grounding"
}
evaluate "$MODEL" "$OUT/eval_before"
for seed in "${SEEDS[@]}"; do
    for arm in top random; do
        ckpt="$OUT/ckpt_${arm}5_s$seed"
        [ -f "$ckpt/rank_train.json" ] || vrh-lmms rank-train --model-dir "$MODEL" --heads-file "$HEADS" --k 5 \
            --heads "$arm" --seed "$seed" --data synth --n 300 --lr 1e-4 --output "$ckpt"
        evaluate "$ckpt" "$OUT/eval_${arm}5_s$seed"
    done
done
