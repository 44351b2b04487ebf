"""A BPE tokenizer read from a checkpoint's folder, equal to ``transformers.AutoTokenizer`` (5.18):
byte-level (GPT-2, Llama 3, Qwen2, SmolLM) or SentencePiece-style with byte fallback (Llama 2,
TinyLlama, Mistral), and RoBERTa's (byte-level, ``<s> … </s>``); BERT's WordPiece through the
same machinery (``wordpiece.WordPieceTokenizer``). ``tokenizer_folder`` builds the spec
transformers' class would (it rebuilds Llama's, Qwen2's, GPT-2's, RoBERTa's and BERT's components
around tokenizer.json's vocabulary and merges, and reads vocab.json + merges.txt, or BERT's
vocab.txt, where there is no tokenizer.json); the bos is added exactly when that
spec's post-processor adds it (``BPETokenizer.bos_id``).

The text's UTF-8 bytes are cut into words (a leading space stays with its word), each byte is
written as one printable character (GPT-2's ``bytes_to_unicode``: a space is ``Ġ``, a newline
``Ċ``), and the merges learned from a corpus join those characters into tokens: `` cat`` is the
one token ``Ġcat``. The ``tokenizers`` package does this, from the same file ``transformers`` uses.

Tokens are shown readably (``label``): the token's bytes decoded as UTF-8, a space shown as ``·``,
a newline as ``↵``, a tab as ``⇥``, and a byte that is not a whole UTF-8 character (a token can
hold half of an emoji) or another control character as ``<0xNN>``, and any other character that
prints as nothing (U+0085, the zero-width joiner U+200D, …) as ``<U+XXXX>``: ``Ġcat`` is ``·cat``,
``Ã©`` is ``é``, ``âĢ`` is ``<0xE2><0x80>``. SentencePiece-style pieces likewise
(``sentencepiece_labels``): ``▁the`` is ``·the``, the byte piece ``<0x0A>`` is ``↵``, ``<0x09>`` is
``⇥``, any other byte piece (``<0xE2>``) as it is written.
Labels are for reading; the ids are the truth, and two
tokens can share a label (``Ġ`` and ``Â·`` are both ``·``). Every label is safe for a terminal
(``escape``): no ESC, no bidi override, no lone surrogate reaches it from a hostile file.

The file is untrusted: ``tokenizer_check`` checks it against what the supported families use
before the library sees it, and the library runs in a child process (``native``), so that a file
that makes it panic or abort is one line.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError
from .jsonfile import read_json, shown
from .native import NativeProcess
from .tokenizer_check import check_tokenizer
from .tokenizer_folder import BACKEND, Folder, from_vocab_and_merges, from_vocab_txt, rebuilt
from .tokenizer_folder import library_ids as _library_ids

MAX_TOKENIZER_BYTES = 200_000_000  # the largest tokenizer.json on the hub is tens of MB
SHOWN = {" ": "·", "\n": "↵", "\t": "⇥"}


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the
    other 68 (controls, space, …) for U+0100 onwards, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(others)}


@functools.lru_cache(maxsize=1)
def _to_latin1() -> dict[int, str]:
    """``str.translate`` table from each stand-in to the Latin-1 character of its byte."""
    return {ord(c): chr(b) for b, c in bytes_to_unicode().items()}


# Bytes that are not part of a whole UTF-8 character are decoded (``surrogateescape``) to the lone
# surrogates U+DC80…U+DCFF, then shown as <0xNN>; control characters likewise, but the three in SHOWN.
_SHOW = (
    {0xDC00 + b: f"<0x{b:02X}>" for b in range(0x80, 0x100)}
    | {c: f"<0x{c:02X}>" for c in (*range(32), 127)}
    | {ord(k): v for k, v in SHOWN.items()}
)
_SEP = "\ud800"  # never a stand-in, never a decoded character: a safe separator for the batch below


def label(token: str) -> str:
    """A byte-level token as text to read: ``Ġcat`` -> ``·cat``, ``Ã©`` -> ``é`` (see the module)."""
    return labels([token])[0]


def labels(tokens: list[str]) -> list[str]:
    """``label`` of every token, in a few passes over all of them at once (128,256 in ~20 ms)."""
    if not tokens:  # "".split(_SEP) below is [""]: one label for no token
        return []
    shown = _byte_level_labels(tokens)
    return shown if shown is not None else _labels_apart(tokens)


def _labels_apart(tokens: list[str]) -> list[str]:
    """``labels`` where not every token is GPT-2's stand-ins (an added token, a hostile file)."""
    if any(_SEP in t for t in tokens):  # a hostile vocabulary: the separator would split a token
        return [escape(t) if _SEP in t else labels([t])[0] for t in tokens]
    joined = _SEP.join(tokens).translate(_to_latin1())
    try:
        joined.replace(_SEP, "").encode("latin-1")
    except UnicodeEncodeError:  # some token is not byte-level (an added token): one at a time
        return [labels([t])[0] if _is_byte_level(t) else escape(t) for t in tokens]
    texts = [t.encode("latin-1").decode("utf-8", "surrogateescape") for t in joined.split(_SEP)]
    shown = _SEP.join(texts).translate(_SHOW).split(_SEP)
    return [escape(t) for t in shown]


