"""Retrieval heads of the text backbone on associative recall: scores and an ablation evaluator for `kcurve`.

Recall (`recall : k1 v1 , ... . key kq ?` -> `vq`) is the text task on which retrieval heads are known to emerge.
A head's score is the attention mass that the row predicting the answer puts on the queried pair (its key and its
value token), averaged over examples: the text analogue of discovery's box-attention score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from research.demo_model.model_heads import Head, ablate, geometry
from research.demo_model.sequences import TurnEncoder, collate
from research.demo_model.train import answer_logits
from vrh_lmms.base.synth.text_tasks import Example, TextTaskConfig, recall

RECALL_SEED = 424_242


def recall_examples(n: int, pairs: int, cfg: TextTaskConfig | None = None) -> list[Example]:
    """Held-out recall questions in the format the model was trained on (practice queries, restated key)."""
    rng = np.random.default_rng(RECALL_SEED)
    return [recall(rng, cfg or TextTaskConfig(), pairs) for _ in range(n)]


class RecallProbe:
    """Teacher-forced recall exact match under head ablations, and attention scores on the queried pair.

    Practice queries in the prompt are context only here: correctness and scores concern the final answer."""

    def __init__(self, model, tokenizer, examples: Sequence[Example], batch_size: int = 128):
        self.model = model
        turns = TurnEncoder(tokenizer, image_tokens=0)
        offset = turns.prompt_offset(False)
        self.batches = []
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            enc = [turns.encode(e.prompt, e.answer, False) for e in chunk]
            b = collate(enc, turns.pad_id)
            b["kind"] = "text"
            b["tasks"] = [e.task for e in chunk]
            # the row predicting the value: the last prompt row, or the restated key's row
            b["query_rows"] = torch.tensor([s.answer_start - 2 + len(e.answer) for s, e in zip(enc, chunk)])
            b["target_pos"] = [[offset + t for t in e.targets] for e in chunk]
            self.batches.append(b)

    @torch.no_grad()
    def evaluate(self, heads: Sequence[Head] = ()) -> np.ndarray:
        out = []
        with ablate(self.model, list(heads)):
            for b in self.batches:
                hits = (answer_logits(self.model, b).argmax(-1) == b["targets"]).numpy()
                ok = np.ones(len(b["tasks"]), dtype=bool)
                np.logical_and.at(ok, b["loss_rows"].numpy(), hits)
                out.append(ok)
        return np.concatenate(out)

    @torch.no_grad()
    def scores(self) -> np.ndarray:
        """layers x heads: mean attention mass of the answer-predicting row on the queried key and value."""
        model = self.model
        n_layers, n_heads, _ = geometry(model)
        total, count = np.zeros((n_layers, n_heads)), 0
        model.set_attn_implementation({"text_config": "eager", "vision_config": "sdpa"})
        try:
            for b in self.batches:
                res = model.model(input_ids=b["input_ids"], output_attentions=True, use_cache=False)
                att = torch.stack(res.attentions, dim=1)  # (B, layers, heads, q, k)
                for i, (row, keys) in enumerate(zip(b["query_rows"].tolist(), b["target_pos"])):
                    total += att[i, :, :, row, keys].sum(-1).numpy()
                    count += 1
        finally:
            model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
        return total / max(count, 1)
