"""Several ranks give the files one process gives: `discover` and a packed `sweep` launched on 2 CPU ranks (gloo)
with torchrun and with `accelerate launch --multi_gpu`, on a tiny Qwen2.5-VL and 5 docs (an uneven shard: lmms-eval
pads rank 1 with a copy of its last request), compared with one process; a rank killed mid-sweep takes the job down
and a rerun finishes it with the uninterrupted files. The launch commands are those of docs/scaling.md."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import offline_env

from vrh_lmms.harness import distributed

PIXELS = 224 * 224
TASK = "vrh_synth_grounding"
DOCS = 5  # does not divide by 2 ranks


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --standalone / a free port: other jobs on the machine may hold torch's default port 29500
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
              str(free_port())]
RANKS_LINE = "vrh-lmms: 2 ranks"


# ------------------------------------------------------------------------------------------------ pure helpers
def test_one_process_order_deinterleaves_rank_after_rank():
    # 5 docs on 2 ranks: rank 0 holds 0, 2, 4 and rank 1 holds 1, 3; gathered rank after rank
    assert distributed.one_process_order(5, 2) == [0, 2, 4, 1, 3]
    assert distributed.one_process_order(7, 3) == [0, 3, 6, 1, 4, 2, 5]
    assert distributed.one_process_order(4, 1) == [0, 1, 2, 3]
    out = SimpleNamespace(logged_samples=[{"doc_id": d} for d in (0, 2, 4, 1, 3)],
                          sample_metrics={("iou", "none"): [0.0, 0.2, 0.4, 0.1, 0.3]},
                          per_sample_metrics={("iou", "none"): [[0.0], [0.2], [0.4], [0.1], [0.3]]})
    distributed.restore_task_output(out, 2)
    assert [s["doc_id"] for s in out.logged_samples] == [0, 1, 2, 3, 4]
    assert out.sample_metrics[("iou", "none")] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert out.per_sample_metrics[("iou", "none")] == [[0.0], [0.1], [0.2], [0.3], [0.4]]


def test_executor_backend_fits_the_launch(monkeypatch):
    spanning = SimpleNamespace(accelerator=SimpleNamespace(num_processes=2))
    one_process = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1))  # accelerate's view on CPU/gloo
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.executor_backend(one_process) == "accelerate"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert distributed.executor_backend(spanning) == "accelerate"
    assert distributed.executor_backend(one_process) == "torchrun"
    assert distributed.executor_backend(SimpleNamespace()) == "torchrun"


def test_errors_name_the_rank(monkeypatch, capsys):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.cli import _guarded

    def fail():
        raise VRHError("bad thing")

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert _guarded(fail) == 2
    assert capsys.readouterr().err.strip() == "vrh-lmms: error: rank 1 of 2: bad thing"
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert _guarded(fail) == 2
    assert capsys.readouterr().err.strip() == "vrh-lmms: error: bad thing"


@pytest.fixture
def rank_group(gloo_group, monkeypatch):
    """This process as a rank of a 2-rank launch, its process group up (gloo, one member: nothing to wait for)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    return gloo_group


# A rank between its collectives and its exit: the group up, what a model load imports, then the CLI's close.
GROUP_PROBE = """
import os, sys
from vrh_lmms.harness import distributed

def gloo_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sorted(n for n in names if "gloo" in n)

distributed.ensure_group()
import torch.distributed.nn.functional  # torch._dynamo imports it when a model loads
distributed.barrier()
print(f"rank {distributed.rank()} gloo threads up: {len(gloo_threads())}", flush=True)
distributed.close_group()
print(f"rank {distributed.rank()} gloo threads left: {gloo_threads()}", flush=True)
"""


