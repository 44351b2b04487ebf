"""A checkpoint's tensors, whichever file holds them (``read_weights``: safetensors, its shards, or
torch's .bin), and what every converter does with them: take each by name with its shape checked
(``Taker``), transpose nn.Linear's (out, in) into our (in, out) a block at a time, count the layers.

The formats are read safely by their own modules: ``safetensors_file`` and ``torch_bin``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .budget import Budget
from .errors import CheckpointError
from .jsonfile import MAX_CONFIG_BYTES, read_json, shown
from .safetensors_file import SHARD_INDEX, ShardedSafetensors, read_safetensors
from .torch_bin import read_torch_bin


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
    implies and each use noted, so that a converter can say which tensors it never used.

    ``stored``: the name the file keeps a tensor under, when a family's older files differ (BERT's
    ``LayerNorm.gamma`` for ``LayerNorm.weight``)."""

    def __init__(
        self, tensors: Mapping[str, np.ndarray], where: str, stored: Callable[[str], str] | None = None
    ) -> None:
        self.tensors, self.where = tensors, where
        self.names = set(tensors)
        self.used: set[str] = set()
        self.stored = stored or (lambda name: name)

    def shape(self, name: str) -> tuple[int, ...]:
        name = self.stored(name)
        if name not in self.names:
            raise CheckpointError(f"{self.where}: missing tensor {name}")
        get_shape = getattr(self.tensors, "shape", None)  # answered from the header, nothing read
        return tuple(get_shape(name)) if get_shape else tuple(self.tensors[name].shape)

    def check(self, name: str, expected: tuple[int, ...], keys: tuple[str, ...] = ()) -> None:
        """Refuse tensor ``name`` unless its shape is ``expected``; ``keys``: config.json's keys
        behind each axis, named in the refusal (a size of 2**62 is a key's fault, not the file's)."""
        shape = self.shape(name)
        if shape != expected:
            because = f" ({', '.join(keys)})" if keys else ""
            raise CheckpointError(
                f"{self.where}: tensor {self.stored(name)} has shape {list(shape)}, "
                f"config.json implies {shown(list(expected))}{because}"
            )

    def take(self, name: str, expected: tuple[int, ...], keys: tuple[str, ...] = ()) -> np.ndarray:
        """Tensor ``name``, once its shape is ``expected`` (``check``)."""
        self.check(name, expected, keys)
        self.used.add(self.stored(name))
        return self.tensors[self.stored(name)]

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


def check_experts(names: Collection[str], tensor: str, key: str, experts: int, where: str) -> None:
    """Refuse a config.json whose ``key`` promises more experts than the tensors hold, before a row
    is made for each (as ``check_layers`` for layers): 10³⁰ experts would be 10³⁰ rows of names.
    Expert e is there when some layer holds ``tensor`` with e in place of ``{e}`` (its first
    tensor, the layer's prefix left out); the numbers held are read from the names at once."""
    pattern = re.compile(re.escape(tensor).replace(re.escape("{e}"), r"(\d+)") + "$")
    held = {int(m.group(1)) for name in names if (m := pattern.search(name))}
    missing = next((e for e in range(min(experts, len(held) + 1)) if e not in held), None)
    if missing is not None:
        raise CheckpointError(
            f"{where}: no layer has the tensor {tensor.format(e=missing)} (config.json's {key} is "
            f"{experts:,}, the tensors have {len(held)} expert{'s' if len(held) != 1 else ''})"
        )
