"""Checkpoint files read into NumPy arrays, safely: nothing in a file can run code or exhaust memory.

Two formats, as the hub stores them:

- ``model.safetensors``: an 8-byte header length, a JSON header naming each tensor's dtype, shape
  and byte range, then the bytes. The header is checked against the file before any tensor is
  read, as the safetensors crate checks it: each range holds its shape's bytes, and the ranges,
  sorted, tile the data exactly (no gap, no overlap, nothing after the last). Tensors are then
  read one at a time, when asked for, each straight into its array.
- ``pytorch_model.bin``: torch's zip format, a pickle ``data.pkl`` whose tensors point at raw
  storages ``data/<key>``. Unpickling can call any function a file names, so this reader's
  unpickler knows exactly the few names a state dict uses and maps each to a NumPy stand-in: torch
  is never imported and no callable from the file is ever looked up. Before unpickling, the
  pickle's opcodes are scanned (``pickletools.genops``) and any that a state dict never uses is
  refused, so that a few kilobytes cannot make gigabytes of sets or bytes; each tensor must be a
  dense block of its storage that no other tensor overlaps (tied weights, the same block under
  two names, are one array), so that a view cannot repeat one float a billion times.

Every file is opened only if it is a regular file (``regular_files.open_regular``), and everything that
reading and converting allocate is charged to a ``budget.Budget`` first.
"""

from __future__ import annotations

import bisect
import io
import math
import pickle
import pickletools
import re
import zipfile
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..regular_files import file_size, open_regular, open_zip
from .budget import Budget
from .errors import CheckpointError, first_line
from .jsonfile import MAX_CONFIG_BYTES, parse_json, read_json, shown

WEIGHTS = "a checkpoint's weights file"  # what open_regular says it expected
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
            raw = _bfloat16_to_float32(raw)
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


# ---------------------------------------------------------------------------------------------
# torch's zip format, read by a restricted unpickler


class _StorageType(NamedTuple):
    """Stands for ``torch.FloatStorage`` and its kin: only the dtype of the storage's bytes (a tuple,
    so that no BUILD in a pickle can change it)."""

    name: str
    dtype: np.dtype


