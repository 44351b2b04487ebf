"""What passes through attention's pieces, forward and back, and what a piece is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from ... import functional as F
from ...formula import Line, Note
from ...trace import Stage
from ..base import Arrays, Spec, StepOf
from ..hand import (
    Check,
)

if TYPE_CHECKING:
    from ....config import ModelConfig
    from ...cell import Cell
    from ...trace import Trace

Explainer = Callable[["Cell", "Trace"], list[str]]
Labels = tuple[str, ...]  # the query rows' tokens (q), or the key rows' (kv)

# ---------------------------------------------------------------------------------------------
# Heads: which columns of W_QKV a head owns, which key/value head a query head reads.
# ---------------------------------------------------------------------------------------------


def columns(m: ModelConfig, which: str, head: int) -> slice:
    """Head ``head``'s block of d_k columns of W_QKV: the num_heads query heads' blocks come first,
    then the num_kv_heads key heads', then the value heads' (``which`` is "Q", "K" or "V")."""
    first = {"Q": 0, "K": m.num_heads, "V": m.num_heads + m.kv_heads}[which] + head - 1
    return slice(first * m.d_k, (first + 1) * m.d_k)


def kv_head(m: ModelConfig, head: int) -> int:
    """The key/value head that query head ``head`` reads (from 1): each serves num_heads / num_kv_heads."""
    return (head - 1) // (m.num_heads // m.kv_heads) + 1


def readers(m: ModelConfig, group: int) -> list[int]:
    """The query heads that read key/value head ``group``."""
    share = m.num_heads // m.kv_heads
    return list(range((group - 1) * share + 1, group * share + 1))


def rope(m: ModelConfig, layer: int | None = None) -> F.RopeScaling:
    """The config's rotary frequencies in decoder layer ``layer``, as ``functional.rotary`` takes
    them: a local layer's (``local_rope_theta``, unscaled, Gemma 3's sliding layers), or the model's."""
    if m.local(layer):
        return F.RopeScaling(m.theta(layer))
    return F.RopeScaling(
        m.rope_theta, m.rope_scaling, m.rope_factor, m.rope_low_freq_factor,
        m.rope_high_freq_factor, m.rope_original_max_positions,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What passes through the pieces, forward and back.
# ---------------------------------------------------------------------------------------------


class At(NamedTuple):
    """Where an attention stage is: what its recipe and its formula depend on beside the config."""

    cross: bool  # keys and values from the encoder's output (memory), not from X
    masked: bool  # the layer gives a mask M

    @property
    def kv(self) -> str:
        return "memory" if self.cross else "X"


@dataclass
class Flow:
    """What flows through attention's pieces, and what the backward pass reads again (the stage's
    cache). Per-head arrays have the head first: Q (h, n_q, d_k); K, V (G, n_k, d_k), G = h but
    with grouped-query attention; S, A (h, n_q, n_k)."""

    m: ModelConfig
    x: np.ndarray  # (n_q, d_model): where the queries come from
    kv: np.ndarray  # (n_k, d_model): where keys and values come from (x itself in self-attention)
    p: Arrays  # the parameters, by local name
    mask: np.ndarray | None = None  # (n_q, n_k) of 0 and −∞
    cache: Any = (
        None  # a layer's key/value cache (``generation.LayerCache``): keys join it before the scores;
    )
    # in cross-attention the encoder's keys and values projected once (``generation.MemoryCache``)
    start: int = 0  # the position of x's first row
    layer: int | None = None  # the decoder layer (its layer type, its rotary base); None elsewhere
    Q: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    K: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    V: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    S: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    B: np.ndarray | None = field(default=None, repr=False)  # (h, n_q, n_k): relative positions' bias
    biased: np.ndarray | None = field(default=None, repr=False)  # S + B (relative positions)
    masked: np.ndarray | None = field(default=None, repr=False)  # S (+ B) + M
    A: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    O: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    concat: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    output: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    # The queries and keys as each piece made them, by the prefix of their names: "" the projections,
    # "rot_" the rotated ones; the scores multiply the last.
    made: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    # Each piece's own intermediates for its backward, by the piece's name (the rotary tables).
    kept: dict[str, Any] = field(default_factory=dict, repr=False)
    # The one query head whose scores and weights were made (``--head``: S, A, … are (1, n_q, n_k),
    # every head's output made in blocks); None: every head's.
    one: int | None = None

    @property
    def self_attention(self) -> bool:
        return self.kv is self.x

    @property
    def causal(self) -> bool:
        """Whether each query sees only itself and the keys before it: the decoder's masked
        attention, which has a mask, or, one token at a time, a key/value cache instead of one."""
        return self.mask is not None or (self.cache is not None and self.self_attention)

    def of_head(self, x: np.ndarray, h: int) -> np.ndarray:
        """Query head h's matrix of scores or weights x (S, A, …): x[h − 1], or the only one."""
        if self.one is None:
            return x[h - 1]
        if h != self.one:
            raise ValueError(f"the flow made the scores of head {self.one} alone, not of head {h}")
        return x[0]

    @property
    def scored(self) -> np.ndarray:
        """The scores the mask (or softmax) takes: S (soft-capped in place when the config caps it),
        or S + B with relative positions."""
        return self.S if self.biased is None else self.biased


@dataclass
class Back:
    """The gradients flowing back through the pieces: dL/d of each quantity of ``Flow``, and of
    each recorded matrix by name (``matrices``) and each parameter by local name (``params``)."""

    Q: np.ndarray = None  # type: ignore[assignment]
    K: np.ndarray = None  # type: ignore[assignment]
    V: np.ndarray = None  # type: ignore[assignment]
    S: np.ndarray = None  # type: ignore[assignment]  # dL/d(S), equal to dL/d(S + M)
    A: np.ndarray = None  # type: ignore[assignment]
    O: np.ndarray = None  # type: ignore[assignment]
    concat: np.ndarray = None  # type: ignore[assignment]
    output: np.ndarray = None  # type: ignore[assignment]
    M: np.ndarray | None = None  # the mask's, gathered from every head
    x: np.ndarray = None  # type: ignore[assignment]
    kv: np.ndarray = None  # type: ignore[assignment]
    per_head: dict[str, np.ndarray] = field(default_factory=dict)  # base -> (heads, …) gradient
    params: Arrays = field(default_factory=dict)


@dataclass
class ByHand:
    """Verify's second computation of one query head, piece by piece: the values computed by hand
    so far, and what each piece held against the stage's own matrices (name, largest gap)."""

    h: int
    g: int
    q: np.ndarray = None  # type: ignore[assignment]
    k: np.ndarray = None  # type: ignore[assignment]
    v: np.ndarray = None  # type: ignore[assignment]
    s: np.ndarray = None  # type: ignore[assignment]
    a: np.ndarray = None  # type: ignore[assignment]
    o: np.ndarray = None  # type: ignore[assignment]
    checked: list[tuple[str, float]] = field(default_factory=list)


class Piece:
    """One step inside attention. Subclasses override what their step has."""

    name = ""
    turns = ""  # a piece that turns Q and K into new matrices: their prefix ("norm", "rot")
    explain: ClassVar[Mapping[str, Explainer]] = {}
    steps: ClassVar[Mapping[str, StepOf]] = {}  # a cell's step and the cells it reads, by base name
    tex: ClassVar[Mapping[str, str]] = {}
    groups: ClassVar[Mapping[str, str]] = {}

    def on(self, m: ModelConfig, at: At) -> bool:
        """Whether the recipe has this piece under the config, in a stage that is ``at``."""
        return True

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        return {}

    def forward(self, f: Flow) -> None:
        raise NotImplementedError

    def record_before(self, stage: Stage, f: Flow, q: Labels, kv: Labels) -> None:
        """Matrices shown before the heads (a table every head reads)."""

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        """Query head h's matrices (and key/value head g's, where ``first`` of its readers)."""

    def record_after(self, stage: Stage, f: Flow, q: Labels) -> None:
        """Matrices shown after the heads (what sets them side by side)."""

    def backward(self, f: Flow, d: Back) -> None:
        raise NotImplementedError

    def before(self, stage: Stage, m: ModelConfig) -> list[Check]:
        """Verify's checks of what every head shares (the tables), before the heads."""
        return []

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        """Verify's second computation of this step for one head, noted in ``b.checked``."""

    def said(self, m: ModelConfig, at: At) -> str:
        """What the stage's explanation says of this step under the config ("" for nothing more)."""
        return ""

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        """This step's lines of the stage's formula (``g``: the key/value head, h or g)."""
        return []


def scores_name(stage: Stage, head: int) -> str:
    """The base name of the scores that the mask or softmax took for head ``head``: soft-capped
    (cap_S, Gemma 2), S + B with relative positions (T5), else S. The config never asks for both."""
    return next(name for name in ("cap_S", "S+B", "S") if name == "S" or stage.has(name, head))


def heads_letter(m: ModelConfig) -> str:
    """The key/value head's letter in a formula: g when query heads share them, else h itself."""
    return "g" if m.kv_heads < m.num_heads else "h"
