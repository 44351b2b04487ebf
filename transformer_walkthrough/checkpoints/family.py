"""A checkpoint family as one record: its ``model_type``, its defaults, and one map from its tensors
to our parameters.

A ``Family`` says what converting one ``model_type`` takes: what the model reads (an encoder's
text, or a prompt), the defaults of transformers' config class for the keys an older config.json
leaves out, the converter, and the name map. The map is a table, not code: each row is one of our
parameters and the tensors it comes from, as stored (their names, their shapes in the family's
size names), set side by side (``W_QKV = [W_Q | W_K | W_V]``) and each transposed first where the
family stores ``nn.Linear``'s ``(out, in)``. A row may be optional: present only when the model
has a switch on (Qwen2's Q/K/V biases, Llama's ``mlp_bias``).

The converter walks the map forward (``convert``: their tensors into our weights, every tensor's
shape checked against config.json before the first array is made); the tests'
references walk the same map backward (``invert``: our weights into a transformers model's state
dict). What the map cannot say stays in the family's module: tied and shared tables, buffers that
are checked and dropped, the refusals of its config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from ..config import sparse_layer
from ..model.architecture import stage_id
from .errors import CheckpointError
from .jsonfile import shown
from .tensors import Taker, transpose_into

Switch = Callable[[Mapping[str, Any]], bool]  # the model's keys -> whether an optional row is there


@dataclass(frozen=True, init=False)
class Tensor:
    """One of their tensors: its name (in a layer, after the layer's prefix) and its shape as stored,
    each axis a size name of the family (``"d"``, ``"ff"``, ``"q"``)."""

    name: str
    shape: tuple[str, ...]

    def __init__(self, name: str, *shape: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "shape", shape)


@dataclass(frozen=True, init=False)
class Param:
    """One of our parameters, ``stage/name`` (the stage within its layer, or within its side), and
    the tensors it is made of, side by side along its last axis; ``transposed``: each is
    ``nn.Linear``'s ``(out, in)``, transposed to our ``(in, out)``; ``when``: the row is there only
    when the model's keys say so (None: always); ``each_expert``: one row per expert of a mixture,
    ``{e}`` in the names standing for its number (``experts/expert{e}.W_gate`` <-
    ``block_sparse_moe.experts.{e}.w1.weight``); ``in_layers``: the row is in a mixture's sparse
    layers only (``"sparse"``: the router, the experts) or in its dense layers only (``"dense"``:
    the plain feed-forward of Qwen2-MoE's ``mlp_only_layers``), as ``ModelConfig.sparse`` says
    (None: in every layer)."""

    ours: str
    theirs: tuple[Tensor, ...]
    transposed: bool
    when: Switch | None
    each_expert: bool
    in_layers: Literal["sparse", "dense"] | None

    def __init__(
        self, ours: str, *theirs: Tensor, transposed: bool = False, when: Switch | None = None,
        each_expert: bool = False, in_layers: Literal["sparse", "dense"] | None = None,
    ):  # fmt: skip
        for key, value in (("ours", ours), ("theirs", theirs), ("transposed", transposed), ("when", when),
                           ("each_expert", each_expert), ("in_layers", in_layers)):  # fmt: skip
            object.__setattr__(self, key, value)


def only_in(layers: Literal["sparse", "dense"], params: Iterable[Param]) -> tuple[Param, ...]:
    """The rows ``params``, each kept to a mixture's sparse or dense layers (``Param.in_layers``)."""
    return tuple(
        Param(p.ours, *p.theirs, transposed=p.transposed, when=p.when, each_expert=p.each_expert,
              in_layers=layers)
        for p in params
    )  # fmt: skip


@dataclass(frozen=True)
class Block:
    """Rows of the map that share a side and a prefix: every layer of a stack (``layers`` names the
    size that counts them, ``{n}`` in ``prefix`` stands for the layer's number), or the side itself
    (its embedding tables, its final norm, an output head)."""

    side: str  # ENCODER, DECODER or OUTPUT
    params: tuple[Param, ...]
    prefix: str = ""
    layers: str | None = None
    when: Switch | None = None  # the whole block is there only when the model's keys say so
    in_body: bool = True  # False: a head's tensors, never under the file's body prefix (``bert.``)


class Part(NamedTuple):
    """One of their tensors in a row, for one model: its full name, its shape as config.json implies
    it, and the config.json keys behind each axis (``num_attention_heads × head_dim``)."""

    name: str
    shape: tuple[int, ...]
    keys: tuple[str, ...]


class Row(NamedTuple):
    """A row of the map for one model: our parameter's full name and the tensors it is made of."""

    ours: str
    theirs: tuple[Part, ...]
    transposed: bool

    def shape(self) -> tuple[int, ...]:
        """Our parameter's shape: the parts side by side, each transposed where the row says so."""
        shapes = [p.shape[::-1] if self.transposed else p.shape for p in self.theirs]
        return (*shapes[0][:-1], sum(s[-1] for s in shapes))


@dataclass(frozen=True)
class Family:
    """Everything this project knows of one ``model_type``, and the functions that convert it.

    ``architecture``: what the model reads — an encoder-decoder its source text (``--source``),
    a decoder-only or an encoder-only model a prompt (``--prompt``). ``defaults``: transformers'
    config class defaults. ``sizes``: the model's keys (``ModelConfig``'s names) -> the size
    names of the map; ``size_keys``: the config.json keys each size name comes from, which a
    refusal names. ``load(folder, dtype, name)``: the converter, which returns a
    ``checkpoint.Checkpoint``.
    """

    model_type: str
    name: str  # as the family names itself: "Marian", "GPT-2", "RoBERTa"
    architecture: Literal["encoder-decoder", "decoder-only", "encoder-only"]
    transformers: str  # the class of its files in transformers: the tests' reference
    tokenizer: Callable[..., Any]  # the reader of its tokenizer's files (BPETokenizer, MarianTokenizer)
    defaults: Mapping[str, Any]
    name_map: tuple[Block, ...]
    sizes: Callable[[Mapping[str, Any]], Mapping[str, int]]
    load: Callable[[Path, str | np.dtype, str | None], Any] = field(repr=False)
    # "q": "num_attention_heads × head_dim" (none: a refusal names the shape only)
    size_keys: Mapping[str, str] = field(default_factory=dict, kw_only=True)
    # ModelConfig's keys the family fixes over its converter's own (Gemma's norm, OLMo 2's placement)
    conventions: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    # config.json's key of the longest input (``max_positions``), which a too-long text is told;
    # None where positions are relative and nothing bounds the input (T5)
    context_key: str | None = field(default="max_position_embeddings", kw_only=True)
    # config.json's keys whose null transformers refuses (its config class wants a value, or its model
    # fails on None): refused by the converter too, naming the key (``refuse_nulls``)
    not_null: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def encoder_decoder(self) -> bool:
        return self.architecture == "encoder-decoder"

    @property
    def stacks(self) -> tuple[Block, ...]:
        """The map's blocks of layers, bottom to top: the encoder's, then the decoder's."""
        return tuple(block for block in self.name_map if block.layers)

    def rows(self, model: Mapping[str, Any], prefix: str = "") -> list[Row]:
        """The map's rows for a model of these keys (``ModelConfig``'s names): every layer's, the
        optional ones whose switch is on; ``prefix`` before each of their names but a head's (the
        base model's prefix in a head model's file: ``bert.``, ``transformer.``)."""
        return list(_rows(self.name_map, model, self.sizes(model), prefix, self.size_keys))


def map_rows(
    blocks: Sequence[Block], model: Mapping[str, Any], sizes: Mapping[str, int], prefix: str = ""
) -> list[Row]:
    """A name map's rows for a model of these keys and sizes (``Family.rows`` for a map alone)."""
    return list(_rows(blocks, model, sizes, prefix, {}))


def _rows(
    blocks: Sequence[Block],
    model: Mapping[str, Any],
    sizes: Mapping[str, int],
    prefix: str,
    size_keys: Mapping[str, str],
) -> Iterator[Row]:
    for block in blocks:
        if block.when is not None and not block.when(model):
            continue
        layers: Sequence[int | None] = range(sizes[block.layers]) if block.layers else [None]
        for n in layers:
            start = (prefix if block.in_body else "") + block.prefix.format(n=n)
            for p in block.params:
                if p.when is not None and not p.when(model):
                    continue
                if p.in_layers is not None and (p.in_layers == "sparse") != _sparse(model, n):
                    continue
                for e in range(sizes["experts"]) if p.each_expert else [None]:
                    stage, local = p.ours.format(e=e).split("/")
                    theirs = tuple(
                        Part(
                            start + t.name.format(e=e),
                            tuple(sizes[s] for s in t.shape),
                            _keys(size_keys, t.shape),
                        )
                        for t in p.theirs
                    )
                    yield Row(f"{stage_id(block.side, stage, n)}/{local}", theirs, p.transposed)


def _sparse(model: Mapping[str, Any], layer: int | None) -> bool:
    """Whether layer ``layer`` of a model of these keys has experts (``ModelConfig.sparse``)."""
    return layer is not None and sparse_layer(
        model.get("experts", 0), model.get("sparse_step", 1), model.get("dense_layers", ()), layer
    )


def _keys(known: Mapping[str, str], shape: tuple[str, ...]) -> tuple[str, ...]:
    """config.json's keys behind each axis of a tensor's shape; none when the family does not say."""
    return tuple(known[s] for s in shape) if all(s in known for s in shape) else ()


def first_tensor(block: Block, prefix: str = "") -> str:
    """The name of a layer's first tensor, ``{}`` for the layer's number (``tensors.check_layers``)."""
    return prefix + block.prefix.replace("{n}", "{}") + block.params[0].theirs[0].name


def convert(rows: Sequence[Row], taker: Taker, dtype: np.dtype) -> dict[str, np.ndarray]:
    """The map walked forward: our weights from their tensors, each parameter filled in place, a part
    at a time: no joined copy.

    Every tensor's shape is checked against what config.json implies before the first array is
    made: a size is believed only where the file's tensors agree with it, so that a config.json
    of ``head_dim`` 2**62 is refused, naming its keys, instead of allocating W_QKV of its size."""
    for row in rows:
        for part in row.theirs:
            taker.check(part.name, part.shape, part.keys)
    weights: dict[str, np.ndarray] = {}
    for row in rows:
        out = np.empty(row.shape(), dtype=dtype)
        start = 0
        for name, shape, _ in row.theirs:
            width = shape[0] if row.transposed else shape[-1]
            part = out[..., start : start + width]
            if row.transposed:
                transpose_into(part, taker.take(name, shape))
            else:
                part[...] = taker.take(name, shape)
            start += width
        weights[row.ours] = out
    return weights


def invert(rows: Sequence[Row], weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The map walked backward: their tensors from our weights, each parameter cut back into its
    parts and each part transposed back where the family stores it ``(out, in)`` (views, not copies)."""
    tensors: dict[str, np.ndarray] = {}
    for row in rows:
        ours, start = weights[row.ours], 0
        for name, shape, _ in row.theirs:
            width = shape[0] if row.transposed else shape[-1]
            part = ours[..., start : start + width]
            tensors[name] = part.T if row.transposed else part
            start += width
    return tensors


def model_keys(m: Any) -> dict[str, Any]:
    """A ``ModelConfig``'s keys as the mapping a converter builds (``Family.rows`` reads either)."""
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}


FINITE_BLOCK = 1 << 16  # numbers checked at a time: their flags (64 kB) stay in cache


def check_finite(weights: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse a parameter holding NaN or an infinity, naming the first.

    Each parameter is checked a block at a time into one small array of flags: ``np.isfinite(w)``
    whole would make a flag for every number first (a 262,144-row table: 168 MB, ten times slower)."""
    flags = np.empty(FINITE_BLOCK, dtype=bool)
    for key, w in weights.items():
        numbers = w.reshape(-1)
        for start in range(0, numbers.size, FINITE_BLOCK):
            block = numbers[start : start + FINITE_BLOCK]
            if not np.isfinite(block, out=flags[: block.size]).all():
                raise CheckpointError(f"{where}: {key} holds NaN or infinite values")


def with_defaults(family: Family, raw: Mapping[str, Any], keep_none: Sequence[str] = ()) -> dict[str, Any]:
    """config.json over the family's defaults; a null value falls back to its default, except for
    the keys of ``keep_none``, where null means something (no head_dim given: derived). Those of
    ``family.not_null`` are refused first (``refuse_nulls``)."""
    return {**family.defaults, **{k: v for k, v in raw.items() if v is not None or k in keep_none}}


def refuse_nulls(family: Family, raw: Mapping[str, Any], path: Path) -> None:
    """Refuse a null in config.json where transformers refuses it (``family.not_null``), naming the
    key and what leaving it out would mean: a null there is a broken file, not the default."""
    for key in family.not_null:
        if key in raw and raw[key] is None:
            default = family.defaults.get(key)
            instead = (
                f"leave it out for {family.name}'s {shown(default)}" if default is not None else "give it"
            )
            raise CheckpointError(f"{path}: {key} is null, which transformers refuses ({instead})")


def find(families: Sequence[Family], model_type: Any) -> Family | None:
    """The family of ``model_type`` among ``families``, or None."""
    return next((f for f in families if f.model_type == model_type), None)
