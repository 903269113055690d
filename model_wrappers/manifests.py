"""Entry point payload for lmms-eval's `lmms_eval.models` group: one ModelManifest per `vrh_*` model name (each
family's `Wrapper`s in vrh_lmms.base.families).

Only class paths live here, so loading the manifests imports no backend (and no optional dependency such as
librosa); lmms-eval imports a wrapper module only when its model is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vrh_lmms.base.families import FAMILIES
from vrh_lmms.base.tables import DerivedTable

if TYPE_CHECKING:
    from lmms_eval.models.registry_v2 import ModelManifest


def _wrappers() -> dict[str, tuple[str, str | None, str | None]]:
    return {w.model_id: (w.module, w.simple, w.chat) for fam in FAMILIES.values() for w in fam.wrappers}


# model id -> (module, simple class or None, chat class or None), derived from the family registry
# (vrh_lmms.base.families: each Family lists its `Wrapper`s). lmms-eval prefers the chat class unless --force_simple.
# `module` is a module under vrh_lmms.model_wrappers, or a full dotted path.
WRAPPERS = DerivedTable(_wrappers, "vrh model")


def manifests() -> list[ModelManifest]:
    # deferred: import cycle: lmms_eval.models' own import loads this entry point, and a module-level import from the
    # same package would make `import vrh_lmms.model_wrappers.manifests` circular.
    from lmms_eval.models.registry_v2 import ModelManifest

    out = []
    for fam in FAMILIES.values():
        for w in fam.wrappers:
            out.append(
                ModelManifest(
                    model_id=w.model_id,
                    simple_class_path=f"{w.module_path}.{w.simple}" if w.simple else None,
                    chat_class_path=f"{w.module_path}.{w.chat}" if w.chat else None,
                )
            )
    return out