@pytest.mark.slow
def test_closing_the_group_stops_gloo_while_the_interpreter_is_whole(tmp_path):
    """`close_group` stops gloo's threads only if nothing else holds the group: torch.distributed.nn.functional,
    imported once the group is up, keeps it in its default arguments, and its threads would stop during the
    interpreter's finalisation, where a rank can abort. `ensure_group` imports that module before the group starts."""
    probe = tmp_path / "probe.py"
    probe.write_text(GROUP_PROBE)
    done = run([*TORCHRUN, str(probe)], offline_env())
    for rank in (0, 1):
        assert re.search(rf"rank {rank} gloo threads up: [1-9]", done.stdout), done.stdout  # the control
        assert f"rank {rank} gloo threads left: []" in done.stdout, done.stdout


def _raises(exc: BaseException):
    def call():
        raise exc

    return call


@pytest.mark.parametrize("outcome", ["done", "refused", "crashed"])
def test_a_rank_tears_its_process_group_down_before_the_interpreter_exits(rank_group, outcome, capsys):
    """Left to the interpreter's exit, gloo's worker threads could drop their last tensors after Python began to
    finalise and abort the rank ("terminate called without an active exception"): a job whose files were all written
    then failed. Every way out of a command closes the group first."""
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.cli import _guarded, main

    if outcome == "done":
        assert _guarded(lambda: 0) == 0
    elif outcome == "refused":  # a one-process command launched as a rank: refused in one line
        assert main(["tasks-path"]) == 2
        assert "runs in one process" in capsys.readouterr().err
    else:
        with pytest.raises(RuntimeError):
            _guarded(_raises(RuntimeError("a bug")))
    assert not rank_group.is_initialized()
    _guarded(_raises(VRHError("bad")))  # nothing left to close: still one line, no error from the teardown
    assert capsys.readouterr().err.strip() == "vrh-lmms: error: rank 1 of 2: bad"


def test_doc_order_patch_is_scoped(monkeypatch):
    from lmms_eval.evaluator_utils import TaskOutput

    original = TaskOutput.calculate_aggregate_metric
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with distributed.doc_order():
        assert TaskOutput.calculate_aggregate_metric is not original
    assert TaskOutput.calculate_aggregate_metric is original
    monkeypatch.setenv("RANK", "1")  # other ranks aggregate nothing
    with distributed.doc_order():
        assert TaskOutput.calculate_aggregate_metric is original


# ------------------------------------------------------------------------------------------- end to end, 2 ranks
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    return root, offline_env(VRH_CACHE_DIR=str(root / "cache"), VRH_SYNTH_CONFIG=json.dumps({"n": DOCS, "seed": 4}),
                             VRH_THREADS="1")


def model_args(tiny) -> str:
    return f"pretrained={tiny},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"


def discover_args(tiny, out: Path) -> list[str]:
    return ["-m", "vrh_lmms", "discover", "--model", "vrh_qwen25", "--model_args", model_args(tiny), "--tasks", TASK,
            "--limit", str(DOCS), "--gen-kwargs", "max_new_tokens=8", "--output", str(out)]


def sweep_args(tiny, heads: Path, out: Path, pack: int) -> list[str]:
    return ["-m", "vrh_lmms", "sweep", "--model", "vrh_qwen25", "--model_args", model_args(tiny), "--tasks", TASK,
            "--heads-file", str(heads), "--k", "1,2", "--random-seeds", "1", "--limit", str(DOCS), "--batch-size",
            "2", "--pack", str(pack), "--gen-kwargs", "max_new_tokens=8", "--output", str(out)]


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def heads_contents(heads: Path) -> dict:
    """What a reader takes from a discovery: the heads file (but when and how it was launched), the per-sample
    statistics, the means, and the evaluation's metrics and sample lines."""
    from safetensors import safe_open

    data = json.loads(heads.read_text())
    for key in ("created", "command"):
        data["scoring"].pop(key)
    stem = heads.with_suffix("")
    with np.load(f"{stem}.samples.npz") as z:
        samples = {k: z[k].tolist() for k in z.files}
    with safe_open(f"{stem}.means.safetensors", "pt") as f:
        means = (f.metadata(), f.get_tensor("means").tolist())
    results = json.loads(Path(f"{stem}.eval/results.json").read_text())
    lines = [json.loads(line) for line in Path(f"{stem}.eval/samples_{TASK}.jsonl").read_text().splitlines()]
    return {"heads": data, "samples": samples, "means": means, "metrics": results["results"],
            "vrh": results["vrh"], "n": results["n-samples"], "lines": lines}


