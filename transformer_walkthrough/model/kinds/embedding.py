"""The bottom of each stack: each token's row of E, then the positions added to it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..trace import CONSTANT, Stage, dims, positions
from .base import Arrays, Grads, Kind, Sizes, Spec, said
from .hand import Check, gap

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights


# ---------------------------------------------------------------------------------------------
# Embedding: each token's row of E.
# ---------------------------------------------------------------------------------------------


def embed(stage: Stage, w: Weights, ids: list[int], tokens: tuple[str, ...], vocabulary: tuple[str, ...],
          m: ModelConfig) -> np.ndarray:  # fmt: skip
    """Look up each token's row of E (times √d_model when the config scales, as the paper §3.4)."""
    E = stage.weight("E", w.take(stage, "E"), vocabulary, dims(m.d_model))
    # math.sqrt gives a Python float, which keeps float32 arrays float32 (a NumPy float64 would not).
    x = E[ids] * math.sqrt(m.d_model) if m.scale_embeddings else E[ids]
    stage.cache = ids
    return stage.out("output", x, tokens, dims(m.d_model))


def embed_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """Each row of E gathers the gradients of the positions that looked it up."""
    dE = np.zeros_like(p["E"])
    # np.add.at, not dE[ids] += …: a token used twice (the the) must add both gradients.
    np.add.at(dE, stage.cache, d_out * (math.sqrt(m.d_model) if m.scale_embeddings else 1.0))
    return Grads({"E": dE, "output": d_out}, {"E": dE})


def embed_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    rows = stage["E"][list(trace.ids(stage.id))] * (math.sqrt(m.d_model) if m.scale_embeddings else 1)
    what = "output equals the tokens' rows of E" + (" times √d_model" if m.scale_embeddings else "")
    return [Check(stage.id, what, gap(stage["output"], rows))]


