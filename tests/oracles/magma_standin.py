"""Magma-8B's image path, re-implemented from its published remote code as a test oracle, and a tiny stand-in model.

Source: github microsoft/Magma @ 1b784e4 (the files shipped with the hub checkpoint microsoft/Magma-8B):
- `magma/image_processing_magma.py`: `select_best_resolution` (most effective pixels, then least waste; sizes are
  (width, height)), `process_anyres_image` (pinpoints (i, j) x base for i in 1..num_crops, j in 1..num_crops // i;
  the whole image resized bilinearly to the best (width, height), no padding, then cut with `unfold` into
  row-major crops), `MagmaImageProcessor.preprocess` (`pixel_values` = all crops, `image_sizes` = (rows, cols)).
- `magma/modeling_magma.py::MagmaForCausalLM.forward`, `img_anyres_strategy == "crop"`: ConvNeXt features of every
  crop at `vision_feature_layer` ("clip_vis_dense", stride 32), `permute(0, 2, 3, 1)`, projector, then per image
  `view(rows, cols, s, s, d).permute(0, 2, 1, 3, 4).flatten(2, 3).flatten(0, 1)`, `row_seperator` appended to every
  row, flattened; `_merge_input_ids_with_image_features` writes these features where the single `<image>` token
  was (positions by cumsum, left padding), attention mask 1 there, position ids from the mask's cumsum.
- `magma/configuration_magma.py::MagmaConfig` copies every attribute of the text config onto itself, `model_type`
  included: a loaded Magma config says `model_type == "llama"` on the instance ("magma" on the class).
- Magma-8B's real settings: preprocessor_config.json `anyres_strategy` "crop", `base_img_size` 512, `num_crops` 4;
  config.json `image_token_index` 128257, `img_size` 512.

`feature_order` runs the forward's own tensor operations on feature indices: it is the oracle for which crop
feature the language model sees at every image position. The stand-in model follows the published classes
(MagmaConfig with `text_config` / `vision_config` dict, MagmaForCausalLM with `vision_tower`,
`multi_modal_projector` (mlp2x_gelu + `row_seperator`) and `language_model` built by
`AutoModelForCausalLM.from_config`); only the vision tower is a stand-in: one stride-32 convolution instead of
ConvNeXt-XXL, with the same output grid (512 px crop -> 16 x 16 features).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModelForCausalLM, BatchFeature, LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
BASE_IMG_SIZE, NUM_CROPS, IMAGE_TOKEN_INDEX, STRIDE = 512, 4, 128257, 32  # Magma-8B


def select_best_resolution(original_size: tuple[int, int], possible) -> tuple[int, int]:
    ow, oh = original_size
    best, max_eff, min_waste = None, 0, float("inf")
    for width, height in possible:
        scale = min(width / ow, height / oh)
        dw, dh = int(ow * scale), int(oh * scale)
        eff = min(dw * dh, ow * oh)
        waste = width * height - eff
        if eff > max_eff or (eff == max_eff and waste < min_waste):
            max_eff, min_waste, best = eff, waste, (width, height)
    return best


def crop_grid(w: int, h: int, base: int = BASE_IMG_SIZE, num_crops: int = NUM_CROPS) -> tuple[int, int]:
    """(rows, cols) = `image_sizes` of process_anyres_image."""
    pins = [(i * base, j * base) for i in range(1, num_crops + 1) for j in range(1, num_crops // i + 1)]
    bw, bh = select_best_resolution((w, h), pins)
    return bh // base, bw // base


class MagmaImageProcessor:
    """MagmaImageProcessor.preprocess: ToTensor, CLIP normalisation, bilinear resize to the crop grid, unfold."""

    def __init__(self, anyres_strategy: str = "crop", base_img_size: int = BASE_IMG_SIZE,
                 num_crops: int = NUM_CROPS) -> None:
        self.anyres_strategy, self.base_img_size, self.num_crops = anyres_strategy, base_img_size, num_crops

    def __call__(self, images, return_tensors: str = "pt") -> BatchFeature:
        import numpy as np

        images = images if isinstance(images, (list, tuple)) else [images]
        crops, sizes = [], []
        mean, std = torch.tensor(CLIP_MEAN).view(3, 1, 1), torch.tensor(CLIP_STD).view(3, 1, 1)
        b = self.base_img_size
        for image in images:
            x = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 255).permute(2, 0, 1)
            x = (x - mean) / std
            rows, cols = crop_grid(x.shape[2], x.shape[1], b, self.num_crops)
            x = nn.functional.interpolate(x[None], size=(rows * b, cols * b), mode="bilinear")
            patches = x.unfold(2, b, b).unfold(3, b, b).permute(0, 2, 3, 1, 4, 5).reshape(rows * cols, -1, b, b)
            crops.append(patches)
            sizes.append((rows, cols))
        return BatchFeature({"pixel_values": torch.cat(crops), "image_sizes": torch.tensor(sizes)})


class MagmaProcessor:
    """MagmaProcessor.__call__(texts, images): tokenizer output plus the image processor's (no batch axis)."""

    def __init__(self, image_processor: MagmaImageProcessor, tokenizer) -> None:
        self.image_processor, self.tokenizer = image_processor, tokenizer

    def __call__(self, texts=None, images=None, return_tensors: str = "pt", **_: object) -> BatchFeature:
        data = dict(self.tokenizer(texts, return_tensors=return_tensors))
        if images:
            data.update(self.image_processor(images))
        return BatchFeature(data)


