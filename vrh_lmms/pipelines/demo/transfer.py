"""`vrh-lmms demo --transfer`: the heads of one demo VLM ablated in a second one that shares its text backbone.

The paper reports that retrieval heads carry over between VLMs built on the same language model. The second demo VLM
shares the shipped model's text-pretrained backbone and differs in its vision tower and visual training (seed). This
step discovers the second model's heads and sweeps them with the same controls as the first, then ablates each
model's top-k heads in the other; `vrh-lmms report` shows the result in its transfer table (a transferred
configuration is labelled `top5@<source model>`, beside the model's own `top5`). The transfer sweeps hold no baseline
of their own: each model's baseline is the one its own sweep wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md
from vrh_lmms.base.families import get_family
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.paths import assets_path
from vrh_lmms.base.synth.demo_spec import SPEC_FILE, DemoSpec
from vrh_lmms.harness.preload import check_pretrained, config_geometry, load_config
from vrh_lmms.pipelines.demo.stages import DemoSettings, demo_model_args, discover_heads, sweep_heads
from vrh_lmms.report.fmt import pct_opt_ci
from vrh_lmms.report.head_compare import compare, load_inputs

TRANSFER_DIR = "transfer"  # the second-VLM step's folder in a demo run
SECOND_MODEL = "demo_model_b"  # the shipped second VLM, under vrh_lmms/assets/
OWN_SWEEP = "sweep"
SECOND_WITH_FIRST = "sweep_second_with_first_heads"
FIRST_WITH_SECOND = "sweep_first_with_second_heads"


def checked_second_model(value: str, first: Path, spec) -> Path:
    """The second model's folder ("shipped": the shipped one), refused unless it was trained on the first model's
    scenes with the same decoder geometry, and unless the report can tell the two apart by name."""
    path = assets_path() / SECOND_MODEL if value == "shipped" else Path(value)
    if value == "shipped" and not path.is_dir():
        raise VRHError(f"--transfer without a folder runs the shipped second model, and this version ships none "
                       f"({path}); pass --transfer DIR, a model trained with `--backbone` on the demo model's text "
                       "backbone (docs/demo-model-experiments.md)")
    check_pretrained(str(path), name="--transfer")
    if not (path / SPEC_FILE).is_file():
        raise VRHError(f"--transfer {path}: no {SPEC_FILE}; the demo runs models written by `vrh-lmms train-tiny`")
    if DemoSpec.load(path) != spec:
        raise VRHError(f"--transfer {path} was trained on other scenes than {first} ({SPEC_FILE} differs): its heads "
                       "would be tested on inputs it never saw")
    family = get_family("qwen2_5_vl")
    geometries = [config_geometry(load_config(str(p)), family) for p in (first, path)]
    if geometries[0] != geometries[1]:
        raise VRHError(f"--transfer {path}: decoder geometry {geometries[1]} differs from {first}'s {geometries[0]}; "
                       "heads transfer between models of one backbone")
    if path.resolve() == first.resolve() or path.resolve().name.lower() == first.resolve().name.lower():
        raise VRHError(f"--transfer {path}: the report tells models apart by their folder's name, and {first} has the "
                       "same one; rename one of the folders")
    return path


def run_transfer(lm_first, args_first: str, heads_first: Path, second: Path, spec, settings: DemoSettings,
                 ks: list[int], out: Path, say, progress: bool) -> list[Path]:
    """Discovery and the controlled sweep on the second model, then each model's top-k in the other; returns the
    sweep folders for the report."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.harness import lmms

    folder = out / TRANSFER_DIR
    args_second = demo_model_args(second, spec)
    lm_second = lmms.build_model("vrh_qwen25", args_second, batch_size=1)
    say(f"[+] transfer: discovery and sweep on the second VLM ({second.name}), then each model's top-k in the other")
    heads_second = discover_heads(lm_second, args_second, spec, settings, folder / "heads.json")
    sweep_heads(lm_second, args_second, spec, settings, heads_second,
                plan_configurations(ks, settings.random_seeds, True, ["zero"]), folder / OWN_SWEEP, progress)
    top_only = [c for c in plan_configurations(ks, 0, False, ["zero"]) if c.kind != "baseline"]
    sweep_heads(lm_second, args_second, spec, settings, heads_first, top_only, folder / SECOND_WITH_FIRST, progress)
    sweep_heads(lm_first, args_first, spec, settings, heads_second, top_only, folder / FIRST_WITH_SECOND, progress)
    return [folder / OWN_SWEEP, folder / SECOND_WITH_FIRST, folder / FIRST_WITH_SECOND]


def transfer_figures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's transfer rows, reduced to what the demo summary prints (drops in [0, 1])."""
    return [{"model": r["model"], "heads_from": r["heads_from"], "k": r["k"], "baseline_acc": r["baseline_acc"],
             "own_drop": None if r["own"] is None else r["own"]["drop"],
             "own_drop_ci": None if r["own"] is None else r["own"]["drop_ci"],
             "transferred_drop": r["transferred"]["drop"], "transferred_drop_ci": r["transferred"]["drop_ci"],
             "transferred_p": r["transferred"]["p_test"]}
            for r in report["transfer"]]


def heads_agreement(first: Path, second: Path, ks: list[int]) -> list[dict[str, Any]]:
    """`vrh-lmms compare-heads` on the two models' heads files at each k (those up to half the heads): top-k overlap
    against chance, hypergeometric p and Spearman over all heads and over heads live in both."""
    items = load_inputs([str(first), str(second)])
    total = items[0].layers * items[0].heads
    rows = []
    for k in ks:
        if 2 * k <= total:
            pair = compare(items, k)["pairs"][0]
            rows.append({key: pair.get(key) for key in ("k", "overlap", "chance", "p_value", "jaccard", "spearman",
                                                         "spearman_live", "n_live")})
    return rows


def agreement_markdown(rows: list[dict[str, Any]]) -> str:
    """One line per k: how many top-k heads the two models share, against chance, and their maps' Spearman."""
    if not rows:
        return ""
    parts = [f"top-{r['k']}: {r['overlap']} shared (chance {r['chance']:.2f}, p = {r['p_value']:.2g})" for r in rows]
    rho = rows[0]["spearman"]
    live = rows[0].get("spearman_live")
    text = ("\nHeads in common between the two VLMs (`vrh-lmms compare-heads`, docs/compare.md): " + "; ".join(parts) +
            ("" if rho is None else f"; Spearman of their score maps {rho:.3f} over all heads") +
            ("" if live is None else f", {live:.3f} over the {rows[0]['n_live']} heads live in both") + ".\n")
    return text


def transfer_markdown(rows: list[dict[str, Any]]) -> str:
    def name(model: str) -> str:
        return md(Path(model).name)

    lines = ["", "Transfer between the two VLMs of one text backbone (each model's top-k ablated in the other; "
                 "report/report.md, \"Cross-model transfer of heads\"):", "",
             "| model | heads from | k | baseline | own top-k drop, points [CI] | "
             "transferred top-k drop, points [CI] |",
             "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["model"], r["k"])):
        lines.append(f"| {name(r['model'])} | {name(r['heads_from'])} | {r['k']} | {r['baseline_acc']:.1%} | "
                     f"{pct_opt_ci(r['own_drop'], r['own_drop_ci'])} | "
                     f"{pct_opt_ci(r['transferred_drop'], r['transferred_drop_ci'])} |")
    return "\n".join(lines) + "\n"
