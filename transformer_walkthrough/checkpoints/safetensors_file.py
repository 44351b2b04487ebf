"""``model.safetensors`` read into NumPy arrays, safely: nothing in a file can run code or exhaust memory.

An 8-byte header length, a JSON header naming each tensor's dtype, shape and byte range, then the
bytes. The header is checked against the file before any tensor is read, as the safetensors crate
checks it: each range holds its shape's bytes, and the ranges, sorted, tile the data exactly (no
gap, no overlap, nothing after the last). Tensors are then read one at a time, when asked for, each
straight into its array; a sharded checkpoint (``SHARD_INDEX``) is its files read the same way.
Every file is opened only if it is a regular file (``regular_files.open_regular``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from ..regular_files import file_size, open_regular
from .errors import CheckpointError, first_line
from .jsonfile import parse_json, read_json, shown

WEIGHTS = "a checkpoint's weights file"  # what open_regular says it expected
# A header larger than this is not a header (the hub's own limit is 100 MB).
MAX_HEADER_BYTES = 100_000_000

# A shard index names each tensor and its file: ~100 bytes a tensor (GPT-2 XL's is 30 kB).
MAX_INDEX_BYTES = 10_000_000
SHARD_INDEX = "model.safetensors.index.json"
_SHARD_FILE = re.compile(r"[\w.-]+\.safetensors")  # a file beside the index, never a path elsewhere

# safetensors dtype -> (NumPy dtype of the stored bytes, bytes per element)
_SAFETENSORS_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),  # NumPy has no bfloat16: the upper half of a float32
    "I64": (np.dtype("<i8"), 8),
}


def bfloat16_to_float32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is float32 with the low 16 bits of the mantissa dropped: shift them back in (in place,
    so that the peak is the raw bytes and one float32 copy)."""
    wide = raw.astype(np.uint32)
    wide <<= 16
    return wide.view(np.float32)


