"""Checkpoint files read into NumPy arrays, safely: nothing in a file can run code or exhaust memory.

Two formats, as the hub stores them:

- ``model.safetensors``: an 8-byte header length, a JSON header naming each tensor's dtype, shape
  and byte range, then the bytes. The header is checked against the file's size before any tensor
  is read; tensors are then read one at a time, when asked for, each straight into its array.
- ``pytorch_model.bin``: torch's zip format, a pickle ``data.pkl`` whose tensors point at raw
  storages ``data/<key>``. Unpickling can call any function a file names, so this reader's
  unpickler knows exactly the few names a state dict uses and maps each to a NumPy stand-in: torch
  is never imported and no callable from the file is ever looked up.
"""

from __future__ import annotations

import math
import pickle
import re
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CheckpointError, first_line
from .jsonfile import MAX_CONFIG_BYTES, parse_json, read_json

# A header larger than this is not a header (the hub's own limit is 100 MB).
MAX_HEADER_BYTES = 100_000_000
# A state dict's pickle is a few bytes of names and shapes per tensor (opus-mt's: ~40 kB); capping
# it caps the objects a hostile pickle can make before it is refused.
MAX_PICKLE_BYTES = 16_000_000

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


def _bfloat16_to_float32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is float32 with the low 16 bits of the mantissa dropped: shift them back in."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


