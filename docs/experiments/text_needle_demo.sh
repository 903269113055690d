#!/usr/bin/env bash
# Text-recall heads vs grounding heads on the demo model (docs/evidence.md): discover each, compare them, and
# ablate each top-k on both tasks beside random live-head controls (the demo model has 54 of 96 heads pruned).
# About 6 min on one core (2026-12-04).
# Run from the repository root: bash docs/experiments/text_needle_demo.sh [OUT] (default runs/text_needle)
set -e
OUT=${1:-runs/text_needle}
eval "$(python - <<'PY'
import shlex
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import EVAL_START, demo_model_args, synth_config
from vrh_lmms.base.paths import assets_path
model = assets_path() / "demo_model"
spec = DemoSpec.load(model)
print("MARGS=" + shlex.quote(demo_model_args(model, spec)))
print("DISC=" + shlex.quote(synth_config(spec, 32, 0)))            # the demo's 32 discovery scenes
print("EVAL=" + shlex.quote(synth_config(spec, 100, EVAL_START)))  # its 100 held-out evaluation scenes
PY
)"
NEEDLE_DISC='{"n": 100, "seed": 0}'  # recall format, 8 facts, 8 practice queries (the task's defaults)
NEEDLE_EVAL='{"n": 100, "seed": 1}'  # held-out haystacks
G=(--model vrh_qwen25 --model_args "$MARGS" --tasks vrh_synth_grounding --gen-kwargs max_new_tokens=16)
T=(--model vrh_qwen25 --model_args "$MARGS" --tasks vrh_synth_text_needle --gen-kwargs max_new_tokens=6)
SW=(--k 3,5,9 --random-seeds 10 --batch-size 25)
VRH_SYNTH_CONFIG="$DISC" vrh-lmms discover "${G[@]}" --limit -1 --output "$OUT/grounding/heads.json"
VRH_NEEDLE_CONFIG="$NEEDLE_DISC" vrh-lmms discover "${T[@]}" --limit -1 --output "$OUT/needle/heads.json"
vrh-lmms compare-heads "$OUT/needle/heads.json" "$OUT/grounding/heads.json" --k 5 --output "$OUT/compare_k5"
vrh-lmms compare-heads "$OUT/needle/heads.json" "$OUT/grounding/heads.json" --k 9 --output "$OUT/compare_k9"
vrh-lmms compare-heads "$OUT/needle/heads.json" "$OUT/grounding/heads.json" --k 5 --cell retrieval \
    --cell out,sum,mean --output "$OUT/compare_retrieval_k5"
VRH_SYNTH_CONFIG="$EVAL" vrh-lmms sweep "${G[@]}" --heads-file "$OUT/needle/heads.json" "${SW[@]}" \
    --compare-cells retrieval --output "$OUT/sweep_needle_heads_on_grounding"
VRH_NEEDLE_CONFIG="$NEEDLE_EVAL" vrh-lmms sweep "${T[@]}" --heads-file "$OUT/grounding/heads.json" "${SW[@]}" \
    --output "$OUT/sweep_grounding_heads_on_needle"
VRH_SYNTH_CONFIG="$EVAL" vrh-lmms sweep "${G[@]}" --heads-file "$OUT/grounding/heads.json" "${SW[@]}" \
    --output "$OUT/sweep_grounding_heads_on_grounding"
VRH_NEEDLE_CONFIG="$NEEDLE_EVAL" vrh-lmms sweep "${T[@]}" --heads-file "$OUT/needle/heads.json" "${SW[@]}" \
    --compare-cells retrieval --output "$OUT/sweep_needle_heads_on_needle"
for s in needle_heads_on_grounding grounding_heads_on_needle grounding_heads_on_grounding needle_heads_on_needle; do
    vrh-lmms report "$OUT/sweep_$s" --output "$OUT/report_$s"
done
python docs/experiments/text_needle_live_overlap.py "$OUT/needle/heads.json" "$OUT/grounding/heads.json"
python docs/experiments/text_needle_live_overlap.py "$OUT/needle/heads.json@retrieval" "$OUT/grounding/heads.json"