def sweep_contents(out: Path) -> dict[str, tuple]:
    contents = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = [json.loads(line) for line in (folder / f"samples_{TASK}.jsonl").read_text().splitlines()]
        contents[folder.name] = (results["results"], results["vrh"], results["n-samples"], lines)
    return contents


@pytest.fixture(scope="module")
def one_process(tiny_qwen25, env):
    """Discovery and a packed sweep in one process: the reference."""
    root, e = env
    heads = root / "one" / "heads.json"
    run([sys.executable, *discover_args(tiny_qwen25, heads)], e)
    sweep = root / "one_sweep"
    run([sys.executable, *sweep_args(tiny_qwen25, heads, sweep, pack=3)], e)
    return heads, sweep


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_discover_on_two_ranks_equals_one_process(launcher, tiny_qwen25, env, one_process):
    root, e = env
    heads = root / launcher / "heads.json"
    done = run([*(TORCHRUN if launcher == "torchrun" else ACCELERATE), *discover_args(tiny_qwen25, heads)[1:]], e)
    assert RANKS_LINE in done.stderr, "the launcher must start two ranks"
    parts = sorted(p.name for p in heads.with_suffix(".parts").glob("*.npz"))
    assert len(parts) == DOCS  # each doc's part written once, the padded copy of rank 1's last doc replayed
    a, b = heads_contents(one_process[0]), heads_contents(heads)
    assert [line["doc_id"] for line in b["lines"]] == list(range(DOCS))
    for key in a:
        assert a[key] == b[key], key


