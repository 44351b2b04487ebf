"""The tokenizer that ``transformers.AutoTokenizer.from_pretrained(folder)`` (5.18) builds from a
checkpoint's folder, as a ``tokenizer.json`` spec: what ``bpe.BPETokenizer`` checks and runs.

What transformers 5.18 does (``models/auto/tokenization_auto.py``, ``tokenization_utils_base``,
``tokenization_utils_tokenizers.TokenizersBackend``):

- The class comes from tokenizer_config.json's ``tokenizer_class`` ("Fast" stripped), unless
  config.json's ``model_type`` registers another one (``mistral``, ``mixtral``: TokenizersBackend
  while mistral-common is not installed; ``qwen2``: Qwen2Tokenizer whatever the file says).
  ``PreTrainedTokenizerFast`` (Llama 3, Mistral's newer files) is ``TokenizersBackend``.
- ``TokenizersBackend`` uses tokenizer.json as it is. ``LlamaTokenizer``, ``Qwen2Tokenizer`` and
  ``GPT2Tokenizer`` have their own ``__init__``: only the vocabulary, the merges and the
  post-processor are read from tokenizer.json; normalizer, pre-tokenizer, decoder and the BPE
  model's options are the class's own. Llama: no normalizer, ``Metaspace(prepend_scheme=…,
  split=False)`` — ``"first"`` unless ``legacy: true`` (``"always"``), ``"never"`` when
  ``add_prefix_space: false`` — so the older files' Prepend/Replace normalizer is not used; the
  decoder Replace, ByteFallback, Fuse, Strip (the Strip only with a prefix space); BPE with
  ``byte_fallback`` and ``fuse_unk`` and no unk token. Qwen2: NFC, its own Split regex, ByteLevel.
  GPT-2: ByteLevel (``add_prefix_space`` from the config). The added tokens are then those of
  tokenizer_config.json's ``added_tokens_decoder`` (else tokenizer.json's), and the special tokens
  it names (the class's defaults where it names none) are added after them.
- ``BertTokenizer`` (``model_type`` bert and distilbert; ``DistilBertTokenizer`` is the same
  class) reads only the vocabulary of tokenizer.json, or vocab.txt (one token a line, its id the
  line's number) where there is none, and builds the rest from tokenizer_config.json: WordPiece
  (``##``, at most 100 characters a word, the config's unk token), BertNormalizer(clean_text,
  ``tokenize_chinese_chars`` (true), ``strip_accents`` (null: as the lowercasing),
  ``do_lower_case`` (true, whatever tokenizer.json's normalizer says)), BertPreTokenizer, the
  WordPiece decoder, and its own ``[CLS] $A [SEP]`` template, whatever the file's
  post-processor. ``decode`` applies ``clean_up_tokenization`` (`` .`` -> ``.``) when the
  config's ``clean_up_tokenization_spaces`` is true (for WordPiece only).
- ``RobertaTokenizer`` (``model_type`` roberta) is GPT-2's byte-level BPE (``add_prefix_space``,
  false) with a RobertaProcessing post-processor (``<s> $A </s>``, ``trim_offsets``), from
  tokenizer.json's vocabulary and merges or vocab.json + merges.txt; ``<mask>``'s ``lstrip`` comes
  from the config's ``added_tokens_decoder``.
- With a tokenizer.json, ``add_bos_token`` and ``add_eos_token`` are dropped from the config
  (``_from_pretrained``): the bos is there exactly when tokenizer.json's post-processor puts it
  there. Without one (GPT-2's vocab.json + merges.txt), they make the post-processor
  (``update_post_processor``: ``bos:0 $A:0 eos:0``).
- ``clean_up_tokenization_spaces`` is ignored for BPE unless forced; ``split_special_tokens``
  keeps special tokens as text; ``fix_mistral_regex`` only acts when passed to from_pretrained.

What the config sets that cannot be reproduced here (another class, a forced clean-up, split
special tokens, an added_tokens.json, ``add_bos_token``/``add_eos_token`` for BERT or RoBERTa, a
vocab.txt line the library would read otherwise than it is written) is refused in one line,
never approximated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..regular_files import read_regular
from .errors import CheckpointError
from .jsonfile import MAX_CONFIG_BYTES, read_json, shown
from .tokenizer_check import MAX_MERGES, MAX_TOKEN_CHARS, MAX_VOCAB_ENTRIES

BACKEND, LLAMA, QWEN2, GPT2 = "TokenizersBackend", "LlamaTokenizer", "Qwen2Tokenizer", "GPT2Tokenizer"
GEMMA = "GemmaTokenizer"
BERT, DISTILBERT, ROBERTA = "BertTokenizer", "DistilBertTokenizer", "RobertaTokenizer"
WORDPIECE = {BERT, DISTILBERT}  # DistilBertTokenizer is BertTokenizer with another model_input_names
# transformers' own names for the class that uses tokenizer.json as it is.
_AS_IS = {"TokenizersBackend", "PreTrainedTokenizer", "PreTrainedTokenizerFast", "PythonBackend"}
_CLASSES = {LLAMA, GEMMA, QWEN2, GPT2, BERT, DISTILBERT, ROBERTA} | _AS_IS
# model_type -> its registered class: transformers' own TOKENIZER_MAPPING_NAMES, as AutoTokenizer
# reads it for any folder (qwen3, mixtral: model types no family here converts). Not a family
# record's field: the families import this reader, so it cannot look them up.
_REGISTERED = {"mistral": BACKEND, "mixtral": BACKEND, "qwen2": QWEN2, "qwen2_moe": QWEN2,
               "qwen3": QWEN2, "gpt2": GPT2, "bert": BERT, "distilbert": BERT,
               "roberta": ROBERTA, "gemma": GEMMA, "gemma2": GEMMA, "gemma3_text": GEMMA}  # fmt: skip
_HUB_CLASS_WRONG = {"qwen2"}  # MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, of those above
# Qwen2Tokenizer's PRETOKENIZE_REGEX (the class's, whatever tokenizer.json says).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Each class's special tokens where tokenizer_config.json does not name them.
DEFAULTS: dict[str, dict[str, str | None]] = {
    BACKEND: {},
    LLAMA: {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    GEMMA: {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
            "mask_token": "<mask>"},
    QWEN2: {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    GPT2: {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    BERT: {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
           "mask_token": "[MASK]"},
    ROBERTA: {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
              "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"},
}  # fmt: skip
DEFAULTS[DISTILBERT] = DEFAULTS[BERT]
MAX_VOCAB_TXT_BYTES = 100_000_000  # bert-base-uncased's vocab.txt is 232 kB, multilingual's 996 kB
MAX_MERGES_BYTES = 100_000_000  # GPT-2's merges.txt is 456 kB, Qwen2's 1.7 MB


class Folder:
    """What transformers reads of a folder besides tokenizer.json: the class it builds, the
    tokenizer config's settings, the special tokens by name (``bos_token`` -> its text)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.config = _object(folder / "tokenizer_config.json")
        model_type = _object(folder / "config.json", missing_ok=True).get("model_type")
        self.model_type = model_type if isinstance(model_type, str) else None
        self.cls = self._class()
        for key in ("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                    "split_special_tokens"):  # fmt: skip
            if self.config.get(key):
                raise self.fail(f"sets {key}, which this tool does not reproduce (false)")
        if (folder / "added_tokens.json").exists():
            raise CheckpointError(f"{folder / 'added_tokens.json'}: an older layout this tool does not read")

    def fail(self, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.folder / 'tokenizer_config.json'}: {problem}")

    def setting(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if type(value) is not bool:
            raise self.fail(f"{key} is {shown(value, 40)}, not true or false")
        return value

    def _class(self) -> str:
        """The class AutoTokenizer picks (see the module), or a one-line refusal."""
        hub = self.config.get("tokenizer_class")
        if hub is not None and not (isinstance(hub, str) and len(hub) <= 100):
            raise self.fail(f"tokenizer_class is {shown(hub, 40)}, not a class name")
        hub = hub.removesuffix("Fast") if hub else None
        registered = _REGISTERED.get(self.model_type or "")
        if hub and registered and registered != hub:
            if registered == BACKEND:
                return BACKEND
            hub = registered if self.model_type in _HUB_CLASS_WRONG else hub
        name = hub or registered or BACKEND
        if name not in _CLASSES:
            supported = (
                "LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer, BertTokenizer,"
                " DistilBertTokenizer, RobertaTokenizer, PreTrainedTokenizerFast"
            )
            raise self.fail(f"tokenizer_class {name}, which transformers builds its own way ({supported})")
        return BACKEND if name in _AS_IS else name

    def special(self, legacy_map: bool) -> dict[str, Any]:
        """Each named special token (str, or an added token's fields) as the class will hold it."""
        named: dict[str, Any] = dict(DEFAULTS[self.cls])
        sources = [self.config]
        if legacy_map:  # no added_tokens_decoder: transformers reads special_tokens_map.json
            sources.append(_object(self.folder / "special_tokens_map.json", missing_ok=True))
        for source in sources:
            for key, value in source.items():
                if key in NAMED or key in ("additional_special_tokens", "extra_special_tokens"):
                    named[key] = value
        return named


def _object(path: Path, missing_ok: bool = True) -> dict[str, Any]:
    try:
        data = read_json(path, MAX_CONFIG_BYTES, what="readable JSON")
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise CheckpointError(f"{path.parent}: missing {path.name}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return data


def _token(value: Any, where: str, folder: Folder) -> dict[str, Any]:
    """An added token (``AddedToken``'s fields) from a string or an object of tokenizer_config.json.

    Its fields are checked here, where they are first used, not later with the spec: the ids of
    the special tokens are looked up (``library_ids``, which hashes each token's fields) before
    ``check_tokenizer`` sees the spec they are part of."""
    if isinstance(value, str):  # AddedToken(text, special=True): normalized is not special
        value = {"content": value}
    if not isinstance(value, dict) or not isinstance(value.get("content"), str):
        raise folder.fail(f"{where} is {shown(value, 40)}, not a token")
    fields = {"content": value["content"], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}  # fmt: skip
    for key in ("single_word", "lstrip", "rstrip", "normalized", "special"):
        if key in value:
            if type(value[key]) is not bool:
                raise folder.fail(f"{where}.{key} is {shown(value[key], 40)}, not true or false")
            fields[key] = value[key]
    return fields


def added_tokens(folder: Folder, file_added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The added tokens a class with its own ``__init__`` adds, in order (``TokenizersBackend``):
    ``added_tokens_decoder`` by id (else tokenizer.json's), then the named special tokens it lacks."""
    decoder = folder.config.get("added_tokens_decoder")
    if decoder is None:
        entries = sorted(file_added, key=lambda t: t["id"])
    elif not isinstance(decoder, dict) or len(decoder) > 1 << 17:
        raise folder.fail("added_tokens_decoder is not an object of id -> token")
    else:
        entries = []
        for key, value in decoder.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 8):
                raise folder.fail(f"added_tokens_decoder has the id {shown(key, 20)}, not an id")
            entries.append({"id": int(key), **_token(value, f"added_tokens_decoder[{key}]", folder)})
        entries.sort(key=lambda t: t["id"])
    named = folder.special(legacy_map=decoder is None)
    texts = [t["content"] for t in entries]
    extra: list[dict[str, Any]] = []
    values = [(key, named.get(key)) for key in NAMED]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        more = named.get(key) or []
        if isinstance(more, dict):
            more = list(more.values())
        if not isinstance(more, list) or len(more) > 1 << 12:
            raise folder.fail(f"{key} is not a list of tokens")
        values += [(f"{key}[{n}]", value) for n, value in enumerate(more)]
    for where, value in values:
        if value is None:
            continue
        token = _token(value, where, folder)
        if token["content"] not in texts:
            texts.append(token["content"])
            extra.append({**token, "special": True})
    next_id = max((t["id"] for t in entries), default=-1) + 1
    # The library assigns the ids (``bpe._library_ids``); these are only the file's field.
    out = entries + [{"id": next_id + n, **t} for n, t in enumerate(extra)]
    if folder.cls == QWEN2:  # Qwen2Tokenizer adds all its special tokens once more, as special
        out += [{"id": 0, **_token(t["content"], "", folder)} for t in out if t["special"]]
    return out


def rebuilt(folder: Folder, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (tokenizer.json's JSON, unchecked) as the class rebuilds it: the class's components
    around the file's vocabulary, merges and post-processor (see the module)."""
    if folder.cls == BACKEND or not isinstance(raw.get("model"), dict):
        return raw
    model = raw["model"]
    wanted = "WordPiece" if folder.cls in WORDPIECE else "BPE"
    if model.get("type", "BPE") != wanted:
        raise CheckpointError(f"{folder.folder / 'tokenizer.json'}: {folder.cls} reads a {wanted} model only")
    base = {"type": "BPE", "dropout": None, "unk_token": None, "vocab": model.get("vocab"),
            "merges": model.get("merges", []), "ignore_merges": False}  # fmt: skip
    added = raw.get("added_tokens") or []
    if not isinstance(added, list) or not all(
        isinstance(t, dict) and type(t.get("id")) is int for t in added
    ):
        added = []  # check_tokenizer refuses the file's list below, when it is used at all
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(folder, added),
        "post_processor": raw.get("post_processor"),
    }
    if folder.cls in WORDPIECE:
        return _bert(folder, spec, model.get("vocab"))
    if folder.cls == GEMMA:  # GemmaTokenizer: no prefix space, each space made "▁" before the split
        return spec | {
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                              "invert": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": {**base, "unk_token": _content(folder, "unk_token"), "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True},
        }  # fmt: skip
    prefix = folder.setting("add_prefix_space", folder.cls == LLAMA)
    if folder.cls == LLAMA:
        scheme = ("first" if not folder.setting("legacy", False) else "always") if prefix else "never"
        decoders = [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}]  # fmt: skip
        if prefix:
            decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        return spec | {
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Metaspace",
                "replacement": "▁",
                "prepend_scheme": scheme,
                "split": False,
            },
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": {
                **base,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": True,
                "byte_fallback": True,
            },
        }
    byte_level = {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True}
    model_dict = base | {"continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                         "byte_fallback": False}  # fmt: skip
    decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    if folder.cls == QWEN2:
        split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False}
        pre = {"type": "Sequence", "pretokenizers": [split, byte_level | {"use_regex": False}]}
        return spec | {
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": pre,
            "decoder": decoder,
            "model": model_dict,
        }
    spec |= {"normalizer": None, "pre_tokenizer": byte_level | {"use_regex": True}, "decoder": decoder,
             "model": model_dict}  # fmt: skip
    if folder.cls == ROBERTA:
        spec["post_processor"] = _roberta_processing(folder, spec, prefix)
    return spec


def _content(folder: Folder, name: str) -> str:
    """The text of the special token ``name`` (``cls_token``) the class holds."""
    value = folder.special(legacy_map=folder.config.get("added_tokens_decoder") is None).get(name)
    return _token(value, name, folder)["content"]


def _special_id(folder: Folder, spec: dict[str, Any], name: str) -> tuple[str, int]:
    """A named special token and the id the library gives it (its vocabulary's, else an added id)."""
    token = _content(folder, name)
    vocab = spec["model"]["vocab"]
    ids = {t: i for i, (t, _) in library_ids(spec["added_tokens"], vocab).items()}
    i = ids.get(token, vocab.get(token))
    if type(i) is not int:
        raise folder.fail(f"{name} {shown(token, 40)} has no id")
    return token, i


def _bert(folder: Folder, spec: dict[str, Any], vocab: Any) -> dict[str, Any]:
    """``BertTokenizer.__init__``'s backend around ``vocab``: WordPiece (``##``, 100 characters a
    word at most, the config's unk token), a BertNormalizer of the config's ``do_lower_case``
    (true unless it says), ``tokenize_chinese_chars`` (true) and ``strip_accents`` (None: as the
    lowercasing), BertPreTokenizer, the WordPiece decoder, and ``[CLS] $A [SEP]``."""
    strip = folder.config.get("strip_accents")
    if strip is not None and type(strip) is not bool:
        raise folder.fail(f"strip_accents is {shown(strip, 40)}, not true, false or null")
    for key in ("add_bos_token", "add_eos_token"):
        if key in folder.config:  # update_post_processor would replace [CLS] … [SEP]: not reproduced
            raise folder.fail(f"sets {key}, which this tool does not reproduce for {folder.cls}")
    spec |= {
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": folder.setting("tokenize_chinese_chars", True),
                       "strip_accents": strip, "lowercase": folder.setting("do_lower_case", True)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": _content(folder, "unk_token"),
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab},
    }  # fmt: skip
    if not isinstance(vocab, dict):
        return spec  # check_tokenizer refuses it, in one line
    (cls, cls_id), (sep, sep_id) = (
        _special_id(folder, spec, "cls_token"),
        _special_id(folder, spec, "sep_token"),
    )
    piece = lambda token, t: {"SpecialToken": {"id": token, "type_id": t}}  # noqa: E731
    seq = lambda name, t: {"Sequence": {"id": name, "type_id": t}}  # noqa: E731
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [piece(cls, 0), seq("A", 0), piece(sep, 0)],
        "pair": [piece(cls, 0), seq("A", 0), piece(sep, 0), seq("B", 1), piece(sep, 1)],
        "special_tokens": {cls: {"id": cls, "ids": [cls_id], "tokens": [cls]},
                           sep: {"id": sep, "ids": [sep_id], "tokens": [sep]}},
    }  # fmt: skip
    return spec


