"""A stand-in for InternVL's remote code (`trust_remote_code`), shaped like the published files (no tests here).

Copied in structure from OpenGVLab's `configuration_internvl_chat.py` / `modeling_internvl_chat.py` as shipped with
the InternVL2.5 / InternVL3 hub checkpoints (e.g. OpenGVLab/InternVL3-1B):

- `InternVLChatConfig` declares no `sub_configs`: `llm_config` is built from the config.json dict by its
  `architectures[0]` (here `Qwen2ForCausalLM` -> `Qwen2Config`), `vision_config` likewise; `is_composition = True`.
- `InternVLChatModel(PreTrainedModel)` sets `config.llm_config._attn_implementation` to 'eager' when flash-attn is
  absent (as on this CPU), builds `language_model = Qwen2ForCausalLM(config.llm_config)` (so the language model's
  config *is* `config.llm_config`), extracts features as published (drop CLS, pixel shuffle, `mlp1`), and
  - `chat()` expands `<image>` into `<img>` + `<IMG_CONTEXT>` x num_image_token x tiles + `</img>` with the
    `internvl2_5` conversation template and sets `self.img_context_token_id`, then calls `self.generate(...)`;
  - `generate(pixel_values, input_ids, attention_mask, **kw)` writes the tile features into the context-token
    embeddings and calls `language_model.generate(inputs_embeds=...)` (only the answer comes back);
  - `forward(pixel_values, input_ids, attention_mask, position_ids, image_flags, ...)` needs `image_flags`
    (one per tile; `image_flags.squeeze(-1)` fails on None).
Only the vision tower is a stand-in (a patch convolution with a CLS token instead of InternViT's 24 layers).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast


class InternVisionConfig(PretrainedConfig):
    model_type = "intern_vit_6b"

    def __init__(self, num_channels=3, patch_size=14, image_size=448, hidden_size=16, **kwargs):
        super().__init__(**kwargs)
        self.num_channels, self.patch_size, self.image_size, self.hidden_size = (num_channels, patch_size,
                                                                                 image_size, hidden_size)


class InternVLChatConfig(PretrainedConfig):
    model_type = "internvl_chat"
    is_composition = True  # and, as published, no `sub_configs`

    def __init__(self, vision_config=None, llm_config=None, use_backbone_lora=0, use_llm_lora=0, select_layer=-1,
                 force_image_size=None, downsample_ratio=0.5, template=None, dynamic_image_size=False,
                 use_thumbnail=False, ps_version="v1", min_dynamic_patch=1, max_dynamic_patch=6, **kwargs):
        super().__init__(**kwargs)
        vision_config = vision_config or {"architectures": ["InternVisionModel"]}
        llm_config = llm_config or {"architectures": ["Qwen2ForCausalLM"]}
        self.vision_config = InternVisionConfig(**vision_config)
        if llm_config["architectures"][0] == "Qwen2ForCausalLM":
            self.llm_config = Qwen2Config(**llm_config)
        else:
            raise ValueError(f"Unsupported architecture: {llm_config['architectures'][0]}")
        self.use_backbone_lora, self.use_llm_lora = use_backbone_lora, use_llm_lora
        self.select_layer, self.force_image_size, self.downsample_ratio = select_layer, force_image_size, \
            downsample_ratio
        self.template, self.dynamic_image_size, self.use_thumbnail = template, dynamic_image_size, use_thumbnail
        self.ps_version, self.min_dynamic_patch, self.max_dynamic_patch = ps_version, min_dynamic_patch, \
            max_dynamic_patch
        self.hidden_size = self.llm_config.hidden_size
        self.tie_word_embeddings = False
        self.llm_config.tie_word_embeddings = self.tie_word_embeddings


def config_json(vocab_size: int, **overrides) -> dict:
    """An InternVL3-1B-shaped config.json (nested dicts, as `from_pretrained` hands them to the config), tiny."""
    llm = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": vocab_size, "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 8192, "rope_theta": 1000000.0,
           "initializer_range": 0.25}  # wider than the real 0.02, so random heads attend unevenly
    return {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "template": "internvl2_5",
            "force_image_size": 448, "downsample_ratio": 0.5, "dynamic_image_size": True, "use_thumbnail": True,
            "ps_version": "v2", "min_dynamic_patch": 1, "max_dynamic_patch": 12, "select_layer": -1,
            "vision_config": {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b",
                              "image_size": 448, "patch_size": 14, "hidden_size": 16},
            "llm_config": llm, **overrides}


class InternVisionStandIn(nn.Module):
    """InternViT's interface: pixel_values (tiles, 3, 448, 448) -> last_hidden_state (tiles, 1 + patches, hidden)."""

    def __init__(self, config: InternVisionConfig):
        super().__init__()
        self.patch = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size, config.patch_size)
        self.cls = nn.Parameter(torch.randn(1, 1, config.hidden_size))

    def forward(self, pixel_values, output_hidden_states=False, return_dict=True):
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        return SimpleNamespace(last_hidden_state=torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1))


