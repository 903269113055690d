"""Locally built word-level tokenizers for tiny checkpoints.

No tokenizer can be downloaded here, so each tiny family gets a word-level `tokenizers` model that knows the
family's special tokens, the words our prompts and chat templates use, integers for coordinates and every ASCII
punctuation mark. Real Processor classes accept it once it is wrapped in `PreTrainedTokenizerFast`.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

UNK = "<unk>"

# Words used by chat templates, our task prompts and the synthetic scenes. Unknown words map to <unk>.
BASE_WORDS: tuple[str, ...] = tuple(
    """
    you are a an the helpful assistant system user model human gpt picture image video frame please output
    give provide locate find detect where is of in on at to and or with without its their this that these those
    bounding box bbox boxes coordinates coordinate format json label region object objects thing which what who
    describes described describe sentence expression referring refer answer question single word number letter
    option options choice choices from given directly only following top bottom left right middle center centre
    above below behind front near far next beside between inside outside big small large tiny huge little tall
    short wide thin long round square circle triangle rectangle star diamond cross ring shape shapes colour color
    colours colors red green blue yellow purple orange pink white black gray grey brown cyan magenta
    how many count there yes no true false not one two three four five six seven eight nine ten
    x y x1 y1 x2 y2 xmin ymin xmax ymax top-left bottom-right all values floating point numbers bounded between
    specified as return report every each matches match description think step by ref det grounding
    person man woman people dog cat car bike bicycle bus table chair cup bottle
    """.split()
)


def build_tokenizer(
    special_tokens: Sequence[str],
    *,
    plain_tokens: Sequence[str] = (),
    extra_words: Iterable[str] = (),
    max_integer: int = 1024,
    named_specials: Mapping[str, str] | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    chat_template: str | None = None,
    lowercase: bool = True,
    model_max_length: int = 32768,
    add_bos_token: bool = False,
    padding_side: str = "right",
) -> PreTrainedTokenizerFast:
    """Build a word-level fast tokenizer whose ids start with the special tokens in the given order.

    `named_specials` maps attribute names that processors read (e.g. ``image_token``) to token strings; they are
    registered as extra special tokens so ``tok.image_token`` and ``tok.image_token_id`` work.
    `plain_tokens` come right after the special tokens: whole-word added tokens that decoding keeps (PaliGemma's
    ``<locNNNN>``, GLM's ``<|begin_of_box|>``), because box parsers read them from the decoded text.
    `add_bos_token` prepends the BOS token on every encode, as Llama-3 tokenizers do. `padding_side` is saved with
    the tokenizer (setting the attribute afterwards is not).
    """
    vocab: dict[str, int] = {}

    def add(tok: str) -> None:
        if tok not in vocab:
            vocab[tok] = len(vocab)

    add(UNK)
    for tok in (*special_tokens, *plain_tokens):
        add(tok)
    for ch in string.punctuation:
        add(ch)
    for i in range(max_integer + 1):
        add(str(i))
    for word in (*BASE_WORDS, *extra_words):
        add(word.lower() if lowercase else word)

    tok_model = models.WordLevel(vocab=vocab, unk_token=UNK)
    backend = Tokenizer(tok_model)
    norms = [normalizers.NFKC()]
    if lowercase:
        norms.append(normalizers.Lowercase())
    backend.normalizer = normalizers.Sequence(norms)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=False),
        ]
    )
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)

    specials = [UNK, *special_tokens]
    extra_special = dict(named_specials or {})
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK,
        bos_token=bos_token,
        eos_token=eos_token,
        pad_token=pad_token,
        model_max_length=model_max_length,
        padding_side=padding_side,
        extra_special_tokens=extra_special or None,
        **({"add_bos_token": True} if add_bos_token else {}),
    )
    # Register every special token so it is matched before pre-tokenization and skipped on decode.
    tok.add_special_tokens({"additional_special_tokens": [t for t in specials if t not in _core(tok)]},
                           replace_extra_special_tokens=False)
    if plain_tokens:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain_tokens])
    if chat_template is not None:
        tok.chat_template = chat_template
    _check_ids_stable(tok, vocab)
    return tok


def _core(tok: PreTrainedTokenizerFast) -> set[str]:
    return {t for t in (tok.unk_token, tok.bos_token, tok.eos_token, tok.pad_token) if t}


def _check_ids_stable(tok: PreTrainedTokenizerFast, vocab: Mapping[str, int]) -> None:
    """Config token ids come from this vocabulary, so adding specials must never renumber anything."""
    for token, idx in vocab.items():
        got = tok.convert_tokens_to_ids(token)
        if got != idx:
            raise RuntimeError(f"tokenizer renumbered {token!r}: {idx} -> {got}")


def chatml_tokenizer(special_tokens: Sequence[str], chat_template: str, extra_words: Iterable[str] = (),
                     image_token: str = "<image>", video_token: str = "<video>") -> PreTrainedTokenizerFast:
    """A Qwen-style ChatML tokenizer (`<|endoftext|>` pads, `<|im_end|>` ends a turn, "\\n" a token, left padding)
    naming its image and video placeholders; `special_tokens` must hold those four."""
    return build_tokenizer(special_tokens, plain_tokens=("\n",), extra_words=extra_words,
                           named_specials={"image_token": image_token, "video_token": video_token},
                           eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=chat_template,
                           padding_side="left")
