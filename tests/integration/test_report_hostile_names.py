"""Names a run gives (model, task, configuration id, cell, label, heads file, doc fields) are data in every report:
fed hostile names (HTML tags with event handlers, <script>, markdown images of local files, javascript: and data:
links, table pipes, line breaks) through every field of every report section (sweep report with steering and
patching, compare-heads, score distribution, demo summary, replicate summary), the markdown keeps its table columns
and the HTML page (report.html, or the markdown rendered by the report's own renderer) holds no script, no event
handler, no link out of the report folder and no picture but the report's own plots, while every name still reads
as the text it is. Parsed with Python's html.parser, not by looking for strings."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from support.sweep_files import LineWriter, make_docs, statuses_from, vrh_block, write_manifest

from vrh_lmms.base.heads import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.cli import main
from vrh_lmms.report.fmt import short
from vrh_lmms.report.html import markdown_to_html

HOSTILE = {
    "img": "<img src=x onerror=alert(1)>",
    "script": "<script>alert(1)</script>",
    "image": "![x](/etc/passwd)",
    "js": "[a](javascript:alert(1))",
    "pipe": "a|b",
    "newline": "a\nb",
    "data": "[d](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
}
GEOMETRY = Geometry(layers=4, heads=8, kv_heads=2, head_dim=16)


def as_file_name(name: str) -> str:
    """The name as a file or folder name can hold it (a task names samples_<task>.jsonl, a configuration its
    folder): `/` cannot be in a name, everything else stays."""
    return name.replace("/", "_")


def shown(name: str) -> str:
    """How the page reads a name: a line break folds into a space."""
    return name.replace("\n", " ")


class Page(HTMLParser):
    """Tags, attributes, text and table shapes of an HTML page or fragment."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.tables: list[list[int]] = []  # per table: cells per row
        self._skip = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1

    def handle_endtag(self, tag):
        if tag in ("style", "title"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)

    @property
    def plain(self) -> str:
        return re.sub(r"\s+", " ", "".join(self.text))


def assert_safe(page_text: str, folder: Path, own_images: set[str]) -> Page:
    """No script or other active element, no event handler, every link inside the report folder, every picture one
    of `own_images` (relative to `folder`) embedded as its own bytes, every table rectangular."""
    page = Page(page_text)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "iframe", "object", "embed", "svg", "math", "form", "input", "link", "base"}, tags
    embedded = []
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.lower().startswith("on")], (tag, attrs)
        href = attrs.get("href")
        if href is not None:
            assert ":" not in href and not href.startswith(("/", "\\")) and ".." not in href, href
        if tag == "img":
            src, title = attrs.get("src") or "", attrs.get("title") or ""
            assert src.startswith("data:image/png;base64,"), src[:80]
            assert title in own_images, title
            assert base64.b64decode(src.split(",", 1)[1]) == (folder / title).read_bytes()
            embedded.append(title)
        elif "src" in attrs:
            pytest.fail(f"<{tag}> with src {attrs['src']!r}")
    for shape in page.tables:
        assert len(set(shape)) == 1, shape  # every row as wide as the header
    return page


_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def assert_tables_keep_columns(markdown: str) -> None:
    """Every row of every markdown table has as many unescaped `|` as its header (GitHub splits on them all)."""
    header = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        n = len(_CELL_SPLIT.findall(line))
        if header is None:
            header = n
        assert n == header, line


def assert_visible(page: Page, names) -> None:
    for name in names:
        assert shown(name) in page.plain, name


# ----------------------------------------------------------------------------------------------------- inputs
def heads_file(path: Path, model: str, cell: str, seed: int) -> Path:
    scores = np.random.default_rng(seed).random((GEOMETRY.layers, GEOMETRY.heads))
    ranking = ranking_from_scores(scores)
    hf = HeadsFile({"id": model, "family": "qwen2_5_vl"}, GEOMETRY, scores, ranking, scoring={"cell": cell},
                   extra={"dead_heads": {"heads": [str(ranking[-1])]}})
    return save_heads_file(hf, path)


