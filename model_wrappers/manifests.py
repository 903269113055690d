"""Entry point payload for lmms-eval's `lmms_eval.models` group: one ModelManifest per `vrh_*` model name."""

from __future__ import annotations

from lmms_eval.models.registry_v2 import ModelManifest

_PKG = "vrh_lmms.model_wrappers"

# model id -> (module, simple class, chat class or None)
WRAPPERS: dict[str, tuple[str, str, str | None]] = {
    "vrh_qwen25": ("qwen2_5_vl", "VRHQwen25", "VRHQwen25Chat"),
}


def manifests() -> list[ModelManifest]:
    out = []
    for model_id, (module, simple_cls, chat_cls) in WRAPPERS.items():
        out.append(
            ModelManifest(
                model_id=model_id,
                simple_class_path=f"{_PKG}.{module}.{simple_cls}",
                chat_class_path=f"{_PKG}.{module}.{chat_cls}" if chat_cls else None,
            )
        )
    return out