# The bytes 0xFF 0xFE, which no UTF-8 text holds, as stand-ins: "ÿþ".
_CUT = bytes_to_unicode()[0xFF] + bytes_to_unicode()[0xFE]
# What _SHOW names but the three of SHOWN: bytes of no whole character, control characters.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f\udc80-\udcff]")


def _byte_level_labels(tokens: list[str]) -> list[str] | None:
    """``labels`` when every token is only stand-ins (a model's vocabulary), else None: what
    ``_labels_apart`` makes of them, in one pass of each step over all the tokens joined by the
    bytes 0xFF 0xFE. Neither is ever part of a UTF-8 character, so each token's bytes decode as
    they would alone, and the two decode to U+DCFF U+DCFE, where the text is cut; a token holding
    both (never in a vocabulary trained on text) is a hostile file's, left to ``_labels_apart``."""
    joined = _CUT.join(tokens)
    data = _bytes_of(joined) if joined.count(_CUT) == len(tokens) - 1 else None
    if data is None:
        return None
    text = data.decode("utf-8", "surrogateescape").replace("\udcff\udcfe", _SEP)
    for c, shown_as in SHOWN.items():
        text = text.replace(c, shown_as)
    shown = _HIDDEN.sub(lambda m: _SHOW[ord(m[0])], text).split(_SEP)
    return shown if all(map(str.isprintable, shown)) else [escape(t) for t in shown]


@functools.lru_cache(maxsize=1)
def _byte_table() -> np.ndarray:
    """The byte each stand-in stands for, by code point (U+0000 to U+0143); 256 for the others."""
    stand_ins = bytes_to_unicode()
    table = np.full(max(map(ord, stand_ins.values())) + 1, 256, dtype=np.uint16)
    table[[ord(c) for c in stand_ins.values()]] = list(stand_ins)
    return table


def _bytes_of(text: str) -> bytes | None:
    """The bytes that ``text``'s stand-ins stand for, or None when it holds any other character
    (``_to_latin1`` for all of it at once: a table look-up of its UTF-16 code units)."""
    try:
        units = np.frombuffer(text.encode("utf-16-le"), dtype=np.uint16)
    except UnicodeEncodeError:  # a lone surrogate
        return None
    table = _byte_table()
    if not units.size:
        return b""
    if units.max() >= len(table):  # a character past U+0143 (one past U+FFFF is two surrogates)
        return None
    found = table[units]
    return None if found.max() > 0xFF else found.astype(np.uint8).tobytes()


_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
_PIECE_SHOWN = {0x0A: "↵", 0x09: "⇥"}
_SP_SHOW = {ord("▁"): "·"} | {ord(k): v for k, v in SHOWN.items()}


def sentencepiece_labels(tokens: list[str]) -> list[str]:
    """SentencePiece-style pieces as text to read: ``▁the`` -> ``·the``, the byte pieces of byte
    fallback ``<0x0A>`` -> ``↵``, ``<0x09>`` -> ``⇥``, any other (``<0xE2>``, part of a character)
    as it is written (32,000 in ~5 ms)."""
    if not tokens:
        return []
    if any(_SEP in t for t in tokens):
        return [escape(t) if _SEP in t else sentencepiece_labels([t])[0] for t in tokens]
    shown = _SEP.join(tokens).translate(_SP_SHOW).split(_SEP)
    for n, token in enumerate(tokens):
        if len(token) == 6 and token.startswith("<0x") and (m := _BYTE_PIECE.fullmatch(token)):
            shown[n] = _PIECE_SHOWN.get(int(m.group(1), 16), token)
    return shown