def sweep(root: Path, model: str, task: str, config_id: str, heads: Path) -> Path:
    """A sweep of `model` on `task`: baseline, top2 (heads of `heads`), an explicit head set named `config_id`, and
    three random-2 draws."""
    rng = np.random.default_rng(3)
    docs = make_docs(rng, n_images=40, sizes=(1, 3))
    writer = LineWriter(docs, task=task)
    root.mkdir(parents=True)
    write_manifest(root, task)
    sha = __import__("hashlib").sha256(heads.read_bytes()).hexdigest()
    base = rng.random(len(docs)) < 0.85
    writer.write(root, "baseline", vrh_block("baseline", "baseline", None, None, model=model),
                 statuses_from(base, rng))
    top = base & (rng.random(len(docs)) < 0.4)
    writer.write(root, "top2", vrh_block("top2", "topk", 2, None, model=model, heads_model=model,
                                         heads_path=str(heads), sha256=sha, heads=["L0H1", "L1H2"]),
                 statuses_from(top, rng))
    writer.write(root, as_file_name(config_id), vrh_block(config_id, "explicit", 2, None, model=model,
                                                          heads_model=None, heads=["L0H1", "L1H2"]),
                 statuses_from(top, rng))
    for s in range(3):
        other = base & (rng.random(len(docs)) < 0.9)
        writer.write(root, f"random2_s{s}", vrh_block(f"random2_s{s}", "random", 2, s, model=model, heads_model=None),
                     statuses_from(other, rng))
    return root


