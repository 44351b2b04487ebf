"""A byte-level BPE tokenizer (GPT-2's) read from a checkpoint's ``tokenizer.json``, equal to
``transformers.GPT2TokenizerFast``.

The text's UTF-8 bytes are cut into words (a leading space stays with its word), each byte is
written as one printable character (GPT-2's ``bytes_to_unicode``: a space is ``Ġ``, a newline
``Ċ``), and the merges learned from a corpus join those characters into tokens: `` cat`` is the
one token ``Ġcat``. The ``tokenizers`` package does this, from the same file ``transformers`` uses.

Tokens are shown readably (``label``): the token's bytes decoded as UTF-8, a space shown as ``·``,
a newline as ``↵``, a tab as ``⇥``, and a byte that is not a whole UTF-8 character (a token can
hold half of an emoji) or another control character as ``<0xNN>``: ``Ġcat`` is ``·cat``,
``Ã©`` is ``é``, ``âĢ`` is ``<0xE2><0x80>``. Labels are for reading; the ids are the truth, and two
tokens can share a label (``Ġ`` and ``Â·`` are both ``·``).
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import CheckpointError

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


def _hex_bytes(err: UnicodeError) -> tuple[str, int]:
    bad = err.object[err.start : err.end]  # type: ignore[attr-defined]
    return "".join(f"<0x{b:02X}>" for b in bad), err.end  # type: ignore[attr-defined]


codecs.register_error("walkthrough-hex-bytes", _hex_bytes)
_CONTROLS = {c: f"<0x{c:02X}>" for c in (*range(32), 127)} | {ord(k): v for k, v in SHOWN.items()}


def label(token: str) -> str:
    """A byte-level token as text to read: ``Ġcat`` -> ``·cat``, ``Ã©`` -> ``é`` (see the module)."""
    try:
        raw = token.translate(_to_latin1()).encode("latin-1")
    except UnicodeEncodeError:  # not a byte-level token (an added token such as <|endoftext|>)
        return token
    return raw.decode("utf-8", "walkthrough-hex-bytes").translate(_CONTROLS)


class ByteLevelBPETokenizer:
    """Text -> ids and ids -> text for a GPT-2-style checkpoint, as ``GPT2TokenizerFast`` does.

    ``vocabulary`` is every token by id (``Ġcat``); ``labels`` the same tokens as ``label`` shows them.
    """

    def __init__(self, folder: str | Path, size: int | None = None):
        path = Path(folder) / "tokenizer.json"
        self._tokenizer = _load(path)
        vocab = self._tokenizer.get_vocab(with_added_tokens=True)
        n = max(max(vocab.values(), default=-1) + 1, size or 0)
        if size is not None and n > size:
            raise CheckpointError(f"{path}: has ids up to {n - 1}, the embedding table only {size} rows")
        tokens: list[str | None] = [None] * n
        for token, i in vocab.items():
            tokens[i] = token
        # Rows of the embedding table that no token names (a table padded to a round size).
        self.vocabulary: tuple[str, ...] = tuple(
            t if t is not None else f"<unused {i}>" for i, t in enumerate(tokens)
        )
        self.special = {i for i, t in self._tokenizer.get_added_tokens_decoder().items() if t.special}
        byte_level = type(self._tokenizer.decoder).__name__ == "ByteLevel"
        self.labels: tuple[str, ...] = tuple(
            t if (i in self.special or not byte_level) else label(t) for i, t in enumerate(self.vocabulary)
        )

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: pre-tokenized, byte-mapped, merged, as ``GPT2TokenizerFast(text)``."""
        return self._tokenizer.encode(text).ids

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` (``["The", "Ġcat"]``)."""
        return [self.vocabulary[i] for i in self.encode(text)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD, as transformers)."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _load(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CheckpointError(
            "byte-level BPE tokenizers need tokenizers: pip install 'transformer-walkthrough[models]'"
        ) from None

    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent}: missing tokenizer file tokenizer.json") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    if size > MAX_TOKENIZER_BYTES:
        raise CheckpointError(f"{path}: {size:,} bytes is too large for a tokenizer")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exceptions
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CheckpointError(f"{path}: not a readable tokenizer ({first})") from None
