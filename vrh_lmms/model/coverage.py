"""What vrh-lmms can do with each image-text-to-text model type of the installed transformers, read from the code.

For every type `AutoModelForImageTextToText` maps (transformers' MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES), the
real class is instantiated on the meta device (no weights) twice: from transformers' default config, and from the
tiny config the coverage test builds (vrh_lmms.model.tiny.generic). Heads can be ablated when `survey` finds a
decoder whose heads can be cut in both; a type whose default or tiny config does not build is refused as untested,
with the error. The other columns come from the same code the commands run: packing from
`vrh_lmms.model.packing.packing_unsupported`, capture / steering / the KV policy from whether the class runs its
attention through transformers' attention interface (what they register a function in), discovery from a family
record with an image-token layout (vrh_lmms.base.families). tests/integration/test_hf_coverage.py checks every
claimed type's ablation exact on its tiny model, and capture's attention function on it.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from dataclasses import dataclass

from vrh_lmms.base.families import FAMILIES

YES = "yes"

# What the static checks cannot see, measured on the tiny models by tests/integration/test_hf_coverage.py:
# model type -> (column, why it is refused there)
MEASURED = {
    "idefics": ("ablation", "untested: its forward needs images (pixel_values or image embeddings) on every call, so "
                            "the text-only check cannot drive it"),
    "step3p7": ("ablation", "untested: its default config leaves sliding_window unset, which its attention "
                            "requires"),
    "ernie4_5_vl_moe": ("ablation", "untested: its tiny model fails a text-only forward in its rotary embedding "
                                    "(RuntimeError: stack expects each tensor to be equal size)"),
    "kosmos-2": ("capture", "the attention switch capture and steering install does not reach its text attention "
                            "(measured on its tiny model)"),
}


@dataclass(frozen=True)
class Row:
    """One model type: what works (YES) or why not, per column."""

    model_type: str
    class_name: str
    ablation: str
    packing: str
    capture: str  # capture, steering and the KV policy share the attention-interface requirement
    discovery: str
    geometry: str = ""

    @property
    def ablates(self) -> bool:
        return self.ablation == YES


def image_text_types() -> dict[str, str]:
    """model_type -> class name, for every type the installed transformers maps to AutoModelForImageTextToText."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return dict(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:140]}"


@contextlib.contextmanager
def _quiet():
    """transformers logs and warns about defaults while building 100 configs; none of it is the user's concern."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def discovery_family(model_type: str) -> str | None:
    """The registered family with an image-token layout that claims `model_type` (discovery needs its layout)."""
    fam = next((f for f in FAMILIES.values() if model_type in f.model_types and f.layout), None)
    return fam.name if fam else None


def row_for(model_type: str, class_name: str) -> Row:
    """The coverage row of one model type (see the module docstring)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from vrh_lmms.model.generic import meta_model, survey
    from vrh_lmms.model.packing import packing_unsupported
    from vrh_lmms.model.tiny.generic import check_size, tiny_config

    fam = discovery_family(model_type)
    discovery = f"{YES} ({fam})" if fam else "no image-token layout record for this type"

    def refused(why: str) -> Row:
        return Row(model_type, class_name, why, "-", "-", discovery)

    try:
        with _quiet():
            model = meta_model(CONFIG_MAPPING[model_type]())
    except Exception as exc:  # noqa: BLE001 - any failure of transformers' own default config is the reason
        return refused(f"untested: transformers' default config does not build ({_first_line(exc)})")
    found = survey(model)
    if not found.ok:
        return refused(found.refusal)
    try:
        with _quiet():
            shrunk = meta_model(tiny_config(model_type))
            check_size(shrunk, model_type)
            tiny = survey(shrunk)
    except Exception as exc:  # noqa: BLE001
        return refused(f"untested: no tiny config could be shrunk from its default ({_first_line(exc)})")
    if not tiny.ok:
        return refused(f"untested: its tiny config does not keep the decoder ({tiny.refusal})")
    why_not_packed = packing_unsupported(model)
    interface = bool(getattr(type(model), "_supports_attention_backend", False))
    g = found.geometry
    column, why = MEASURED.get(model_type, ("", ""))
    if column == "ablation":
        return refused(why)
    if column == "capture":
        interface = False
    return Row(model_type, class_name, YES, YES if why_not_packed is None else why_not_packed,
               YES if interface else why or "its attention does not run through transformers' attention interface",
               discovery, f"{g.layers}x{g.heads} (kv {g.kv_heads}, d {g.head_dim})")


def coverage() -> list[Row]:
    """Every image-text-to-text model type of the installed transformers, in its mapping's order."""
    return [row_for(t, c) for t, c in image_text_types().items()]


def markdown(rows: list[Row], transformers_version: str) -> str:
    """docs/models.md: the verdict first, then the table (vrh_lmms.cli.commands.models writes it)."""
    ok = [r for r in rows if r.ablates]
    lines = [
        "# Models vrh-lmms runs",
        "",
        "<!-- generated by `vrh-lmms models --markdown`; tests/integration/test_hf_coverage.py checks it -->",
        "",
        f"Of the {len(rows)} image-text-to-text model types of transformers {transformers_version}, heads can be "
        f"ablated in **{len(ok)}**: each is checked exact on a tiny random checkpoint of its real class against an "
        "independent reference (tests/integration/test_hf_coverage.py). Load any checkpoint of these types with "
        "`lmms-eval --model vrh_hf --model_args pretrained=<hub id or folder>,heads=...` or "
        "`vrh.load(\"<hub id or folder>\")`; every other type is refused in one line naming why, before any weight "
        "loads.",
        "",
        "Columns: **ablation** (`heads=` specs and files, zero / mean ablation, sweeps); **packing** (a sweep's "
        "configurations served from one generate call, with the shared prefill); **capture** (attention capture, "
        "steering, patching's attention edits and the KV policy, which run through transformers' attention "
        "interface); **discovery** (needs the family's image-token layout; families are added in "
        "vrh_lmms/base/families.py). Geometry: layers x heads of the default config's decoder.",
        "",
        "| model type | class | ablation | packing | capture | discovery | geometry |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.model_type, r.class_name, r.ablation, r.packing, r.capture, r.discovery, r.geometry]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    refused = [r for r in rows if not r.ablates]
    groups: dict[str, list[str]] = {}
    for r in refused:
        key = re.sub(r"\d+", "N", r.ablation.split("(")[0].split(";")[0]).strip().rstrip(":")
        groups.setdefault(key, []).append(r.model_type)
    lines += ["", f"## Refused ({len(refused)})", ""]
    lines += [f"- {why}: {', '.join(types)}" for why, types in sorted(groups.items())]
    return "\n".join(lines) + "\n"
