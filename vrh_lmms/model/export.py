"""Write a checkpoint with heads folded out of o_proj: any engine (vLLM, SGLang, plain transformers) then runs the
ablated model without vrh-lmms.

Only the zeroed o_proj columns differ from the source checkpoint. Processor, tokenizer, chat template and remote
code files are copied unchanged, and `vrh_masked.json` records which heads were removed and how (the `vrh` block
of docs/contracts.md, plus the source). The output is written to a temporary sibling folder and moved into place
at the end, so an interrupted export leaves no half-written checkpoint.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from torch import nn

from vrh_lmms import __version__
from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import Family, family_for_config
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.spec import HeadSet, resolve_spec
from vrh_lmms.model.ablation import Ablator, load_means, means_path_for
from vrh_lmms.model.backbone import Decoder, locate_decoder

MASKED_FILE = "vrh_masked.json"
SCHEMA = "vrh-masked/1"
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.msgpack", "*.h5", "*.gguf", "*.ckpt",
                   "*.safetensors.index.json", "*.bin.index.json")
# written by save_pretrained from the loaded model; never copied over from the source
MODEL_FILES = ("config.json", "generation_config.json")


@dataclass
class ExportResult:
    output: Path
    record: dict[str, Any]


def _dtype(name: str | None) -> torch.dtype | str:
    table = {None: "auto", "auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}
    if name not in table:
        raise VRHError(f"--dtype {name!r}: use one of auto, float32, bfloat16, float16")
    return table[name]


def load_config(pretrained: str, trust_remote_code: bool):
    # deferred: keeps `vrh-lmms export-masked --help` free of transformers
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError) as exc:
        hint = "" if trust_remote_code else " (a remote-code model needs --trust-remote-code)"
        raise VRHError(f"cannot read the config of {pretrained}: {str(exc).splitlines()[0]}{hint}") from None
    except OSError as exc:
        raise VRHError(f"cannot read the config of {pretrained}: {str(exc).splitlines()[0]}") from None


def load_model(pretrained: str, family: Family, trust_remote_code: bool, dtype: torch.dtype | str) -> nn.Module:
    """The checkpoint in its stored dtype (default), with the class its config maps to."""
    # deferred: keeps `vrh-lmms export-masked --help` free of transformers
    import transformers

    if family.remote_code and not trust_remote_code and family.hf_class is None:
        raise VRHError(f"{pretrained} is a {family.name} checkpoint, which runs remote code: pass "
                       f"--trust-remote-code to load it")
    classes = [transformers.AutoModelForImageTextToText, transformers.AutoModelForCausalLM, transformers.AutoModel]
    if family.hf_class and hasattr(transformers, family.hf_class):
        classes.append(getattr(transformers, family.hf_class))
    errors = []
    for cls in classes:
        try:
            return cls.from_pretrained(pretrained, dtype=dtype, trust_remote_code=trust_remote_code).eval()
        except ValueError as exc:  # "Unrecognized configuration class ... for this kind of AutoModel"
            errors.append(f"{cls.__name__}: {str(exc).splitlines()[0]}")
    raise VRHError(f"cannot load {pretrained} as a {family.name} model; tried " + "; ".join(errors))


def source_files_dir(pretrained: str) -> Path:
    """Folder holding the checkpoint's non-weight files (a local folder, or the hub snapshot without weights)."""
    path = Path(pretrained)
    if path.is_dir():
        return path
    try:
        return Path(snapshot_download(pretrained, ignore_patterns=list(WEIGHT_PATTERNS)))
    except (OSError, ValueError) as exc:  # offline without a cached snapshot, unknown repo (HTTP errors are OSErrors)
        raise VRHError(f"cannot fetch the processor and tokenizer files of {pretrained}: {exc}") from None


def copy_side_files(src: Path, dst: Path) -> list[str]:
    """Copy everything but weights and the files save_pretrained writes (processor, tokenizer, code, README)."""
    copied = []
    for item in sorted(src.rglob("*")):
        rel = item.relative_to(src)
        if item.is_dir() or rel.parts[0].startswith("."):
            continue
        if any(fnmatch.fnmatch(item.name, p) for p in WEIGHT_PATTERNS) or str(rel) in MODEL_FILES:
            continue
        target = dst / rel
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(item, target)
        copied.append(str(rel))
    return copied


