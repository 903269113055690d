"""tasks/_template: a benchmark made from it loads through lmms-eval and emits vrh records."""

from __future__ import annotations

import json
import shutil

import pytest

from vrh_lmms.base.paths import tasks_path
from vrh_lmms.base.synth.scenes import generate_scenes


@pytest.fixture
def mybench_tasks(tmp_path):
    """A copy of the task tree with tasks/mybench/ instantiated from the template, as the guide says."""
    tree = tmp_path / "tasks"
    shutil.copytree(tasks_path(), tree, ignore=shutil.ignore_patterns("__pycache__"))
    bench = tree / "mybench"
    bench.mkdir()
    for tmpl in (tree / "_template").glob("*.tmpl"):
        shutil.copy(tmpl, bench / tmpl.name.removesuffix(".tmpl"))
    data = tmp_path / "data"
    data.mkdir()
    rows = []
    for i, scene in enumerate(generate_scenes(3, seed=9)):
        path = data / f"{i}.png"
        scene.image.save(path)
        rows.append({"image": str(path), "phrase": scene.expression, "bbox": list(scene.target_object.bbox),
                     "question": f"Is there {scene.expression}?", "answer": "yes"})
    (data / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tree, data


def test_template_tasks_load_and_score(mybench_tasks, vrh_env):
    from lmms_eval.tasks import TaskManager, get_task_dict

    tree, data = mybench_tasks
    vrh_env.setenv("VRH_MYBENCH_DATA", str(data))
    vrh_env.setenv("VRH_BOX_CONVENTION", "qwen3_vl")
    manager = TaskManager(include_path=str(tree), include_defaults=False, model_name="qwen2_5_vl")
    assert {"vrh_mybench_grounding", "vrh_mybench_vqa"} <= set(manager.all_tasks)
    tasks = get_task_dict(["vrh_mybench_grounding", "vrh_mybench_vqa"], manager)
    grounding, vqa = tasks["vrh_mybench_grounding"], tasks["vrh_mybench_vqa"]
    doc = grounding.test_docs()[0]
    assert len(grounding.test_docs()) == 3 and doc["image_width"] == 224
    assert "in the image" in grounding.doc_to_text(doc)
    x1, y1, x2, y2 = (v / 224 * 1000 for v in doc["gt_box"])
    out = grounding.process_results(doc, [json.dumps([{"bbox_2d": [x1, y1, x2, y2]}])])
    assert out["acc50"]["score"] == 1.0 and out["vrh_record"]["status"] == "correct"
    vdoc = vqa.test_docs()[0]
    assert vqa.doc_to_text(vdoc).endswith("Answer yes or no.")
    out = vqa.process_results(vdoc, ["Yes"])
    assert out["acc"]["score"] == 1.0 and out["vrh_record"]["kind"] == "vqa"