def stitch(features: torch.Tensor, rows: int, cols: int, separator: torch.Tensor) -> torch.Tensor:
    """The forward's per-image crop stitching: (rows*cols, s, s, d) crop features -> (tokens, d)."""
    f = features.view(rows, cols, *features.shape[1:]).permute(0, 2, 1, 3, 4).flatten(2, 3).flatten(0, 1)
    f = torch.cat((f, separator.repeat(f.shape[0], 1, 1)), dim=1)
    return f.flatten(0, 1)


def feature_order(rows: int, cols: int, side: int) -> list[tuple[int, int, int, int] | None]:
    """Per image position the language model sees: (crop row, crop col, feature y, feature x), None = separator."""
    n = rows * cols * side * side
    idx = torch.arange(n, dtype=torch.float64).view(rows * cols, side, side, 1)
    order = stitch(idx, rows, cols, torch.full((1, 1, 1), -1.0, dtype=torch.float64))[:, 0].long().tolist()
    out: list[tuple[int, int, int, int] | None] = []
    for k in order:
        if k < 0:
            out.append(None)
            continue
        crop, rem = divmod(k, side * side)
        out.append((crop // cols, crop % cols, rem // side, rem % side))
    return out


# ------------------------------------------------------------------------------------------- stand-in model
class MagmaConfig(PretrainedConfig):
    model_type = "magma"

    def __init__(self, vision_config=None, text_config=None, image_token_index=None, **kwargs) -> None:
        self.vision_config = vision_config or {}
        self.image_token_index = image_token_index
        if isinstance(text_config, dict):
            text_config = LlamaConfig(**text_config)  # CONFIG_MAPPING[text_config["model_type"]](**text_config)
        if text_config is not None:  # as published: "copy all variables in text_config to self"
            for key, value in text_config.__dict__.items():
                if not key.startswith("_"):
                    setattr(self, key, value)
        self.text_config = text_config
        super().__init__(**kwargs)


class MagmaProjector(nn.Module):
    def __init__(self, vision_config: dict) -> None:
        super().__init__()
        d_in, d = vision_config["mm_hidden_size"], vision_config["hidden_size"]
        self.proj = nn.Sequential(nn.Linear(d_in, d), nn.GELU(), nn.Linear(d, d))
        self.row_seperator = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class StrideTower(nn.Module):
    """ConvNeXt's output grid (stride 32) from one convolution; returns the features by layer name, as published."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, STRIDE, STRIDE)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"clip_vis_dense": self.stem(x)}


class MagmaForCausalLM(PreTrainedModel):
    config_class = MagmaConfig
    base_model_prefix = "model"
    _supports_sdpa = True

    def __init__(self, config: MagmaConfig) -> None:
        super().__init__(config)
        vc = config.vision_config
        self.vision_tower = StrideTower(vc["mm_hidden_size"])
        self.multi_modal_projector = MagmaProjector(vc)
        self.language_model = AutoModelForCausalLM.from_config(config.text_config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def _image_features(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        """5-dim pixel values (batch, crops, 3, H, W) and image_sizes (batch, images, 2), crop strategy."""
        feats = []
        for pix, sizes in zip(pixel_values, image_sizes, strict=True):
            sizes = sizes[sizes.sum(-1) > 0].tolist()
            crops = pix[:sum(r * c for r, c in sizes)].to(self.dtype)
            layer = self.config.vision_config["vision_feature_layer"]
            f = self.multi_modal_projector(self.vision_tower(crops)[layer].permute(0, 2, 3, 1))
            for part, (r, c) in zip(torch.split(f, [r * c for r, c in sizes]), sizes, strict=True):
                feats.append(stitch(part, r, c, self.multi_modal_projector.row_seperator))
        return feats

    def _merge(self, feats, embeds, input_ids, attention_mask):
        """_merge_input_ids_with_image_features (left padding, no labels)."""
        lens = torch.tensor([f.shape[0] for f in feats])
        is_image = input_ids == self.config.image_token_index
        n_img = is_image.sum(-1)
        if int(is_image.sum()) != len(feats):
            raise ValueError(f"Number of image tokens in input_ids ({int(is_image.sum())}) different from "
                             f"num_images ({len(feats)}).")
        per_row = torch.stack([x.sum() for x in lens.split(n_img.tolist())])
        seq_lens = (attention_mask == 1).long().sum(-1) - n_img + per_row
        max_len = int(seq_lens.max())
        b, t = torch.where(~is_image & (attention_mask == 1))
        shift = is_image.long()
        shift[is_image] = lens - 1
        new_pos = torch.cumsum(shift + 1, -1) - 1
        new_pos += max_len - 1 - new_pos[:, -1:]
        to = new_pos[b, t]
        out = torch.zeros(input_ids.shape[0], max_len, embeds.shape[-1], dtype=embeds.dtype)
        mask = torch.zeros(input_ids.shape[0], max_len, dtype=attention_mask.dtype)
        out[b, to], mask[b, to] = embeds[b, t], attention_mask[b, t]
        fill = torch.ones(input_ids.shape[0], max_len, dtype=torch.bool)
        fill[b, to] = False
        fill &= (max_len - torch.arange(max_len)[None]) <= seq_lens[:, None]
        out[fill] = torch.cat(feats).to(out.dtype)
        mask |= fill
        return out, mask, (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1)

    def embed(self, input_ids, pixel_values=None, image_sizes=None, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        ids = input_ids.masked_fill(input_ids == self.config.image_token_index, 0)
        embeds = self.get_input_embeddings()(ids)
        if pixel_values is None:
            return embeds, attention_mask, None
        return self._merge(self._image_features(pixel_values, image_sizes), embeds, input_ids, attention_mask)

    def forward(self, input_ids=None, pixel_values=None, image_sizes=None, attention_mask=None,
                output_attentions=None, **kwargs) -> CausalLMOutputWithPast:
        embeds, mask, positions = self.embed(input_ids, pixel_values, image_sizes, attention_mask)
        out = self.language_model.model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions,
                                        output_attentions=output_attentions, use_cache=False)
        return CausalLMOutputWithPast(logits=self.language_model.lm_head(out[0]).float(),
                                      attentions=out.attentions)

    def generate(self, input_ids, pixel_values=None, image_sizes=None, attention_mask=None, **kwargs):
        """GenerationMixin's contract for this class: the prompt ids followed by the new tokens."""
        embeds, mask, _ = self.embed(input_ids, pixel_values, image_sizes, attention_mask)
        new = self.language_model.generate(inputs_embeds=embeds, attention_mask=mask, **kwargs)
        return torch.cat([input_ids, new], dim=1)


def build(vocab: int, image_token_index: int, seed: int = 0) -> MagmaForCausalLM:
    """A tiny Magma: Llama text of 2 layers x 4 heads (GQA 2), width 64; the real 512 px crops and 4-crop grid."""
    torch.manual_seed(seed)
    text = {"model_type": "llama", "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192}
    vision = {"img_anyres_strategy": "crop", "vision_backbone": "convnextxxlarge", "mm_hidden_size": 16,
              "hidden_size": 64, "mm_projector_type": "mlp2x_gelu", "vision_feature_layer": "clip_vis_dense",
              "img_size": BASE_IMG_SIZE, "max_num_crops": NUM_CROPS}
    config = MagmaConfig(vision_config=vision, text_config=text, image_token_index=image_token_index,
                         mm_use_image_start_end=True)
    return MagmaForCausalLM(config).eval()
