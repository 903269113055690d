"""`vrh_synth_vqa`: short VQA on the synthetic scenes (colour, shape, count, existence), one question per scene.

The demo model is trained on these questions beside grounding, so masking its grounding heads here is the demo's
counterpart of the paper's cross-task test (Table 3). Scenes come from the same spec as `vrh_synth_grounding`
(``VRH_SYNTH_CONFIG``, else 100 scenes of seed 0) and the same cached parquet, so the two tasks can share images;
each scene's question is `vrh_lmms.base.synth.questions.evaluation_question` (kinds in turn by scene id, seeded).
Scored by the VQA readers: colour / shape as short answers, count as a number, existence as yes / no.
"""

from __future__ import annotations

from vrh_lmms.base.synth.cache import SPLIT, ensure_hub_data
from vrh_lmms.base.synth.questions import evaluation_question
from vrh_lmms.base.synth.scenes import generate_scenes
from vrh_lmms.tasks.common import docs as D
from vrh_lmms.tasks.common.grounding_data import synth_spec
from vrh_lmms.tasks.common.sources import Source, load_rows, resolve, spec_row
from vrh_lmms.tasks.common.vqa_data import _push, vqa_columns

READER = {"colour": "short", "shape": "short", "count": "number", "exists": "yes_no"}
TASK = "vrh_synth_vqa"


def synth_vqa_docs(options: dict, origin: str):
    spec = synth_spec(options, origin)
    cfg = spec.scene_config()
    rows = load_rows(Source("files", {"path": str(ensure_hub_data(spec))}, origin), SPLIT)
    row_of = {str(i): r for r, i in enumerate(rows["image_id"])}
    cols = vqa_columns(spec.n)
    index = []
    for scene in generate_scenes(spec.n, spec.seed, cfg, start=spec.start):
        q = evaluation_question(scene, spec.seed, cfg)
        index.append(row_of[str(scene.scene_id)])
        _push(cols, prompt=q.prompt, target=q.answer[0], answer_type=READER[q.task], question_type=q.task,
              meta={"kind": q.task}, image_id=scene.scene_id, question_id=f"{scene.scene_id}_{q.task}")
    return D.repeat_with(rows, index, cols)


def vrh_synth_vqa(dataset):
    """Docs of vrh_synth_vqa (lmms-eval passes only the placeholder dataset)."""
    source = resolve("SYNTH", spec_row(dataset), Source("synth", {}), None, ("synth",))
    return D.with_keys(synth_vqa_docs(dict(source.options), source.origin), TASK)
