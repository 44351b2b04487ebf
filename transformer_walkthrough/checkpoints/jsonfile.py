"""A checkpoint's JSON files (config, generation settings, shard index, vocabulary, tokenizer), read
once their size is checked and parsed so that any malformed file is one line: never a traceback.

``json.loads`` raises more than ``JSONDecodeError``: ``ValueError`` for an integer of over 4,300
digits, ``RecursionError`` for arrays nested a few thousand deep, ``UnicodeDecodeError`` for bytes
that are not UTF-8. All of them are caught here, in one place.

A file's bytes do not bound what parsing it allocates: ``[{},{},…]`` is 3 bytes a value and 72 in
memory, so a 198 MB flood takes 3.6 GB. Before parsing, the values are counted from above: every
value or key but the first follows one of ``[ { , :`` (counted everywhere, in strings too, so the
count is never short), and each costs at most ~100 bytes (a str, int or empty container and its
slot), its characters at most 4 bytes each. A file of more than ``MAX_JSON_VALUES`` values, or
whose estimate passes the memory limit (``budget``), is refused unparsed. GPT-2's tokenizer.json
(1.4 MB, 50k tokens and 50k merges) counts ~250k values, 25 MB by the estimate, counted in ~1 ms.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any

from ..regular_files import read_regular
from .budget import how_to_raise, memory_limit, size
from .errors import CheckpointError, first_line

MAX_JSON_BYTES = 100_000_000  # opus-mt's vocab.json is 1 MB, GPT-2's tokenizer.json 1.4 MB
MAX_CONFIG_BYTES = 10_000_000  # config.json and generation_config.json: a few kB
MAX_TOKEN_ID = 10_000_000  # a vocabulary's ids (vocab.json, tokenizer.json): beyond this, a corrupt file
# Keys and values of one file: a vocabulary of 10 million pieces (MAX_TOKEN_ID) is 20 million.
MAX_JSON_VALUES = 20_000_000
BYTES_PER_VALUE = 100  # a short str (~50 B), an int (28 B) or {} (64 B), and its slot in a dict or list


def values_at_most(data: bytes) -> int:
    """An upper bound on the keys and values that parsing ``data`` makes (see the module)."""
    return 1 + data.count(b"[") + data.count(b"{") + data.count(b",") + data.count(b":")


def parse_json(data: bytes, where: object, what: str = "readable JSON") -> Any:
    """``data`` (UTF-8 JSON) parsed, or a CheckpointError "WHERE: not WHAT (why)"; refused unparsed
    when what it would allocate passes ``MAX_JSON_VALUES`` values or the memory limit."""
    values = values_at_most(data)
    if values > MAX_JSON_VALUES:
        raise CheckpointError(
            f"{where}: not {what} (up to {values:,} JSON values, more than the {MAX_JSON_VALUES:,} "
            "a checkpoint's file may have)"
        )
    estimate, limit = values * BYTES_PER_VALUE + 4 * len(data), memory_limit()
    if estimate > limit:
        raise CheckpointError(
            f"{where}: parsing it could take {size(estimate)} of memory; {how_to_raise(limit)}"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an int too long to convert
        raise CheckpointError(f"{where}: not {what} ({first_line(err)})") from None
    except RecursionError:
        raise CheckpointError(f"{where}: not {what} (nested too deeply)") from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES, what: str = "readable JSON") -> Any:
    """The JSON file at ``path``, parsed (``parse_json``); a file that is not regular (a FIFO, a
    device) or is over ``max_bytes`` is refused unread.

    ``FileNotFoundError`` passes through: each caller says what a missing file means.
    """
    data = read_regular(path, "a checkpoint's JSON file", max_bytes, CheckpointError)
    return parse_json(data, path, what)


def shown(value: object, limit: int = 60) -> str:
    """A value read from a file, quoted in a message: its repr, shortened (``reprlib``: a few levels
    and items, long strings and integers cut in the middle), then cut to ``limit`` characters."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()  # keyword arguments only from Python 3.12
    short.maxlevel, short.maxdict, short.maxlist, short.maxtuple = 2, 3, 3, 3
    short.maxstring, short.maxlong, short.maxother = 40, 24, 40
    return short


_SHORT_REPR = _short_repr()
