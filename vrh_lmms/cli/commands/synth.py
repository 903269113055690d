"""`vrh-lmms synth OUT_DIR`: write synthetic grounding scenes in the lmms-lab RefCOCO (hub) or refer layout.

The hub layout (``OUT_DIR/<split>.parquet``) is what ``VRH_SYNTH_DATA`` / ``VRH_REFCOCO_DATA`` read; the refer
layout (``OUT_DIR/refcoco/refs(unc).p`` + ``instances.json`` + ``OUT_DIR/images``) is what ``VRH_REFCOCO_ROOT`` /
``VRH_SYNTH_REFER_ROOT`` read. Splits take consecutive scene ids, so they never share a scene.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.cache import SynthSpec
from vrh_lmms.base.synth.layouts import check_targets, write_hub_layout, write_refer_layout


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", help="folder to write")
    parser.add_argument("--layout", choices=("hub", "refer"), default="hub",
                        help="hub: <split>.parquet (lmms-lab RefCOCO columns); refer: refs(unc).p + instances.json")
    parser.add_argument("--split", action="append", metavar="NAME=COUNT",
                        help="a split and its scene count, repeatable (default: test=100)")
    parser.add_argument("--seed", type=int, default=0, help="scene stream seed (default 0)")
    parser.add_argument("--start", type=int, default=0, help="first scene id (default 0)")
    parser.add_argument("--scene", metavar="JSON", help="SceneConfig overrides as JSON text or a .json file, "
                                                         "e.g. '{\"image_size\": 224, \"max_objects\": 4}' "
                                                         "(default: none, the scene defaults)")
    parser.add_argument("--dataset", default="refcoco", help="refer layout: dataset folder name (default refcoco)")
    parser.add_argument("--split-by", default="unc", help="refer layout: refs(<split_by>).p (default unc)")
    parser.add_argument("--force", action="store_true", help="replace synthetic data written here before")


def parse_splits(items: list[str] | None, start: int) -> dict[str, tuple[int, int]]:
    """['train=800', 'test=200'] -> {'train': (start, 800), 'test': (start + 800, 200)}."""
    out, next_id = {}, start
    for item in items or ["test=100"]:
        name, eq, count = item.partition("=")
        if not eq or not name.strip() or not count.strip().isdigit() or int(count) <= 0:
            raise VRHError(f"--split {item!r}: expected NAME=COUNT with a positive count")
        if name in out:
            raise VRHError(f"--split {name!r} given twice")
        out[name.strip()] = (next_id, int(count))
        next_id += int(count)
    return out


def scene_config(raw: str | None):
    if not raw:
        return SynthSpec().scene_config()
    try:
        data = json.loads(Path(raw).read_text() if not raw.lstrip().startswith("{") else raw)
        return SynthSpec(scene=data).scene_config()
    except (OSError, ValueError, TypeError) as exc:
        raise VRHError(f"--scene: {exc}") from None


def run(args: argparse.Namespace) -> int:
    splits = parse_splits(args.split, args.start)
    cfg = scene_config(args.scene)
    check_targets(args.out_dir, args.layout, splits, dataset=args.dataset, split_by=args.split_by, force=args.force)
    if args.layout == "hub":
        paths = write_hub_layout(args.out_dir, splits, seed=args.seed, cfg=cfg)
        for split, path in paths.items():
            print(f"{split}: {path}")
    else:
        data_dir = write_refer_layout(args.out_dir, splits, seed=args.seed, cfg=cfg, dataset=args.dataset,
                                      split_by=args.split_by)
        print(data_dir)
    return 0
