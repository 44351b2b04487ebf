"""A byte-level BPE tokenizer (GPT-2's) read from a checkpoint's ``tokenizer.json``, equal to
``transformers.GPT2TokenizerFast``.

The text's UTF-8 bytes are cut into words (a leading space stays with its word), each byte is
written as one printable character (GPT-2's ``bytes_to_unicode``: a space is ``Ġ``, a newline
``Ċ``), and the merges learned from a corpus join those characters into tokens: `` cat`` is the
one token ``Ġcat``. The ``tokenizers`` package does this, from the same file ``transformers`` uses.

Tokens are shown readably (``label``): the token's bytes decoded as UTF-8, a space shown as ``·``,
a newline as ``↵``, a tab as ``⇥``, and a byte that is not a whole UTF-8 character (a token can
hold half of an emoji) or another control character as ``<0xNN>``, and any other character that
prints as nothing (U+0085, the zero-width joiner U+200D, …) as ``<U+XXXX>``: ``Ġcat`` is ``·cat``,
``Ã©`` is ``é``, ``âĢ`` is ``<0xE2><0x80>``. Labels are for reading; the ids are the truth, and two
tokens can share a label (``Ġ`` and ``Â·`` are both ``·``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import CheckpointError, first_line
from .jsonfile import read_json

MAX_TOKENIZER_BYTES = 200_000_000  # the largest tokenizer.json on the hub is tens of MB
MAX_VOCABULARY = 10_000_000  # ids beyond this are not a vocabulary but a corrupt file
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
    """``label`` of every token, in a few passes over all of them at once (50,257 in ~50 ms)."""
    joined = _SEP.join(tokens).translate(_to_latin1())
    try:
        joined.replace(_SEP, "").encode("latin-1")
    except UnicodeEncodeError:  # some token is not byte-level (an added token): one at a time
        return [labels([t])[0] if _is_byte_level(t) else t for t in tokens]
    texts = [t.encode("latin-1").decode("utf-8", "surrogateescape") for t in joined.split(_SEP)]
    shown = _SEP.join(texts).translate(_SHOW).split(_SEP)
    return [t if t.isprintable() else _escape(t) for t in shown]


def _escape(text: str) -> str:
    """Characters that print as nothing or move the cursor (U+0085, U+200D, …) as <U+XXXX>."""
    return "".join(c if c.isprintable() else f"<U+{ord(c):04X}>" for c in text)


def _is_byte_level(token: str) -> bool:
    return all(ord(c) in _to_latin1() for c in token)


class ByteLevelBPETokenizer:
    """Text -> ids and ids -> text for a GPT-2-style checkpoint, as ``GPT2TokenizerFast`` does.

    ``vocabulary`` is every token by id (``Ġcat``), ``labels`` the same tokens as ``label`` shows
    them (an added token, such as ``<|endoftext|>``, as it is written). Both are read from the
    file's JSON at once; the ``tokenizers`` machine that encodes and decodes is built when first used.
    """

    def __init__(self, folder: str | Path, size: int | None = None):
        self.path = Path(folder) / "tokenizer.json"
        vocab, added, byte_level = _read_vocabulary(self.path)
        n = max(max(vocab.values(), default=-1) + 1, max(added, default=-1) + 1, size or 0)
        if size is not None and n > size:
            raise CheckpointError(f"{self.path}: has ids up to {n - 1}, the embedding table only {size} rows")
        tokens: list[str | None] = [None] * n
        for token, i in vocab.items():
            tokens[i] = token
        for i, (token, _) in added.items():
            tokens[i] = token
        # Rows of the embedding table that no token names (a table padded to a round size).
        self.vocabulary: tuple[str, ...] = tuple(
            t if t is not None else f"<unused {i}>" for i, t in enumerate(tokens)
        )
        self.special = frozenset(i for i, (_, special) in added.items() if special)
        shown = list(self.vocabulary)
        if byte_level:
            model_ids = [i for i in range(n) if tokens[i] is not None and i not in added]
            for i, text in zip(model_ids, labels([shown[i] for i in model_ids]), strict=True):
                shown[i] = text
        self.labels: tuple[str, ...] = tuple(t if t.isprintable() else _escape(t) for t in shown)
        # The display form is what rows, columns and predictions show (checkpoint.Tokenizer); one
        # vocabulary serves the prompt and what follows it.
        self.source_vocabulary = self.target_vocabulary = self.labels
        self._machine: Any = None

    @property
    def _tokenizer(self) -> Any:
        if self._machine is None:
            self._machine = _load(self.path)
        return self._machine

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: pre-tokenized, byte-mapped, merged, as ``GPT2TokenizerFast(text)``."""
        return self._tokenizer.encode(text).ids

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
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _read_vocabulary(path: Path) -> tuple[dict[str, int], dict[int, tuple[str, bool]], bool]:
    """tokenizer.json's model vocabulary (token -> id), its added tokens (id -> (token, special)),
    and whether its decoder is byte-level; every id checked."""
    _check_size(path)
    data = read_json(path, MAX_TOKENIZER_BYTES, what="a readable tokenizer")
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict) or model.get("type") not in ("BPE", None):
        raise CheckpointError(f"{path}: not a BPE tokenizer (no model.vocab of token -> id)")
    for token, i in vocab.items():
        if type(i) is not int or not 0 <= i < MAX_VOCABULARY:
            raise CheckpointError(f"{path}: token {token!r} has id {i!r}, not an id")
    added: dict[int, tuple[str, bool]] = {}
    for entry in data.get("added_tokens") or []:
        i, content = (entry.get("id"), entry.get("content")) if isinstance(entry, dict) else (None, None)
        if type(i) is not int or not 0 <= i < MAX_VOCABULARY or not isinstance(content, str):
            raise CheckpointError(f"{path}: an added token is not an id and a string: {str(entry)[:60]}")
        added[i] = (content, bool(entry.get("special")))
    decoder = data.get("decoder")
    return vocab, added, isinstance(decoder, dict) and decoder.get("type") == "ByteLevel"


def _check_size(path: Path) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: missing tokenizer file tokenizer.json") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    if size > MAX_TOKENIZER_BYTES:
        raise CheckpointError(f"{path}: {size:,} bytes is too large for a tokenizer")


def _load(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CheckpointError(
            "byte-level BPE tokenizers need tokenizers: pip install 'transformer-walkthrough[models]'"
        ) from None
    _check_size(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exceptions
        raise CheckpointError(f"{path}: not a readable tokenizer ({first_line(err)})") from None