def _rank_pid(launcher_pid: int, rank: int) -> int | None:
    """The worker of `rank` among the launcher's children (Linux /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


@pytest.mark.slow
def test_packed_sweep_on_two_ranks_survives_a_killed_rank_and_equals_one_process(tiny_qwen25, env, one_process):
    """A packed sweep on 2 ranks under torchrun; rank 1 is killed once a configuration is written: the launcher ends
    the job and names rank 1, no configuration folder looks finished that is not. The same sweep on 2 ranks under
    `accelerate launch` finishes it (so both launchers run a packed sweep), and every configuration (each written by
    a 2-rank run, packed 2 by 2) equals the one-process sweep packed 3 by 3."""
    root, e = env
    out = root / "two_sweep"
    cmd = [*TORCHRUN, *sweep_args(tiny_qwen25, one_process[0], out, pack=2)[1:]]
    proc = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if list((out / "configs").glob("*/results.json")) if (out / "configs").exists() else []:
                break
            time.sleep(0.05)
        victim = _rank_pid(proc.pid, 1)
        assert victim is not None and proc.poll() is None, "the sweep ended before a rank could be killed"
        os.kill(victim, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0 and RANKS_LINE in stderr
    # The launcher names the dead rank as the root cause of the failure.
    assert re.search(r"Root Cause.*?rank\s*:\s*1 \(local_rank: 1\).*?SIGKILL", stderr, re.S), stderr[-2000:]
    folders = [p for p in (out / "configs").iterdir() if not p.name.startswith(".")]
    assert all((p / "results.json").is_file() for p in folders), "a configuration folder looks finished but is not"
    done = {p.name for p in folders}
    assert 1 <= len(done) < 5, f"kill came too late: {sorted(done)}"
    manifest = json.loads((out / "sweep.json").read_text())
    assert {c["id"] for c in manifest["configurations"] if c["status"] == "done"} <= done
    finished = run([*ACCELERATE, *cmd[len(TORCHRUN):]], e)
    assert RANKS_LINE in finished.stderr
    a, b = sweep_contents(one_process[1]), sweep_contents(out)
    assert sorted(a) == sorted(b) == ["baseline", "random1_s0", "random2_s0", "top1", "top2"]
    for cid in a:
        assert a[cid] == b[cid], cid
    assert all(len(v[3]) == DOCS for v in b.values())
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["pack"] == 2 and all(c["status"] == "done" for c in manifest["configurations"])


def test_one_process_commands_refuse_several_ranks(monkeypatch, capsys):
    from vrh_lmms.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(["tasks-path"]) == 2
    assert "`vrh-lmms tasks-path` runs in one process" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main(["tasks-path"]) == 0


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("VRH_TEST_RANKS_ALL") != "1",
                    reason="steer and patch on 2 ranks cost ~1.5 CPU-minutes beyond CI's budget for rank tests; "
                           "VRH_TEST_RANKS_ALL=1 runs them")
def test_steer_and_patch_on_two_ranks_equal_one_process(tiny_qwen25, env, one_process):
    """Steering records are made on each rank for its docs and gathered on rank 0; patching pairs are shared out
    and their parts merged by rank 0: the folders equal one process's (7 docs of scenes with every object named)."""
    root, _ = env
    e = offline_env(VRH_CACHE_DIR=str(root / "cache_all"), VRH_THREADS="1",
                    VRH_SYNTH_CONFIG=json.dumps({"n": 2, "seed": 7, "scene": {"image_size": 168}, "objects": "all"}))
    common = ["--model", "vrh_qwen25", "--model_args", model_args(tiny_qwen25), "--tasks", TASK, "--heads-file",
              str(one_process[0]), "--k", "1", "--limit", "7", "--gen-kwargs", "max_new_tokens=8"]
    steer = ["-m", "vrh_lmms", "steer", *common, "--bias", "6", "--no-random"]
    patch = ["-m", "vrh_lmms", "patch", *common, "--random-seeds", "1", "--pairs", "all", "--answers", "reference",
             "--min-gap", "0", "--max-pairs", "3"]
    for name, cmd in (("steer", steer), ("patch", patch)):
        run([sys.executable, *cmd, "--output", str(root / f"{name}1")], e)
        done = run([*TORCHRUN, *cmd[1:], "--output", str(root / f"{name}2")], e)
        assert RANKS_LINE in done.stderr
    a, b = sweep_contents(root / "steer1"), sweep_contents(root / "steer2")
    assert sorted(a) == sorted(b) == ["baseline", "top1_b6"]
    for cid in a:
        assert a[cid] == b[cid], cid
    assert [line["vrh_steer"]["steerable"] for line in b["top1_b6"][3]].count(True) > 1  # records of both ranks
    assert (root / "steer1" / "report.md").read_text() == (root / "steer2" / "report.md").read_text()
    pa, pb = (json.loads((root / f"patch{i}" / "patch.json").read_text()) for i in (1, 2))
    pa.pop("created"), pb.pop("created")
    assert pa == pb and pb["n_pairs"] == 3
    parts = sorted(p.name for p in (root / "patch2" / "parts").iterdir())
    assert parts == sorted(p.name for p in (root / "patch1" / "parts").iterdir())


def test_part_store_skips_the_temporary_file_of_a_killed_writer(tmp_path):
    """A rank killed while writing a discovery part leaves `.<part>.npz.<random>.npz` (atomic.atomic_file); the
    rerun must neither read it as a part nor fail on it."""
    from vrh_lmms.runs.discovery.store import PartStore, SamplePart

    store = PartStore(tmp_path / "parts")
    store.write(SamplePart("t__test__0", {"out_sum": np.ones((2, 4))}, np.array([1, 2]), {}))
    (tmp_path / "parts" / ".t__test__1.npz.k1ll3d.npz").write_bytes(b"PK\x03\x04 truncated")
    assert store.keys() == ["t__test__0"]
    assert store.cached_answer("t__test__1") is None