class SafetensorsFile(Mapping):
    """A ``.safetensors`` file as a read-only mapping ``name -> ndarray``, each read on first use.

    ``shape(name)`` and ``dtype(name)`` answer from the header without reading the tensor.
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
        try:
            raw = np.fromfile(self.path, dtype=stored, count=(end - start) // size, offset=start)
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot read tensor {name!r} ({first_line(err)})") from None
        if raw.size * size != end - start:  # the file shrank since its header was read
            raise CheckpointError(f"{self.path}: truncated safetensors file (tensor {name!r})")
        if entry["dtype"] == "BF16":  # NumPy has no bfloat16: widened to float32
            raw = _bfloat16_to_float32(raw)
        return raw.reshape(entry["shape"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def dtype(self, name: str) -> str:
        return self._entries[name]["dtype"]


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

    def __len__(self) -> int:
        return len(self._file_of)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file_of[name].shape(name)

    def dtype(self, name: str) -> str:
        return self._file_of[name].dtype(name)


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
    """The header's entries, each checked to lie inside the file and to match its shape and dtype,
    and the header's size in bytes (at most ``max_header``)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
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
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise CheckpointError(f"{where} has no description in the header")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in _SAFETENSORS_DTYPES:
            allowed = ", ".join(_SAFETENSORS_DTYPES)
            raise CheckpointError(f"{where} has dtype {dtype!r}; readable dtypes are {allowed}")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise CheckpointError(f"{where} has an invalid shape {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise CheckpointError(f"{where} has invalid data offsets {offsets!r}")
        expected = math.prod(shape) * _SAFETENSORS_DTYPES[dtype][1]  # Python ints: no overflow
        if offsets[1] - offsets[0] != expected:
            raise CheckpointError(
                f"{where}: shape {shape} needs {expected} bytes, the header gives it "
                f"{offsets[1] - offsets[0]}"
            )
        if offsets[1] > data_size:
            raise CheckpointError(
                f"{path}: truncated safetensors file (tensor {name!r} ends at byte "
                f"{data_start + offsets[1]} of {size})"
            )
        entries[name] = {
            "dtype": dtype,
            "shape": shape,
            "absolute": (data_start + offsets[0], data_start + offsets[1]),
        }
    return entries, n


# ---------------------------------------------------------------------------------------------
# torch's zip format, read by a restricted unpickler


class _StorageType:
    """Stands for ``torch.FloatStorage`` and its kin: only the dtype of the storage's bytes."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, np.dtype(dtype)


_STORAGE_TYPES = {
    "FloatStorage": _StorageType("FloatStorage", "<f4"),
    "DoubleStorage": _StorageType("DoubleStorage", "<f8"),
    "HalfStorage": _StorageType("HalfStorage", "<f2"),
    "BFloat16Storage": _StorageType("BFloat16Storage", "<u2"),
    "LongStorage": _StorageType("LongStorage", "<i8"),
}


class _Storage:
    """A storage's elements, read from the zip as a flat read-only NumPy array."""

    def __init__(self, kind: _StorageType, data: np.ndarray):
        self.kind, self.data = kind, data


def _rebuild_tensor(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2``: a strided view of a storage, every index checked in bounds."""
    if not isinstance(storage, _Storage):
        raise CheckpointError("a tensor in the pickle is not built on a storage")
    shape, strides = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(shape) != len(strides) or type(storage_offset) is not int or storage_offset < 0:
        raise CheckpointError("a tensor in the pickle has an invalid size, stride or offset")
    if any(s < 0 for s in strides):
        raise CheckpointError("a tensor in the pickle has a negative stride")
    n = storage.data.size
    last = storage_offset + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
    if math.prod(shape) > 0 and last >= n:
        raise CheckpointError(f"a tensor in the pickle reaches element {last} of a storage of {n}")
    base = storage.data[storage_offset:] if math.prod(shape) > 0 else storage.data[:0]
    item = base.itemsize
    view = np.lib.stride_tricks.as_strided(
        base, shape=shape, strides=tuple(s * item for s in strides), writeable=False
    )
    if storage.kind.name == "BFloat16Storage":
        return _bfloat16_to_float32(view)
    return view


def _rebuild_parameter(data: Any, requires_grad: Any = False, backward_hooks: Any = None) -> Any:
    """``torch._utils._rebuild_parameter``: a Parameter is its tensor."""
    if not isinstance(data, np.ndarray):
        raise CheckpointError("a parameter in the pickle is not a tensor")
    return data


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not (isinstance(value, tuple | list) and all(type(v) is int and v >= 0 for v in value)):
        raise CheckpointError(f"a tensor in the pickle has an invalid {what}")
    return tuple(value)


# Every global a state dict's pickle may name, and what it becomes here. Nothing else is looked up.
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): kind for name, kind in _STORAGE_TYPES.items()},
}


class _StateDictUnpickler(pickle.Unpickler):
    """Unpickles a state dict and nothing else: globals come from a fixed table, never from imports."""

    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str, path: Path):
        super().__init__(file)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise CheckpointError(
                f"{self.path}: refused: its pickle asks for {module}.{name}, which a state dict of "
                "tensors never needs (nothing from the file was run)"
            ) from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise CheckpointError(f"{self.path}: refused: unknown persistent reference in its pickle")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or type(numel) is not int:
            raise CheckpointError(f"{self.path}: refused: malformed storage reference in its pickle")
        if key in self.storages:
            return self.storages[key]
        member = f"{self.prefix}data/{key}"
        try:
            info = self.archive.getinfo(member)
        except KeyError:
            raise CheckpointError(f"{self.path}: truncated or corrupt (no storage {member})") from None
        nbytes = numel * kind.dtype.itemsize
        # Sizes are checked before anything is allocated: the zip's directory says how many bytes
        # the member holds, and a stored (uncompressed) member cannot hold more than the file.
        if info.file_size != nbytes or info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{self.path}: corrupt: storage {key} should hold {nbytes} bytes uncompressed, "
                f"the archive lists {info.file_size}"
            )
        if info.header_offset + nbytes > self.path.stat().st_size:
            raise CheckpointError(f"{self.path}: truncated (storage {key} lies past the end of the file)")
        try:
            raw = self.archive.read(member)
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            raise CheckpointError(f"{self.path}: truncated or corrupt ({first_line(err)})") from None
        data = np.frombuffer(raw, dtype=kind.dtype)
        self.storages[key] = storage = _Storage(kind, data)
        return storage


def read_torch_bin(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a torch ``pytorch_model.bin`` (zip format) as NumPy arrays, without torch.

    Tensors that share a storage in the file (tied weights) share memory here too.
    """
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise CheckpointError(
            f"{path}: not a torch zip checkpoint (truncated, corrupt, or the legacy format of torch < 1.6)"
        ) from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: not a torch checkpoint (no single */data.pkl in the archive)")
        prefix = pickles[0][: -len("data.pkl")]
        if prefix + "byteorder" in archive.namelist() and archive.read(prefix + "byteorder") != b"little":
            raise CheckpointError(f"{path}: saved on a big-endian machine, which this reader does not handle")
        info = archive.getinfo(pickles[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"{path}: its pickle is {info.file_size} bytes, too large for a state dict")
        try:
            with archive.open(pickles[0]) as f:
                state = _StateDictUnpickler(f, archive, prefix, path).load()
        except CheckpointError:
            raise
        except (
            pickle.UnpicklingError,
            zipfile.BadZipFile,
            EOFError,
            ValueError,
            TypeError,
            IndexError,
            KeyError,
            AttributeError,
            OSError,
        ) as err:
            raise CheckpointError(f"{path}: corrupt pickle ({first_line(err)})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: its pickle is not a state dict of named tensors")
    return dict(state)


def read_weights(folder: str | Path) -> tuple[Mapping[str, np.ndarray], str]:
    """A checkpoint folder's tensors, from ``model.safetensors``, else its shards (``SHARD_INDEX``),
    else ``pytorch_model.bin``.

    Returns the tensors and the file they came from ("model.safetensors.index.json, 3 shards").
    """
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return read_safetensors(folder / "model.safetensors"), "model.safetensors"
    if (folder / SHARD_INDEX).is_file():
        sharded = ShardedSafetensors(folder / SHARD_INDEX)
        return sharded, f"{SHARD_INDEX}, {sharded.shards} shard{'s' if sharded.shards > 1 else ''}"
    if (folder / "pytorch_model.bin").is_file():
        return read_torch_bin(folder / "pytorch_model.bin"), "pytorch_model.bin"
    if (folder / "pytorch_model.bin.index.json").is_file():
        raise CheckpointError(
            f"{folder}: torch's sharded format (pytorch_model.bin.index.json) is not read; "
            "save the model with safe_serialization=True (save_pretrained's default)"
        )
    raise CheckpointError(f"{folder}: no weights (model.safetensors, {SHARD_INDEX} or pytorch_model.bin)")


def float_dtype(dtype: str | np.dtype) -> np.dtype:
    """The dtype a converter writes its arrays in: float32 or float64, nothing else."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise CheckpointError(f"dtype {dtype} is not supported; use float32 or float64")
    return dtype


def read_config_json(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's config.json as a dict, or one line saying why not."""
    path = folder / "config.json"
    try:
        raw = read_json(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: no config.json (is this a checkpoint folder?)") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return raw


class Taker:
    """A checkpoint's tensors handed out by name, each shape checked against what config.json
    implies and each use noted, so that a converter can say which tensors it never used."""

    def __init__(self, tensors: Mapping[str, np.ndarray], where: str) -> None:
        self.tensors, self.where = tensors, where
        self.names = set(tensors)
        self.used: set[str] = set()

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.names:
            raise CheckpointError(f"{self.where}: missing tensor {name}")
        get_shape = getattr(self.tensors, "shape", None)  # answered from the header, nothing read
        return tuple(get_shape(name)) if get_shape else tuple(self.tensors[name].shape)

    def take(self, name: str, expected: tuple[int, ...]) -> np.ndarray:
        if self.shape(name) != expected:
            raise CheckpointError(
                f"{self.where}: tensor {name} has shape {list(self.shape(name))}, "
                f"config.json implies {list(expected)}"
            )
        self.used.add(name)
        return self.tensors[name]

    def refuse_unused(self, family: str) -> None:
        unused = sorted(self.names - self.used)
        if unused:
            more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
            raise CheckpointError(f"{self.where}: tensor {unused[0]}{more} is not part of a {family} model")