def masked_record(family: Family, pretrained: str, decoder: Decoder, headset: HeadSet, mode: str) -> dict[str, Any]:
    """The `vrh` block of docs/contracts.md for this export (the same fields a vrh_* model run records)."""
    return {
        "schema": 1,
        "family": family.name,
        "pretrained": pretrained,
        "geometry": decoder.geometry.to_dict(),
        "ablation": {"spec": headset.spec, "heads": headset.names, "mode": mode, "seed": headset.seed,
                     "method": "fold", "heads_file": headset.heads_file},
        "config": {"id": headset.spec, "kind": headset.kind, "k": headset.k, "seed": headset.seed},
    }


def check_output(output: Path, pretrained: str, force: bool) -> None:
    owned.check_checkpoint_output(output, pretrained, output_layout(output), force=force, what="an exported checkpoint")


def output_layout(output: Path) -> owned.Layout:
    """What an earlier export wrote into `output`: its file listing (exports made before listings: the files that
    its vrh_masked.json names, and the model files save_pretrained writes)."""
    meta = output / MASKED_FILE
    extra: list[str] = []
    if owned.listed_files(output) is None and owned.json_with("copied_files", schema_prefix="vrh-masked/")(meta):
        copied = json.loads(meta.read_text())["copied_files"]
        written = [p.name for p in output.iterdir() if p.is_file() and (p.name in MODEL_FILES or any(
            fnmatch.fnmatch(p.name, pat) for pat in WEIGHT_PATTERNS))]
        extra = [MASKED_FILE, *copied, *written]
    return owned.listing_layout(output, extra)


def export_masked(pretrained: str, heads: str, output: str | Path, *, heads_file: str | None = None,
                  seed: int = 0, ablation: str = "zero", means_file: str | None = None,
                  allow_cross_model: bool = False, heads_cell: str | None = None, trust_remote_code: bool = False,
                  dtype: str | None = None, force: bool = False) -> ExportResult:
    """Load, fold the heads into o_proj, save weights + side files + vrh_masked.json into `output`."""
    output = Path(output)
    check_output(output, pretrained, force)
    if ablation not in ("zero", "mean"):
        raise VRHError(f"--ablation {ablation!r}: use zero or mean")
    config = load_config(pretrained, trust_remote_code)
    family = family_for_config(config)
    model = load_model(pretrained, family, trust_remote_code, _dtype(dtype))
    decoder = locate_decoder(model, family)
    hf = load_heads_file(heads_file) if heads_file else None
    headset = resolve_spec(heads, decoder.geometry, heads_file=hf, seed=seed, allow_cross_model=allow_cross_model,
                           cell=heads_cell)
    if not headset.heads:
        raise VRHError(f"head spec {heads!r} selects no heads: there is nothing to fold out")
    means = None
    if ablation == "mean":
        if any(getattr(decoder.out_projs[layer], "bias", None) is None for layer in {h.layer for h in headset.heads}):
            raise VRHError("mean ablation folds into an o_proj bias, which this architecture's o_proj does not have "
                           "(a saved bias would be dropped on loading); export --ablation zero, or run mean "
                           "ablation in memory with the model arg ablation=mean")
        path = means_file or (str(means_path_for(heads_file)) if heads_file else None)
        if path is None:
            raise VRHError("--ablation mean needs --means-file (written by `vrh-lmms discover` beside the heads file)")
        means = load_means(path)
    ablator = Ablator(model, decoder, method="fold")
    ablator.apply(headset, mode=ablation, means=means)
    record = masked_record(family, pretrained, decoder, headset, ablation)

    staging = atomic.staging_dir(output)
    try:
        model.save_pretrained(staging, safe_serialization=True)
        copied = copy_side_files(source_files_dir(pretrained), staging)
        meta = {"schema": SCHEMA, "vrh": record, "source": pretrained, "copied_files": copied,
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "version": __version__, "command": " ".join(sys.argv)}
        (staging / MASKED_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        # replaces only what an earlier export wrote; anything else was refused before loading
        owned.publish_checkpoint(staging, output, output_layout(output), force=force, what="an exported checkpoint")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        ablator.restore()
    return ExportResult(output, record)
