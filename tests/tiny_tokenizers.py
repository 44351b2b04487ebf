"""Tiny tokenizers trained offline (``tokenizers``' trainers) in the layout of each real family's
checkpoint folder: tokenizer.json, tokenizer_config.json and special_tokens_map.json as the hub's
files hold them, each vocabulary a few hundred tokens, so that a model fixture stays tiny.

Each builder writes into ``folder`` and returns a ``Tiny``: the vocabulary's size and the ids of
the bos and eos tokens (``bos`` is None where the family adds none). No config.json is written:
a checkpoint fixture writes its own (``model_type`` decides the class ``AutoTokenizer`` uses, see
``transformer_walkthrough.checkpoints.bpe``); ``write_model_type`` writes a minimal one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_walkthrough.checkpoints.bpe import bytes_to_unicode

CORPUS = [
    "The cat sat on the mat. The dog ate the bone!",
    "A quick brown fox jumps over the lazy dog, and the cat watches.",
    "Café, naïve, résumé: accents are letters too. Über schön.",
    "Numbers 1234567 and 3.14159 and 42 are digits; so is 2024.",
    "It's what they're saying: we'll see, I'd think, you've been.",
    "the the the cat cat dog mat sat on on over",
    "Hello world, hello there, hello again.",
    "Transformers read tokens; attention weighs them.",
] * 4

# Llama 3's and Qwen2's pre-tokenizer regexes, as their tokenizer.json files spell them.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class Tiny:
    """What a fixture needs of a tiny tokenizer: its size (the embedding table's rows) and ids."""

    vocab_size: int
    bos: int | None
    eos: int


def _added(content: str, i: int, special: bool = True) -> dict:
    return {
        "id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": not special, "special": special,
    }  # fmt: skip


def _write(folder: Path, tokenizer: dict, config: dict, special_map: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tokenizer["added_tokens"]}
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": decoder, **config}, indent=2), encoding="utf-8"
    )
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2), encoding="utf-8")


def write_model_type(folder: Path, model_type: str) -> None:
    """A minimal config.json naming the model's type, as every checkpoint has one."""
    (Path(folder) / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")


def _byte_level(split: str, nfc: bool, vocab_size: int) -> dict:
    """A byte-level BPE (Split regex, then ByteLevel without its own regex) trained on CORPUS."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    return json.loads(tok.to_str())


def llama3_style(folder: Path) -> Tiny:
    """Llama 3's layout: byte-level BPE with its Split regex and ``ignore_merges``, specials
    ``<|begin_of_text|>``, ``<|end_of_text|>``, ``<|eot_id|>`` past the vocabulary, a post-processor
    Sequence[ByteLevel, TemplateProcessing] that puts ``<|begin_of_text|>`` first, and a
    tokenizer_config.json of class PreTrainedTokenizerFast."""
    folder = Path(folder)
    spec = _byte_level(LLAMA3_SPLIT, nfc=False, vocab_size=360)
    spec["model"]["ignore_merges"] = True
    n = len(spec["model"]["vocab"])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
    spec["added_tokens"] = [_added(t, n + k) for k, t in enumerate(specials)]
    bos, eos = n, n + 1
    spec["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {
                "type": "TemplateProcessing",
                "single": [
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                ],
                "pair": [
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                    {"Sequence": {"id": "B", "type_id": 1}},
                ],
                "special_tokens": {
                    "<|begin_of_text|>": {
                        "id": "<|begin_of_text|>",
                        "ids": [bos],
                        "tokens": ["<|begin_of_text|>"],
                    }
                },
            },
        ],
    }
    config = {
        "bos_token": "<|begin_of_text|>",
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|end_of_text|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    _write(folder, spec, config, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})
    return Tiny(n + len(specials), bos, eos)


def qwen2_style(folder: Path) -> Tiny:
    """Qwen2's layout: byte-level BPE with an NFC normalizer and its Split regex, a ByteLevel
    post-processor (no bos), ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, and a
    tokenizer_config.json of class Qwen2Tokenizer with ``bos_token`` null."""
    folder = Path(folder)
    spec = _byte_level(QWEN2_SPLIT, nfc=True, vocab_size=360)
    n = len(spec["model"]["vocab"])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    spec["added_tokens"] = [_added(t, n + k) for k, t in enumerate(specials)]
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": False}  # fmt: skip
    config = {
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    special_map = {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                   "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}  # fmt: skip
    _write(folder, spec, config, special_map)
    return Tiny(n + len(specials), None, n)


def llama2_style(folder: Path, legacy_layout: bool, legacy: bool = False) -> Tiny:
    """Llama 2's / TinyLlama's layout: SentencePiece-style BPE (``▁`` for a space) with byte
    fallback, ``<unk>`` ``<s>`` ``</s>`` at 0, 1, 2 and the 256 byte pieces ``<0x00>``…``<0xFF>``
    after them; a TemplateProcessing that puts ``<s>`` first; tokenizer_config.json of class
    LlamaTokenizerFast with ``add_bos_token: true``, ``add_eos_token: false`` and ``legacy``.

    ``legacy_layout``: the older files' normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and
    no pre-tokenizer, decoder Sequence[Replace, ByteFallback, Fuse, Strip]; else the newer files'
    pre-tokenizer Metaspace (prepend_scheme "first") and decoder Metaspace. The corpus has no
    newline, so ``\\n`` is the byte piece ``<0x0A>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = Path(folder)
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", *byte_pieces], show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [_added(t, i) for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    if legacy_layout:
        spec["normalizer"] = {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            ],
        }
        spec["pre_tokenizer"] = None
        spec["decoder"] = {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        }
    else:
        metaspace = {"replacement": "▁", "prepend_scheme": "first", "split": False}
        spec["normalizer"] = None
        spec["pre_tokenizer"] = {"type": "Metaspace", **metaspace}
        spec["decoder"] = {"type": "Metaspace", **metaspace}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<s>", "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": legacy,
        "model_max_length": 2048,
        "pad_token": "</s>",
        "padding_side": "right",
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    special_map = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    _write(folder, spec, config, special_map)
    return Tiny(len(spec["model"]["vocab"]), 1, 2)


