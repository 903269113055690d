#!/usr/bin/env bash
# Evidence in several images on the demo model (docs/evidence.md, "Several images"): discover heads on the needle
# image among 3 of the demo's scenes (`which`: the image evidence; `locate`: a box in it), then a small sweep and
# report on `locate`. Run from the repository root: bash docs/experiments/haystack_demo.sh [OUT] [N]
# (defaults runs/haystack, 20 docs).
set -e
OUT=${1:-runs/haystack}
N=${2:-20}
eval "$(python - "$N" <<'PY'
import json, shlex, sys
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import demo_model_args
from vrh_lmms.base.paths import assets_path
model = assets_path() / "demo_model"
spec = DemoSpec.load(model)
print("MARGS=" + shlex.quote(demo_model_args(model, spec)))
for mode in ("locate", "which"):  # the demo's own scenes (168 px, its scene settings), 3 per doc
    cfg = {"n": int(sys.argv[1]), "seed": 2, "n_images": 3, "sizes": [spec.image_size], "scene": spec.scene,
           "mode": mode}
    print(f"{mode.upper()}=" + shlex.quote(json.dumps(cfg)))
PY
)"
H=(--model vrh_qwen25 --model_args "$MARGS" --tasks vrh_synth_haystack)
VRH_HAYSTACK_CONFIG="$WHICH" vrh-lmms discover "${H[@]}" --gen-kwargs max_new_tokens=4 --limit -1 \
    --output "$OUT/which/heads.json"
VRH_HAYSTACK_CONFIG="$LOCATE" vrh-lmms discover "${H[@]}" --gen-kwargs max_new_tokens=16 --limit -1 \
    --output "$OUT/locate/heads.json"
VRH_HAYSTACK_CONFIG="$LOCATE" vrh-lmms sweep "${H[@]}" --gen-kwargs max_new_tokens=16 \
    --heads-file "$OUT/locate/heads.json" --k 3 --random-seeds 3 --output "$OUT/locate/sweep"
vrh-lmms report "$OUT/locate/sweep" --output "$OUT/locate/report"
