"""Files opened only when they are regular files, of a size known before reading: every file the
tool reads (a config, a weights ``.npz``, a checkpoint's weights, JSON and tokenizer files).

A FIFO named ``model.safetensors`` or ``-w w.npz`` blocks ``open()`` for ever, and ``/dev/zero``
(linked as ``config.json``) reads until memory runs out. ``Path.is_file()`` before ``open()`` leaves a gap in
which the file can be swapped for one, so the file is opened without blocking (``O_NONBLOCK``:
opening a FIFO returns at once), then ``fstat`` says what was opened; only a regular file is read,
and only then is the descriptor made blocking again.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

from .errors import WalkthroughError


def open_regular(
    path: str | Path,
    what: str,
    max_bytes: int | None = None,
    error: type[WalkthroughError] = WalkthroughError,
) -> BinaryIO:
    """``path`` opened for reading in binary, once it is a regular file of at most ``max_bytes``.

    ``FileNotFoundError`` passes through: each caller says what a missing file means. Any other
    refusal is a one-line ``error`` naming ``what`` was expected ("a checkpoint's JSON file").
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: is a directory; expected {what}")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file (a pipe, a socket or a device); expected {what}")
        if max_bytes is not None and info.st_size > max_bytes:
            limit = f"the limit is {max_bytes:,}"
            raise error(f"{path}: {info.st_size:,} bytes is too large for {what} ({limit})")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | Path, what: str, max_bytes: int, error: type[WalkthroughError] = WalkthroughError
) -> bytes:
    """The whole of ``path``, once it is a regular file of at most ``max_bytes`` (``open_regular``);
    one that grew past them while it was read is refused too. ``FileNotFoundError`` passes through."""
    with open_regular(path, what, max_bytes, error) as f:
        try:
            data = f.read(min(file_size(f), max_bytes) + 1)  # no buffer of max_bytes for a small file
        except OSError as err:
            raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise error(f"{path}: too large for {what} (it grew past {max_bytes:,} bytes as it was read)")
    return data


def file_size(f: BinaryIO) -> int:
    """The size of an open file, as the file system says now."""
    return os.fstat(f.fileno()).st_size


_END_RECORD, _END_LOCATOR_64, _END_RECORD_64 = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"


def open_zip(
    file: BinaryIO,
    path: str | Path,
    max_directory: int,
    needs: str,
    error: type[WalkthroughError] = WalkthroughError,
) -> zipfile.ZipFile:
    """``zipfile.ZipFile(file)``, once the zip's central directory is at most ``max_directory``
    bytes: zipfile makes a ZipInfo of ~500 bytes for every ~50 of it, so a flood of empty members
    is refused from the end record, before it is read (``needs``: what the directory should hold,
    "a state dict's few hundred tensors"). zipfile's own errors pass through."""
    directory = _directory_bytes(file)
    if directory > max_directory:
        raise error(
            f"{path}: its zip directory is {directory:,} bytes, over the {max_directory:,} that {needs} need"
        )
    return zipfile.ZipFile(file)


def _directory_bytes(file: BinaryIO) -> int:
    """The size of a zip's central directory, read from its end record (and, past 4 GB, the zip64
    record it points at); 0 when there is no end record (not a zip: zipfile says so). The file is
    left at its start."""
    size = file_size(file)
    tail = min(size, 22 + 65_535)  # the end record: 22 bytes, then a comment of up to 64 kB
    file.seek(size - tail)
    data = file.read(tail)
    at = data.rfind(_END_RECORD)
    directory = 0
    if at >= 0:
        directory = int.from_bytes(data[at + 12 : at + 16], "little")
        locator = data[max(0, at - 20) : at]
        if directory == 0xFFFFFFFF and locator[:4] == _END_LOCATOR_64:
            file.seek(int.from_bytes(locator[8:16], "little"))
            record = file.read(56)
            if record[:4] == _END_RECORD_64:
                directory = int.from_bytes(record[40:48], "little")
    file.seek(0)
    return directory
