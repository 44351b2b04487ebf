"""A checkpoint's files opened only when they are regular files, of a size known before reading.

A FIFO named ``model.safetensors`` blocks ``open()`` for ever, and ``/dev/zero`` (linked as
``config.json``) reads until memory runs out. ``Path.is_file()`` before ``open()`` leaves a gap in
which the file can be swapped for one, so the file is opened without blocking (``O_NONBLOCK``:
opening a FIFO returns at once), then ``fstat`` says what was opened; only a regular file is read,
and only then is the descriptor made blocking again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import CheckpointError


def open_regular(path: str | Path, max_bytes: int | None = None, what: str = "file") -> BinaryIO:
    """``path`` opened for reading in binary, once it is a regular file of at most ``max_bytes``.

    ``FileNotFoundError`` passes through: each caller says what a missing file means. Any other
    refusal is a one-line CheckpointError. The file's size is ``os.fstat(f.fileno()).st_size``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a pipe, a socket or a device"
            raise CheckpointError(f"{path}: not a regular file ({kind}); expected a checkpoint's {what}")
        if max_bytes is not None and info.st_size > max_bytes:
            raise CheckpointError(
                f"{path}: {info.st_size:,} bytes, more than the {max_bytes:,} a checkpoint's {what} may have"
            )
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_size(f: BinaryIO) -> int:
    """The size of an open file, as the file system says now."""
    return os.fstat(f.fileno()).st_size
