"""Reading an untrusted ``.npz``: every header checked before a single array is loaded.

``np.load`` trusts the file: a 336-byte member whose header claims 10¹⁰ floats makes it allocate
75 GiB, a compressed member can hold gigabytes, and string, object or complex arrays come back as
if they were weights. Here the zip directory and each member's ``.npy`` header (name, shape, dtype)
are read first; only when every one of them is a real floating-point array of a sane total size is
any data read, and the zip's CRC check catches a truncated file or a flipped byte.

The file itself is opened only if it is a regular file (``open_regular``): a FIFO would block the
read for ever, and ``/dev/zero`` would be read until memory ran out.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from ..errors import WalkthroughError
from ..regular_files import open_regular, open_zip

MAX_BYTES = 1 << 30  # 1 GiB of arrays: far more than any model this walkthrough can show
_FLOATS = ("f",)  # numpy dtype kinds accepted: real floating point only
_HEADER = 10_000  # bytes: a .npy header is a short dict literal
# A zip's directory takes ~100 bytes a member here (zipfile makes a ~500-byte ZipInfo of each, and
# each member's header is then read): a model this walkthrough can show has a few thousand
# parameters at most; 600,000 empty members took 30 s and 870 MB before this cap.
MAX_DIRECTORY_BYTES = 2_000_000
PARAMETERS = "a model's parameters"  # what an .npz's directory lists
# The one member that is not a parameter: the words of the toy's embedding tables, in row order
# (``walkthrough train --output`` writes it), so that a sentence with other words can be told which
# words the file knows. A 1-D array of strings, of at most MAX_WORDS words and VOCABULARY_BYTES.
VOCABULARY = "vocabulary"
MAX_WORDS, VOCABULARY_BYTES = 100_000, 64_000_000


def _refuse(path: str | Path, why: str) -> WalkthroughError:
    return WalkthroughError(f"{path}: {why}")


def member_names(path: str | Path) -> set[str] | None:
    """The array names an .npz holds (its members without ``.npy``), or None when it is not a
    regular file or not a zip: the directory alone is read, never an array."""
    try:
        with (
            open_regular(path, "an .npz") as f,
            open_zip(f, path, MAX_DIRECTORY_BYTES, PARAMETERS) as archive,
        ):
            return {n.removesuffix(".npy") for n in archive.namelist()}
    except (WalkthroughError, OSError, EOFError, ValueError, zipfile.BadZipFile):
        return None


def read_vocabulary(path: str | Path) -> tuple[str, ...] | None:
    """The words an .npz's tables were trained on (its ``vocabulary`` member), or None when it has
    none or cannot be read: a hint for a message, never a reason to fail."""
    try:
        with (
            open_regular(path, "an .npz") as f,
            open_zip(f, path, MAX_DIRECTORY_BYTES, PARAMETERS) as archive,
        ):
            info = archive.getinfo(f"{VOCABULARY}.npy")
            with archive.open(info) as member:
                shape, _, dtype = _header(member)
            if (
                dtype.kind != "U"
                or len(shape) != 1
                or shape[0] > MAX_WORDS
                or shape[0] * dtype.itemsize > VOCABULARY_BYTES
            ):
                return None
            with archive.open(info) as member:  # from its start: read_array reads the header again
                words = npy.read_array(member, allow_pickle=False, max_header_size=_HEADER)
    except (WalkthroughError, OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    return tuple(str(w) for w in words)


def _header(member: zipfile.ZipExtFile) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, Fortran order and dtype that a member's ``.npy`` header declares."""
    version = npy.read_magic(member)
    if version == (1, 0):
        return npy.read_array_header_1_0(member, max_header_size=_HEADER)
    if version == (2, 0):
        return npy.read_array_header_2_0(member, max_header_size=_HEADER)
    raise ValueError(f"unsupported .npy version {version}")


