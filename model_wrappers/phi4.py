"""`vrh_phi4`: lmms-eval's phi4_multimodal backend (simple and chat) with head ablation.

lmms-eval's backend module imports librosa at import time, and librosa is an optional extra here
(`pip install 'vrh-lmms[phi4]'`). When it is missing, this module still imports and `vrh_phi4` fails on use with one
line naming the missing package, instead of lmms-eval's import traceback.

Phi-4-multimodal's remote code wraps the decoder's o_proj in PEFT LoRA layers (vision and speech adapters), which
are not plain nn.Linear: ablation then uses the pre-hook on o_proj's input (method `auto` picks it), which zeroes
a head for the base weight and both adapters alike.
"""

from __future__ import annotations

from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin, unavailable_backend, user_errors_exit

try:
    from lmms_eval.models.chat.phi4_multimodal import Phi4 as _Chat
    from lmms_eval.models.simple.phi4_multimodal import Phi4 as _Simple

    MISSING: str | None = None
except ModuleNotFoundError as exc:  # librosa (or another optional audio package) is not installed
    MISSING = exc.name or str(exc)

    _Simple = _Chat = unavailable_backend(lambda: missing_error())


def missing_error() -> VRHError:
    return VRHError(f"vrh_phi4 needs the Python package {MISSING!r}, which lmms-eval's phi4_multimodal backend "
                    f"imports; install it with: pip install 'vrh-lmms[phi4]' (or: pip install {MISSING})")


class _Phi4Guard:
    """Fail first, with the missing package named, before the mixin touches the backend."""

    @user_errors_exit
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if MISSING is not None:
            raise missing_error()
        super().__init__(*args, **kwargs)


class VRHPhi4(_Phi4Guard, VRHMixin, _Simple):
    vrh_family = "phi4_multimodal"


class VRHPhi4Chat(_Phi4Guard, VRHMixin, _Chat):
    vrh_family = "phi4_multimodal"
    is_simple = False
