"""Per-sample capture: teacher-force the model's own answer and reduce its attention rows to head statistics.

Called by the generate interceptor with the exact tensors the backend built for `generate`, so the prompt, the
image preprocessing and the chat template are the backend's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.ablation import HeadMeanCollector
from vrh_lmms.model.capture.attention import CapturePlan, capture_attention
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import lm_input_ids, main_view_grid
from vrh_lmms.model.capture.teacher_forced import teacher_forced_inputs
from vrh_lmms.runs.discovery import localization
from vrh_lmms.runs.discovery.controls import IMAGE_MASS, NULL_EXPRESSION, NULL_PREFIX, content_free_prompt
from vrh_lmms.runs.discovery.evidence import KeyContext, evidence_kind, get_kind
from vrh_lmms.runs.discovery.interceptor import DocContext
from vrh_lmms.runs.discovery.queries import (
    answer_length,
    coord_rows,
    expression_rows,
    out_rows,
    random_row,
    token_pieces,
    union_rows,
)
from vrh_lmms.runs.discovery.sample_stats import reduce_sample
from vrh_lmms.runs.discovery.scoring import QUERIES, RETRIEVAL
from vrh_lmms.runs.discovery.store import PartStore, SamplePart

GRID_PREFIX = "grid:"  # key sets of single grid tokens (Localization Heads' maps)


def backend_processor(lm) -> Any:
    for name in ("vrh_processor", "processor", "_processor", "_image_processor", "image_processor"):
        proc = getattr(lm, name, None)
        if proc is not None and hasattr(proc, "tokenizer"):
            return proc
    raise VRHError(f"{type(lm).__name__} exposes no processor; discovery needs it to map image tokens")


def stop_token_ids(lm, model) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(lm, "tokenizer", None), getattr(model, "generation_config", None)):
        for name in ("eos_token_id", "pad_token_id"):
            value = getattr(source, name, None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
    return ids


class SampleCollector:
    """Callback for GenerateInterceptor: capture, reduce, and store one part per doc.

    null_query: also score the content-free query (the expression replaced by "N/A", vrh_lmms.runs.discovery.controls),
    stored as `null_<quantity>` beside each quantity. key_tokens: the rule mapping the box to key tokens
    (vrh_lmms.model.capture.layouts.RULES). localization: also capture the last input token's attention over the main
    view's token grid and store the Localization Heads statistics (vrh_lmms.runs.discovery.localization)."""

    def __init__(self, lm, store: PartStore, collect_means: bool = True, null_query: bool = False,
                 key_tokens: str = "overlap", localization: bool = False) -> None:
        self.lm, self.store, self.collect_means, self.null_query = lm, store, collect_means, null_query
        self.key_tokens, self.localization = key_tokens, localization
        self.model = lm.model
        self.family = lm.vrh_family_spec
        self.processor = backend_processor(lm)
        self.tokenizer = getattr(lm, "tokenizer", None) or self.processor.tokenizer
        self.stop_ids = stop_token_ids(lm, self.model)

    def __call__(self, ctx: DocContext, tensors: dict[str, torch.Tensor], continuation: torch.Tensor,
                 output_includes_prompt: bool = True) -> None:
        where = f"{ctx.task} doc {ctx.doc_id}"
        kind = get_kind(evidence_kind(ctx.doc))
        target = kind.target(ctx.doc, where)
        cont = continuation.detach().cpu()
        n = answer_length(cont.tolist(), self.stop_ids)
        answer = cont[:n]
        stats, info, head_sums, tokens = self._sample(tensors, answer, target.expression, target, kind, ctx.key,
                                                      collect_means=self.collect_means,
                                                      localize=self.localization and kind.grid)
        meta: dict[str, Any] = {"evidence": kind.name, "task": ctx.task, "split": ctx.split, "doc_id": ctx.doc_id,
                                "image_id": target.image_id,
                                "n_answer": n, "output_includes_prompt": output_includes_prompt, **info,
                                "answer": self.tokenizer.decode(answer.tolist(), skip_special_tokens=True)}
        if self.null_query:
            prompt_pieces = token_pieces(self.tokenizer, tensors["input_ids"][0].tolist())
            null = content_free_prompt(tensors, self.tokenizer, prompt_pieces, target.expression)
            if null is not None:
                null_stats = self._sample(null, answer, NULL_EXPRESSION, target, kind, ctx.key,
                                          collect_means=False, localize=False)[0]
            else:
                null_stats = {k: np.full_like(v, np.nan) for k, v in stats.items()}
            stats.update({NULL_PREFIX + k: v for k, v in null_stats.items()})
            meta["null_query"] = null is not None
        self.store.write(SamplePart(key=ctx.key, stats=stats, answer_ids=cont.numpy(), meta=meta,
                                    head_sums=head_sums, tokens=tokens))

    def _sample(self, tensors: dict[str, torch.Tensor], answer: torch.Tensor, expression: str, target, kind,
                key: str, collect_means: bool, localize: bool,
                ) -> tuple[dict[str, np.ndarray], dict[str, Any], np.ndarray | None, int]:
        """Per-head statistics of one teacher-forced prompt + answer (and the o_proj input sums for means).
        key: the doc's key, which seeds the `out_random1` draw (reruns agree)."""
        # Positions count the sequence the language model sees (Magma expands its `<image>` in the forward).
        has_image = getattr(target, "image_size", None) is not None  # one image the family's layout maps
        extras = layout_extras(self.family.name, self.processor, tensors, 0, backend=self.lm) if has_image else {}

        def lm_ids(ids: torch.Tensor) -> torch.Tensor:
            ids = ids.detach().cpu()
            return lm_input_ids(self.family.name, ids, target.image_size, extras) if has_image else ids

        prompt = lm_ids(tensors["input_ids"][0])
        prompt_len = prompt.numel()
        n = answer.numel()
        inputs = teacher_forced_inputs(tensors, answer, self.family.forward_fills)
        full = lm_ids(inputs["input_ids"][0])
        seq_len = full.numel()
        pieces = token_pieces(self.tokenizer, full.tolist())
        rows_by_set = {
            "out": out_rows(prompt_len, n),
            "out_coords": coord_rows(prompt_len, pieces[prompt_len:prompt_len + n]),
            "in": expression_rows(pieces, expression, limit=prompt_len) if expression else [],
        }
        rows_by_set["out_random1"] = random_row(rows_by_set["out"], key)
        rows_by_set["in+out"] = union_rows(rows_by_set["in"], rows_by_set["out"])
        keys = kind.keys(target, KeyContext(self.family.name, self.processor, self.tokenizer, self.lm, tensors,
                                            prompt, seq_len, self.key_tokens, extras if has_image else None,
                                            None if expression == target.expression else expression))
        box, image, tmap = keys.evidence, keys.media, keys.tmap  # `box`: the stored name of the evidence key set
        last = prompt_len - 1  # Localization Heads' query: the last input token
        rows = sorted({r for rs in rows_by_set.values() for r in rs} | ({last} if localize else set()))
        # image tokens, not Magma's row separators; kinds without one image's map count their media tokens
        n_image = int(tmap.positions.numel()) if tmap is not None else int(image.sum())
        info = {"prompt_len": prompt_len, "n_box_tokens": int(box.sum()), "n_image_tokens": n_image,
                "rows": {k: len(v) for k, v in rows_by_set.items()}, "out_random1_row": rows_by_set["out_random1"]}
        key_sets = {"box": box.view(1, -1), "image": image.view(1, -1)}
        grid = main_view_grid(tmap) if localize and tmap is not None else None
        if grid is not None:
            key_sets.update(grid_key_sets(tmap.positions, grid, seq_len))
        geometry = self.lm.vrh_decoder.geometry
        head_sums, tokens = None, 0
        nan = np.full((geometry.layers, geometry.heads), np.nan)
        if rows:
            plan = CapturePlan(query_positions=torch.tensor([rows], dtype=torch.long), key_sets=key_sets, argmax=True)
            means = HeadMeanCollector(self.model, self.lm.vrh_decoder) if collect_means else None
            with torch.no_grad(), capture_attention(self.model, plan) as handle:
                if means is not None:
                    with means:
                        self.model(**inputs)
                else:
                    self.model(**inputs)
            result = handle.result()
            stats = reduce_sample(result.mass["box"][0].cpu(), result.argmax[0].cpu(), rows, rows_by_set, box, full,
                                  needle_mask=torch.arange(seq_len) < prompt_len)
            out_cols = [rows.index(r) for r in rows_by_set["out"]]
            stats[IMAGE_MASS] = (result.mass["image"][0][:, :, out_cols].double().mean(-1).cpu().numpy()
                                 if out_cols else nan.copy())
            if grid is not None:
                stats.update(localization.sample_statistics(grid_maps(result.mass, grid, rows.index(last))))
            if means is not None:
                head_sums, tokens = means.sums.numpy().astype(np.float32), means.count
        else:
            names = [f"{q}_{k}" for q in QUERIES for k in ("sum", "argmax")] + [RETRIEVAL, IMAGE_MASS]
            names += [localization.ENTROPY, localization.IMAGE_SUM] if localize else []
            stats = {k: nan.copy() for k in names}
        return stats, info, head_sums, tokens


def grid_key_sets(positions: torch.Tensor, grid: torch.Tensor, seq_len: int) -> dict[str, torch.Tensor]:
    """One single-token key set per cell of the token grid that has a token (its mass = that token's attention)."""
    out = {}
    for cell, index in enumerate(grid.flatten().tolist()):
        if index >= 0:
            mask = torch.zeros(1, seq_len, dtype=torch.bool)
            mask[0, int(positions[index])] = True
            out[f"{GRID_PREFIX}{cell}"] = mask
    return out



def grid_maps(mass: dict[str, torch.Tensor], grid: torch.Tensor, column: int) -> np.ndarray:
    """(layers, heads, rows, cols): the captured row `column`'s attention on each grid cell's token (0 where the
    grid has no token)."""
    first = mass["box"]
    layers, heads = first.shape[1], first.shape[2]
    out = np.zeros((layers, heads, grid.numel()))
    for cell, index in enumerate(grid.flatten().tolist()):
        if index >= 0:
            out[:, :, cell] = mass[f"{GRID_PREFIX}{cell}"][0, :, :, column].double().cpu().numpy()
    return out.reshape(layers, heads, *grid.shape)