_STORAGE_TYPES = {
    "FloatStorage": _StorageType("FloatStorage", np.dtype("<f4")),
    "DoubleStorage": _StorageType("DoubleStorage", np.dtype("<f8")),
    "HalfStorage": _StorageType("HalfStorage", np.dtype("<f2")),
    "BFloat16Storage": _StorageType("BFloat16Storage", np.dtype("<u2")),
    "LongStorage": _StorageType("LongStorage", np.dtype("<i8")),
}


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided view's elements fill a block of its storage, each element once: taken from
    the smallest stride up, each stride is the product of the sizes before it (contiguous, or a
    transpose of contiguous: torch's ``is_non_overlapping_and_dense``). A dimension of size 1 is
    never stepped along, so its stride does not matter."""
    expected = 1
    for d, s in sorted(((d, s) for d, s in zip(shape, strides, strict=True) if d != 1), key=lambda ds: ds[1]):
        if s != expected:
            return False
        expected *= d
    return True


class _Storage:
    """A storage's elements, read from the zip as a flat read-only array, and the tensors viewing it."""

    def __init__(self, kind: _StorageType, data: np.ndarray, budget: Budget, where: Path) -> None:
        self.kind, self.data, self.budget, self.where = kind, data, budget, where
        self.tensors: dict[tuple, np.ndarray] = {}  # (offset, shape, strides) -> the tensor
        self.blocks: list[tuple[int, int]] = []  # the [start, stop) of each, sorted

    def tensor(self, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
        """``torch.as_strided(storage, shape, strides, offset)`` as a NumPy view, once it is a dense
        block inside the storage that overlaps no other tensor's; the same block under another
        name (tied weights, as torch saves them) is the same array."""
        n, numel = self.data.size, math.prod(shape)
        if numel == 0:
            return self._widened(self.data[:0].reshape(shape))
        if not _dense(shape, strides):
            raise CheckpointError(
                f"{self.where}: refused: a tensor of shape {shown(list(shape))} has strides "
                f"{shown(list(strides))}, which repeat or skip elements of its storage (a state dict's "
                "tensors are dense)"
            )
        if offset + numel > n:
            raise CheckpointError(
                f"{self.where}: corrupt: a tensor in the pickle reaches element {offset + numel - 1} "
                f"of a storage of {n}"
            )
        steps = tuple(0 if d == 1 else s for d, s in zip(shape, strides, strict=True))  # 2⁶² is 0 here
        key = (offset, shape, steps)
        if key in self.tensors:
            return self.tensors[key]
        block = (offset, offset + numel)
        i = bisect.bisect_left(self.blocks, block)
        if (i > 0 and self.blocks[i - 1][1] > offset) or (
            i < len(self.blocks) and self.blocks[i][0] < block[1]
        ):
            raise CheckpointError(
                f"{self.where}: refused: two tensors overlap in one storage but are not the same "
                "tensor (only tied weights may share elements)"
            )
        self.blocks.insert(i, block)
        item = self.data.itemsize
        view = np.lib.stride_tricks.as_strided(
            self.data[offset : offset + numel], shape, tuple(s * item for s in steps), writeable=False
        )
        self.tensors[key] = tensor = self._widened(view)
        return tensor

    def _widened(self, view: np.ndarray) -> np.ndarray:
        if self.kind.name != "BFloat16Storage":
            return view
        self.budget.charge(view.size * 4, self.where, "widening its bfloat16 tensors to float32")
        return _bfloat16_to_float32(view)


def _rebuild_tensor(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2``: a strided view of a storage (``_Storage.tensor``)."""
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor in the pickle is not built on a storage")
    shape, strides = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(shape) != len(strides) or type(storage_offset) is not int or storage_offset < 0:
        raise pickle.UnpicklingError("a tensor in the pickle has an invalid size, stride or offset")
    return storage.tensor(storage_offset, shape, strides)


def _rebuild_parameter(data: Any, requires_grad: Any = False, backward_hooks: Any = None) -> Any:
    """``torch._utils._rebuild_parameter``: a Parameter is its tensor."""
    if not isinstance(data, np.ndarray):
        raise pickle.UnpicklingError("a parameter in the pickle is not a tensor")
    return data


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not (isinstance(value, tuple | list) and all(type(v) is int and v >= 0 for v in value)):
        raise pickle.UnpicklingError(f"a tensor in the pickle has an invalid {what}")
    return tuple(value)


# Every global a state dict's pickle may name, and what it becomes here. Nothing else is looked up.
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): kind for name, kind in _STORAGE_TYPES.items()},
}

# The opcodes of a state dict's pickle as torch.save writes it (protocol 2; 4's frames, short
# strings and memo too), each of which makes at most one small object. Every other is refused
# before unpickling: sets (15.9 MB of EMPTY_SET is 3.6 GB of sets), bytes (BINBYTES8 can claim
# 2⁴⁰ of them), integers past 255 bytes (LONG4), protocol 0's text forms, building instances
# (OBJ, INST, NEWOBJ), extension codes and out-of-band buffers.
_STATE_DICT_OPCODES = frozenset(
    {
        "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK",
        "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "BINPERSID",
        "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
        "SETITEM", "SETITEMS", "APPEND", "APPENDS",
        "BINUNICODE", "SHORT_BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
        "NONE", "NEWTRUE", "NEWFALSE",
        "BINPUT", "LONG_BINPUT", "MEMOIZE", "BINGET", "LONG_BINGET",
    }
)  # fmt: skip
# ~36 opcodes a tensor (opus-mt's pickle has ~10,000): a million is a state dict of ~25,000 tensors,
# and at most ~100 MB of objects however it is spent.
MAX_PICKLE_OPCODES = 1_000_000
# Names one tensor may have: opus-mt ties model.shared, both embed_tokens and lm_head. A pickle can
# name one tensor a thousand times (one storage, or its memo), as every layer's weights, and each
# name is converted into an array of its own: a 4 MB file would become gigabytes.
MAX_TIED_NAMES = 4


def _check_pickle(data: bytes, path: Path) -> None:
    """Refuse, before unpickling, a pickle not made as a state dict is: an opcode outside
    ``_STATE_DICT_OPCODES``, more than ``MAX_PICKLE_OPCODES`` of them, an integer past 64 bits, or a
    memo index past the opcodes (the C unpickler sizes its memo by the largest index it is given:
    LONG_BINPUT 2³²−1 would be 32 GiB of pointers)."""
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(data)):
            if count == MAX_PICKLE_OPCODES:
                raise CheckpointError(
                    f"{path}: refused: its pickle has over {MAX_PICKLE_OPCODES:,} opcodes, more than "
                    "a state dict needs"
                )
            if opcode.name not in _STATE_DICT_OPCODES:
                raise CheckpointError(
                    f"{path}: refused: its pickle uses {opcode.name}, which a state dict never does "
                    "(nothing from the file was run)"
                )
            if opcode.name == "LONG1" and not -(2**63) <= arg < 2**63:
                raise CheckpointError(f"{path}: refused: its pickle holds an integer past 64 bits")
            if opcode.name == "LONG_BINPUT" and arg > MAX_PICKLE_OPCODES:
                raise CheckpointError(f"{path}: refused: its pickle uses memo index {arg:,}")
    except ValueError as err:  # genops: an unknown opcode, an argument cut short
        raise CheckpointError(f"{path}: corrupt pickle ({first_line(err)})") from None


class _StateDictUnpickler(pickle.Unpickler):
    """Unpickles a state dict and nothing else: globals come from a fixed table, never from imports;
    each storage is charged to the budget before it is read."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, path: Path, budget: Budget):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.path, self.budget = archive, prefix, path, budget
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise CheckpointError(
                f"{self.path}: refused: its pickle asks for {shown(module)}.{shown(name)}, which a "
                "state dict of tensors never needs (nothing from the file was run)"
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
            raise CheckpointError(f"{self.path}: truncated or corrupt (no storage {shown(member)})") from None
        nbytes = numel * kind.dtype.itemsize
        # Sizes are checked before anything is allocated: the zip's directory says how many bytes
        # the member holds, and a stored (uncompressed) member lies inside the file (_check_members).
        if numel < 0 or info.file_size != nbytes or info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{self.path}: corrupt: storage {shown(key)} should hold {nbytes} bytes uncompressed, "
                f"the archive lists {info.file_size}"
            )
        self.budget.charge(nbytes, self.path, "reading its storages")
        try:
            raw = self.archive.read(member)
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            raise CheckpointError(f"{self.path}: truncated or corrupt ({first_line(err)})") from None
        data = np.frombuffer(raw, dtype=kind.dtype)
        self.storages[key] = storage = _Storage(kind, data, self.budget, self.path)
        return storage


_LOCAL_HEADER = 30  # bytes of a zip member's local header before its name and extra field


# A state dict's zip directory has a few hundred members (GPT-2 XL's: 40 kB); one this large is
# a flood of empty members (``open_zip``).
MAX_DIRECTORY_BYTES = 10_000_000


def _check_members(archive: zipfile.ZipFile, path: Path, size: int) -> None:
    """Every member's local header, name and data lie inside the file and before the next member's:
    zip entries that overlap would let a small file hand out the same bytes as many storages. (The
    local extra field, whose length only the local header says, is not counted: an overlap of it
    alone shares no data.)"""
    members = sorted(archive.infolist(), key=lambda info: info.header_offset)
    ends = [
        info.header_offset + _LOCAL_HEADER + len(info.orig_filename.encode("utf-8")) + info.compress_size
        for info in members
    ]
    starts = [info.header_offset for info in members[1:]] + [size]
    for info, end, next_start in zip(members, ends, starts, strict=True):
        if end > next_start:
            raise CheckpointError(
                f"{path}: corrupt zip archive (member {shown(info.filename)} overlaps the next or "
                "passes the end of the file)"
            )


def read_torch_bin(path: str | Path, budget: Budget | None = None) -> dict[str, np.ndarray]:
    """The tensors of a torch ``pytorch_model.bin`` (zip format) as NumPy arrays, without torch.

    Tensors that share a storage in the file (tied weights) share memory here too. Storages read
    and bfloat16 tensors widened are charged to ``budget`` (a new one if None) before they are.
    """
    path, budget = Path(path), budget or Budget()
    try:
        file = open_regular(path, WEIGHTS, error=CheckpointError)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    with file:
        try:
            archive = open_zip(
                file, path, MAX_DIRECTORY_BYTES, "a state dict's few hundred tensors", CheckpointError
            )
        except zipfile.BadZipFile:
            raise CheckpointError(
                f"{path}: not a torch zip checkpoint (truncated, corrupt, or torch < 1.6's legacy format)"
            ) from None
        except (OSError, EOFError, ValueError) as err:
            raise CheckpointError(f"{path}: cannot read ({first_line(err)})") from None
        with archive:
            return _read_archive(archive, path, file_size(file), budget)


def _read_archive(archive: zipfile.ZipFile, path: Path, size: int, budget: Budget) -> dict[str, np.ndarray]:
    _check_members(archive, path, size)
    names = archive.namelist()
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise CheckpointError(f"{path}: not a torch checkpoint (no single */data.pkl in the archive)")
    prefix = pickles[0][: -len("data.pkl")]
    try:
        order = archive.getinfo(prefix + "byteorder") if prefix + "byteorder" in names else None
        if order and (order.file_size > 16 or archive.read(order) != b"little"):
            raise CheckpointError(f"{path}: saved on a big-endian machine, which this reader does not handle")
        info = archive.getinfo(pickles[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"{path}: its pickle is {info.file_size} bytes, too large for a state dict")
        data = archive.read(pickles[0])
        _check_pickle(data, path)
        state = _StateDictUnpickler(data, archive, prefix, path, budget).load()
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
        OverflowError,
        OSError,
    ) as err:
        raise CheckpointError(f"{path}: corrupt pickle ({first_line(err)})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: its pickle is not a state dict of named tensors")
    names_of: dict[int, list[str]] = {}  # each array's names: a tied table has several
    for name, tensor in state.items():
        names_of.setdefault(id(tensor), []).append(name)
    shared = max(names_of.values(), key=len, default=[])
    if len(shared) > MAX_TIED_NAMES:
        raise CheckpointError(
            f"{path}: refused: one tensor is stored under {len(shared):,} names ({shown(shared[0])}, "
            f"{shown(shared[1])}, …); only tied weights share one, under at most {MAX_TIED_NAMES} names"
        )
    return dict(state)


def read_weights(folder: str | Path, budget: Budget | None = None) -> tuple[Mapping[str, np.ndarray], str]:
    """A checkpoint folder's tensors, from ``model.safetensors``, else its shards (``SHARD_INDEX``),
    else ``pytorch_model.bin``; what reading them allocates is charged to ``budget``.

    Returns the tensors and the file they came from ("model.safetensors.index.json, 3 shards").
    A file that is there but not a regular file (a FIFO, a device) is refused, not passed over.
    """
    folder = Path(folder)
    if (folder / "model.safetensors").exists():
        return read_safetensors(folder / "model.safetensors"), "model.safetensors"
    if (folder / SHARD_INDEX).exists():
        sharded = ShardedSafetensors(folder / SHARD_INDEX)
        return sharded, f"{SHARD_INDEX}, {sharded.shards} shard{'s' if sharded.shards > 1 else ''}"
    if (folder / "pytorch_model.bin").exists():
        return read_torch_bin(folder / "pytorch_model.bin", budget), "pytorch_model.bin"
    if (folder / "pytorch_model.bin.index.json").exists():
        raise CheckpointError(
            f"{folder}: torch's sharded format (pytorch_model.bin.index.json) is not read; "
            "save the model with safe_serialization=True (save_pretrained's default)"
        )
    raise CheckpointError(f"{folder}: no weights (model.safetensors, {SHARD_INDEX} or pytorch_model.bin)")


TRANSPOSE_ROWS = 256  # rows of the source per block: 256 × 3,072 float32 (3 MB) stay in cache


def transpose_into(out: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``out[...] = a.T``, cast to ``out``'s dtype, a block of rows of ``a`` at a time.

    nn.Linear's (out, in) weight becomes this project's (in, out) by a transpose, and NumPy's
    copy of a transposed view walks one of the two arrays a column at a time: a cache miss per
    element (bert-base's 72 projections: 0.6 s). A block of rows of ``a`` is read once, whole,
    and written as a block of columns of ``out``, each row of it a run of ``TRANSPOSE_ROWS``
    contiguous numbers: three to four times faster, the same numbers."""
    for start in range(0, a.shape[0], TRANSPOSE_ROWS):
        out[:, start : start + TRANSPOSE_ROWS] = a[start : start + TRANSPOSE_ROWS].T
    return out


def transposed(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a.T`` as a new C-contiguous array of ``dtype`` (``transpose_into``)."""
    return transpose_into(np.empty(a.shape[::-1], dtype=dtype), a)


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

    def charge(self, budget: Budget, dtype: np.dtype) -> None:
        """Charge what converting takes at its peak, before it starts, on top of what reading took.

        From a lazy file (safetensors, read from its header): every tensor as an array of ``dtype``
        (each tensor is used once, so this bounds the weights made). From arrays already in memory
        (a torch ``.bin``, whose storages were charged as they were read): a copy for each name
        whose array must be cast or made contiguous — a float32 array kept as float32 costs
        nothing more, and a table tied under four names, cast, costs four copies. Both add twice
        the largest tensor as read: a copy widened or joined (Marian's W_QKV) before its cast."""
        read_bytes = getattr(self.tensors, "read_bytes", None)
        if read_bytes:
            total = sum(math.prod(self.shape(name)) for name in self.names) * dtype.itemsize
            largest = max((read_bytes(name) for name in self.names), default=0)
        else:
            arrays = [self.tensors[name] for name in self.names]
            copied = [a for a in arrays if a.dtype != dtype or not a.flags.c_contiguous]
            total = sum(a.size for a in copied) * dtype.itemsize
            largest = max((a.nbytes for a in arrays), default=0)
        budget.charge(total + 2 * largest, self.where, f"converting its tensors to {dtype}")

    def refuse_unused(self, family: str) -> None:
        unused = sorted(self.names - self.used)
        if unused:
            more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
            raise CheckpointError(f"{self.where}: tensor {unused[0]}{more} is not part of a {family} model")


def check_layers(names: Collection[str], first_tensor: str, key: str, layers: int, where: str) -> None:
    """Refuse a config.json whose ``key`` promises more layers than the tensors hold, before a single
    row is made for them: a config of 10⁹ layers over a file of 2 would otherwise build 10⁹ rows of
    names first. Layer n is there when its first tensor, ``first_tensor.format(n)``, is: so at most
    one more layer than there are tensors is ever looked for. (Fewer layers than the tensors hold
    costs nothing: the converter refuses the tensors it did not use.)"""
    for n in range(min(layers, len(names) + 1)):
        if first_tensor.format(n) not in names:
            raise CheckpointError(
                f"{where}: missing tensor {first_tensor.format(n)} (config.json's {key} is {layers:,}, "
                f"the tensors have {n} layer{'s' if n != 1 else ''})"
            )
