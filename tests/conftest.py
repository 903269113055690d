"""Shared fixtures: tiny real-class checkpoints built once per session, offline environment for subprocesses."""

from __future__ import annotations

import os

import pytest

# Nothing in the suite may reach the hub or the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_qwen25(tmp_path_factory):
    """A tiny random-weight Qwen2.5-VL checkpoint directory (built once per session)."""
    from vrh_lmms.tiny.qwen2_5_vl import build

    return build(tmp_path_factory.mktemp("tiny_qwen25"), seed=0)


def offline_env(**extra: str) -> dict[str, str]:
    """Environment for lmms-eval subprocesses: offline, single-threaded, quiet."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Factory: family name -> tiny checkpoint dir, each built once per session."""
    from vrh_lmms.tiny.registry import build_tiny

    cache: dict[str, object] = {}

    def get(family: str):
        if family not in cache:
            cache[family] = build_tiny(family, tmp_path_factory.mktemp(f"tiny_{family}"), seed=0)
        return cache[family]

    return get
