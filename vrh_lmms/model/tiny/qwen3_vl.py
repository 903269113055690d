"""Tiny random-weight Qwen3-VL checkpoints of the real transformers class.

Structurally real: GQA text backbone with q/k norms, interleaved M-RoPE, a 16 px patch vision tower with learned
position embeddings and DeepStack mergers that inject vision features into the first text layers.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily
from vrh_lmms.model.tiny.qwen2_5_vl import SPECIALS as QWEN25_SPECIALS
from vrh_lmms.model.tiny.vocab import build_tokenizer

# Qwen3 keeps Qwen2.5-VL's special tokens and adds the reasoning / tool tokens of the Qwen3 vocabulary.
SPECIALS = (*QWEN25_SPECIALS, "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
            "<|file_sep|>")
PLAIN = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")

# The official Qwen3-VL Instruct template (tools, tool responses with images, assistant tool calls), reproduced.
CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with
    function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within
    <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\":
    <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

DEFAULT_VISION = {"depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
                  "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
                  "deepstack_visual_indexes": [0, 1]}
# Interleaved M-RoPE sections (t, h, w) over head_dim / 2 = 8 frequencies; the real 24/20/20 split scaled down.
MROPE_SECTION = [4, 2, 2]


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        plain_tokens=PLAIN,
        extra_words=extra_words,
        named_specials={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                        "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def make_processor(tokenizer, *, min_pixels: int = 32 * 32 * 4, max_pixels: int = 32 * 32 * 256):
    # Qwen3-VL normalises with mean = std = 0.5 and cuts 16 px patches, merged 2x2 into 32 px cells.
    common = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5]}
    image_processor = Qwen2VLImageProcessor(size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, **common)
    video_processor = Qwen3VLVideoProcessor(size={"shortest_edge": min_pixels, "longest_edge": max_pixels * 4},
                                            **common)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                            chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"],
                  "initializer_range": initializer_range}
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": MROPE_SECTION,
                         "mrope_interleaved": True},
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        initializer_range=initializer_range,
    )
    return Qwen3VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


# the factory: a complete tiny Qwen3-VL checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("Qwen3-VL", Qwen3VLForConditionalGeneration,
                     make_tokenizer, make_config, lambda tokenizer, vision, **kw: make_processor(tokenizer, **kw))
build = FAMILY.build
