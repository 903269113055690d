"""The demo trainer's resume state loads with torch.load(weights_only=True): real states (and the older layout with
`lasso_start`) load, a file whose unpickling would run a command is refused in one line and the command never runs."""

from __future__ import annotations

import os

import pytest
import torch

from research.demo_model import run_state
from vrh_lmms.base.errors import VRHError


def _state() -> run_state.RunState:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return run_state.RunState(
        phase="joint", step=4, model=model.state_dict(), optimizer=opt.state_dict(),
        drop_generator=torch.Generator().manual_seed(3).get_state(), seconds=1.5,
        history=[{"phase": "joint", "step": 4, "loss": 0.25, "pruned_heads": ["L1H0"]}],
        hooks=[{"lasso_start": 0.5}], prune={"importance": torch.rand(2, 4), "alive": torch.ones(2, 4, dtype=bool)})


def test_saved_state_loads_with_weights_only(tmp_path):
    state = _state()
    run_state.save_state(tmp_path, state)
    torch.load(run_state.resume_path(tmp_path), weights_only=True)  # plain data, no allow-list needed
    back = run_state.load_state(tmp_path)
    assert back.optimizer["param_groups"][0]["betas"] == (0.9, 0.95)
    assert torch.equal(back.model["weight"], state.model["weight"]) and back.history == state.history
    assert torch.equal(back.drop_generator, state.drop_generator) and back.hooks == [{"lasso_start": 0.5}]


def test_older_state_with_lasso_start_loads(tmp_path):
    data = dict(_state().__dict__)
    data.pop("hooks")
    data["lasso_start"] = 0.75
    torch.save(data, run_state.resume_path(tmp_path))
    assert run_state.load_state(tmp_path).hooks == [{"lasso_start": 0.75}]


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_state_that_runs_code_is_refused_in_one_line(tmp_path):
    marker = tmp_path / "ran"
    data = dict(_state().__dict__, history=[_Payload(marker)])
    torch.save(data, run_state.resume_path(tmp_path))
    with pytest.raises(VRHError) as err:
        run_state.load_state(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and str(run_state.resume_path(tmp_path)) in msg and "system" in msg
    assert "without --resume" in msg
    assert not marker.exists()
