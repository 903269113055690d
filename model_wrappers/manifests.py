"""Entry point payload for lmms-eval's `lmms_eval.models` group: one ModelManifest per `vrh_*` model name.

Only class paths live here, so loading the manifests imports no backend (and no optional dependency such as
librosa); lmms-eval imports a wrapper module only when its model is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lmms_eval.models.registry_v2 import ModelManifest

_PKG = "vrh_lmms.model_wrappers"

# model id -> (module, simple class or None, chat class or None). lmms-eval prefers the chat class unless
# --force_simple is given.
WRAPPERS: dict[str, tuple[str, str | None, str | None]] = {
    "vrh_qwen25": ("qwen2_5_vl", "VRHQwen25", "VRHQwen25Chat"),
    "vrh_qwen3": ("qwen3_vl", "VRHQwen3", "VRHQwen3Chat"),
    "vrh_internvl": ("internvl_hf", None, "VRHInternVLChat"),
    "vrh_internvl3": ("internvl_remote", "VRHInternVL3", None),
    "vrh_internvl3_5": ("internvl_remote", "VRHInternVL3_5", None),
    "vrh_internvl2": ("internvl_remote", "VRHInternVL2", None),
    "vrh_llava_next": ("llava_next", "VRHLlavaNext", "VRHLlavaNextChat"),
    "vrh_glm4v": ("glm4v", "VRHGLM4V", None),
    "vrh_phi4": ("phi4", "VRHPhi4", "VRHPhi4Chat"),
    "vrh_paligemma": ("paligemma", "VRHPaliGemma", None),
    "vrh_magma": ("magma", "VRHMagma", None),
    "vrh_deepseek_vl2": ("deepseek_vl2", "VRHDeepseekVL2", None),
}


def manifests() -> list[ModelManifest]:
    # Imported here, not at module level: lmms_eval.models' own import loads this entry point, and a module-level
    # import from the same package would make `import vrh_lmms.model_wrappers.manifests` circular.
    from lmms_eval.models.registry_v2 import ModelManifest

    out = []
    for model_id, (module, simple_cls, chat_cls) in WRAPPERS.items():
        out.append(
            ModelManifest(
                model_id=model_id,
                simple_class_path=f"{_PKG}.{module}.{simple_cls}" if simple_cls else None,
                chat_class_path=f"{_PKG}.{module}.{chat_cls}" if chat_cls else None,
            )
        )
    return out
