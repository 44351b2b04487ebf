"""torch's ``pytorch_model.bin`` read into NumPy arrays, safely: torch is never imported, and nothing in
the file can run code or exhaust memory.

torch's zip format is a pickle ``data.pkl`` whose tensors point at raw storages ``data/<key>``.
Unpickling can call any function a file names, so this reader's unpickler knows exactly the few
names a state dict uses and maps each to a NumPy stand-in: no callable from the file is ever looked
up. Before unpickling, the pickle's opcodes are scanned (``pickletools.genops``) and any that a
state dict never uses is refused, so that a few kilobytes cannot make gigabytes of sets or bytes;
each tensor must be a dense block of its storage that no other tensor overlaps (tied weights, the
same block under two names, are one array), so that a view cannot repeat one float a billion
times. Everything reading allocates is charged to a ``budget.Budget`` first.
"""

from __future__ import annotations

import bisect
import io
import math
import pickle
import pickletools
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..regular_files import file_size, open_regular, open_zip
from .budget import Budget
from .errors import CheckpointError, first_line
from .jsonfile import shown
from .safetensors_file import WEIGHTS, bfloat16_to_float32

# A state dict's pickle is a few bytes of names and shapes per tensor (opus-mt's: ~40 kB); capping
# it caps the objects a hostile pickle can make before it is refused.
MAX_PICKLE_BYTES = 16_000_000


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
        return bfloat16_to_float32(view)


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