def _gpt2_bpe(vocab_size: int, specials: list[str], corpus: list[str] | None = None) -> Any:
    """GPT-2's byte-level BPE (its own regex, ByteLevel decoder) trained on ``corpus`` (CORPUS) with
    ``specials``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=specials,
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS if corpus is None else corpus, trainer)
    return tok


def _vocab_and_merges(folder: Path, vocab: dict[str, int], merges: list) -> None:
    """vocab.json and merges.txt (``#version`` line first), as older GPT-2 and RoBERTa folders hold them."""
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def gpt2_vocab_merges(folder: Path, add_prefix_space: bool | None = None) -> Tiny:
    """A GPT-2 fine-tune's older layout: vocab.json and merges.txt (``#version`` line first), no
    tokenizer.json; ``<|endoftext|>`` the last token of vocab.json. ``add_prefix_space`` is
    written to tokenizer_config.json when given."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = json.loads(_gpt2_bpe(350, ["<|endoftext|>"]).to_str())
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if t != "<|endoftext|>"}
    vocab = {t: n for n, t in enumerate(sorted(vocab, key=vocab.__getitem__))}
    eos = len(vocab)
    vocab["<|endoftext|>"] = eos
    _vocab_and_merges(folder, vocab, spec["model"]["merges"])
    config: dict = {"model_max_length": 1024}
    if add_prefix_space is not None:
        config["add_prefix_space"] = add_prefix_space
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return Tiny(eos + 1, eos, eos)


def llama3_sized(folder: Path, size: int = 128_000, merges: int = 280_000) -> None:
    """A byte-level tokenizer.json of Llama 3's size: 128,000 tokens, 280,000 merges (several
    merges make one token, as in Llama 3's), 256 added tokens; a loading test's and
    benchmarks/bench_tokenizer.py's (no trainer: plain JSON)."""
    alphabet = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(alphabet)}
    pairs: list[str] = []
    letters = alphabet[:40]
    words = [""]
    while len(vocab) < size:  # every word of 2, 3, then 4 of the first 40 characters, by length
        words = [w + c for w in words for c in letters]
        for word in words if len(words[0]) > 1 else []:
            if len(vocab) == size:
                break
            vocab[word] = len(vocab)
            pairs += [f"{word[:k]} {word[k:]}" for k in range(1, len(word))]  # each split a merge
    pairs = pairs[:merges]
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [
        f"<|reserved_special_token_{n}|>" for n in range(254)
    ]
    spec = {
        "version": "1.0",
        "added_tokens": [_added(t, size + n) for n, t in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": LLAMA3_SPLIT},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab, "merges": pairs},
    }
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')


BERT_SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# CJK characters, so that some are in the vocabulary (each its own word) and others are not.
BERT_CORPUS = [*CORPUS, "猫は寝ている。中文 日本", "playing played plays player sleeping comfortably"] * 2


def bert_style(
    folder: Path,
    lower: bool = True,
    with_tokenizer_json: bool = True,
    config: dict | None = None,
    corpus: list[str] | None = None,
    vocab_size: int = 300,
) -> Tiny:
    """bert-base's layout: WordPiece (``##`` continuations) trained on ``corpus`` (BERT_CORPUS) to
    at most ``vocab_size`` tokens with a BertNormalizer of ``lower``, ``[PAD]``, two ``[unused]``,
    ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]`` first, a TemplateProcessing ``[CLS] $A [SEP]``;
    vocab.txt always (one token a line, as the hub's), tokenizer.json when
    ``with_tokenizer_json``; tokenizer_config.json as transformers 4.x saved it for
    bert-base-(un)cased, or ``config`` as it is (distilbert-base-uncased's is
    ``{"do_lower_case": true}``). ``bos`` is ``[CLS]``, ``eos`` ``[SEP]``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=BERT_SPECIALS, show_progress=False
    )
    tok.train_from_iterator(BERT_CORPUS if corpus is None else corpus, trainer)
    cls, sep = BERT_SPECIALS.index("[CLS]"), BERT_SPECIALS.index("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    vocab = tok.get_vocab()
    (folder / "vocab.txt").write_text(
        "\n".join(sorted(vocab, key=vocab.__getitem__)) + "\n", encoding="utf-8"
    )
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [_added(t, i) for i, t in enumerate(BERT_SPECIALS) if not t.startswith("[unused")]
    if with_tokenizer_json:
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    if config is None:
        decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in spec["added_tokens"]}
        config = {
            "added_tokens_decoder": decoder,
            "clean_up_tokenization_spaces": True,
            "cls_token": "[CLS]",
            "do_lower_case": lower,
            "mask_token": "[MASK]",
            "model_max_length": 512,
            "pad_token": "[PAD]",
            "sep_token": "[SEP]",
            "strip_accents": None,
            "tokenize_chinese_chars": True,
            "tokenizer_class": "BertTokenizer",
            "unk_token": "[UNK]",
        }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return Tiny(len(vocab), cls, sep)


def roberta_style(
    folder: Path, with_tokenizer_json: bool = True, corpus: list[str] | None = None, vocab_size: int = 360
) -> Tiny:
    """roberta-base's layout: byte-level BPE as GPT-2's (trained on ``corpus``, CORPUS by default,
    to ``vocab_size`` tokens before ``<mask>``), ``<s>`` ``<pad>`` ``</s>`` ``<unk>`` at
    0–3 and ``<mask>`` last, a RobertaProcessing post-processor (``<s> $A </s>``); vocab.json and
    merges.txt always, tokenizer.json when ``with_tokenizer_json``; tokenizer_config.json as
    transformers 4.x saved roberta-base's, ``<mask>`` with ``lstrip``."""
    from tokenizers import processors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _gpt2_bpe(vocab_size, ["<s>", "<pad>", "</s>", "<unk>"], corpus)
    mask = tok.get_vocab_size()
    tok.add_special_tokens(["<mask>"])  # then made lstrip below, as roberta-base's
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True)
    spec = json.loads(tok.to_str())
    spec["model"]["vocab"]["<mask>"] = mask
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    spec["added_tokens"] = [_added(t, i) for i, t in enumerate(specials)] + [
        {**_added("<mask>", mask), "lstrip": True}
    ]
    if with_tokenizer_json:
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    _vocab_and_merges(folder, spec["model"]["vocab"], spec["model"]["merges"])
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in spec["added_tokens"]}
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": True,
        "cls_token": "<s>",
        "eos_token": "</s>",
        "errors": "replace",
        "mask_token": "<mask>",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "tokenizer_class": "RobertaTokenizer",
        "trim_offsets": True,
        "unk_token": "<unk>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return Tiny(mask + 1, 0, 2)


def gemma_style(folder: Path) -> Tiny:
    """Gemma's layout: SentencePiece-style BPE with byte fallback and no prefix space (the normalizer
    replaces each space by ``▁``), ``<pad>`` ``<eos>`` ``<bos>`` ``<unk>`` ``<mask>`` at 0 to 4 and
    the 256 byte pieces after them, a TemplateProcessing that puts ``<bos>`` first; the pipeline
    transformers' GemmaTokenizer builds, written out in tokenizer.json."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    folder = Path(folder)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=[*specials, *byte_pieces], show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [_added(t, i) for i, t in enumerate(specials)]
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ],
    }
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": "<bos>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<bos>", "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}},
    }
    config = {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
        "clean_up_tokenization_spaces": False, "model_max_length": 2048, "tokenizer_class": "GemmaTokenizer",
    }  # fmt: skip
    special_map = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
    _write(folder, spec, config, special_map)
    return Tiny(len(spec["model"]["vocab"]), 2, 1)