def read_npz(
    path: str | Path,
    *,
    expected: dict[str, tuple[int, ...]] | None = None,
    max_bytes: int = MAX_BYTES,
    what: str = "a weights .npz (as `walkthrough train --output` writes)",
) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` by name, read only after every header has been checked.

    Refused with one line (WalkthroughError): a file that is not a zip of ``.npy`` members; a
    member whose dtype is not a real float (strings, bytes, objects, records, complex, bool,
    datetimes, integers); arrays that would take more than ``max_bytes`` in memory; with
    ``expected``, a missing or extra name or a shape that differs; a truncated or corrupted file;
    NaN or infinity among the values.
    """
    name = str(path)
    if not Path(path).is_file():  # the plain message; open_regular's fstat is the guard against a swap
        raise _refuse(name, "no such file" if not Path(path).exists() else f"not a file; expected {what}")
    try:
        file = open_regular(path, what)
    except FileNotFoundError:  # removed since
        raise _refuse(name, "no such file") from None
    with file:
        try:
            archive = open_zip(file, name, MAX_DIRECTORY_BYTES, PARAMETERS)
        except (zipfile.BadZipFile, EOFError, ValueError):
            raise _refuse(name, f"not {what}") from None
        except OSError as err:
            raise _refuse(name, f"cannot be read ({err.strerror or err})") from None
        try:
            with archive:
                return _read_arrays(name, archive, expected, max_bytes, what)
        except MemoryError:
            raise _refuse(name, "out of memory while reading its arrays") from None


def _read_arrays(
    name: str,
    archive: zipfile.ZipFile,
    expected: dict[str, tuple[int, ...]] | None,
    max_bytes: int,
    what: str,
) -> dict[str, np.ndarray]:
    """Every member's header checked (kind, size, names), then the arrays read (``read_npz``)."""
    headers: dict[str, tuple[zipfile.ZipInfo, tuple[int, ...], bool, np.dtype]] = {}
    total = 0
    for info in archive.infolist():
        key = info.filename.removesuffix(".npy")
        if not info.filename.endswith(".npy") or info.is_dir():
            raise _refuse(name, f"holds {_short(info.filename)}, which is not .npy data; expected {what}")
        try:
            with archive.open(info) as member:
                shape, fortran, dtype = _header(member)
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            raise _refuse(name, f"{_short(key)} is damaged or truncated ({_short(str(err), 60)})") from None
        except Exception:
            raise _refuse(name, f"{_short(key)} is not .npy data; expected {what}") from None
        if key == VOCABULARY and dtype.kind == "U":
            if len(shape) != 1 or shape[0] > MAX_WORDS or shape[0] * dtype.itemsize > VOCABULARY_BYTES:
                raise _refuse(
                    name,
                    f"{VOCABULARY} is not a list of at most {MAX_WORDS:,} words "
                    f"in {VOCABULARY_BYTES:,} bytes",
                )
            total += math.prod(shape) * dtype.itemsize
            headers[key] = (info, shape, fortran, dtype)
            continue
        if dtype.kind not in _FLOATS or dtype.fields is not None or dtype.subdtype is not None:
            raise _refuse(name, f"{_short(key)} holds {dtype} values; weights are real floats")
        total += math.prod(shape) * dtype.itemsize
        if total > max_bytes:
            raise _refuse(
                name, f"its arrays would take {total / 2**30:,.1f} GiB or more; the limit is "
                f"{max_bytes / 2**30:g} GiB"
            )  # fmt: skip
        headers[key] = (info, shape, fortran, dtype)
    if expected is not None:
        _check_names(name, headers, expected)
    arrays = {}
    for key, (info, shape, _, _) in headers.items():
        try:
            with archive.open(info) as member:
                array = npy.read_array(member, allow_pickle=False, max_header_size=_HEADER)
                trailing = member.read(1)  # to the end, so that zipfile compares the CRC
        except (ValueError, EOFError, OSError, zipfile.BadZipFile) as err:
            why = _short(str(err), 60)
            raise _refuse(name, f"{_short(key)} is damaged or truncated ({why})") from None
        if trailing or array.shape != shape:
            raise _refuse(name, f"{_short(key)} is damaged: its data does not match its header")
        if key != VOCABULARY and not np.isfinite(array).all():
            raise _refuse(name, f"{_short(key)} holds NaN or infinite values; weights must be finite")
        arrays[key] = array
    return arrays


def _check_names(
    path: str,
    headers: dict[str, tuple[zipfile.ZipInfo, tuple[int, ...], bool, np.dtype]],
    expected: dict[str, tuple[int, ...]],
) -> None:
    headers = {k: v for k, v in headers.items() if k != VOCABULARY}  # not a parameter
    missing = [k for k in expected if k not in headers]
    if missing:
        raise _refuse(path, f"has no {missing[0]}, which this config's model needs ({len(missing)} missing)")
    extra = [k for k in headers if k not in expected]
    if extra:
        raise _refuse(path, f"has {_short(extra[0])}, which this config's model does not have")
    for key, want in expected.items():
        have = headers[key][1]
        if tuple(have) != tuple(want):
            raise _refuse(
                path, f"{key} is {'×'.join(map(str, have))} in the file but {'×'.join(map(str, want))} "
                "in this config's model"
            )  # fmt: skip


def _short(text: str, limit: int = 40) -> str:
    """A name from the file, quoted in a message: control characters escaped, cut to a prefix."""
    text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= limit else text[: limit - 1] + "…"