SYSTEM = "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。"


class InternVLChatModel(PreTrainedModel):
    config_class = InternVLChatConfig
    main_input_name = "pixel_values"
    base_model_prefix = "language_model"
    _supports_flash_attn_2 = True
    _no_split_modules = ["InternVisionModel", "Qwen2DecoderLayer"]

    def __init__(self, config: InternVLChatConfig, use_flash_attn=True):
        super().__init__(config)
        image_size = config.force_image_size or config.vision_config.image_size
        patch_size = config.vision_config.patch_size
        self.select_layer, self.template = config.select_layer, config.template
        self.num_image_token = int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))
        self.downsample_ratio, self.ps_version = config.downsample_ratio, config.ps_version
        use_flash_attn = False  # has_flash_attn is False without the flash_attn package
        config.llm_config._attn_implementation = "flash_attention_2" if use_flash_attn else "eager"
        self.vision_model = InternVisionStandIn(config.vision_config)
        self.language_model = Qwen2ForCausalLM(config.llm_config)
        vit_hidden, llm_hidden = config.vision_config.hidden_size, config.llm_config.hidden_size
        self.mlp1 = nn.Sequential(nn.LayerNorm(vit_hidden * int(1 / self.downsample_ratio) ** 2),
                                  nn.Linear(vit_hidden * int(1 / self.downsample_ratio) ** 2, llm_hidden),
                                  nn.GELU(), nn.Linear(llm_hidden, llm_hidden))
        self.img_context_token_id = None
        self.system_message = SYSTEM
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            module.weight.data.normal_(0.0, 0.2)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, 0.2)

    def forward(self, pixel_values, input_ids=None, attention_mask=None, position_ids=None, image_flags=None,
                past_key_values=None, labels=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                return_dict=None):
        image_flags = image_flags.squeeze(-1)
        input_embeds = self.language_model.get_input_embeddings()(input_ids).clone()
        vit_embeds = self.extract_feature(pixel_values)
        vit_embeds = vit_embeds[image_flags == 1]
        B, N, C = input_embeds.shape
        input_embeds = input_embeds.reshape(B * N, C)
        input_ids = input_ids.reshape(B * N)
        selected = input_ids == self.img_context_token_id
        input_embeds[selected] = input_embeds[selected] * 0.0 + vit_embeds.reshape(-1, C)
        input_embeds = input_embeds.reshape(B, N, C)
        outputs = self.language_model(inputs_embeds=input_embeds, attention_mask=attention_mask,
                                      position_ids=position_ids, past_key_values=past_key_values, use_cache=use_cache,
                                      output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        return CausalLMOutputWithPast(logits=outputs.logits, past_key_values=outputs.past_key_values,
                                      hidden_states=outputs.hidden_states, attentions=outputs.attentions)

    def pixel_shuffle(self, x, scale_factor=0.5):
        n, w, h, c = x.size()
        x = x.view(n, w, int(h * scale_factor), int(c / scale_factor))
        x = x.permute(0, 2, 1, 3).contiguous()
        x = x.view(n, int(h * scale_factor), int(w * scale_factor), int(c / (scale_factor * scale_factor)))
        if self.ps_version != "v1":
            x = x.permute(0, 2, 1, 3).contiguous()
        return x

    def extract_feature(self, pixel_values):
        vit_embeds = self.vision_model(pixel_values=pixel_values, output_hidden_states=False,
                                       return_dict=True).last_hidden_state
        vit_embeds = vit_embeds[:, 1:, :]
        h = w = int(vit_embeds.shape[1] ** 0.5)
        vit_embeds = vit_embeds.reshape(vit_embeds.shape[0], h, w, -1)
        vit_embeds = self.pixel_shuffle(vit_embeds, scale_factor=self.downsample_ratio)
        vit_embeds = vit_embeds.reshape(vit_embeds.shape[0], -1, vit_embeds.shape[-1])
        return self.mlp1(vit_embeds)

    def chat(self, tokenizer, pixel_values, question, generation_config, history=None, return_history=False,
             num_patches_list=None, IMG_START_TOKEN="<img>", IMG_END_TOKEN="</img>",  # noqa: N803 (published names)
             IMG_CONTEXT_TOKEN="<IMG_CONTEXT>", verbose=False):  # noqa: N803
        if history is None and pixel_values is not None and "<image>" not in question:
            question = "<image>\n" + question
        if num_patches_list is None:
            num_patches_list = [pixel_values.shape[0]] if pixel_values is not None else []
        assert pixel_values is None or len(pixel_values) == sum(num_patches_list)
        self.img_context_token_id = tokenizer.convert_tokens_to_ids(IMG_CONTEXT_TOKEN)
        sep = "<|im_end|>\n"  # the internvl2_5 conversation template (MPT style)
        eos_token_id = tokenizer.convert_tokens_to_ids(sep.strip())
        history = [] if history is None else history
        query = (f"<|im_start|>system\n{self.system_message}{sep}<|im_start|>user\n{question}{sep}"
                 "<|im_start|>assistant\n")
        for num_patches in num_patches_list:
            image_tokens = IMG_START_TOKEN + IMG_CONTEXT_TOKEN * self.num_image_token * num_patches + IMG_END_TOKEN
            query = query.replace("<image>", image_tokens, 1)
        model_inputs = tokenizer(query, return_tensors="pt")
        input_ids = model_inputs["input_ids"].to(self.device)
        attention_mask = model_inputs["attention_mask"].to(self.device)
        generation_config["eos_token_id"] = eos_token_id
        generation_output = self.generate(pixel_values=pixel_values, input_ids=input_ids,
                                          attention_mask=attention_mask, **generation_config)
        response = tokenizer.batch_decode(generation_output, skip_special_tokens=True)[0]
        response = response.split(sep.strip())[0].strip()
        history.append((question, response))
        return (response, history) if return_history else response

    @torch.no_grad()
    def generate(self, pixel_values=None, input_ids=None, attention_mask=None, visual_features=None,
                 generation_config=None, output_hidden_states=None, **generate_kwargs):
        assert self.img_context_token_id is not None
        if pixel_values is not None:
            vit_embeds = visual_features if visual_features is not None else self.extract_feature(pixel_values)
            input_embeds = self.language_model.get_input_embeddings()(input_ids)
            B, N, C = input_embeds.shape
            input_embeds = input_embeds.reshape(B * N, C)
            selected = input_ids.reshape(B * N) == self.img_context_token_id
            assert selected.sum() != 0
            input_embeds[selected] = vit_embeds.reshape(-1, C).to(input_embeds.device)
            input_embeds = input_embeds.reshape(B, N, C)
        else:
            input_embeds = self.language_model.get_input_embeddings()(input_ids)
        return self.language_model.generate(inputs_embeds=input_embeds, attention_mask=attention_mask,
                                            generation_config=generation_config,
                                            output_hidden_states=output_hidden_states, use_cache=True,
                                            **generate_kwargs)


def build(vocab_size: int, dtype: torch.dtype = torch.float32, seed: int = 0, **overrides) -> InternVLChatModel:
    """What `AutoModel.from_pretrained(..., trust_remote_code=True)` returns for the config above (random weights)."""
    torch.manual_seed(seed)
    config = InternVLChatConfig(**config_json(vocab_size, **overrides))
    return InternVLChatModel(config).to(dtype).eval()
