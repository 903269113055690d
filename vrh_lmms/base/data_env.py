"""The environment variables that choose a task's data (synthetic scene and needle configs, local dataset folders):
part of a run's identity, so a resumed or --force'd run never reuses answers made on other data."""

from __future__ import annotations

import os

DATA_VARIABLES = ("VRH_SYNTH_CONFIG", "VRH_NEEDLE_CONFIG", "VRH_REFCOCO_ROOT", "VRH_REFCOCO_DATA", "VRH_TOLOKA_IMAGES",
                  "VRH_SPATIALRGPT_IMAGES", "VRH_VAW_IMAGES", "VRH_VAW_ROOT", "VRH_VAW_MC", "VRH_VAW_MODE",
                  "VRH_MMNIAH_DIR", "VRH_MMNIAH_SPLIT", "VRH_MMNIAH_IMAGES", "VRH_MMNIAH_LIMIT", "VRH_MMNIAH_DOCS",
                  "VRH_MMNIAH_MAX_CONTEXT", "VRH_VHS_DIR", "VRH_VHS_IMAGES", "VRH_VHS_SUBSET", "VRH_VHS_SIZE",
                  "VRH_VHS_SEED", "VRH_VHS_LIMIT", "VRH_HAYSTACK_CONFIG",
                  "VRH_CLIP_CONFIG", "VRH_AUDIO_CONFIG", "VRH_FACT_CONFIG")


def data_env(skip: tuple[str, ...] = ()) -> dict[str, str]:
    """The data-choosing variables set in this process (those in `skip` left out), by name."""
    return {k: os.environ[k] for k in DATA_VARIABLES if k in os.environ and k not in skip}
