"""A checkpoint's JSON files (config, generation settings, shard index, vocabulary, tokenizer), read
once their size is checked and parsed so that any malformed file is one line: never a traceback.

``json.loads`` raises more than ``JSONDecodeError``: ``ValueError`` for an integer of over 4,300
digits, ``RecursionError`` for arrays nested a few thousand deep, ``UnicodeDecodeError`` for bytes
that are not UTF-8. All of them are caught here, in one place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import CheckpointError, first_line

MAX_JSON_BYTES = 100_000_000  # opus-mt's vocab.json is 1 MB, GPT-2's tokenizer.json 1.4 MB
MAX_CONFIG_BYTES = 10_000_000  # config.json and generation_config.json: a few kB


def parse_json(data: bytes, where: object, what: str = "readable JSON") -> Any:
    """``data`` (UTF-8 JSON) parsed, or a CheckpointError "WHERE: not WHAT (why)"."""
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an int too long to convert
        raise CheckpointError(f"{where}: not {what} ({first_line(err)})") from None
    except RecursionError:
        raise CheckpointError(f"{where}: not {what} (nested too deeply)") from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES, what: str = "readable JSON") -> Any:
    """The JSON file at ``path``, parsed (``parse_json``); one over ``max_bytes`` is refused unread.

    ``FileNotFoundError`` passes through: each caller says what a missing file means.
    """
    if path.exists() and not path.is_file():  # a FIFO would block the read for ever
        raise CheckpointError(f"{path}: not a regular file")
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise CheckpointError(f"{path}: more than {max_bytes:,} bytes; not a checkpoint's JSON file")
    return parse_json(data, path, what)
