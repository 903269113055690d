"""The coverage table's KV-policy cell (vrh_lmms.model.coverage_kv): yes only for types on the verified lists (a note
where only masking applies), refusals from the geometry the policy does not model, measured refusals, else untested."""

from __future__ import annotations

from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.model.coverage_kv import (
    HYBRID,
    KV_FAMILY,
    KV_MASK_ONLY,
    KV_REFUSED,
    KV_VERIFIED,
    PER_LAYER,
    UNTESTED,
    kv_cell,
)

UNIFORM = Geometry(layers=4, heads=4, kv_heads=2, head_dim=16)


def test_cells_follow_the_lists_and_the_geometry():
    assert kv_cell("llava", UNIFORM) == "yes" and "llava" in KV_VERIFIED
    assert kv_cell(next(iter(KV_FAMILY)), UNIFORM) == "yes"
    masked = next(iter(KV_MASK_ONLY))
    assert kv_cell(masked, UNIFORM).startswith("yes (mask only: ") and KV_MASK_ONLY[masked] in kv_cell(masked)
    refused = next(iter(KV_REFUSED))
    assert kv_cell(refused, UNIFORM) == KV_REFUSED[refused]
    assert kv_cell("a_type_of_a_newer_transformers", UNIFORM) == UNTESTED
    hybrid = Geometry(layers=4, heads=4, kv_heads=2, head_dim=16, head_layers=(3,))
    assert kv_cell("a_type_of_a_newer_transformers", hybrid) == HYBRID
    widths = Geometry(layers=4, heads=4, kv_heads=2, head_dim=16, layer_head_dims=(16, 16, 16, 32))
    assert kv_cell("a_type_of_a_newer_transformers", widths) == PER_LAYER
    kv = Geometry(layers=4, heads=4, kv_heads=2, head_dim=16, layer_kv_heads=(2, 2, 2, 1))
    assert kv_cell("a_type_of_a_newer_transformers", kv) == PER_LAYER
    for cell in (HYBRID, PER_LAYER, UNTESTED, *KV_REFUSED.values()):
        assert "\n" not in cell and not cell.startswith("yes")
