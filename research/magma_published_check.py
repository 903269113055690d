"""Check the Magma layout and attention capture on Magma's *published* modeling code (a dev check, not a test).

The published files cannot ship here; point this at a checkout of github microsoft/Magma (its `magma/` folder, or
the hub checkpoint's folder holding `configuration_magma.py` and `modeling_magma.py`):

    python -m research.magma_published_check /path/to/Magma/magma

It builds the published MagmaForCausalLM with tiny Llama text and the stand-in's weights. Only the vision tower is
replaced, by the stand-in's stride-32 convolution (the real one imports open_clip and downloads the LAION ConvNeXt
weights whenever it is built). Two patches let the published code construct under transformers 5.25:
`attn_implementation="eager"` (its `_supports_sdpa` property reads `self.language_model` before `__init__` sets it)
and a `tie_weights(*args, **kwargs)` override (transformers now passes `recompute_mapping`). For 4 image sizes it
prints: logits equal to the stand-in's (tests/oracles/magma_standin.py), the rectangle experiment
(`check_layout`) on the published forward, and captured box mass equal to eager attention.
Measured 2026-12-03 on microsoft/Magma @ 1b784e4 (whose projector pattern is `mlp<N>x_gelu_segtokv<M>`): logits
within 1.4e-6 of the stand-in's (0.0 while both run the same attention implementation); changed == predicted at
640x480, 300x900, 5000x300 and 1920x1080; capture vs eager max diff 4.5e-8.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from PIL import Image

TOWER = '''import torch
from torch import nn


class MagmaImageTower(nn.Module):
    """Stand-in for ConvNeXt: a stride-32 convolution (the same output grid)."""

    def __init__(self, config, **kwargs):
        super().__init__()
        self.stem = nn.Conv2d(3, config["mm_hidden_size"], 32, 32)
        self._c = config["mm_hidden_size"]

    @property
    def hidden_size(self):
        return self._c

    def forward(self, x):
        return {"clip_vis_dense": self.stem(x)}
'''
SIZES = [(640, 480), (300, 900), (5000, 300), (1920, 1080)]


def published_package(src: Path, into: Path) -> str:
    """Copy the published config and modeling files next to the stand-in tower as an importable package."""
    pkg = into / "magma_published"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("configuration_magma.py", "modeling_magma.py"):
        shutil.copy(src / name, pkg / name)
    (pkg / "image_tower_magma.py").write_text(TOWER)
    sys.path.insert(0, str(into))
    return pkg.name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="folder with the published configuration_magma.py, modeling_magma.py")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from oracles import magma_standin as ms

    from vrh_lmms.model.capture.attention import CapturePlan, capture_attention
    from vrh_lmms.model.capture.extras import layout_extras
    from vrh_lmms.model.capture.layouts import box_key_mask, image_token_map, lm_input_ids
    from vrh_lmms.model.capture.verify import check_layout
    from vrh_lmms.model.tiny.vocab import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        name = published_package(args.src, Path(tmp))
        modeling = __import__(f"{name}.modeling_magma", fromlist=["MagmaForCausalLM"])
        configuration = __import__(f"{name}.configuration_magma", fromlist=["MagmaConfig"])
        tok = build_tokenizer(("<|begin_of_text|>", "<|eot_id|>", "<pad>", "<image>", "<image_start>", "<image_end>"),
                              bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<pad>")
        proc = ms.MagmaProcessor(ms.MagmaImageProcessor(), tok)
        image_id = tok.convert_tokens_to_ids("<image>")
        stand = ms.build(len(tok), image_id)
        vision = dict(stand.config.vision_config)
        source = (args.src / "modeling_magma.py").read_text()
        if "x_gelu_segtokv" in source:  # the GitHub HEAD projector's name pattern (the hub's is mlp2x_gelu)
            vision["mm_projector_type"] = "mlp2x_gelu_segtokv1"
        cfg = configuration.MagmaConfig(vision_config=vision, text_config=stand.config.text_config.to_dict(),
                                        image_token_index=image_id, attn_implementation="eager")

        class Published(modeling.MagmaForCausalLM):
            def tie_weights(self, *a, **k):
                return self.language_model.tie_weights(*a, **k)

        pub = Published(cfg).eval()
        pub.load_state_dict(stand.state_dict())

        def batch(processor, image):
            out = dict(processor(texts="user: <image_start><image><image_end>\nfind it", images=[image]))
            return {k: (v.unsqueeze(0) if k in ("pixel_values", "image_sizes") else v) for k, v in out.items()}

        for size in SIZES:
            b = batch(proc, Image.new("RGB", size, (90, 90, 90)))
            with torch.no_grad():
                diff = (pub(**b).logits - stand(**b).logits).abs().max().item()
            check = check_layout(pub, proc, "magma", size, batch)
            ex = layout_extras("magma", proc, b, 0)
            seq = lm_input_ids("magma", b["input_ids"][0], size, ex)
            box = box_key_mask(image_token_map("magma", seq, size, ex),
                               [0.1 * size[0], 0.2 * size[1], 0.4 * size[0], 0.6 * size[1]], seq.numel())
            rows = list(range(seq.numel() - 4, seq.numel()))
            plan = CapturePlan(query_positions=torch.tensor([rows]), key_sets={"box": box.view(1, -1)}, argmax=False)
            with torch.no_grad(), capture_attention(pub, plan) as handle:
                pub(**b)
            got = handle.result().mass["box"][0].float()
            pub.language_model.config._attn_implementation = "eager"
            with torch.no_grad():
                att = pub(**b, output_attentions=True).attentions
            ref = torch.stack([a[0][:, rows].float() @ box.float() for a in att])
            print(f"{size[0]}x{size[1]}: logits vs stand-in {diff:.1e}; rectangle changed == predicted "
                  f"{check.changed == check.predicted} ({len(check.predicted)} tokens); capture vs eager "
                  f"{(got - ref).abs().max().item():.1e}; sequence {seq.numel()} = attention {att[0].shape[-1]}")


if __name__ == "__main__":
    main()