def _roberta_processing(folder: Folder, spec: dict[str, Any], prefix: bool) -> dict[str, Any] | None:
    """``RobertaTokenizer.__init__``'s post-processor: ``<s> $A </s>`` (RobertaProcessing)."""
    if not isinstance(spec["model"]["vocab"], dict):
        return None  # check_tokenizer refuses the vocabulary, in one line
    for key in ("add_bos_token", "add_eos_token"):
        if key in folder.config:
            raise folder.fail(f"sets {key}, which this tool does not reproduce for {folder.cls}")
    return {"type": "RobertaProcessing", "sep": list(_special_id(folder, spec, "sep_token")),
            "cls": list(_special_id(folder, spec, "cls_token")),
            "trim_offsets": folder.setting("trim_offsets", True), "add_prefix_space": prefix}  # fmt: skip


def from_vocab_txt(folder: Folder) -> dict[str, Any]:
    """The tokenizer.json spec ``BertTokenizer`` builds from a folder with vocab.txt and no
    tokenizer.json (as many bert-base checkpoints ship): one token a line, its id the line's number
    (the library's ``WordPiece.read_file``). A line it would read differently than it is written
    (whitespace at its end, which the library trims; a token twice, whose first id it drops) is
    refused, not approximated."""
    path = folder.folder / "vocab.txt"
    if folder.cls not in WORDPIECE:  # no class to go by is not guessed: BertTokenizer needs naming
        raise folder.fail(f"{folder.cls} needs a tokenizer.json, which {folder.folder} does not have")
    data = read_regular(path, "a vocabulary", MAX_VOCAB_TXT_BYTES, CheckpointError)
    lines = _lines(data, path, MAX_VOCAB_ENTRIES, f"at most {MAX_VOCAB_ENTRIES:,} tokens")
    vocab: dict[str, int] = {}
    for n, line in enumerate(lines):
        token = line.removesuffix("\r")
        if not 1 <= len(token) <= MAX_TOKEN_CHARS:
            raise CheckpointError(
                f"{path}: line {n + 1:,} has {len(token):,} characters (1 to {MAX_TOKEN_CHARS})"
            )
        if token[-1].isspace():
            raise CheckpointError(f"{path}: line {n + 1:,} ends in whitespace, which the library would trim")
        if vocab.setdefault(token, n) != n:
            raise CheckpointError(
                f"{path}: line {n + 1:,} repeats line {vocab[token] + 1:,}, {shown(token, 40)}"
            )
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens(folder, []),
            "post_processor": None}  # fmt: skip
    return _bert(folder, spec, vocab)


