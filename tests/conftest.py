"""Shared fixtures: tiny real-class checkpoints built once per session, offline environment for subprocesses."""

from __future__ import annotations

import os
import tempfile

import pytest

# Nothing in the suite may reach the hub or the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `vrh-lmms discover` registers its heads files (vrh_lmms.base.heads.registry): never in the user's own registry.
os.environ["VRH_HEADS_REGISTRY"] = os.path.join(tempfile.mkdtemp(prefix="vrh-test-registry-"), "registry.json")


@pytest.fixture
def gloo_group(tmp_path):
    """A one-member gloo process group in this process (torch.distributed, yielded), closed afterwards unless the test
    closed it itself."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield dist
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.fixture(scope="session")
def tiny_qwen25(tmp_path_factory):
    """A tiny random-weight Qwen2.5-VL checkpoint directory (built once per session)."""
    from vrh_lmms.model.tiny.qwen2_5_vl import build

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
    from vrh_lmms.model.tiny.registry import build_tiny

    cache: dict[str, object] = {}

    def get(family: str):
        if family not in cache:
            cache[family] = build_tiny(family, tmp_path_factory.mktemp(f"tiny_{family}"), seed=0)
        return cache[family]

    return get


@pytest.fixture(scope="session")
def tiny_or_skip(tiny_checkpoints):
    """Like `tiny_checkpoints`, but skips the test (naming the family) while its tiny factory is not registered."""

    def get(family: str):
        from vrh_lmms.model.tiny.registry import TINY_FACTORIES

        if family not in TINY_FACTORIES:
            pytest.skip(f"no tiny {family} factory registered in vrh_lmms.model.tiny.registry yet")
        return tiny_checkpoints(family)

    return get


# ---------------------------------------------------------------------------------------------- vrh tasks / boxes
@pytest.fixture
def vrh_env(monkeypatch, tmp_path):
    """No VRH_* settings leak in or out: every VRH_ variable unset, the synth cache in tmp, no active convention."""
    from vrh_lmms.base.boxes import context

    for key in list(os.environ):
        if key.startswith("VRH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "vrh_cache"))
    monkeypatch.setenv("VRH_HEADS_REGISTRY", str(tmp_path / "heads-registry.json"))
    context.clear_active()
    yield monkeypatch
    context.clear_active()


@pytest.fixture
def placeholder():
    """What lmms-eval hands a vrh task's process_docs: the one-row source spec (default: auto)."""
    import datasets

    def make(**spec):
        return datasets.Dataset.from_list([{"vrh_source": "auto", **spec}])

    return make
