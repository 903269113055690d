"""A sweep run one configuration at a time and then packed, on one loaded model, for the packing tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path


def sweep_answers(out: Path, task: str) -> dict:
    """configuration -> (its results, the heads it ablated, each sample's filtered answers)."""
    found = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = [json.loads(line)["filtered_resps"]
                 for line in (folder / f"samples_{task}.jsonl").read_text().splitlines()]
        found[folder.name] = (results["results"], results["vrh"]["ablation"]["heads"], lines)
    return found


def unpacked_and_packed(lm, model: str, model_args: str, task: str, heads: Path, configs, out: Path, *, limit: int,
                        max_new_tokens: int, pack: int = 3) -> tuple[dict, dict, int]:
    """The sweep's answers with --pack 1 and with --pack `pack`, and how many packed generate calls the second made."""
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    def answers(n: int) -> dict:
        folder = out / f"pack{n}"
        run_sweep(SweepSpec(model, model_args, [task], str(heads), configs, limit=limit, batch_size=1,
                            gen_kwargs=f"max_new_tokens={max_new_tokens}", pack=n), folder, lm=lm, progress=False)
        return sweep_answers(folder, task)

    one = answers(1)
    with counting_packs(lm) as calls:
        packed = answers(pack)
    return one, packed, calls["packs"]


@contextlib.contextmanager
def counting_packs(lm) -> Iterator[dict]:
    """While active, each packed generate the backend starts (`lm.vrh_pack`) counts in the yielded dict's "packs"."""
    calls = {"packs": 0}
    original_pack = lm.vrh_pack

    def counting_pack(*args, **kwargs):
        calls["packs"] += 1
        return original_pack(*args, **kwargs)

    lm.vrh_pack = counting_pack
    try:
        yield calls
    finally:
        del lm.vrh_pack