def escape(text: str) -> str:
    """``text`` safe for a terminal: every character that prints as nothing or acts on the terminal
    as <U+XXXX> — controls (ESC, so no ``ESC[2J``, no OSC title), C1 controls, lone surrogates
    (<U+DC80>), bidi overrides and isolates (U+202A–U+202E, U+2066–U+2069, U+200E/U+200F),
    zero-width characters (U+200B–U+200D, U+2060, U+FEFF): Python's ``str.isprintable`` is false
    for all of them (categories Cc, Cf, Cs, Zl, Zp, Zs but the space, Cn)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"<U+{ord(c):04X}>" for c in text)


def _is_byte_level(token: str) -> bool:
    return all(ord(c) in _to_latin1() for c in token)


class BPETokenizer:
    """Text -> ids and ids -> text for a GPT-2, Llama, Mistral or Qwen2 checkpoint, as
    ``AutoTokenizer.from_pretrained(folder)`` does (``bos_id``, ``eos_id``, ``suffix_ids``: the
    ids it adds and the one generation stops at).

    ``vocabulary`` is every token by id (``Ġcat``), ``labels`` the same tokens as ``label`` shows
    them (an added token, such as ``<|endoftext|>``, as it is written). Both are read from the
    file's JSON at once; the ``tokenizers`` machine that encodes and decodes is built when first used.
    """

    def __init__(self, folder: str | Path, size: int | None = None):
        folder = Path(folder)
        self.folder = Folder(folder)  # tokenizer_config.json: the class transformers would build
        self.path = folder / "tokenizer.json"
        for other in ("vocab.json", "vocab.txt"):  # the older layouts: GPT-2's or RoBERTa's, BERT's
            if not self.path.exists() and (folder / other).exists():
                self.path = folder / other
        with _collector_paused():
            self._read(size)
        self._machine: NativeProcess | None = None

    def _read(self, size: int | None) -> None:
        """The vocabulary, labels and special ids, from the checked spec (see the class)."""
        self._spec, (vocab, added, style) = _read_vocabulary(self.path, self.folder)
        n = max(max(vocab.values(), default=-1) + 1, max(added, default=-1) + 1, size or 0)
        #: The embedding table's rows: the ids a prompt may use, the logits' columns. A tokenizer
        #: may know more (Gemma 3's ``<image_soft_token>``, id 262,144 over 262,144 rows, shared with
        #: its multimodal models): a prompt that uses one is refused (``encode``), not the folder.
        self.rows = n if size is None else size
        tokens: list[str | None] = [None] * n
        in_order = list(vocab.values()) == list(range(len(vocab)))  # as tokenizer.json lists them
        if in_order:
            tokens[: len(vocab)] = vocab
        else:
            for token, i in vocab.items():
                tokens[i] = token
        for i, (token, _) in added.items():
            tokens[i] = token
        # Rows of the embedding table that no token names (a table padded to a round size).
        self.vocabulary: tuple[str, ...] = tuple(
            tokens
            if None not in tokens
            else (t if t is not None else f"<unused {i}>" for i, t in enumerate(tokens))
        )
        self.special = frozenset(i for i, (_, special) in added.items() if special)
        shown = list(self.vocabulary)
        if style:
            show = labels if style == "byte-level" else sentencepiece_labels
            if in_order and min(added, default=n) >= len(vocab):  # the model's tokens come first
                shown[: len(vocab)] = show(shown[: len(vocab)])
            else:
                model_ids = [i for i in range(n) if tokens[i] is not None and i not in added]
                for i, text in zip(model_ids, show([shown[i] for i in model_ids]), strict=True):
                    shown[i] = text
        self.labels: tuple[str, ...] = tuple(
            shown if all(map(str.isprintable, shown)) else (escape(t) for t in shown)
        )
        # The display form is what rows, columns and predictions show (checkpoint.Tokenizer), a
        # label for each row of the table; one vocabulary serves the prompt and what follows it.
        table = self.labels if self.rows == n else self.labels[: self.rows]
        self.source_vocabulary = self.target_vocabulary = table
        ids = {t: i for i, (t, _) in added.items()}
        #: The id ``encode`` puts first (the post-processor's template: Llama's ``<s>``, Llama 3's
        #: ``<|begin_of_text|>``), or None when it adds none (GPT-2, Qwen2).
        self.bos_id: int | None = _first_special(self._spec.get("post_processor"))
        #: The ids ``encode`` puts last (``add_eos_token`` in a vocab.json folder's config): ().
        self.suffix_ids: tuple[int, ...] = _last_specials(self._spec.get("post_processor"))
        named = self.folder.special(legacy_map=self.folder.config.get("added_tokens_decoder") is None)

        def text_and_id(name: str) -> tuple[str | None, int | None]:
            token = named.get(name)
            token = token.get("content") if isinstance(token, dict) else token
            if not isinstance(token, str):
                return None, None
            i = ids.get(token, vocab.get(token))
            return (token, i) if i is not None else (None, None)

        #: The id of the eos token the config names (where generation stops), or None.
        self.eos_id: int | None = text_and_id("eos_token")[1]
        #: The token a masked language model predicts (BERT's ``[MASK]``, RoBERTa's ``<mask>``), its id.
        self.mask_token, self.mask_id = text_and_id("mask_token")
        #: The ids of the classifier token that starts a sequence and of the separator that ends it
        #: (BERT's ``[CLS]``/``[SEP]``, RoBERTa's ``<s>``/``</s>``), or None for a family without.
        self.cls_id, self.sep_id = text_and_id("cls_token")[1], text_and_id("sep_token")[1]
        #: WordPiece (BERT): ``decode`` applies transformers' clean-up when the config asks for it.
        self.wordpiece = self._spec["model"]["type"] == "WordPiece"
        self._clean_up = self.wordpiece and self.folder.setting("clean_up_tokenization_spaces", False)

    @property
    def _tokenizer(self) -> NativeProcess:
        if self._machine is None:
            self._machine = _load(self.path, self._spec)
        return self._machine

    def close(self) -> None:
        """End the child process that runs the library (it also ends when the tokenizer is dropped)."""
        if self._machine is not None:
            self._machine.close()

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: pre-tokenized, byte-mapped, merged, as ``GPT2TokenizerFast(text)``."""
        ids = self._tokenizer.call("encode", text, doing="encoding the text")
        n = len(self.vocabulary)
        # A post-processor's template may name any id: one past the table would fail mid-pass.
        bad = [i for i in ids if not (type(i) is int and 0 <= i < n)] if isinstance(ids, list) else [ids]
        if bad:
            raise CheckpointError(
                f"{self.path}: encoding gave the id {str(bad[0])[:20]}, not one of the {n:,} tokens"
            )
        past = next((i for i in ids if i >= self.rows), None)
        if past is not None:
            raise CheckpointError(
                f"the text has the token {shown(self.labels[past])}, id {past:,}, which the model cannot "
                f"read: its embedding table has {self.rows:,} rows (ids 0 to {self.rows - 1:,})"
            )
        return ids

    def encode_source(self, text: str) -> list[int]:
        """A decoder-only model has no source: the same ids as ``encode`` (checkpoint.Tokenizer)."""
        return self.encode(text)

    def encode_target(self, text: str) -> list[int]:
        """The decoder's input: the text's ids as they are (no start token, no eos appended)."""
        return self.encode(text)

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` (``["The", "Ġcat"]``)."""
        return [self.vocabulary[i] for i in self.encode(text)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD, as transformers)."""
        text = self._tokenizer.call(
            "decode", [int(i) for i in ids], bool(skip_special_tokens), doing="decoding"
        )
        if not isinstance(text, str):
            raise CheckpointError(f"{self.path}: decoding gave {str(text)[:20]}, not a text")
        return clean_up_tokenization(text) if self._clean_up else text


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a large file is parsed and checked: each of the
    millions of objects it makes would otherwise trigger passes over all those before it (Llama
    3's 128,256 tokens and 280,000 merges: 0.9 s with it, 0.4 s without). Nothing made there is
    cyclic; the collector is back on as it was when the block ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_Vocabulary = tuple[dict[str, int], dict[int, tuple[str, bool]], str | None]


def _read_vocabulary(path: Path, folder: Folder) -> tuple[dict[str, Any], _Vocabulary]:
    """The spec the library will run (tokenizer.json, or vocab.json and merges.txt, as the class
    transformers picks builds them: ``tokenizer_folder``), checked (``check_tokenizer``), and from
    it the model vocabulary (token -> id), the added tokens (id -> (token, special)), and how the
    model's tokens are shown: "byte-level" (GPT-2's), "sentencepiece" (``▁``, byte pieces) or None."""
    checked = None
    if path.name == "vocab.json":
        raw = from_vocab_and_merges(folder)
    elif path.name == "vocab.txt":
        raw = from_vocab_txt(folder)
    else:
        try:
            raw = read_json(path, MAX_TOKENIZER_BYTES, what="a readable tokenizer")
        except FileNotFoundError:
            raise CheckpointError(f"{path.parent}: missing tokenizer file tokenizer.json") from None
        # All of the file is checked, the parts the class replaces too: a hostile file is refused
        # (one line) whichever class reads it.
        checked = check_tokenizer(raw, path)
        if folder.cls == BACKEND:
            return checked, _vocabulary(checked, path)
        raw = rebuilt(folder, checked)
    data = check_tokenizer(raw, path, checked=checked)
    return data, _vocabulary(data, path)


def _vocabulary(data: dict[str, Any], path: Path) -> _Vocabulary:
    added = _library_ids(data["added_tokens"], data["model"]["vocab"])
    return data["model"]["vocab"], added, _style(data) if data["model"]["type"] == "BPE" else None


def _style(data: dict[str, Any]) -> str | None:
    """How a model token is written: byte-level (a ByteLevel decoder) or SentencePiece's ``▁``
    (byte fallback, a Metaspace, or a Replace of ``▁``)."""
    decoder = data["decoder"] or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    if any(p.get("type") == "ByteLevel" for p in parts):
        return "byte-level"
    if data["model"].get("byte_fallback") or any(
        p.get("type") == "Metaspace" or (p.get("type") == "Replace" and p["pattern"].get("String") == "▁")
        for p in parts
    ):
        return "sentencepiece"
    return None


def _templates(post: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not post:
        return []
    if post["type"] == "Sequence":
        return [p for p in post["processors"] if p["type"] == "TemplateProcessing"]
    return [post] if post["type"] == "TemplateProcessing" else []


def _ids_of(template: dict[str, Any], pieces: list[dict[str, Any]]) -> list[int]:
    return [i for p in pieces for i in template["special_tokens"][p["SpecialToken"]["id"]]["ids"]]


def _roberta(post: dict[str, Any] | None) -> dict[str, Any] | None:
    """RoBERTa's post-processor (``cls $A sep``), alone or in a Sequence."""
    if not post:
        return None
    parts = post["processors"] if post["type"] == "Sequence" else [post]
    return next((p for p in parts if p["type"] == "RobertaProcessing"), None)


def _first_special(post: dict[str, Any] | None) -> int | None:
    """The first id of the single-sequence template, when it is a special token before ``$A``."""
    if roberta := _roberta(post):
        return roberta["cls"][1]
    for template in _templates(post):
        single = template["single"]
        if (
            single
            and "SpecialToken" in single[0]
            and single[0]["SpecialToken"]["id"] in template["special_tokens"]
        ):
            return _ids_of(template, single[:1])[0]
    return None


def _last_specials(post: dict[str, Any] | None) -> tuple[int, ...]:
    if roberta := _roberta(post):
        return (roberta["sep"][1],)
    for template in _templates(post):
        single = template["single"]
        tail = []
        for piece in reversed(single):
            if "SpecialToken" not in piece or piece["SpecialToken"]["id"] not in template["special_tokens"]:
                break
            tail.insert(0, piece)
        if tail and len(tail) < len(single):
            return tuple(_ids_of(template, tail))
    return ()


def _load(path: Path, spec: dict[str, Any]) -> NativeProcess:
    """The library's tokenizer of the checked ``spec``, built and run in a child process (``native``);
    padding and truncation are not in ``spec`` (see ``tokenizer_check``)."""
    try:
        from tokenizers import Tokenizer  # imported here, so that every child inherits it
    except ImportError:
        raise CheckpointError(
            "byte-level BPE tokenizers need tokenizers: pip install 'transformer-walkthrough[models]'"
        ) from None
    # Compact and not ASCII-escaped: 20% faster to write and to parse (a lone surrogate, which the
    # library cannot take, then fails in from_str: one line).
    return NativeProcess(
        str(path), lambda: Tokenizer.from_str(json.dumps(spec, ensure_ascii=False, separators=COMPACT)), OPS
    )


_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
             (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization`` (WordPiece only): `` .`` -> ``.``, `` n't`` -> ``n't``."""
    for before, after in _CLEAN_UP:
        text = text.replace(before, after)
    return text


COMPACT = (",", ":")
OPS = {
    "encode": lambda tok, text: tok.encode(text).ids,
    "decode": lambda tok, ids, skip: tok.decode(ids, skip_special_tokens=skip),
}

# The name of the class when it read GPT-2's tokenizers only; existing imports keep it.
ByteLevelBPETokenizer = BPETokenizer
