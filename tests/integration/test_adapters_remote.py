"""Remote-code families (no transformers class, no downloadable tiny checkpoint): module trees with the attribute
layout and projection shapes of the real code, read from the public sources (InternVLChatModel + InternLM2 / Qwen2,
Phi4MMForCausalLM with its PEFT LoRA adapters, DeepseekVLV2ForCausalLM with MLA and MHA attention, Magma).

For each: `locate_decoder` picks the language decoder (never the vision / audio towers, which have their own
`o_proj`-like projections), the geometry is right, and Ablator's zeroing of a head equals a manual computation:
the un-ablated input of that layer's output projection with the head's slice zeroed, through the original
projection. Vision/audio weights are untouched.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PretrainedConfig, Qwen2Config, Qwen2ForCausalLM

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES, family_for_config
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.model.ablation import Ablator, ablated
from vrh_lmms.model.backbone import locate_decoder

torch.set_num_threads(1)
HIDDEN = 64


def _config(model_type: str, **fields) -> PretrainedConfig:
    cls = type(f"Config_{model_type}", (PretrainedConfig,), {"model_type": model_type})
    return cls(**fields)


class TinyAttention(nn.Module):
    """Causal multi-head attention; q/k/v/out projections named as the family names them.

    layout: "llama" (q_proj, k_proj, v_proj, o_proj), "internlm2" (wqkv, wo), "phi3" (qkv_proj, o_proj),
    "mla" (DeepSeek-V2: q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj with num_heads * v_head_dim inputs).
    """

    def __init__(self, layout: str, heads: int, kv_heads: int, head_dim: int, v_head_dim: int | None = None):
        super().__init__()
        self.layout, self.num_heads, self.num_key_value_heads = layout, heads, kv_heads
        dq, dv = head_dim, v_head_dim or head_dim
        self.qk_dim, self.v_dim = dq, dv
        if layout == "mla":
            self.v_head_dim, self.q_head_dim, self.kv_lora_rank = dv, dq, 32
            self.q_proj = nn.Linear(HIDDEN, heads * dq, bias=False)
            self.kv_a_proj_with_mqa = nn.Linear(HIDDEN, self.kv_lora_rank, bias=False)
            self.kv_b_proj = nn.Linear(self.kv_lora_rank, heads * (dq + dv), bias=False)
            self.o_proj = nn.Linear(heads * dv, HIDDEN, bias=False)
            return
        self.head_dim = dq
        widths = (heads * dq, kv_heads * dq, kv_heads * dq)
        if layout == "llama":
            self.q_proj, self.k_proj, self.v_proj = (nn.Linear(HIDDEN, w, bias=True) for w in widths)
            self.o_proj = nn.Linear(heads * dq, HIDDEN, bias=False)
        elif layout == "internlm2":
            self.wqkv = nn.Linear(HIDDEN, sum(widths), bias=False)
            self.wo = nn.Linear(heads * dq, HIDDEN, bias=False)
        elif layout == "phi3":
            self.qkv_proj = nn.Linear(HIDDEN, sum(widths), bias=False)
            self.o_proj = nn.Linear(heads * dq, HIDDEN, bias=False)
        else:
            raise ValueError(layout)

    @property
    def out(self) -> nn.Module:
        return self.wo if self.layout == "internlm2" else self.o_proj

    def _qkv(self, x):
        b, s, _ = x.shape
        h, kv, dq, dv = self.num_heads, self.num_key_value_heads, self.qk_dim, self.v_dim
        if self.layout == "mla":
            q = self.q_proj(x).view(b, s, h, dq)
            kvb = self.kv_b_proj(self.kv_a_proj_with_mqa(x)).view(b, s, h, dq + dv)
            return q, kvb[..., :dq], kvb[..., dq:]
        if self.layout == "llama":
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            fused = self.wqkv(x) if self.layout == "internlm2" else self.qkv_proj(x)
            q, k, v = fused.split([h * dq, kv * dq, kv * dq], dim=-1)
        rep = h // kv
        k = k.view(b, s, kv, dq).repeat_interleave(rep, dim=2)
        v = v.view(b, s, kv, dv).repeat_interleave(rep, dim=2)
        return q.view(b, s, h, dq), k, v

    def forward(self, x):
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.qk_dim)
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        out = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v  # (b, h, s, dv)
        return self.out(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


def _layers(attr: str, n: int, **attn) -> nn.ModuleList:
    layers = nn.ModuleList()
    for _ in range(n):
        layer = nn.Module()
        setattr(layer, attr, TinyAttention(**attn))
        layer.mlp = nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.GELU(), nn.Linear(2 * HIDDEN, HIDDEN))
        layers.append(layer)
    return layers


def _vit(n: int, width: int, attn_attr: str, out_name: str) -> nn.Module:
    """A vision/audio tower whose attention has its own output projection (a decoy for name-based search)."""
    tower = nn.Module()
    tower.layers = nn.ModuleList()
    for _ in range(n):
        layer, attn = nn.Module(), nn.Module()
        attn.qkv = nn.Linear(width, 3 * width)
        setattr(attn, out_name, nn.Linear(width, width))
        setattr(layer, attn_attr, attn)
        tower.layers.append(layer)
    return tower


# --------------------------------------------------------------------------------------------- module trees
def internvl_internlm2() -> nn.Module:
    """InternVLChatModel with InternLM2 text: language_model.model.layers[i].attention.wo (InternVL2 / 2.5)."""
    root = nn.Module()
    llm = _config("internlm2", hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=3)
    root.config = _config("internvl_chat", llm_config=llm, vision_config=_config("intern_vit_6b", hidden_size=48))
    root.vision_model = nn.Module()
    root.vision_model.encoder = _vit(2, 48, "attn", "proj")
    root.vision_model.encoder.layers[0].attn.wo = nn.Linear(48, 48)  # decoy: a name search for wo would hit it
    root.mlp1 = nn.Sequential(nn.LayerNorm(48), nn.Linear(48, HIDDEN))
    root.language_model = nn.Module()
    root.language_model.model = nn.Module()
    root.language_model.model.tok_embeddings = nn.Embedding(50, HIDDEN)
    root.language_model.model.layers = _layers("attention", 3, layout="internlm2", heads=4, kv_heads=2, head_dim=16)
    root.language_model.output = nn.Linear(HIDDEN, 50, bias=False)
    return root


def internvl_qwen2() -> nn.Module:
    """InternVLChatModel with a real transformers Qwen2ForCausalLM (InternVL3): self_attn.o_proj."""
    root = nn.Module()
    llm = Qwen2Config(vocab_size=50, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    root.config = _config("internvl_chat", llm_config=llm, vision_config=_config("intern_vit_6b", hidden_size=48))
    root.vision_model = nn.Module()
    root.vision_model.encoder = _vit(2, 48, "self_attn", "o_proj")  # decoy o_proj in the vision tower
    root.mlp1 = nn.Sequential(nn.LayerNorm(48), nn.Linear(48, HIDDEN))
    root.language_model = Qwen2ForCausalLM(llm).eval()
    return root


def phi4mm() -> nn.Module:
    """Phi4MMForCausalLM: model.layers[i].self_attn.{qkv_proj,o_proj} under PEFT LoRA (vision + speech adapters),
    a SigLIP image tower and a Conformer audio tower inside model.embed_tokens_extend."""
    from peft import LoraConfig, inject_adapter_in_model

    root = nn.Module()
    root.config = _config("phi4mm", hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=2,
                          num_hidden_layers=2, vision_lora={"r": 4}, speech_lora={"r": 2})
    model = nn.Module()
    model.embed_tokens = nn.Embedding(50, HIDDEN)
    model.embed_tokens_extend = nn.Module()
    model.embed_tokens_extend.image_embed = nn.Module()
    model.embed_tokens_extend.image_embed.img_processor = _vit(2, 32, "self_attn", "o_proj")
    model.embed_tokens_extend.audio_embed = nn.Module()
    model.embed_tokens_extend.audio_embed.encoder = _vit(2, 40, "self_attn", "o_proj")
    model.layers = _layers("self_attn", 2, layout="phi3", heads=4, kv_heads=2, head_dim=16)
    # the real config's target regex (vision_lora.layer); it must not reach the towers' o_proj
    target = r"layers.*((self_attn\.(qkv_proj|o_proj))|(mlp\.(gate_up|down)_proj))"
    with warnings.catch_warnings():  # PEFT warns that a second adapter joins the first: as in the real model
        warnings.simplefilter("ignore", UserWarning)
        inject_adapter_in_model(LoraConfig(r=4, lora_alpha=8, target_modules=target), model, adapter_name="vision")
        inject_adapter_in_model(LoraConfig(r=2, lora_alpha=4, target_modules=target), model, adapter_name="speech")
    with torch.no_grad():  # PEFT starts B at zero; make the adapters matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    root.model = model
    root.lm_head = nn.Linear(HIDDEN, 50, bias=False)
    return root


def deepseek_vl2(use_mla: bool = True) -> nn.Module:
    """DeepseekVLV2ForCausalLM: vision (timm ViT, attn.proj), projector, language.model.layers[i].self_attn.

    With MLA (VL2, VL2-Small) o_proj takes num_heads * v_head_dim (4 x 20 here) while q/k heads are
    qk_nope + qk_rope = 24 wide; VL2-Tiny (use_mla false) uses plain multi-head attention."""
    root = nn.Module()
    if use_mla:
        lang = _config("deepseek_v2", hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=4,
                       num_hidden_layers=2, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=20,
                       kv_lora_rank=32, use_mla=True)
        attn = dict(layout="mla", heads=4, kv_heads=4, head_dim=24, v_head_dim=20)
    else:
        lang = _config("deepseek_v2", hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=4,
                       num_hidden_layers=2, qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0, use_mla=False)
        attn = dict(layout="llama", heads=4, kv_heads=4, head_dim=16)
    root.config = _config("deepseek_vl_v2", language_config=lang, vision_config=_config("vision", width=48))
    root.vision = _vit(2, 48, "attn", "proj")
    root.projector = nn.Sequential(nn.Linear(48, HIDDEN))
    root.language = nn.Module()
    root.language.model = nn.Module()
    root.language.model.embed_tokens = nn.Embedding(50, HIDDEN)
    root.language.model.layers = _layers("self_attn", 2, **attn)
    root.language.lm_head = nn.Linear(HIDDEN, 50, bias=False)
    return root


def magma() -> nn.Module:
    """MagmaForCausalLM: ConvNeXt vision tower, projector, language_model = a real LlamaForCausalLM (Llama-3)."""
    root = nn.Module()
    text = LlamaConfig(vocab_size=50, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    root.config = _config("magma", text_config=text, vision_config={"vision_backbone": "convnextxxlarge"},
                          hidden_size=HIDDEN, num_attention_heads=4)
    root.vision_tower = nn.Sequential(nn.Conv2d(3, 48, 4, 4), nn.GELU(), nn.Conv2d(48, 48, 2, 2))
    root.multi_modal_projector = nn.Sequential(nn.Linear(48, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN))
    root.language_model = LlamaForCausalLM(text).eval()
    return root


def _tiny_forward(root, layer):
    dec = locate_decoder(root)
    x = torch.randn(2, 5, HIDDEN, generator=torch.Generator().manual_seed(layer))
    return lambda: dec.attns[layer](x)


def _lm_forward(lm):
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    return lambda: lm(input_ids=ids)


TREES = {
    "internvl_internlm2": (internvl_internlm2, "internvl_chat", (3, 4, 2, 16), None),
    "internvl_qwen2": (internvl_qwen2, "internvl_chat", (2, 4, 2, 16), "language_model"),
    "phi4mm": (phi4mm, "phi4_multimodal", (2, 4, 2, 16), None),
    "deepseek_vl2_mla": (deepseek_vl2, "deepseek_vl2", (2, 4, 4, 20), None),
    "deepseek_vl2_tiny_mha": (lambda: deepseek_vl2(use_mla=False), "deepseek_vl2", (2, 4, 4, 16), None),
    "magma": (magma, "magma", (2, 4, 2, 16), "language_model"),
}
TOWERS = ("vision_model", "vision", "vision_tower", "model.embed_tokens_extend")


def _towers(root) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in root.named_parameters():
        if any(name.startswith(t + ".") for t in TOWERS):
            out[name] = p.detach().clone()
    return out


@pytest.fixture(params=sorted(TREES))
def tree(request):
    build, family, geometry, lm_attr = TREES[request.param]
    torch.manual_seed(0)
    return request.param, build(), family, geometry, lm_attr


def test_family_and_decoder_found(tree):
    _, root, family, (layers, heads, kv, head_dim), _ = tree
    fam = family_for_config(root.config)
    assert fam.name == family and fam.remote_code
    dec = locate_decoder(root)
    g = dec.geometry
    assert (g.layers, g.heads, g.kv_heads, g.head_dim) == (layers, heads, kv, head_dim)
    # the projections found are the decoder's: each sits under the family's layer path, none in a tower
    path_of = {id(m): n for n, m in root.named_modules()}
    for proj in dec.out_projs:
        where = path_of[id(proj)]
        assert where.startswith(dec.layers_path + "."), where
        assert not any(where.startswith(t) for t in TOWERS)
        assert proj.in_features == heads * head_dim


def test_towers_have_decoys_a_name_search_would_hit(tree):
    """The reason locate_decoder walks the layer list: searching names would also collect tower projections."""
    name, root, *_ = tree
    dec = locate_decoder(root)
    out_names = {n.rsplit(".", 1)[-1] for n, m in root.named_modules() if m in dec.out_projs}
    by_name = [n for n, m in root.named_modules()
               if n.rsplit(".", 1)[-1] in out_names and m not in dec.out_projs and isinstance(m, nn.Linear)
               and "base_layer" not in n]
    if name.startswith("deepseek") or name == "magma":
        assert by_name == []  # their towers use other names (attn.proj, convolutions)
    else:
        assert by_name, f"{name}: expected a decoy projection in a tower"


@pytest.mark.parametrize("method", ["fold", "hook"])
def test_zeroing_equals_manual_computation(tree, method):
    name, root, _, (layers, heads, _, head_dim), lm_attr = tree
    dec = locate_decoder(root)
    if method == "fold" and name == "phi4mm":
        with pytest.raises(VRHError, match="'fold' impossible"):
            Ablator(root, method="fold").apply([HeadRef(0, 1)])
        return
    towers = _towers(root)
    layer = layers - 1
    chosen = [0, heads - 1]
    forward = _lm_forward(getattr(root, lm_attr)) if lm_attr else _tiny_forward(root, layer)
    proj = dec.out_projs[layer]
    original = copy.deepcopy(proj)
    seen = {}
    # registered before the ablator's pre-hook, so it sees the raw head outputs; the forward hook sees the result
    pre = proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0].detach().clone()))
    post = proj.register_forward_hook(lambda m, a, out: seen.__setitem__("y", out.detach().clone()))
    try:
        with torch.no_grad():
            forward()
            clean_y = seen["y"]
            with ablated(root, [HeadRef(layer, h) for h in chosen], method=method) as ab:
                assert ab.method == method
                forward()
            raw_x, ablated_y = seen["x"], seen["y"]
    finally:
        pre.remove()
        post.remove()
    x = raw_x.clone()
    for h in chosen:
        x[..., h * head_dim:(h + 1) * head_dim] = 0
    with torch.no_grad():
        manual = original(x)
    assert not torch.allclose(manual, clean_y)
    torch.testing.assert_close(ablated_y, manual, rtol=1e-5, atol=1e-6)
    after = _towers(root)
    assert towers.keys() == after.keys() and all(torch.equal(towers[k], after[k]) for k in towers)


def test_phi4_lora_output_projection_is_ablated_through_the_hook():
    """Phi-4-multimodal's o_proj is a PEFT LoRA layer: `auto` must choose the hook, which zeroes the head for the
    base weight and both adapters; folding the base weight alone would leave the LoRA path reading the head."""
    root = phi4mm()
    dec = locate_decoder(root)
    assert all(type(p).__module__.startswith("peft") for p in dec.out_projs)
    ab = Ablator(root)
    assert ab.resolve_method() == "hook"


def test_family_table_entries_of_remote_code_families():
    assert FAMILIES["internvl_chat"].layer_paths == ("language_model.model.layers",)
    assert FAMILIES["internvl_chat"].attn_attrs[:1] == ("attention",) and "wo" in FAMILIES["internvl_chat"].out_attrs
    assert FAMILIES["phi4_multimodal"].layer_paths == ("model.layers",)
    assert "phi4mm" in FAMILIES["phi4_multimodal"].model_types
    assert FAMILIES["deepseek_vl2"].layer_paths == ("language.model.layers",)
    assert FAMILIES["deepseek_vl2"].model_types == ("deepseek_vl_v2",)
    assert FAMILIES["magma"].layer_paths[0] == "language_model.model.layers"