_ADDED_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def library_ids(entries: list[dict[str, Any]], vocab: dict[str, int]) -> dict[int, tuple[str, bool]]:
    """id -> (token, special) of the added tokens, with the ids the library gives them: not the
    file's ``"id"`` (it only logs a warning when they differ) but, one token at a time in the
    file's order, its id in ``model.vocab`` or of an earlier added token of that content, else the
    next one past the vocabulary (``AddedVocabulary::add_tokens``); a token equal in every field
    to one already added is skipped, and a later token at the same id replaces the earlier."""
    size, top = len(vocab), -1
    ids: dict[str, int] = {}
    tokens: dict[int, tuple[Any, ...]] = {}
    seen: set[tuple[Any, ...]] = set()  # tokens.values(), as a set (131,072 tokens: no n²)
    special: set[str] = set()
    for entry in entries:
        token = tuple(entry.get(key) for key in _ADDED_FIELDS)
        content = entry["content"]
        if entry.get("special"):
            special.add(content)
        if token in seen:
            continue
        if content in ids or content in vocab:
            i = ids.get(content, vocab.get(content, 0))
        else:
            i = size if top < 0 or (top < size and size > 0) else top + 1
        ids[content], top = i, max(top, i)
        seen.discard(tokens.get(i))
        tokens[i] = token
        seen.add(token)
    return {i: (token[0], token[0] in special) for i, token in tokens.items()}