def steer_folder(root: Path, config_id: str, task: str) -> Path:
    """A finished `vrh-lmms steer` folder in its documented layout, with a hostile configuration id and task."""
    configs = [{"id": "baseline", "kind": "baseline", "k": 0, "seed": None, "spec": "none", "bias": 0.0},
               {"id": as_file_name(config_id), "kind": "topk", "k": 2, "seed": None, "spec": "top2", "bias": 6.0}]
    (root / "configs").mkdir(parents=True)
    (root / "steer.json").write_text(json.dumps({"identity": {"model": config_id}, "configurations": configs}))
    rng = np.random.default_rng(5)
    for cfg in configs:
        folder = root / "configs" / cfg["id"]
        folder.mkdir()
        lines = [{"doc_id": i, "vrh_record": {"image_id": f"img{i // 2}", "correct": bool(rng.random() < 0.5),
                                              "status": "correct"},
                  "vrh_steer": {"steerable": True, "steered": cfg["kind"] != "baseline",
                                "moved": bool(rng.random() < (0.7 if cfg["kind"] != "baseline" else 0.1))}}
                 for i in range(20)]
        (folder / f"samples_{as_file_name(task)}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (folder / "results.json").write_text(json.dumps({"results": {task: {}}}))
    return root


def patch_folder(root: Path, name: str, heads: Path, plot: Path) -> Path:
    """A finished `vrh-lmms patch` folder: patch.json from the real aggregation, then its names made hostile."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.runs.interventions.patch_run import PatchSpec, aggregate

    hf = load_heads_file(heads)
    rng = np.random.default_rng(0)
    parts = []
    for i in range(6):
        grid = -1.0 + rng.random((GEOMETRY.layers, GEOMETRY.heads))
        parts.append({"task": name, "a": 2 * i, "b": 2 * i + 1, "image_id": f"img{i // 2}", "expressions": [name, "y"],
                      "ld_clean": 3.0, "ld_corrupt": -1.0, "heads": grid.tolist(),
                      "sets": {name: 2.0 + rng.random(), "random1_s0": -1.0 + rng.random()}})
    sets = {name: {"kind": "topk", "k": 1, "seed": None, "heads": [HeadRef(0, 0)]},
            "random1_s0": {"kind": "random", "k": 1, "seed": 0, "heads": [HeadRef(1, 1)]}}
    spec = PatchSpec(model=name, model_args="", tasks=[name], heads_file=str(heads), ks=[1], direction="denoise",
                     min_gap=0.0)
    result = aggregate(parts, sets, hf, GEOMETRY, spec)
    result["top_heads"][0]["head"] = name
    result["metric"], result["rows"] = name, name
    result["unavailable_sets"] = {name: name}
    root.mkdir(parents=True)
    (root / "patch.json").write_text(json.dumps(result))
    (root / "patch_run.json").write_text(json.dumps({"identity": {}}))
    (root / "patch_map.png").write_bytes(plot.read_bytes())
    return root


# ----------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("key", sorted(HOSTILE))
def test_sweep_steer_patch_report_shows_hostile_names_as_text(key, tmp_path):
    """`vrh-lmms report` with --steer and --patch on runs whose model, task, configuration id, heads file (name,
    model id, cell) and patching names are all hostile."""
    name = HOSTILE[key]
    model, task, config_id, cell = f"org/{name}", as_file_name(f"t{name}"), f"c{name}", f"cell{name}"
    heads_dir = tmp_path / as_file_name(f"h{name}")
    heads_dir.mkdir()
    heads = heads_file(heads_dir / as_file_name(f"heads{name}.json"), model, cell, 0)
    partner = heads_file(tmp_path / "partner.json", f"org/p{name}", cell, 1)
    root = sweep(tmp_path / "sweep", model, task, config_id, heads)
    steer = steer_folder(tmp_path / "steer", config_id, task)
    leak = tmp_path / "report" / "plots" / "leak.png"  # a picture a name might point at: never embedded
    report_dir = tmp_path / "report"
    assert main(["report", str(root), "--output", str(report_dir), "--n-resamples", "200", "--heads-files",
                 str(heads), str(partner), "--overlap-k", "2", "--steer", str(steer)]) == 0
    plot = next((report_dir / "plots").glob("*.png"))
    patch = patch_folder(tmp_path / "patch", name, heads, plot)
    assert main(["report", str(root), "--output", str(report_dir), "--n-resamples", "200", "--heads-files",
                 str(heads), str(partner), "--overlap-k", "2", "--steer", str(steer),
                 "--patch", str(patch), "--force"]) == 0
    rep = json.loads((report_dir / "report.json").read_text())
    text = (report_dir / "report.md").read_text()
    assert_tables_keep_columns(text)
    assert "## Steering" in text and "## Activation patching" in text
    own = {*rep["files"]["plots"], "plots/patch_map.png"}
    leak.write_bytes(plot.read_bytes())
    (report_dir / "report.md").write_text(text + f"\n\n![x](plots/leak.png) ![y]({leak}) ![z](../partner.json)\n")
    from vrh_lmms.report.html import write_report_html

    write_report_html(report_dir)
    page = assert_safe((report_dir / "report.html").read_text(), report_dir, own)
    embedded = [attrs["title"] for tag, attrs in page.tags if tag == "img"]
    assert sorted(embedded) == sorted(own)  # the report's own plots, each once; leak.png is not one
    assert_visible(page, [short(model), task, config_id, f"top2 by {cell}", name])  # name: patching's fields
    assert shown(f"org/p{name}") in page.plain or shown(short(f"org/p{name}")) in page.plain


def test_compare_heads_and_score_distribution_show_hostile_names_as_text(tmp_path):
    """compare.md and distribution.md: labels (model ids), sources (file paths) and cells of every hostile kind."""
    files = []
    for i, (key, name) in enumerate(sorted(HOSTILE.items())):
        folder = tmp_path / as_file_name(f"d{name}")
        folder.mkdir()
        files.append(heads_file(folder / as_file_name(f"{key}{name}.json"), f"org/{key}{name}", f"c{name}", i))
    for command, md_name, plot in (("compare-heads", "compare.md", "compare.png"),
                                   ("score-distribution", "distribution.md", "distribution.png")):
        out = tmp_path / command
        extra = ["--k", "2"] if command == "compare-heads" else []
        assert main([command, *map(str, files), *extra, "--output", str(out)]) == 0
        text = (out / md_name).read_text()
        assert_tables_keep_columns(text)
        assert not re.search(r"(?<![.\w])" + re.escape(str(tmp_path)), text)  # sources relative, never absolute
        page = assert_safe(markdown_to_html(text, out, images=[plot]), out, {plot})
        assert [a["title"] for t, a in page.tags if t == "img"] == [plot]
        assert_visible(page, [short(f"org/{key}{name}") for key, name in HOSTILE.items()])
        assert_visible(page, [f"c{name}" for name in HOSTILE.values()])
        if command == "compare-heads":
            assert_visible(page, [as_file_name(f"{key}{name}.json") for key, name in HOSTILE.items()])


def test_demo_summary_shows_hostile_names_as_text(tmp_path):
    """demo_summary.md in front of report.html: the model name in the title, an unavailable control's reason, the
    transfer table's model names, the recall section's task, cell and head names."""
    from vrh_lmms.pipelines.demo.pipeline import Acceptance, summary_markdown, write_demo_html
    from vrh_lmms.pipelines.demo.recall import recall_markdown
    from vrh_lmms.pipelines.demo.transfer import transfer_markdown

    names = list(HOSTILE.values())
    row = {"k": 2, "topk_acc": 0.5, "topk_drop": 0.4, "topk_drop_ci": [0.3, 0.5], "topk_parse_failure": 0.0,
           "random_drops": [0.0], "random_mean_drop": 0.0, "layer_matched_drops": [],
           "layer_matched_mean_drop": None,
           "layer_matched_unavailable": " ".join(names), "random_max_parse_failure": 0.0}
    markdown = summary_markdown(Acceptance(0.9, 100, [row]), 32, 1.0)
    markdown += transfer_markdown([{"model": f"/m/{n}" if "/" not in n else n, "heads_from": n, "k": 2,
                                    "baseline_acc": 0.9, "own_drop": 0.4, "own_drop_ci": [0.3, 0.5],
                                    "transferred_drop": 0.1, "transferred_drop_ci": None} for n in names])
    block = {"task": names[0], "baseline": 0.9,
             "sets": {"backbone_recall": {"acc": 0.5, "drop": 0.4, "drop_ci": None, "random_drops": [],
                                          "p_random": None}}}
    recall = {"k": 2, "cell": names[1], "overlap": [], "ablation": {names[0]: block},
              "backbone_top_dead_in_vlm": names[2:4]}
    markdown += recall_markdown(recall, None)
    assert_tables_keep_columns(markdown)
    out = tmp_path / "demo"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.md").write_text("# report\n")
    page = assert_safe(write_demo_html(out, " ".join(names), markdown).read_text(), out, set())
    assert_visible(page, names + [" ".join(names)])


def test_replicate_summary_shows_hostile_names_as_text(tmp_path):
    """replicate.md: the model (a checkpoint path: shown relative, never absolute), tasks, scorer labels."""
    from vrh_lmms.pipelines.replicate.plan import ReplicateSpec
    from vrh_lmms.pipelines.replicate.summary import write_summary

    name = " ".join(v for v in HOSTILE.values() if "," not in v)
    task = as_file_name(f"t{name}")
    model = str(tmp_path / "ckpt" / as_file_name(f"m{name}"))
    heads = heads_file(tmp_path / "heads.json", model, "out,sum,mean", 0)
    root = sweep(tmp_path / "sweep", model, task, "c", heads)
    assert main(["report", str(root), "--output", str(tmp_path / "report"), "--n-resamples", "200",
                 "--heads-files", str(heads), "--no-plots"]) == 0
    absolute = re.compile(r"(?<![.\w])" + re.escape(str(tmp_path)))
    for written in ("report.md", "report.json", "report.html"):  # checkpoint, inputs, heads file: never absolute
        assert not absolute.search((tmp_path / "report" / written).read_text()), written
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    report["scorers"] = [{"task": task, "ks": [2], "rows": [
        {"label": "primary", "cell": "a", "by_k": {"2": {"acc": 0.2}}},
        {"label": name, "cell": "b", "by_k": {"2": {"acc": 0.3}}}]}]
    spec = ReplicateSpec(model="vrh_qwen25", model_args=f"pretrained={model}", detection_task=task,
                         grounding_tasks=[task], vqa_tasks=[task], vqa_k=2, ks=[2])
    out = tmp_path / "replicate"
    out.mkdir()
    text = write_summary(out, spec, report).read_text()
    assert_tables_keep_columns(text)
    assert not absolute.search(text)  # no absolute checkpoint path
    page = assert_safe(markdown_to_html(text, out), out, set())
    assert_visible(page, [task, name])


def test_kv_cache_ranker_and_efficiency_tables_show_hostile_names_as_text(tmp_path):
    """kv_cache.md (model: a checkpoint path, tasks, mode, heads file, policy), rank.md (data, query row) and the
    sample-efficiency table (cell)."""
    from vrh_lmms.runs.discovery.efficiency import EfficiencyRow, efficiency_markdown
    from vrh_lmms.runs.kvcache.outputs import markdown as kv_markdown
    from vrh_lmms.runs.rank.outputs import markdown as rank_markdown

    names = list(HOSTILE.values())
    ci = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    kv = {"model": str(tmp_path / as_file_name(names[0])), "tasks": names, "mode": names[1], "sink": names[2],
          "recent": names[3], "heads_file": str(tmp_path / as_file_name(names[4])), "n_docs": 10, "n_clusters": 5,
          "rows": [{"policy": name, "budget": 0.5, "accuracy": ci, "drop_vs_none": None,
                    "cache": {"kv_bytes_full": 0, "image_kv_kept": 0.5}} for name in names]}
    diff = {"diff": 0.1, "ci_low": 0.0, "ci_high": 0.2}
    block = {"rows": [{"k": 2, "topk": {"recall@1": ci, "recall@5": ci, "mrr": ci},
                       "topk_minus_all": {"recall@1": diff}}], "all": {"recall@1": ci, "recall@5": ci, "mrr": ci},
             "n_all": 32}
    rank = {"data": names[5], "query_row": names[6], "n_queries": 4, "n_sets": 2, "candidates": 3,
            "results": {"calibrated": block, "raw": block}, "chance_recall@1": 0.3}
    efficiency = efficiency_markdown([EfficiencyRow(5, 0.5, 0.1, 0.3, 0.7, 0.2)], 2, names[6])
    for text in (kv_markdown(kv, "kv.png"), rank_markdown(rank), efficiency):
        assert_tables_keep_columns(text)
        assert not re.search(r"(?<![.\w])" + re.escape(str(tmp_path)), text)  # paths relative, never absolute
        assert_safe(markdown_to_html(text, tmp_path, images=[]), tmp_path, set())
    kv_page = Page(markdown_to_html(kv_markdown(kv, "kv.png"), tmp_path, images=[]))
    assert_visible(kv_page, names + [as_file_name(names[0]), as_file_name(names[4])])
    assert_visible(Page(markdown_to_html(rank_markdown(rank), tmp_path)), names[5:7])
    assert_visible(Page(markdown_to_html(efficiency, tmp_path)), names[6:7])


def test_maps_panel_shows_hostile_doc_fields_as_text_and_copies_only_its_folders_pngs(tmp_path):
    """The attention-maps panel: task, doc id, expression, answer, boxes and model are text; a picture named outside
    the maps folder is refused in one line, before anything is copied."""
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.report.maps_panel import maps_block, maps_markdown

    names = list(HOSTILE.values())
    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
                           "rkJggg==")
    maps = tmp_path / "maps"
    maps.mkdir()
    (maps / "map 0.png").write_bytes(png)
    doc = {"doc_id": names[0], "task": names[1], "expression": names[2], "answer": names[3], "gt_box": names[4],
           "pred_box": names[5], "located_box": names[6], "png": "map 0.png"}
    data = {"schema": "vrh-attention-maps/1", "model": str(tmp_path / as_file_name(names[0])), "k": 2, "rows": "all",
            "docs": [doc]}
    (maps / "attention_maps.json").write_text(json.dumps(data))
    out = tmp_path / "report"
    block = maps_block([maps], out)
    text = maps_markdown(block)
    assert block["maps"][0]["png"] == "plots/maps_0_map_0.png" and (out / block["maps"][0]["png"]).is_file()
    page = assert_safe(markdown_to_html(text, out, images=[block["maps"][0]["png"]]), out, {"plots/maps_0_map_0.png"})
    assert_visible(page, names)
    outside = tmp_path / "secret.png"
    outside.write_bytes(png)
    for bad in ("../secret.png", str(outside), "attention_maps.json"):
        (maps / "attention_maps.json").write_text(json.dumps(data | {"docs": [doc | {"png": bad}]}))
        with pytest.raises(VRHError, match="outside its folder or not a PNG"):
            maps_block([maps], tmp_path / "other")
    assert not (tmp_path / "other").exists()
