"""A ``tokenizer.json`` checked against what the supported families use, before the ``tokenizers``
library (Rust) sees it: a file that names anything else, or something too large, is one line.

Why an allow-list: the library trusts its file. A few kB of JSON made it allocate 8 GB and abort
(fixed padding of 2e9, a precompiled charsmap claiming 4 GB, Replace normalizers that each grow the
text), or panic (a short charsmap, a Replace or Prepend of nothing, a 1,000-NUL subword prefix, a
truncation stride at its max length, a catastrophic Split regex); a WordLevel model without its
unk token raised in ``encode``. Checking every field we hand over is cheap (50,257 tokens and
50,000 merges in ~30 ms) and names the offending key; what no check can foresee (a regex that is
slow on one text) is left to the child process that runs the library (``native``).

What is allowed, by family, and nothing else:

- GPT-2, and Llama 3 / Qwen2 / SmolLM (byte-level BPE): model ``BPE``; normalizer none or ``NFC``;
  pre-tokenizer ``ByteLevel``, ``Split`` (a regex of at most ``MAX_PATTERN`` characters),
  ``Digits``, in a ``Sequence``; decoder ``ByteLevel``; post-processor ``ByteLevel``,
  ``TemplateProcessing`` (Llama 3's ``<|begin_of_text|>``), in a ``Sequence``.
- Llama 2 / TinyLlama / Mistral (SentencePiece-style BPE with byte fallback): model ``BPE``
  (``byte_fallback``, ``fuse_unk``, ``unk_token``); normalizer ``Prepend("▁")``,
  ``Replace(" ", "▁")``; pre-tokenizer ``Metaspace`` (newer files); decoder ``Replace("▁", " ")``,
  ``ByteFallback``, ``Fuse``, ``Strip``, ``Metaspace``; post-processor ``TemplateProcessing``.
- BERT (WordPiece): model ``WordPiece``; normalizer ``BertNormalizer`` (or ``NFD``, ``Lowercase``,
  ``StripAccents``, as some uncased files spell it); pre-tokenizer ``BertPreTokenizer``; decoder
  ``WordPiece``; post-processor ``TemplateProcessing``.
- RoBERTa: byte-level BPE as GPT-2's, post-processor ``RobertaProcessing`` (``<s> $A </s>``).
- T5 and Flan-T5 (SentencePiece unigram): model ``Unigram`` (``[piece, score]`` pairs, ``unk_id``,
  ``byte_fallback``); normalizer ``Precompiled`` (SentencePiece's nmt_nfkc charsmap), with
  transformers' converter also ``Strip`` and ``Replace`` of the one regex `` {2,}``; pre-tokenizer
  ``WhitespaceSplit`` and ``Metaspace``; decoder ``Metaspace``; post-processor ``TemplateProcessing``
  (``$A </s>``).

A ``Precompiled`` charsmap is a binary blob the library indexes unchecked (one claiming 4 GB made it
allocate that much, a short one made it panic): it is decoded here and its header checked against
its length (its trie's size, in whole 32-bit units, within the blob; at most ``MAX_CHARSMAP``
bytes, T5's is 237 kB); what the trie's own offsets do is left to the child process (``native``).

Refused: WordLevel, BPE dropout (a random tokenization), BPE subword prefixes and suffixes (null or ""
only), a ``Sequence`` inside a ``Sequence``, Replace patterns that are regexes, any key a
component does not have, and sizes past the ``MAX_*`` below.

``padding`` and ``truncation`` are removed, not refused: they are settings for batches, not part
of the tokenization, and ``transformers`` does not apply them either — ``PreTrainedTokenizerFast``
resets the backend on every call (``set_truncation_and_padding``: ``no_padding()`` unless
``padding=`` is given, ``no_truncation()`` unless ``truncation=``), so ``GPT2TokenizerFast(text)``
ignores a saved ``"padding": {"strategy": {"Fixed": 2000000000}}``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .jsonfile import MAX_TOKEN_ID, shown

MAX_VOCAB_ENTRIES = 1 << 20  # Gemma's 262,144 is the largest vocabulary on the hub
MAX_MERGES = 1 << 19  # Llama 3 has 280,147; 2 million peaked at 1.3 GB in the library
MAX_ADDED_TOKENS = 1 << 17  # Llama 3 has 256; a few models reserve some thousands
MAX_TOKEN_CHARS = 1024  # GPT-2's longest token is 128 characters, Llama 3's and Qwen2's 256 bytes
MAX_PATTERN = 1024  # Llama 3's and Qwen2's Split regexes are ~170 characters
MAX_SHORT = 16  # a Replace's pattern and content, a Prepend, a subword prefix: one or two characters
MAX_SEQUENCE = 8  # Llama 2's decoder is a Sequence of 4
MAX_GROWTH = 16  # how many times longer every Replace together may make a text (Llama 2's: 1)
MAX_TEMPLATE = 32  # pieces of a TemplateProcessing (BERT's pair template has 5)
MAX_CHARSMAP = 1 << 20  # bytes of a Precompiled charsmap: T5's nmt_nfkc is 237 kB
REGEXES = (" {2,}",)  # the Replace regexes a supported file holds: transformers' SentencePiece converter's

Check = Callable[[Any, str, "_Context"], Any]


class _Context:
    """What the checks of one file share: its path, the vocabulary's ids, the text's growth so far,
    and the model of an earlier check of the same file (``check_tokenizer``'s ``checked``)."""

    def __init__(self, path: Path, checked: dict[str, Any] | None = None, models: tuple[str, ...] = ()):
        self.path = path
        self.models = models  # the model types the reading family takes
        self.checked: dict[str, Any] = checked["model"] if checked else {}
        self.ids = 0  # one past the largest id of the vocabulary and the added tokens
        self.growth = 1.0

    def fail(self, where: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {where} {problem}")


def _shown(value: Any) -> str:
    """A value quoted in a message: ``jsonfile.shown``, which never builds the repr of all of a
    1.6 MB token to cut it."""
    return shown(value, 40)


def boolean(value: Any, where: str, ctx: _Context) -> bool:
    if type(value) is not bool:
        raise ctx.fail(where, f"is {_shown(value)}, not true or false")
    return value


def integer(lo: int, hi: int) -> Check:
    def check(value: Any, where: str, ctx: _Context) -> int:
        if type(value) is not int or not lo <= value <= hi:
            raise ctx.fail(where, f"is {_shown(value)}, not an integer from {lo} to {hi}")
        return value

    return check


def text(lo: int, hi: int, printable: bool = True) -> Check:
    """A string of ``lo`` to ``hi`` characters; a setting (``printable``) has no control characters
    (a subword prefix of 1,000 NULs made the library panic)."""

    def check(value: Any, where: str, ctx: _Context) -> str:
        if not isinstance(value, str) or not lo <= len(value) <= hi:
            raise ctx.fail(where, f"is {_shown(value)}, not a string of {lo} to {hi} characters")
        if printable and not value.isprintable():
            raise ctx.fail(where, f"is {_shown(value)}, which holds control characters")
        return value

    return check


def choice(*options: str) -> Check:
    def check(value: Any, where: str, ctx: _Context) -> str:
        if value not in options:
            raise ctx.fail(where, f"is {_shown(value)}, not one of {', '.join(options)}")
        return value

    return check


def unset(*same: Any) -> Check:
    """A setting no supported family uses: null, or a value that means the same (``same``: GPT-2's
    own file has ``"continuing_subword_prefix": ""``)."""

    def check(value: Any, where: str, ctx: _Context) -> Any:
        if value is not None and not any(type(value) is type(v) and value == v for v in same):
            raise ctx.fail(where, f"is {_shown(value)}; no supported tokenizer sets it (null)")
        return value

    return check


def optional(inner: Check) -> Check:
    def check(value: Any, where: str, ctx: _Context) -> Any:
        return None if value is None else inner(value, where, ctx)

    return check


def pattern(kinds: tuple[str, ...], hi: int) -> Check:
    """``{"String": s}`` or ``{"Regex": r}`` (as ``kinds`` allows), never empty: an empty pattern
    made Replace panic."""

    def check(value: Any, where: str, ctx: _Context) -> dict[str, str]:
        if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in kinds:
            raise ctx.fail(where, f"is {_shown(value)}, not {' or '.join(f'{{{k!r}: ...}}' for k in kinds)}")
        kind, body = next(iter(value.items()))
        return {kind: text(1, hi, printable=False)(body, f"{where}.{kind}", ctx)}

    return check


def _replace(value: dict[str, Any], where: str, ctx: _Context) -> None:
    """Each Replace may make a text longer (``h`` -> 64 ``h``, six times, is 69 billion times): the
    product of their growth is bounded."""
    find, put = next(iter(value["pattern"].values())), value["content"]
    ctx.growth *= max(1.0, len(put) / len(find))
    if ctx.growth > MAX_GROWTH:
        raise ctx.fail(
            where, f"makes the text more than {MAX_GROWTH} times longer, with the Replaces before it"
        )


BYTE_LEVEL = {"add_prefix_space": boolean, "trim_offsets": boolean, "use_regex": boolean}
METASPACE = {
    "replacement": text(1, 1),
    "prepend_scheme": choice("always", "never", "first"),
    "split": boolean,
    "add_prefix_space": boolean,  # the older spelling of prepend_scheme
    "str_rep": text(1, 1),  # the older spelling of replacement
}
REPLACE = {"pattern": pattern(("String",), MAX_SHORT), "content": text(0, MAX_SHORT)}


def known_regex(value: Any, where: str, ctx: _Context) -> dict[str, str]:
    """A Replace's pattern: a string, or (T5's file) one of the ``REGEXES`` its converter writes."""
    unigram = "Unigram" in ctx.models
    if unigram and isinstance(value, dict) and value.keys() == {"Regex"} and value["Regex"] in REGEXES:
        return value
    return pattern(("String",), MAX_SHORT)(value, where, ctx)


def charsmap(value: Any, where: str, ctx: _Context) -> str:
    """SentencePiece's precompiled charsmap, base64: a 32-bit little-endian trie size in bytes, the
    trie (32-bit units), then the normalized strings; the size must fit the blob."""
    if not isinstance(value, str) or len(value) > MAX_CHARSMAP * 4 // 3 + 4:
        raise ctx.fail(where, f"is not a charsmap of at most {MAX_CHARSMAP:,} bytes in base64")
    try:
        blob = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ctx.fail(where, "is not base64") from None
    trie = int.from_bytes(blob[:4], "little") if len(blob) >= 4 else -1
    if trie < 0 or trie % 4 or 4 + trie > len(blob):
        raise ctx.fail(where, f"claims a trie of {trie:,} bytes in a charsmap of {len(blob):,}")
    return value


def sequence(kind: str) -> Check:
    def check(value: Any, where: str, ctx: _Context) -> list[Any]:
        if not isinstance(value, list) or len(value) > MAX_SEQUENCE:
            raise ctx.fail(where, f"is not a list of at most {MAX_SEQUENCE} {kind}s")
        return [_component(kind, item, f"{where}[{n}]", ctx, nested=True) for n, item in enumerate(value)]

    return check


def template(value: Any, where: str, ctx: _Context) -> list[Any]:
    """A TemplateProcessing's ``single`` or ``pair``: special tokens and the sequences A and B."""
    if not isinstance(value, list) or len(value) > MAX_TEMPLATE:
        raise ctx.fail(where, f"is not a list of at most {MAX_TEMPLATE} pieces")
    out = []
    for n, piece in enumerate(value):
        here = f"{where}[{n}]"
        if (
            not isinstance(piece, dict)
            or len(piece) != 1
            or next(iter(piece)) not in ("SpecialToken", "Sequence")
        ):
            raise ctx.fail(here, f"is {_shown(piece)}, not a SpecialToken or a Sequence")
        kind, body = next(iter(piece.items()))
        name = text(1, MAX_TOKEN_CHARS, printable=False) if kind == "SpecialToken" else choice("A", "B")
        fields = {"id": name, "type_id": integer(0, MAX_SHORT)}
        out.append({kind: _fields(fields, body, f"{here}.{kind}", ctx, required=fields)})
    return out


def special_tokens(value: Any, where: str, ctx: _Context) -> dict[str, Any]:
    """A TemplateProcessing's special tokens: name -> its ids (in the vocabulary) and tokens."""
    if not isinstance(value, dict) or len(value) > MAX_TEMPLATE:
        raise ctx.fail(where, f"is not an object of at most {MAX_TEMPLATE} special tokens")
    out = {}
    for name, token in value.items():
        here = f"{where}[{_shown(name)}]"
        fields = {"id": choice(name), "ids": _ids, "tokens": _tokens}
        checked = _fields(fields, token, here, ctx, required=fields)
        if len(checked["ids"]) != len(checked["tokens"]):
            raise ctx.fail(here, f"has {len(checked['ids'])} ids but {len(checked['tokens'])} tokens")
        out[name] = checked
    return out


def token_id(value: Any, where: str, ctx: _Context) -> list[Any]:
    """RobertaProcessing's ``sep`` or ``cls``: ``[token, id]``, the id in the vocabulary."""
    if not isinstance(value, list) or len(value) != 2:
        raise ctx.fail(where, f"is {_shown(value)}, not a token and its id")
    return [text(1, MAX_TOKEN_CHARS, printable=False)(value[0], f"{where}[0]", ctx),
            integer(0, ctx.ids - 1)(value[1], f"{where}[1]", ctx)]  # fmt: skip


def _ids(value: Any, where: str, ctx: _Context) -> list[int]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TEMPLATE:
        raise ctx.fail(where, f"is not a list of 1 to {MAX_TEMPLATE} ids")
    return [integer(0, ctx.ids - 1)(i, f"{where}[{n}]", ctx) for n, i in enumerate(value)]


def _tokens(value: Any, where: str, ctx: _Context) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TEMPLATE:
        raise ctx.fail(where, f"is not a list of 1 to {MAX_TEMPLATE} tokens")
    return [text(1, MAX_TOKEN_CHARS, printable=False)(t, f"{where}[{n}]", ctx) for n, t in enumerate(value)]


# kind -> type -> the keys it may have (each checked); a key not listed is refused.
ALLOWED: dict[str, dict[str, dict[str, Check]]] = {
    "normalizer": {
        "NFC": {}, "NFD": {}, "NFKC": {}, "NFKD": {}, "Lowercase": {}, "StripAccents": {},
        "BertNormalizer": {"clean_text": boolean, "handle_chinese_chars": boolean,
                           "strip_accents": optional(boolean), "lowercase": boolean},
        "Replace": {**REPLACE, "pattern": known_regex},
        "Prepend": {"prepend": text(1, MAX_SHORT)},
        "Precompiled": {"precompiled_charsmap": charsmap},
        "Strip": {"strip_left": boolean, "strip_right": boolean},
        "Sequence": {"normalizers": sequence("normalizer")},
    },
    "pre_tokenizer": {
        "ByteLevel": BYTE_LEVEL,
        "Split": {"pattern": pattern(("String", "Regex"), MAX_PATTERN),
                  "behavior": choice("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                     "Contiguous"),
                  "invert": boolean},
        "Digits": {"individual_digits": boolean},
        "Metaspace": METASPACE,
        "BertPreTokenizer": {},
        "WhitespaceSplit": {},
        "Sequence": {"pretokenizers": sequence("pre_tokenizer")},
    },
    "decoder": {
        "ByteLevel": BYTE_LEVEL,
        "Replace": REPLACE,
        "ByteFallback": {},
        "Fuse": {},
        "Strip": {"content": text(1, 1), "start": integer(0, MAX_SHORT), "stop": integer(0, MAX_SHORT)},
        "Metaspace": METASPACE,
        "WordPiece": {"prefix": text(1, MAX_SHORT), "cleanup": boolean},
        "Sequence": {"decoders": sequence("decoder")},
    },
    "post_processor": {
        "ByteLevel": BYTE_LEVEL,
        "TemplateProcessing": {"single": template, "pair": template, "special_tokens": special_tokens},
        "RobertaProcessing": {"sep": token_id, "cls": token_id, "trim_offsets": boolean,
                              "add_prefix_space": boolean},
        "Sequence": {"processors": sequence("post_processor")},
    },
}  # fmt: skip
# The parts of ALLOWED only T5's SentencePiece unigram file holds: refused in any other family's.
UNIGRAM_ONLY = {"normalizer": ("Precompiled", "Strip"), "pre_tokenizer": ("WhitespaceSplit",)}


def _fields(
    allowed: dict[str, Check], value: Any, where: str, ctx: _Context, required: dict[str, Check] | None = None
) -> dict[str, Any]:
    """The object ``value`` with each key checked; a key ``allowed`` lacks, or a ``required`` one
    missing, is refused."""
    if not isinstance(value, dict):
        raise ctx.fail(where, f"is {_shown(value)}, not an object")
    for key in value:
        if key not in allowed:
            raise ctx.fail(where, f"has the key {_shown(key)}, which no supported tokenizer uses")
    for key in required or {}:
        if key not in value:
            raise ctx.fail(where, f"has no {key!r}")
    return {key: allowed[key](item, f"{where}.{key}", ctx) for key, item in value.items()}


def _component(
    kind: str, value: Any, where: str, ctx: _Context, nested: bool = False
) -> dict[str, Any] | None:
    """A normalizer, pre-tokenizer, decoder or post-processor, of a type ``ALLOWED`` names."""
    if value is None and not nested:
        return None
    types = ALLOWED[kind]
    if "Unigram" not in ctx.models:
        types = {t: keys for t, keys in types.items() if t not in UNIGRAM_ONLY.get(kind, ())}
    name = value.get("type") if isinstance(value, dict) else None
    # A "type" that is a list or an object is unhashable: ``in types`` would raise TypeError.
    if not isinstance(name, str) or name not in types or (nested and name == "Sequence"):
        allowed = ", ".join(t for t in types if not (nested and t == "Sequence"))
        what = f"type {_shown(name)}" if isinstance(value, dict) else _shown(value)
        raise ctx.fail(where, f"is {what}, not a {kind} of a supported tokenizer ({allowed})")
    body = {k: v for k, v in value.items() if k != "type"}
    checked = {"type": name, **_fields(types[name], body, where, ctx)}
    if name == "Replace":
        _replace(checked, where, ctx)
    return checked


def _vocab(value: Any, where: str, ctx: _Context) -> dict[str, int]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{ctx.path}: not a BPE tokenizer (no model.vocab of token -> id)")
    if len(value) > MAX_VOCAB_ENTRIES:
        raise ctx.fail(where, f"has {len(value):,} tokens; the largest vocabularies have some 260,000")
    for token, i in value.items():
        if type(i) is not int or not 0 <= i < MAX_TOKEN_ID:
            raise ctx.fail(where, f"gives the token {_shown(token)} the id {_shown(i)}, not an id")
        if not 1 <= len(token) <= MAX_TOKEN_CHARS:
            raise ctx.fail(where, f"has a token of {len(token):,} characters (at most {MAX_TOKEN_CHARS})")
    return value


def _merges(value: Any, where: str, ctx: _Context, vocab: dict[str, int]) -> list[Any]:
    """BPE's merges, ``"a b"`` or ``["a", "b"]``: both tokens and what they make in the vocabulary."""
    if not isinstance(value, list) or len(value) > MAX_MERGES:
        raise ctx.fail(where, f"is not a list of at most {MAX_MERGES:,} merges")
    if _merges_fit(value, vocab):
        return value
    for n, merge in enumerate(value):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
            raise ctx.fail(f"{where}[{n}]", f"is {_shown(merge)}, not two tokens")
        a, b = pair
        if a not in vocab or b not in vocab or a + b not in vocab:
            missing = next(t for t in (a, b, a + b) if t not in vocab)
            raise ctx.fail(
                f"{where}[{n}]", f"({_shown(a)}, {_shown(b)}) needs {_shown(missing)}, not in model.vocab"
            )
    return value


_SEP = "\ud800"  # a lone surrogate: the separator of the joined merges below (a merge holding it: walked)
# Merges written "a b", one space in each, joined by _SEP: (a b SEP)* a b, with no space or _SEP in a token.
_ONE_SPACE_EACH = re.compile(f"(?:[^ {_SEP}]*+ [^ {_SEP}]*+{_SEP})*+[^ {_SEP}]*+ [^ {_SEP}]*+")


def _merges_fit(value: list[Any], vocab: dict[str, int]) -> bool:
    """Whether every merge is two tokens that make a third, all in ``vocab``: the check of
    ``_merges`` in C-level passes (Llama 3's 280,000 merges in ~0.1 s, walked ~0.4); when it is
    false, ``_merges`` walks the list to name the first bad merge."""
    if not value:
        return True
    try:
        joined = _SEP.join(value)
    except TypeError:  # not every merge is written "a b": some are ["a", "b"] (or hostile)
        pass
    else:
        return _spaced_merges_fit(joined, len(value), vocab)
    pairs = [m.split(" ") if type(m) is str else m for m in value]
    if set(map(type, pairs)) != {list} or set(map(len, pairs)) != {2}:
        return False
    a, b = zip(*pairs, strict=True)
    if not set(map(type, a)) | set(map(type, b)) <= {str}:
        return False
    has = vocab.__contains__
    return all(map(has, a)) and all(map(has, b)) and all(map(has, map(str.__add__, a, b)))


def _spaced_merges_fit(joined: str, n: int, vocab: dict[str, int]) -> bool:
    """``_merges_fit`` of ``n`` merges written ``"a b"``, on all of them joined by ``_SEP`` (which
    none holds): when each has one space, ``a``, ``b``, ``a``, ``b``, … are the joined merges cut at
    every space and separator, and each ``a + b`` is a merge without its space."""
    if joined.count(_SEP) != n - 1 or not _ONE_SPACE_EACH.fullmatch(joined):
        return False
    has = vocab.__contains__
    return all(map(has, joined.replace(_SEP, " ").split(" "))) and all(
        map(has, joined.replace(" ", "").split(_SEP))
    )


def _unk(value: Any, where: str, ctx: _Context, vocab: dict[str, int]) -> str | None:
    """An unk token must be in the vocabulary: one that is not made ``encode`` raise."""
    if value is not None and (not isinstance(value, str) or value not in vocab):
        raise ctx.fail(where, f"is {_shown(value)}, which is not in model.vocab")
    return value


def _unigram(value: Any, ctx: _Context) -> dict[str, Any]:
    """T5's SentencePiece unigram model: its pieces with their log-probabilities, in id order."""
    where = "model.vocab"
    vocab = value.get("vocab")
    if not isinstance(vocab, list) or not 1 <= len(vocab) <= MAX_VOCAB_ENTRIES:
        raise ctx.fail(where, f"is not a list of 1 to {MAX_VOCAB_ENTRIES:,} [piece, score] pairs")
    for n, entry in enumerate(vocab):
        if (
            not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
            or type(entry[1]) not in (int, float) or not math.isfinite(entry[1])
        ):  # fmt: skip
            raise ctx.fail(f"{where}[{n}]", f"is {_shown(entry)}, not a [piece, score] pair")
        if not 1 <= len(entry[0]) <= MAX_TOKEN_CHARS:
            raise ctx.fail(
                f"{where}[{n}]", f"has a piece of {len(entry[0]):,} characters (at most {MAX_TOKEN_CHARS})"
            )
    ctx.ids = max(ctx.ids, len(vocab))
    body = _fields(
        {"type": _anything, "vocab": _anything, "unk_id": optional(integer(0, len(vocab) - 1)),
         "byte_fallback": boolean},
        value, "model", ctx,
    )  # fmt: skip
    return body | {"type": "Unigram"}


def _model(value: Any, ctx: _Context) -> dict[str, Any]:
    """BPE (GPT-2, Llama), WordPiece (BERT) or Unigram (T5), its vocabulary and merges checked."""
    where = "model"
    if not isinstance(value, dict):
        raise CheckpointError(f"{ctx.path}: not a BPE tokenizer (no model.vocab of token -> id)")
    name = value.get("type", "BPE")
    if name not in ctx.models:
        raise ctx.fail(
            f"{where}.type",
            f"is {_shown(name)}, not a model this family's tokenizer has ({', '.join(ctx.models)})",
        )
    if name == "Unigram":
        return _unigram(value, ctx)
    vocab = value.get("vocab")
    # The very vocabulary (and merges) an earlier check of this file passed: not walked again.
    known = bool(ctx.checked) and vocab is ctx.checked["vocab"]
    if not known:
        vocab = _vocab(vocab, f"{where}.vocab", ctx)
    ctx.ids = max(ctx.ids, max(vocab.values(), default=-1) + 1)
    if name == "BPE":
        allowed: dict[str, Check] = {
            "dropout": unset(0.0), "continuing_subword_prefix": unset(""), "end_of_word_suffix": unset(""),
            "fuse_unk": boolean, "byte_fallback": boolean, "ignore_merges": boolean,
        }  # fmt: skip
        special = {"vocab", "merges", "unk_token", "type"}
    else:
        allowed = {
            "continuing_subword_prefix": text(1, MAX_SHORT),
            "max_input_chars_per_word": integer(1, 10_000),
        }
        special = {"vocab", "unk_token", "type"}
        if value.get("unk_token") is None:
            raise ctx.fail(f"{where}.unk_token", "is missing; a WordPiece model needs one")
    body = _fields({**allowed, **dict.fromkeys(special, _anything)}, value, where, ctx)
    body["type"] = name
    body["unk_token"] = _unk(value.get("unk_token"), f"{where}.unk_token", ctx, vocab)
    if name == "BPE":
        merges = value.get("merges", [])
        known = known and merges is ctx.checked.get("merges")
        body["merges"] = merges if known else _merges(merges, f"{where}.merges", ctx, vocab)
    return body


def _anything(value: Any, where: str, ctx: _Context) -> Any:
    return value  # checked by _model itself


ADDED_TOKEN = {
    "id": integer(0, MAX_TOKEN_ID - 1),
    "content": text(1, MAX_TOKEN_CHARS, printable=False),
    "single_word": boolean, "lstrip": boolean, "rstrip": boolean, "normalized": boolean, "special": boolean,
}  # fmt: skip


def _added(value: Any, ctx: _Context) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ADDED_TOKENS:
        raise ctx.fail("added_tokens", f"is not a list of at most {MAX_ADDED_TOKENS:,} tokens")
    out = []
    for n, entry in enumerate(value):
        where = f"added_tokens[{n}]"
        if (
            not isinstance(entry, dict)
            or type(entry.get("id")) is not int
            or not isinstance(entry.get("content"), str)
        ):
            raise CheckpointError(f"{ctx.path}: an added token is not an id and a string: {str(entry)[:60]}")
        out.append(_fields(ADDED_TOKEN, entry, where, ctx, required={"id": ADDED_TOKEN["id"]}))
    ctx.ids = max(ctx.ids, max((t["id"] + 1 for t in out), default=0))
    return out


TOP_LEVEL = ("version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
             "post_processor", "decoder", "model")  # fmt: skip


def check_tokenizer(
    data: Any,
    path: Path,
    checked: dict[str, Any] | None = None,
    models: tuple[str, ...] = ("BPE", "WordPiece"),
) -> dict[str, Any]:
    """``tokenizer.json``'s parsed JSON, every part checked against ``ALLOWED`` and its sizes, with
    ``padding`` and ``truncation`` removed: what the ``tokenizers`` library may be given
    (``Tokenizer.from_str(json.dumps(...))``). Anything else is a one-line CheckpointError.

    ``checked``: what an earlier call returned for this file, when ``data`` is a spec rebuilt
    around it (``tokenizer_folder.rebuilt``): a ``model.vocab`` and ``model.merges`` that are the
    very objects it holds, which nothing changes, are not checked again (half of Qwen2's load).
    ``models``: the model types the family reads (T5's: Unigram)."""
    ctx = _Context(path, checked, models)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a BPE tokenizer (no model.vocab of token -> id)")
    for key in data:
        if key not in TOP_LEVEL:
            raise ctx.fail(f"the key {_shown(key)}", "is not part of a tokenizer.json")
    model = _model(data.get("model"), ctx)  # first: the ids that the rest is checked against
    cleaned: dict[str, Any] = {
        "version": text(1, MAX_SHORT)(data.get("version", "1.0"), "version", ctx),
        "truncation": None,
        "padding": None,
        "added_tokens": _added(data.get("added_tokens"), ctx),
    }
    for kind in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        cleaned[kind] = _component(kind, data.get(kind), kind, ctx)
    cleaned["model"] = model
    return cleaned