def from_vocab_and_merges(folder: Folder) -> dict[str, Any]:
    """The tokenizer.json spec of a folder with vocab.json and merges.txt and no tokenizer.json
    (GPT-2's fine-tunes): the class's components (GPT2Tokenizer unless the config says Qwen2),
    and the post-processor ``update_post_processor`` makes of ``add_bos_token``/``add_eos_token``."""
    path = folder.folder
    if folder.cls == BACKEND and folder.config.get("tokenizer_class") is None:
        folder.cls = GPT2  # GPT2TokenizerFast.from_pretrained(folder)
    if folder.cls not in (GPT2, QWEN2, ROBERTA):
        raise folder.fail(f"{folder.cls} needs a tokenizer.json, which {path} does not have")
    try:
        vocab = read_json(path / "vocab.json", MAX_CONFIG_BYTES * 10, what="a readable vocabulary")
    except FileNotFoundError:
        raise CheckpointError(
            f"{path}: missing tokenizer file tokenizer.json (or vocab.json and merges.txt)"
        ) from None
    if not isinstance(vocab, dict):
        raise CheckpointError(f"{path / 'vocab.json'}: not a JSON object of token -> id")
    if len(vocab) > MAX_VOCAB_ENTRIES:
        raise CheckpointError(
            f"{path / 'vocab.json'}: has {len(vocab):,} tokens (at most {MAX_VOCAB_ENTRIES:,})"
        )
    spec = rebuilt(folder, {"model": {"type": "BPE", "vocab": vocab, "merges": _merges(path / "merges.txt")}})
    if folder.cls != ROBERTA:
        spec["post_processor"] = _template(folder, spec)
    return spec


