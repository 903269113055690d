"""What `vrh-lmms replicate` runs: the paper's protocol as one spec (vrh_lmms/pipelines/replicate/run.py runs it).

The paper (arXiv 2608.27417, paper-protocol.md): heads found on 200 detection samples of a grounding set
(Q_out, sum, mean), then masked on the disjoint rest at k in {0, 1, 3, 5, 10, 20} beside random heads drawn
outside the detected set, and at k = 20 on the VQA sets; transfer between models sharing a backbone; sample
efficiency; the score distribution; attention maps. `demo_spec` fills the same protocol for the shipped demo model
on its synthetic scenes (detection and evaluation scenes disjoint by scene id).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.stages import DISCOVERY_START, EVAL_START, TASK, demo_model_args, synth_config
from vrh_lmms.runs.sweep.control_docs import check_control_docs

PAPER_KS = (1, 3, 5, 10, 20)  # Table A1's grid without k = 0, which is the baseline every sweep has
PAPER_VQA_K = 20
PAPER_N_DETECT = 200
DEMO_N_EVAL = 200


@dataclass
class ReplicateSpec:
    model: str
    model_args: str
    detection_task: str
    grounding_tasks: list[str]
    vqa_tasks: list[str] = field(default_factory=list)
    ks: list[int] = field(default_factory=lambda: list(PAPER_KS))
    vqa_k: int = PAPER_VQA_K
    random_seeds: int = 10
    n_detect: int = PAPER_N_DETECT
    limit: int | None = None  # evaluation docs per task (the paper's extra models: 500); None = all
    partner_model_args: str | None = None  # a second model on the same backbone (transfer, Fig 7)
    batch_size: int = 1
    gen_kwargs: str | None = None
    map_docs: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    # scoring cells whose top-k the grounding sweep also masks (Figs 2/3/8b, Table A8; vrh_lmms.runs.protocol); None:
    # none
    compare_cells: str | None = "paper"
    # synthetic scenes (the demo): VRH_SYNTH_CONFIG for the detection and for the evaluation docs; None: real tasks,
    # whose evaluation leaves out the detection docs (sweep's exclude-discovery-docs)
    scenes: dict[str, str] | None = None
    # the sweeps' control draws on a seeded image subset of this many docs per task (sweep --control-docs); None:
    # every doc
    control_docs: int | None = None

    def check(self) -> None:
        if not self.grounding_tasks:
            raise VRHError("replicate needs at least one grounding task (--grounding-tasks)")
        if self.n_detect < 1:
            raise VRHError(f"--n-detect must be positive, got {self.n_detect}")
        if not self.ks or any(k < 1 for k in self.ks):
            raise VRHError(f"--k values must be positive, got {self.ks}")
        if self.random_seeds < 1:
            raise VRHError("--random-seeds must be at least 1 (the random control)")
        check_control_docs(self.control_docs)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["control_docs"] is None:  # replications of earlier versions resume: their spec has no such key
            out.pop("control_docs")
        return out


def demo_spec(partner: str | Path | None = None, random_seeds: int = 10, n_detect: int = PAPER_N_DETECT,
              n_eval: int = DEMO_N_EVAL) -> ReplicateSpec:
    """The paper's protocol on the shipped demo model: synthetic detection scenes, disjoint evaluation scenes,
    `vrh_synth_vqa` for the cross-task test, the paper's k grid."""
    # deferred: keeps `vrh-lmms replicate --help` free of matplotlib, scipy, statsmodels
    from vrh_lmms.pipelines.demo.pipeline import demo_model_path

    model = demo_model_path()
    spec = DemoSpec.load(model)
    partner_args = None
    if partner is not None:
        # deferred: keeps `vrh-lmms replicate --help` free of matplotlib, scipy, statsmodels
        from vrh_lmms.pipelines.demo.transfer import checked_second_model

        partner_args = demo_model_args(checked_second_model(str(partner), model, spec), spec)
    return ReplicateSpec(model="vrh_qwen25", model_args=demo_model_args(model, spec), detection_task=TASK,
                         grounding_tasks=[TASK], vqa_tasks=["vrh_synth_vqa"], random_seeds=random_seeds,
                         n_detect=n_detect, partner_model_args=partner_args, batch_size=25,
                         gen_kwargs="max_new_tokens=16",
                         scenes={"detect": synth_config(spec, n_detect, DISCOVERY_START),
                                 "eval": synth_config(spec, n_eval, EVAL_START)})
