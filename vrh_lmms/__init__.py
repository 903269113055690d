"""vrh-lmms: find the Visual Retrieval Heads of vision-language models and test what they do (lmms-eval plugin)."""
import importlib
import warnings

__version__ = "0.1.0"

# huggingface_hub and datasets import tqdm.auto, which in a notebook without ipywidgets warns "IProgress not found"
# once; our calls draw tqdm's text bar there (vrh_lmms.base.console), so the warning only alarms a reader.
warnings.filterwarnings("ignore", message="IProgress not found")

# The Python API (vrh_lmms.api, docs/api.md), imported on first use so that `import vrh_lmms` stays light. The root
# only forwards the names (by module name: modules that read __version__ import the root, not the API).
API = ("load", "discover", "ablate", "evaluate")


def __getattr__(name: str):
    if name in API:
        return getattr(importlib.import_module("vrh_lmms.api"), name)
    raise AttributeError(f"module 'vrh_lmms' has no attribute {name!r}")
