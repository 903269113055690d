"""Report plots sized for a page and readable: no PNG wider than 2,400 px however many configurations (bars wrap
onto rows of panels), drops and accuracies in points / percent as the tables print them, and legends outside the
axes so that no plotted point sits under one."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vrh_lmms.report import plots

MAX_PX = 2400


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions made, kept open (they close them after saving)."""
    kept = []
    monkeypatch.setattr(plots.plt, "close", kept.append)
    yield kept
    monkeypatch.undo()
    for fig in kept:
        plots.plt.close(fig)


def _config(i: int, kind: str, k: int | None, acc: float, seed: int | None = None) -> dict:
    drop = 0.88 - acc
    label = f"{kind}{k}" + ("" if seed is None else f"_s{seed}")
    heads_label = f"top{k} by out,sum,mean" if kind == "topk" else None  # the legend's longest label
    return {"label": label, "kind": kind, "mode": "zero", "k": k, "heads_source": None, "heads_label": heads_label,
            "accuracy": {"mean": acc, "ci_low": acc - 0.05, "ci_high": acc + 0.05},
            "drop": {"drop": drop, "ci_low": drop - 0.08, "ci_high": drop + 0.08},
            "taxonomy": {"fractions": {"correct": acc, "mislocated": (1 - acc) * 0.8,
                                       "parse_failure": (1 - acc) * 0.2}}}


def _group(ks=(5, 9, 14), seeds=20) -> dict:
    """A demo-sized group: top-k at three k, 20 random and 20 uniform draws each (the shape that made a 3,804 px
    taxonomy plot)."""
    rng = np.random.default_rng(0)
    configs = []
    for k, top in zip(ks, (0.22, 0.04, 0.03)[:len(ks)], strict=True):
        configs.append(_config(len(configs), "topk", k, top))
        for kind, loss in (("random", 0.25), ("random_all", 0.1)):
            configs += [_config(len(configs), kind, k, float(np.clip(0.88 - loss * rng.random() * k / 5, 0, 1)), s)
                        for s in range(seeds)]
    base = _config(0, "baseline", None, 0.88)
    base["drop"] = None
    return {"model": "org/demo_model", "task": "vrh_synth_grounding", "metric": "acc50", "baseline": base,
            "configs": configs}


@pytest.mark.parametrize("plot", [plots.drop_plot, plots.taxonomy_plot])
def test_bar_plots_wrap_instead_of_growing_wide(tmp_path, figures, plot):
    group = _group()
    n = len(group["configs"])
    assert n == 123
    path = plot(group, tmp_path / "p.png")
    width, height = Image.open(path).size
    assert width <= MAX_PX and height > 1.5 * 480, (width, height)  # several rows of panels, not one long one
    (fig,) = figures
    labels = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels()]
    expected = [c["label"] for c in group["configs"]]
    if plot is plots.taxonomy_plot:
        expected = ["baseline", *expected]
    assert labels == expected  # every configuration once, in order, across the panels
    few = plot(_group(ks=(5,), seeds=2), tmp_path / "few.png")
    assert Image.open(few).size[1] <= 600  # a handful of bars stays one row


def test_bars_are_in_points_and_percent(tmp_path, figures):
    group = _group(ks=(5,), seeds=2)
    plots.drop_plot(group, tmp_path / "d.png")
    plots.taxonomy_plot(group, tmp_path / "t.png")
    drops_fig, tax_fig = figures
    heights = [p.get_height() for ax in drops_fig.axes for p in ax.patches]
    assert heights == pytest.approx([100 * c["drop"]["drop"] for c in group["configs"]])
    assert "points" in drops_fig.axes[0].get_ylabel()
    assert tax_fig.axes[0].get_ylim() == (0, 100) and "%" in tax_fig.axes[0].get_ylabel()


def _points_in_display(ax) -> np.ndarray:
    """Display coordinates of every plotted marker and line vertex of an axes."""
    pts = [line.get_xydata() for line in ax.get_lines() if len(line.get_xydata())]
    pts = [p for p in pts if np.isfinite(p).all()]
    return ax.transData.transform(np.vstack(pts))


def _assert_legend_off_the_data(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert len(legends) == 1
    box = legends[0].get_window_extent(renderer)
    (ax,) = fig.axes
    pts = _points_in_display(ax)
    inside = (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)
    assert not inside.any(), pts[inside]
    assert not box.overlaps(ax.get_window_extent(renderer))  # nor over the axes' area (bands, lines between points)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)  # and not cut off the page


def test_ksweep_legend_is_off_the_data_and_accuracy_in_percent(tmp_path, figures):
    plots.ksweep_plot(_group(), "zero", tmp_path / "k.png")
    (fig,) = figures
    _assert_legend_off_the_data(fig)
    top = next(line for line in fig.axes[0].get_lines() if line.get_label().startswith("top-k"))
    assert list(top.get_ydata()) == pytest.approx([22.0, 4.0, 3.0])
    assert Image.open(tmp_path / "k.png").size[0] <= MAX_PX


def test_demo_k_curve_legend_does_not_cover_the_top_k_point(tmp_path, figures):
    """The shipped demo's curve: top-k 66 / 84 / 85 points at k = 5 / 9 / 14 (its legend used to sit on k = 9)."""
    from vrh_lmms.pipelines.demo.kcurve import plot_k_curve

    rng = np.random.default_rng(1)
    rows = [{"k": k, "top_drop": top, "random_drops": list(rnd + 5 * rng.standard_normal(10)),
             "layer_matched_drops": [], "random_all_drops": list(uni + 5 * rng.standard_normal(10))}
            for k, top, rnd, uni in ((5, 66.0, 23.2, 9.2), (9, 84.0, 45.5, 10.1), (14, 85.0, 71.8, 32.2))]
    plot_k_curve({"rows": rows, "layers": 6, "heads": 16}, tmp_path / "kcurve.png", "demo", pool="live")
    (fig,) = figures
    _assert_legend_off_the_data(fig)