def explain_lookup(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    row = trace.ids(c.stage.id)[c.i]
    e = float(c.stage["E"][row, c.j])
    line = f"output[{c.i}, {c.j}] = E[{c.row!s} (row {row} of E), {c.j}] = {c.f(e)}"
    if m.scale_embeddings:
        line += f", times √d_model = {c.f(math.sqrt(m.d_model))}: {c.f(c.value)}"
    return [f"The token {c.row!r} looks up its row of the embedding table E.", line]


EMBEDDING = Kind(
    "embedding",
    "embedding",
    said("Each token looks up its row of the embedding table E, a vector of d_model numbers."),
    lambda m: (
        "output[i] = E[token_i]"
        + ("·√d_model" if m.scale_embeddings else "")
        + (
            ""
            if not m.tie_embeddings
            else "\n    (E is also the output layer's table, W = Eᵀ: tied)"
            if m.decoder_only
            else "\n    (E is the one table of both stacks and of the output layer: tied)"
        )
    ),
    lambda m: [
        r"\mathrm{output}_i &= E[\mathrm{token}_i]"
        + (r" \cdot \sqrt{d_\mathrm{model}}" if m.scale_embeddings else "")
    ],
    embed_backward,
    embed_second,
    {"output": explain_lookup},
    params=lambda m, sizes: {"E": Spec((sizes.vocab, m.d_model), "embedding")},
)


# ---------------------------------------------------------------------------------------------
# Positional encoding: a pattern that differs from position to position, added to each row.
# ---------------------------------------------------------------------------------------------


def add_positions(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig, start: int = 0
) -> np.ndarray:
    """X + PE: fixed sinusoids (§3.5, interleaved or in halves), or rows of a learned P; the rows of
    positions ``start``, ``start + 1``, … (a cached generation step adds its one token's)."""
    D = dims(m.d_model)
    stage.input("X", x, tokens, D)
    rows = slice(start, start + len(tokens))
    if m.positional_encoding == "learned":
        P = stage.weight("P", w.take(stage, "P"), tuple(f"pos {k}" for k in range(m.max_positions)), D)
        pe = stage.rec("PE", P[rows], positions(tokens, start), D)
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        halves = m.positional_encoding == "sinusoidal-halves"
        table = F.positional_encoding(rows.stop, m.d_model, x.dtype, halves)[rows]
        pe = stage.rec("PE", table, positions(tokens, start), D, CONSTANT)
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return stage.out("output", x + pe, tokens, D)


def positions_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = X + PE passes its gradient to X unchanged, and to the rows of P that were used."""
    grads = {"X": d_out, "PE": d_out, "output": d_out}
    if "P" not in p:
        return Grads(grads, {})
    dP = np.zeros_like(p["P"])
    dP[: len(d_out)] = d_out
    return Grads({"X": d_out, "P": dP, "PE": d_out, "output": d_out}, {"P": dP})


def sinusoid_by_hand(n: int, d_model: int, halves: bool) -> np.ndarray:
    """The sinusoidal table, one cell at a time with ``math``."""

    def cell(pos: int, j: int) -> float:
        if halves:  # sines in the first ⌈d/2⌉ columns, the cosines of the same angles after them
            sines = (d_model + 1) // 2
            i, f = (j, math.sin) if j < sines else (j - sines, math.cos)
            return f(pos / 10000 ** (2 * i / d_model))
        return (math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / d_model))

    return np.array([[cell(pos, j) for j in range(d_model)] for pos in range(n)])


def positions_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    n = len(stage["X"])
    if m.positional_encoding == "learned":
        pe, what = stage["P"][:n], "PE equals the first rows of P; output equals X + PE"
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        pe = sinusoid_by_hand(n, m.d_model, m.positional_encoding == "sinusoidal-halves")
        what = "PE recomputed by sin and cos; output equals X + PE"
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return [Check(stage.id, what, max(gap(stage["PE"], pe), gap(stage["output"], stage["X"] + pe)))]


def _positions_formula(m: ModelConfig) -> str:
    if m.positional_encoding == "learned":
        return "PE = the first rows of P, one per position (P is learned)\noutput = X + PE"
    if m.positional_encoding == "sinusoidal-halves":
        return (
            "PE[pos, i]          = sin(pos / 10000^(2i/d_model))    (i < d_model/2: the sines first)\n"
            "PE[pos, d_model/2+i] = cos(pos / 10000^(2i/d_model))   (then the cosines)\n"
            "output = X + PE"
        )
    if m.positional_encoding == "sinusoidal":
        return (
            "PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))\n"
            "PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))\n"
            "output = X + PE"
        )
    raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")


def _positions_latex(m: ModelConfig) -> list[str]:
    angle = r"pos / 10000^{2i/d_\mathrm{model}}"
    if m.positional_encoding == "learned":
        first = r"PE_{pos} &= P_{pos} \quad \text{(a row of the learned table } P\text{)}"
    elif m.positional_encoding == "sinusoidal-halves":
        first = rf"PE_{{pos, i}} &= \sin({angle}), \quad PE_{{pos, d_\mathrm{{model}}/2 + i}} = \cos({angle})"
    elif m.positional_encoding == "sinusoidal":
        first = rf"PE_{{pos, 2i}} &= \sin({angle}), \quad PE_{{pos, 2i+1}} = \cos({angle})"
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return [first, r"\mathrm{output} &= X + PE"]


def _token_at(c: Cell) -> str:
    """The token at the cell's position (PE's rows are named "pos 2 · is")."""
    return c.stage.matrices["X"].rows[c.i] if "X" in c.stage else c.row


def explain_positional(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    d_model = m.d_model
    if m.positional_encoding == "learned":
        return [
            f"PE[{c.i}, {c.j}] = P[{c.i}, {c.j}] = {c.f(c.value)}: the token at position {c.i} ({c.row}) takes row {c.i}",
            "  of the learned position table P (a weight, trained like any other; no formula makes it).",
        ]
    if m.positional_encoding == "sinusoidal-halves":
        sines = (d_model + 1) // 2
        i, fn = (c.j, "sin") if c.j < sines else (c.j - sines, "cos")
        angle = c.i / 10000 ** (2 * i / d_model)
        return [
            f"PE[pos, {'i' if fn == 'sin' else 'd_model/2 + i'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"i = {i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({2 * i}/{d_model}) = {c.i} / {c.f(10000 ** (2 * i / d_model))} = {c.f(angle)}",
            f"  {fn}({c.f(angle)}) = {c.f(c.value)}",
            "  (the first half of the columns are sines, the second half the cosines of the same angles: Marian's layout)",
        ]
    if m.positional_encoding == "sinusoidal":
        two_i = c.j - c.j % 2
        angle = c.i / 10000 ** (two_i / d_model)
        fn = "sin" if c.j % 2 == 0 else "cos"
        return [
            f"PE[pos, {'2i' if c.j % 2 == 0 else '2i+1'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"2i = {two_i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({two_i}/{d_model}) = {c.i} / {c.f(10000 ** (two_i / d_model))} = {c.f(angle)}",
            f"  {fn}({c.f(angle)}) = {c.f(c.value)}",
            "  (even columns are sines, odd ones cosines; low columns turn fast with the position, high ones slowly)",
        ]
    raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")


def explain_shifted(c: Cell, trace: Trace) -> list[str]:
    x, pe = float(c.stage["X"][c.i, c.j]), float(c.stage["PE"][c.i, c.j])
    return [
        f"output = X + PE: {c.f(x)} + {c._factor(pe)} = {c.f(c.value)} (the token's vector, shifted by its position's pattern)"
    ]


def _positions_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return (
        {"P": Spec((m.max_positions, m.d_model), "positions")} if m.positional_encoding == "learned" else {}
    )


POSITIONAL_ENCODING = Kind(
    "positional-encoding",
    "positional encoding",
    said(
        "Attention by itself ignores word order, so a pattern different for every position is added "
        "to each token's vector: fixed sines and cosines, or a table learned like any weight."
    ),
    _positions_formula,
    _positions_latex,
    positions_backward,
    positions_second,
    {"PE": explain_positional, "output": explain_shifted},
    params=_positions_params,
    tex={"PE": "PE"},
)
