#!/usr/bin/env bash
# Table A10 on the demo model: heads from the first 200 of 600 scenes (discover --preset paper), then the same sweep
# with the detection scenes left out (--preset paper) and with them kept. 6 min 42 s on 2 CPU cores (2026-12-04).
# Run from the repository root: bash docs/experiments/table_a10_demo.sh
set -e
eval "$(python - <<'PY'
import shlex
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import demo_model_args, synth_config
from vrh_lmms.base.paths import assets_path
model = assets_path() / "demo_model"
spec = DemoSpec.load(model)
print("MARGS=" + shlex.quote(demo_model_args(model, spec)))
print("SCENES=" + shlex.quote(synth_config(spec, 600, 0)))   # one task of 600 scenes; discovery takes its first 200
PY
)"
export VRH_SYNTH_CONFIG="$SCENES"
COMMON=(--model vrh_qwen25 --model_args "$MARGS" --tasks vrh_synth_grounding --gen-kwargs max_new_tokens=16)
vrh-lmms discover "${COMMON[@]}" --preset paper --output runs/a10/heads.json
vrh-lmms sweep "${COMMON[@]}" --heads-file runs/a10/heads.json --preset paper --k 3,5,10 --random-seeds 5 --batch-size 25 --output runs/a10/without_detection
vrh-lmms sweep "${COMMON[@]}" --heads-file runs/a10/heads.json --k 3,5,10 --random-seeds 5 --control random-outside --batch-size 25 --output runs/a10/with_detection
vrh-lmms report runs/a10/without_detection --output runs/a10/report_without
vrh-lmms report runs/a10/with_detection --output runs/a10/report_with
