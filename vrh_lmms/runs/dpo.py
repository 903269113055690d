"""Preference pairs for DPO from a sweep: the correct answer (chosen) vs the head-ablated model's wrong answer
(rejected), written as TRL's conversational vision preference format.

Each JSONL row, for a doc the ablated configuration got wrong:

    {"prompt":   [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": <sample input>}]}],
     "chosen":   [{"role": "assistant", "content": [{"type": "text", "text": <correct answer>}]}],
     "rejected": [{"role": "assistant", "content": [{"type": "text", "text": <ablated answer>}]}],
     "images":   ["/abs/path/to/image.jpg"],
     "chosen_source": "baseline" | "ground_truth",
     "meta": {...provenance...}}

`chosen` is the baseline's own answer when the baseline got the doc right, else the ground truth written in the
model's box convention (`vrh_lmms.base.boxes`), checked by reading it back with that convention's parser (VQA: the
target; pointing tasks have no writable ground truth, so only baseline answers are used there).

Images: samples lines never hold image bytes. Plain `lmms-eval --log_samples` files drop the `doc` entirely; sweep
files keep the doc's non-image fields (`doc`), which hold an image path only for datasets that store paths (e.g.
Toloka with a local images folder). Images come from `image_root` + `image_pattern` (e.g. `{image_id}.jpg`: the
user supplies the dataset's image folder), else the line's `input_media` (local paths, or small inline data URIs,
written out beside the JSONL), else a path-valued field of `doc` (`image`, `image_path`, `file_name`, `path`),
else (synthetic tasks) the regenerated scene: those need no image folder, because the sweep records the scene
config it evaluated (`sweep.json`); each scene is regenerated from it, checked against the sample's expression
and box, and written beside the JSONL.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic
from vrh_lmms.base.boxes import get_convention, iou
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.owned import files_matching
from vrh_lmms.base.runfolder.runs import read_run_meta
from vrh_lmms.base.runfolder.samples import read_samples
from vrh_lmms.base.synth.cache import SynthSpec
from vrh_lmms.base.synth.scenes import expression_for, generate_scene, nameable_objects
from vrh_lmms.runs.checks import SYNTH_TASKS

CHOSEN_MODES = ("auto", "baseline", "ground-truth")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
_DOC_PATH_KEYS = ("image", "image_path", "file_name", "path", "img_path")
_DATA_URI = re.compile(r"^data:image/(?P<ext>[a-zA-Z0-9.+-]+);base64,(?P<data>.+)$", re.DOTALL)


@dataclass(frozen=True)
class PairOptions:
    """What to pair and where images come from; `box_params` override the convention's parameters
    (Qwen2.5-VL: `min_pixels`/`max_pixels` must match the run's processor)."""

    config: str
    tasks: tuple[str, ...] = ()
    chosen: str = "auto"
    image_root: Path | None = None
    image_pattern: str = "{image_id}.jpg"
    check_images: bool = True
    skip_missing_images: bool = False
    convention: str | None = None
    box_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PairStats:
    docs: int = 0
    ablated_wrong: int = 0
    written: int = 0
    chosen_baseline: int = 0
    chosen_ground_truth: int = 0
    skipped_not_in_baseline: int = 0
    skipped_baseline_wrong: int = 0
    skipped_no_ground_truth: int = 0
    skipped_no_image: int = 0
    skipped_empty_answer: int = 0
    images_written: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- ground truth in a box convention
def _from_pixels(conv, box: list[float], size: tuple[float, float], params: Mapping[str, Any]) -> list[float]:
    """Invert the convention's pixel mapping, which is affine per axis: probe it at 0 and 1."""
    zero = conv.to_pixels([0.0, 0.0], size, params)
    one = conv.to_pixels([1.0, 1.0], size, params)
    out = []
    for i, v in enumerate(box):
        axis = i % 2
        scale = one[axis] - zero[axis]
        if scale == 0:
            raise VRHError(f"box convention {conv.name!r} cannot be inverted for an image of size {size}")
        out.append((float(v) - zero[axis]) / scale)
    return out


def _ints(values: list[float], upper: int | None = None) -> list[int]:
    out = [round(v) for v in values]
    return out if upper is None else [min(max(v, 0), upper) for v in out]


def _fracs(values: list[float], digits: int) -> list[float]:
    return [round(min(max(v, 0.0), 1.0), digits) for v in values]


def _qwen_json(coords: list[int], expression: str) -> str:
    item = json.dumps({"bbox_2d": coords, "label": expression}, ensure_ascii=False)
    return f"```json\n[\n\t{item}\n]\n```"


def format_ground_truth_box(convention: str, gt_box: list[float], image_size: list[float], expression: str,
                            params: Mapping[str, Any] | None = None) -> str:
    """The ground-truth box (original pixels) written the way a model of `convention` answers."""
    try:
        conv = get_convention(convention)
    except ValueError as exc:
        raise VRHError(str(exc)) from None
    merged = conv.merged_params(params)
    size = (float(image_size[0]), float(image_size[1]))
    raw = _from_pixels(conv, list(gt_box), size, merged)
    expr = expression or "the object"
    name = conv.name
    if name in ("qwen2_5_vl", "qwen3_vl"):
        text = _qwen_json(_ints(raw, None if name == "qwen2_5_vl" else 1000), expr)
    elif name == "glm4v":
        x1, y1, x2, y2 = _ints(raw, 1000)
        text = f"<|begin_of_box|>[{x1},{y1},{x2},{y2}]<|end_of_box|>"
    elif name == "internvl":
        text = f"<ref>{expr}</ref><box>[{_ints(raw, 1000)}]</box>"
    elif name == "deepseek_vl2":
        text = f"<|ref|>{expr}<|/ref|><|det|>[{_ints(raw, 999)}]<|/det|>"
    elif name == "paligemma":
        x1, y1, x2, y2 = _ints(raw, 1023)  # bins: round(value / size * 1023), the inverse of the /1023 decode
        text = f"<loc{y1:04d}><loc{x1:04d}><loc{y2:04d}><loc{x2:04d}> {expr}"
    elif name == "llava_next":
        text = str(_fracs(raw, 3))
    elif conv.space == "auto":
        fractions = [v / size[i % 2] for i, v in enumerate(gt_box)]
        if name == "generic":  # its prompt asks for a 0-1000 grid
            text = str(_ints([f * 1000 for f in fractions], 1000))
        else:  # phi4_multimodal / magma prompts ask for fractions
            text = str(_fracs(fractions, 3))
    else:
        raise VRHError(f"no ground-truth answer format for box convention {name!r}")
    back = conv.read_box(text, size, **merged)
    if back.box is None or iou(back.box, gt_box) < 0.9:
        raise VRHError(f"ground truth written in box convention {name!r} does not read back as the same box "
                       f"({text!r} -> {back.box} vs {list(gt_box)}); check --box-param values")
    return text


def ground_truth_answer(record: dict, where: str, convention: str | None,
                        params: Mapping[str, Any]) -> str | None:
    """The correct answer written as the model would; None where the record holds no writable ground truth
    (pointing tasks score points against a mask that the record does not carry)."""
    if record.get("kind") == "pointing":
        return None
    if record.get("kind") == "vqa":
        target = record.get("target")
        if target is None or str(target) == "":
            raise VRHError(f"{where}: field vrh_record.target is missing")
        return str(target)
    for key in ("gt_box", "image_size"):
        if not isinstance(record.get(key), list) or len(record[key]) < (4 if key == "gt_box" else 2):
            raise VRHError(f"{where}: field vrh_record.{key} is missing or malformed")
    name = convention or record.get("convention")
    if not name:
        raise VRHError(f"{where}: field vrh_record.convention is missing; pass --convention NAME")
    return format_ground_truth_box(name, record["gt_box"], record["image_size"], record.get("expression") or "",
                                   params)


# ----------------------------------------------------------------------------- reading the sweep
def _answer(line: dict) -> str:
    """The scored reply: `filtered_resps` (complete), else `vrh_record.raw` (truncated by the tasks)."""
    resp = line.get("filtered_resps")
    while isinstance(resp, list) and resp:
        resp = resp[0]
    if isinstance(resp, str):
        return resp
    raw = (line.get("vrh_record") or {}).get("raw")
    return raw if isinstance(raw, str) else ""


def _prompt(line: dict) -> str | None:
    """`input` in plain lmms-eval files; sweeps write the evaluator's samples, where the context is arguments[0]."""
    if isinstance(line.get("input"), str):
        return line["input"]
    args = line.get("arguments")
    if isinstance(args, list) and args and isinstance(args[0], str):
        return args[0]
    return None


def _read_lines(path: Path) -> dict[str, dict]:
    table = read_samples(path, keep_lines=True)  # validates vrh_record fields and doc_id uniqueness
    return dict(zip(table.doc_ids, table.raw_lines or [], strict=True))


def _recorded_synth(sweep: Path) -> dict[str, Any] | None:
    """The synthetic scene config a sweep recorded in sweep.json (None: not recorded, or no synthetic task)."""
    manifest = sweep / "sweep.json"
    try:
        synth = json.loads(manifest.read_text()).get("identity", {}).get("synth")
    except (OSError, ValueError):
        return None
    return synth if isinstance(synth, dict) else None


def _config_folder(sweep: Path, config: str) -> Path:
    folder = sweep / "configs" / config
    if not (folder / "results.json").is_file():
        known = sorted(p.parent.name for p in (sweep / "configs").glob("*/results.json"))
        raise VRHError(f"{folder}: no results.json (configuration missing or incomplete); complete configurations: "
                       f"{', '.join(known) or 'none'}")
    return folder


def _model_of(folder: Path) -> str:
    return read_run_meta(folder / "results.json").model


# ----------------------------------------------------------------------------- images
class ImageResolver:
    """Finds the image of a sample: `image_root` / `image_pattern`, else `input_media` paths or data URIs, else a
    path in `doc`, else (synthetic tasks of a sweep that recorded its scenes) the regenerated scene."""

    def __init__(self, options: PairOptions, images_dir: Path, synth: Mapping[str, Any] | None = None) -> None:
        self.options = options
        self.images_dir = images_dir
        self.synth = synth
        self.written = 0

    def _synthetic(self, record: dict, task: str, where: str) -> Path | None:
        """The scene of a synthetic sample, regenerated from the sweep's recorded scene config and checked
        against the sample (same expression, same box) before it is written."""
        if task not in SYNTH_TASKS or self.synth is None or record.get("image_id") in (None, ""):
            return None
        spec = SynthSpec.from_dict(dict(self.synth), "sweep.json synth")
        path = self.images_dir / f"{task}_{int(record['image_id']):08d}.png"
        scene = generate_scene(int(record["image_id"]), spec.seed, spec.scene_config())
        box = record.get("gt_box") or []

        def same(obj) -> bool:
            x, y, w, h = obj.bbox
            return (expression_for(obj) == record.get("expression") and len(box) == 4
                    and max(abs(a - b) for a, b in zip(box, (x, y, x + w, y + h))) < 1e-3)

        # objects="all" scenes have one sample per nameable object of the image, else the referent's only
        named = nameable_objects(scene) if spec.objects == "all" else [scene.target]
        if not any(same(scene.objects[i]) for i in named):
            x, y, w, h = scene.target_object.bbox
            raise VRHError(f"{where}: the scene regenerated from sweep.json's synth config ({scene.expression!r}, "
                           f"box {[x, y, x + w, y + h]}) is not the sample's ({record.get('expression')!r}, box "
                           f"{box}); was VRH_SYNTH_CONFIG changed after the sweep? Pass --image-root instead")
        if not path.is_file():
            self.images_dir.mkdir(parents=True, exist_ok=True)
            scene.image.save(path, format="PNG")
            self.written += 1
        return path.resolve()

    def _write_data_uri(self, uri: str, stem: str) -> Path | None:
        match = _DATA_URI.match(uri)
        if not match:
            return None
        try:
            data = base64.b64decode(match["data"], validate=False)
        except (binascii.Error, ValueError):
            return None
        ext = {"jpeg": "jpg", "svg+xml": "svg"}.get(match["ext"].lower(), match["ext"].lower())
        self.images_dir.mkdir(parents=True, exist_ok=True)
        path = self.images_dir / f"{stem}.{ext}"
        path.write_bytes(data)
        self.written += 1
        return path.resolve()

    def resolve(self, line: dict, task: str, doc_id: str, where: str = "") -> list[str] | None:
        record = line.get("vrh_record") or {}
        image_id = record.get("image_id")
        if self.options.image_root is not None:
            try:
                name = self.options.image_pattern.format(image_id=image_id, doc_id=doc_id, task=task)
            except (KeyError, IndexError) as exc:
                raise VRHError(f"--image-pattern {self.options.image_pattern!r}: unknown field {exc}; use "
                               f"{{image_id}}, {{doc_id}} or {{task}}") from None
            path = (self.options.image_root / name).resolve()
            if self.options.check_images and not path.is_file():
                return None
            return [str(path)]
        media = line.get("input_media") or []
        out = []
        for i, item in enumerate(media if isinstance(media, list) else []):
            if not isinstance(item, str):
                continue
            if item.startswith("data:"):
                safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{task}_{doc_id}_{i}")
                path = self._write_data_uri(item, safe)
                if path is not None:
                    out.append(str(path))
            elif "://" not in item and Path(item).is_file():
                out.append(str(Path(item).resolve()))
        if not out:
            doc = line.get("doc") if isinstance(line.get("doc"), dict) else {}
            for key in _DOC_PATH_KEYS:
                value = doc.get(key)
                if isinstance(value, str) and value.lower().endswith(_IMAGE_SUFFIXES) and Path(value).is_file():
                    out.append(str(Path(value).resolve()))
                    break
        if not out:
            synthetic = self._synthetic(record, task, where or f"{task} doc_id {doc_id}")
            if synthetic is not None:
                out.append(str(synthetic))
        return out or None


# ----------------------------------------------------------------------------- pairs
def _message(role: str, text: str, with_image: bool = False) -> list[dict]:
    content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": text}]
    return [{"role": role, "content": content}]


def build_pairs(sweep_dir: str | Path, options: PairOptions, images_dir: str | Path) -> tuple[list[dict], PairStats]:
    """Rows for every doc the configuration got wrong, with a correct answer to prefer; see the module doc."""
    if options.chosen not in CHOSEN_MODES:
        raise VRHError(f"--chosen must be one of {', '.join(CHOSEN_MODES)}, got {options.chosen!r}")
    sweep = Path(sweep_dir)
    if not (sweep / "configs").is_dir():
        raise VRHError(f"{sweep}: not a sweep folder (no configs/ inside)")
    if options.config == "baseline":
        raise VRHError("--config must be an ablated configuration, not the baseline")
    base_dir = _config_folder(sweep, "baseline")
    abl_dir = _config_folder(sweep, options.config)
    model = _model_of(abl_dir)
    tasks = sorted(p.name[len("samples_"):-len(".jsonl")] for p in abl_dir.glob("samples_*.jsonl"))
    if options.tasks:
        missing = sorted(set(options.tasks) - set(tasks))
        if missing:
            raise VRHError(f"{abl_dir}: no samples for task(s) {', '.join(missing)}; it has {', '.join(tasks)}")
        tasks = list(options.tasks)
    if not tasks:
        raise VRHError(f"{abl_dir}: no samples_<task>.jsonl files")
    resolver = ImageResolver(options, Path(images_dir), synth=_recorded_synth(sweep))
    stats = PairStats()
    rows: list[dict] = []
    first_missing: str | None = None
    for task in tasks:
        base_path = base_dir / f"samples_{task}.jsonl"
        if not base_path.is_file():
            raise VRHError(f"{base_path}: the baseline has no samples for task {task}")
        base = _read_lines(base_path)
        abl_path = abl_dir / f"samples_{task}.jsonl"
        ablated = _read_lines(abl_path)
        for doc_id, line in ablated.items():
            stats.docs += 1
            record = line["vrh_record"]
            if record.get("correct"):
                continue
            stats.ablated_wrong += 1
            where = f"{abl_path} doc_id {doc_id}"
            if doc_id not in base:
                stats.skipped_not_in_baseline += 1
                continue
            base_record = base[doc_id]["vrh_record"]
            use_baseline = bool(base_record.get("correct")) and options.chosen != "ground-truth"
            if not use_baseline and options.chosen == "baseline":
                stats.skipped_baseline_wrong += 1
                continue
            chosen = _answer(base[doc_id]) if use_baseline else ground_truth_answer(
                record, where, options.convention, options.box_params)
            if chosen is None:
                stats.skipped_no_ground_truth += 1
                continue
            rejected = _answer(line)
            if not rejected.strip() or not chosen.strip():
                stats.skipped_empty_answer += 1
                continue
            prompt = _prompt(line)
            if prompt is None:
                raise VRHError(f"{where}: no prompt text (field input, or arguments[0] in sweep samples)")
            images = resolver.resolve(line, task, doc_id, where)
            if images is None:
                if not options.skip_missing_images:
                    first_missing = first_missing or where
                stats.skipped_no_image += 1
                continue
            source = "baseline" if use_baseline else "ground_truth"
            stats.chosen_baseline += use_baseline
            stats.chosen_ground_truth += not use_baseline
            rows.append({
                "prompt": _message("user", prompt, with_image=True),
                "chosen": _message("assistant", chosen),
                "rejected": _message("assistant", rejected),
                "images": images,
                "chosen_source": source,
                "meta": {"model": model, "config": options.config, "task": task, "doc_id": doc_id,
                         "image_id": None if record.get("image_id") is None else str(record["image_id"]),
                         "kind": record.get("kind"), "baseline_status": base_record.get("status"),
                         "ablated_status": record.get("status"), "convention": options.convention
                         or record.get("convention")},
            })
    stats.written = len(rows)
    stats.images_written = resolver.written
    if first_missing is not None:
        raise VRHError(
            f"{first_missing}: no image found ({stats.skipped_no_image} pairs lack one). Samples files carry no "
            f"images; pass --image-root DIR (and --image-pattern, default '{{image_id}}.jpg') pointing at the "
            f"dataset's images, or --skip-missing-images"
        )
    return rows, stats


def is_pairs_file(path: Path) -> bool:
    """A JSONL file whose first row is one of our preference pairs (what --force may replace)."""
    try:
        with open(path, encoding="utf-8") as fh:
            row = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and {"prompt", "chosen", "rejected", "images"} <= set(row)


def is_pair_images(path: Path) -> bool:
    """A folder of image files only, as `ImageResolver` writes beside the JSONL (what --force may replace)."""
    return files_matching(*(f"*{suffix}" for suffix in (*_IMAGE_SUFFIXES, ".svg")))(path)


def images_dir_for(output: str | Path) -> Path:
    """Where images decoded from inline data URIs go: `<output stem>_images/` beside the JSONL."""
    out = Path(output)
    return out.parent / f"{out.stem}_images"


def write_pairs(rows: list[dict], output: str | Path) -> Path:
    """Write the JSONL atomically (temporary file, then rename)."""
    return atomic.write_text(output, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