def _lines(data: bytes, path: Path, most: int, limit: str) -> list[str]:
    """A text file's lines as the library splits them (on "\\n", the last empty one dropped), or one
    line saying it is not UTF-8 or has more than ``most`` lines (``limit`` says why).

    The lines are counted in the bytes before any is made: a flood of short ones (99 MB of
    ``ab\\n``, 33 million lines) would otherwise take 2.5 GB of strings before it is refused."""
    count = data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))  # no empty last line
    if count > most:
        raise CheckpointError(f"{path}: has {count:,} lines ({limit})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {err.start:,})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _merges(path: Path) -> list[str]:
    """merges.txt as the library reads it: one ``a b`` a line, ``#version`` lines skipped."""
    try:
        data = read_regular(path, "a merges file", MAX_MERGES_BYTES, CheckpointError)
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: has vocab.json but no merges.txt") from None
    lines = _lines(data, path, MAX_MERGES + 1, f"at most {MAX_MERGES:,} merges")
    merges = []
    for n, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or len(line) > 2 * MAX_TOKEN_CHARS + 1:
            raise CheckpointError(f"{path}: line {n:,} is {shown(line, 40)}, not two tokens")
        merges.append(line)
    return merges


def _template(folder: Folder, spec: dict[str, Any]) -> dict[str, Any] | None:
    """``update_post_processor``'s TemplateProcessing, for ``add_bos_token``/``add_eos_token``."""
    ends = []
    for key, name in (("add_bos_token", "bos_token"), ("add_eos_token", "eos_token")):
        token = folder.special(legacy_map=folder.config.get("added_tokens_decoder") is None).get(name)
        if folder.setting(key, False) and token is not None:
            ends.append(_token(token, name, folder)["content"])
        else:
            ends.append(None)
    if ends == [None, None]:
        return None  # "$A:0": the ids as they are
    vocab = spec["model"]["vocab"]
    ids = {t["content"]: t["id"] for t in spec["added_tokens"]}
    bos, eos = ends
    single = (
        ([{"SpecialToken": {"id": bos, "type_id": 0}}] if bos else [])
        + [{"Sequence": {"id": "A", "type_id": 0}}]
        + ([{"SpecialToken": {"id": eos, "type_id": 0}}] if eos else [])
    )
    pair = single + [
        {"SpecialToken": {"id": bos, "type_id": 1}}] * bool(bos) + [{"Sequence": {"id": "B", "type_id": 1}}
    ] + [{"SpecialToken": {"id": eos, "type_id": 1}}] * bool(eos)  # fmt: skip
    specials = {}
    for token in (bos, eos):
        if token:
            i = vocab.get(token, ids.get(token)) if isinstance(vocab, dict) else None
            if type(i) is not int:
                raise folder.fail(f"adds {shown(token, 40)}, which has no id")
            specials[token] = {"id": token, "ids": [i], "tokens": [token]}
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}