class SafetensorsFile(Mapping):
    """A ``.safetensors`` file as a read-only mapping ``name -> ndarray``, each read on first use.

    ``shape(name)``, ``dtype(name)`` and ``read_bytes(name)`` answer from the header without
    reading the tensor.
    """

    def __init__(self, path: Path, max_header: int = MAX_HEADER_BYTES):
        self.path = Path(path)
        self._entries, self.header_bytes = _safetensors_header(self.path, max_header)

    def __getitem__(self, name: str) -> np.ndarray:
        """The tensor's bytes read straight into a new array: its byte range was checked against the
        file with the header, and a plain read (no memory map) keeps the peak at one copy."""
        entry = self._entries[name]
        stored, size = _SAFETENSORS_DTYPES[entry["dtype"]]
        start, end = entry["absolute"]
        try:  # opened again: the file may have been swapped since its header was read
            with open_regular(self.path, WEIGHTS, error=CheckpointError) as f:
                f.seek(start)
                raw = np.fromfile(f, dtype=stored, count=(end - start) // size)
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot read tensor {name!r} ({first_line(err)})") from None
        if raw.size * size != end - start:  # the file shrank since its header was read
            raise CheckpointError(f"{self.path}: truncated safetensors file (tensor {name!r})")
        if entry["dtype"] == "BF16":  # NumPy has no bfloat16: widened to float32
            raw = bfloat16_to_float32(raw)
        return raw.reshape(entry["shape"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:  # Mapping's would read the tensor to answer
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def dtype(self, name: str) -> str:
        return self._entries[name]["dtype"]

    def read_bytes(self, name: str) -> int:
        """The bytes that reading the tensor allocates: its stored bytes, and a float32 copy of bfloat16."""
        start, end = self._entries[name]["absolute"]
        widened = 2 * (end - start) if self._entries[name]["dtype"] == "BF16" else 0
        return end - start + widened


def read_safetensors(path: str | Path) -> SafetensorsFile:
    """The tensors of a ``.safetensors`` file, header checked, each read when first asked for."""
    return SafetensorsFile(Path(path))


class ShardedSafetensors(Mapping):
    """A checkpoint split over several ``.safetensors`` files, as one read-only mapping ``name -> ndarray``.

    ``save_pretrained`` splits a model larger than its ``max_shard_size`` (5 GB by default: GPT-2
    XL in float32) into ``model-00001-of-00002.safetensors``, … and writes ``model.safetensors.index.json``,
    whose ``weight_map`` names each tensor's file. Every shard's header is checked here, and the
    index must name each tensor of each shard exactly once; each tensor is read on first use.
    """

    def __init__(self, index: Path):
        self.index = Path(index)
        weight_map = _shard_map(self.index)
        shards: dict[str, SafetensorsFile] = {}
        budget = MAX_HEADER_BYTES  # for all the headers together, as for one file's
        for file in sorted(set(weight_map.values())):
            path = self.index.parent / file
            if not path.is_file():  # missing; or a FIFO, which would block the read for ever
                raise CheckpointError(f"{self.index}: shard {file} is missing or not a file")
            shard = shards[file] = SafetensorsFile(path, budget)
            budget -= shard.header_bytes
            for name in shard:  # each shard checked as it is read: a bad one stops the rest
                if weight_map.get(name) != file:
                    where = f"puts it in {weight_map[name]}" if name in weight_map else "does not list it"
                    raise CheckpointError(
                        f"{self.index}: {file} holds tensor {name!r}, but the index {where}"
                    )
        for name, file in weight_map.items():
            if name not in shards[file]:
                raise CheckpointError(
                    f"{self.index}: tensor {name!r} is not in {file}, where the index puts it"
                )
        self.shards = len(shards)
        self._file_of = {name: shards[file] for name, file in weight_map.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._file_of[name][name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._file_of)

    def __contains__(self, name: object) -> bool:  # Mapping's would read the tensor to answer
        return name in self._file_of

    def __len__(self) -> int:
        return len(self._file_of)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file_of[name].shape(name)

    def dtype(self, name: str) -> str:
        return self._file_of[name].dtype(name)

    def read_bytes(self, name: str) -> int:
        """From the shard's header (``Taker.charge`` would otherwise read every tensor to size it)."""
        return self._file_of[name].read_bytes(name)


def _shard_map(index: Path) -> dict[str, str]:
    """The index's ``weight_map`` (tensor name -> shard file), each file a plain name beside the index."""
    raw = read_json(index, MAX_INDEX_BYTES)
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: no weight_map (tensor name -> shard file)")
    for name, file in weight_map.items():
        if not (isinstance(file, str) and _SHARD_FILE.fullmatch(file)):
            raise CheckpointError(
                f"{index}: tensor {name!r} is in {file!r}, not a .safetensors file beside the index"
            )
    return weight_map


def shard_files(index: Path) -> list[str]:
    """The shard files an index names, each once (what a download of the checkpoint must fetch)."""
    return sorted(set(_shard_map(index).values()))


def _safetensors_header(path: Path, max_header: int = MAX_HEADER_BYTES) -> tuple[dict[str, dict], int]:
    """The header's entries, each checked to match its shape and dtype, all together to tile the
    file's data exactly, and the header's size in bytes (at most ``max_header``)."""
    try:
        with open_regular(path, WEIGHTS, error=CheckpointError) as f:
            size = file_size(f)
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes)")
            n = int.from_bytes(prefix, "little")
            if n > size - 8:
                raise CheckpointError(
                    f"{path}: truncated or corrupt safetensors file (header of {n} bytes in a file of {size})"
                )
            if n > max_header:
                raise CheckpointError(
                    f"{path}: a header of {n:,} bytes, over the {max_header:,} that a checkpoint's "
                    "headers may take together"
                )
            data = f.read(n)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    header = parse_json(data, path, what="a safetensors file: its header is not JSON")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors file (its header is not a JSON object)")
    data_start, data_size = 8 + n, size - 8 - n
    entries = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {shown(name)}"
        if not isinstance(entry, dict):
            raise CheckpointError(f"{where} has no description in the header")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in _SAFETENSORS_DTYPES:
            allowed = ", ".join(_SAFETENSORS_DTYPES)
            raise CheckpointError(f"{where} has dtype {shown(dtype)}; readable dtypes are {allowed}")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise CheckpointError(f"{where} has an invalid shape {shown(shape)}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise CheckpointError(f"{where} has invalid data offsets {shown(offsets)}")
        expected = math.prod(shape) * _SAFETENSORS_DTYPES[dtype][1]  # Python ints: no overflow
        if offsets[1] - offsets[0] != expected:
            raise CheckpointError(
                f"{where}: shape {shown(shape)} needs {expected} bytes, the header gives it "
                f"{offsets[1] - offsets[0]}"
            )
        if offsets[1] > data_size:
            raise CheckpointError(
                f"{path}: truncated safetensors file (tensor {shown(name)} ends at byte "
                f"{data_start + offsets[1]} of {size})"
            )
        entries[name] = {
            "dtype": dtype,
            "shape": shape,
            "offsets": tuple(offsets),
            "absolute": (data_start + offsets[0], data_start + offsets[1]),
        }
    _check_tiling(path, entries, data_size)
    return entries, n


def _check_tiling(path: Path, entries: dict[str, dict], data_size: int) -> None:
    """The tensors' byte ranges, sorted, follow each other from 0 to the end of the data, as the
    safetensors crate requires: a range that overlaps another would let one stretch of a (sparse)
    file be read many times over, a gap or a tail would be bytes that no tensor accounts for."""
    end = 0
    for (start, stop), name in sorted((entry["offsets"], name) for name, entry in entries.items()):
        if start != end:
            how = "overlaps the tensor before it" if start < end else f"leaves bytes {end} to {start} unused"
            raise CheckpointError(
                f"{path}: corrupt safetensors file (tensor {shown(name)} {how}; tensors must tile the data)"
            )
        end = stop
    if end != data_size:
        raise CheckpointError(
            f"{path}: corrupt safetensors file ({data_size - end:,} bytes after the last tensor's data)"
        )
