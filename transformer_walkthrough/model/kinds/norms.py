"""Residual connections and their norm: add & norm (post-norm), or norm, then add (pre-norm).

The norm is one piece that three kinds call: ``add-norm`` (LayerNorm(X + sublayer), the paper),
``layer-norm`` (before a pre-norm sublayer, or on top of a stack) and, with no norm at all,
``residual`` (X + sublayer, the pre-norm sum).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, said
from .hand import Check, gap, mean_square_rows

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights


# ---------------------------------------------------------------------------------------------
# The norm: its parameters, its arithmetic, its gradient, its second computation, its formula.
# ---------------------------------------------------------------------------------------------


def _norm_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return {"gamma": Spec((m.d_model,), "ones"), "beta": Spec((m.d_model,), "zeros")}


def normalize(stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig) -> np.ndarray:
    """The norm of each row of x, with the stage's gamma and beta (recorded), as the stage's output."""
    D = dims(x.shape[1])
    gamma = stage.weight("gamma", w.take(stage, "gamma"), ("gamma",), D)
    beta = stage.weight("beta", w.take(stage, "beta"), ("beta",), D)
    return stage.out("output", F.layer_norm(x, gamma.ravel(), beta.ravel(), m.layer_norm_eps), tokens, D)


def normalize_backward(
    d_out: np.ndarray, x: np.ndarray, p: Arrays, m: ModelConfig
) -> tuple[np.ndarray, Arrays]:
    """dL/dx and dL/d(each of the norm's parameters)."""
    dx, d_gamma, d_beta = F.layer_norm_backward(d_out, x, p["gamma"], m.layer_norm_eps)
    return dx, {"gamma": d_gamma, "beta": d_beta}


def normalize_by_hand(x: np.ndarray, stage: Stage, m: ModelConfig) -> np.ndarray:
    rows = [[(v - mean) / math.sqrt(var + m.layer_norm_eps) for v in row]
            for row, (mean, var) in zip(x.tolist(), mean_square_rows(x), strict=True)]  # fmt: skip
    return np.array(rows) * stage["gamma"] + stage["beta"]


def _norm_formula(x: str) -> str:
    return (
        f"output = gamma ⊙ ({x} − mean) / √(var + eps) + beta\n"
        f"    (mean and var of each row of {x}; var divides by d_model)"
    )


def _norm_latex(x: str) -> str:
    return (
        rf"\mathrm{{output}} &= \gamma \odot \frac{{{x} - \mu}}{{\sqrt{{\sigma^2 + \epsilon}}}} + \beta"
        r" \quad \text{(per row; } \sigma^2 \text{ divides by } d_\mathrm{model}\text{)}"
    )


def explain_norm(c: Cell, trace: Trace) -> list[str]:
    eps = trace.config.model.layer_norm_eps
    x = "sum" if "sum" in c.stage else "X"
    row = c.stage[x][c.i].tolist()
    d = len(row)
    mean = math.fsum(row) / d
    var = math.fsum((v - mean) ** 2 for v in row) / d
    gamma, beta = float(c.stage["gamma"][0, c.j]), float(c.stage["beta"][0, c.j])
    normed = (row[c.j] - mean) / math.sqrt(var + eps)
    return [
        f"output = gamma ⊙ ({x} − mean) / √(var + eps) + beta, over row {c.i} ({c.row}) of {x}",
        f"  mean = ({c.sum_of([c._factor(v) for v in row])}) / {d} = {c.f(mean)}",
        f"  var = Σ (v − mean)² / {d} = {c.f(var)}   (divided by d, not d − 1, as torch.nn.LayerNorm)",
        f"  ({x}[{c.i}, {c.j}] − mean) / √(var + eps) = ({c.f(row[c.j])} − {c._factor(mean)}) / √({c.f(var)} + {eps:g}) = {c.f(normed)}",
        f"  × gamma[{c.j}] {c.f(gamma)} + beta[{c.j}] {c._factor(beta)} = {c.f(c.value)}",
    ]


NORM_TEX = {"gamma": r"\gamma", "beta": r"\beta"}


# ---------------------------------------------------------------------------------------------
# Add & norm (post-norm): output = Norm(X + sublayer).
# ---------------------------------------------------------------------------------------------


def add_norm(stage: Stage, w: Weights, x: np.ndarray, sublayer: np.ndarray, tokens: tuple[str, ...],
             m: ModelConfig) -> np.ndarray:  # fmt: skip
    """Norm(x + Sublayer(x)): the residual connection, then the norm (§5.4)."""
    D = dims(x.shape[1])
    stage.input("X", x, tokens, D)
    stage.input("sublayer", sublayer, tokens, D)
    return normalize(stage, w, stage.rec("sum", x + sublayer, tokens, D), tokens, m)


def add_norm_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = Norm(X + sublayer): dL/d(sum) reaches both X and the sublayer unchanged."""
    d_sum, d_params = normalize_backward(d_out, stage["sum"], p, m)
    shown = {"X": d_sum, "sublayer": d_sum, "sum": d_sum, **{k: g[None] for k, g in d_params.items()}}
    return Grads(shown | {"output": d_out}, d_params)


def add_norm_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    total = stage["X"] + stage["sublayer"]
    worst = max(gap(stage["sum"], total), gap(stage["output"], normalize_by_hand(total, stage, m)))
    return [Check(stage.id, "sum equals X + sublayer; output is LayerNorm of each row", worst)]


def explain_sum(c: Cell, trace: Trace) -> list[str]:
    x, s = float(c.stage["X"][c.i, c.j]), float(c.stage["sublayer"][c.i, c.j])
    return [f"{c.name} = X + sublayer (the residual connection): {c.f(x)} + {c._factor(s)} = {c.f(c.value)}"]


def explain_carried(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    where = f"the output of {source}" if source else "given"
    return [f"X is the sublayer's input, {where}, carried around it by the residual connection."]


def explain_sublayer(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    where = f"the output of {source}" if source else "given"
    return [f"sublayer is {where}, row {c.i}, column {c.j}."]


ADD_NORM = Kind(
    "add-norm",
    "add & norm",
    said(
        "The sublayer's output is added back to its input (a residual connection), then each row "
        "is normalised to mean 0 and variance 1, scaled by gamma and shifted by beta (post-norm, the paper)."
    ),
    lambda m: "sum = X + sublayer\n" + _norm_formula("sum"),
    lambda m: [r"\mathrm{sum} &= X + \mathrm{sublayer}", _norm_latex(r"\mathrm{sum}")],
    add_norm_backward,
    add_norm_second,
    {"X": explain_carried, "sublayer": explain_sublayer, "sum": explain_sum, "output": explain_norm},
    params=_norm_params,
    tex=NORM_TEX,
)


# ---------------------------------------------------------------------------------------------
# The norm alone: before a pre-norm sublayer, or on top of a stack.
# ---------------------------------------------------------------------------------------------


def layer_norm(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """Norm(x) on its own: before a pre-norm sublayer, or at the top of a stack."""
    stage.input("X", x, tokens, dims(x.shape[1]))
    return normalize(stage, w, x, tokens, m)


def layer_norm_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    dx, d_params = normalize_backward(d_out, stage["X"], p, m)
    return Grads({"X": dx, **{k: g[None] for k, g in d_params.items()}, "output": d_out}, d_params)


def layer_norm_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    out = normalize_by_hand(stage["X"], stage, m)
    return [Check(stage.id, "output is LayerNorm of each row of X", gap(stage["output"], out))]


LAYER_NORM = Kind(
    "layer-norm",
    "layer norm",
    said(
        "Each row is normalised to mean 0 and variance 1, then scaled by gamma and shifted by beta: "
        "before a sublayer in a pre-norm model, or on top of a stack (model.final_norm)."
    ),
    lambda m: _norm_formula("X"),
    lambda m: [_norm_latex("X")],
    layer_norm_backward,
    layer_norm_second,
    {"output": explain_norm},
    params=_norm_params,
    tex=NORM_TEX,
)


# ---------------------------------------------------------------------------------------------
# The pre-norm residual connection: output = X + sublayer, no norm after it.
# ---------------------------------------------------------------------------------------------


def residual(stage: Stage, x: np.ndarray, sublayer: np.ndarray, tokens: tuple[str, ...]) -> np.ndarray:
    """x + Sublayer(Norm(x)): the pre-norm residual connection, with no norm after it."""
    D = dims(x.shape[1])
    stage.input("X", x, tokens, D)
    stage.input("sublayer", sublayer, tokens, D)
    return stage.out("output", x + sublayer, tokens, D)


def residual_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = X + sublayer passes its gradient to both, unchanged."""
    return Grads({"X": d_out, "sublayer": d_out, "output": d_out}, {})


def residual_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x, sub = stage["X"].tolist(), stage["sublayer"].tolist()
    total = np.array([[a + b for a, b in zip(r, s, strict=True)] for r, s in zip(x, sub, strict=True)])
    return [Check(stage.id, "output equals X + sublayer", gap(stage["output"], total))]


def explain_stream(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    where = f"the output of {source}" if source else "given"
    return [
        f"X is the residual stream, {where}: the sublayer read it through a LayerNorm (pre-norm),",
        "and the stream itself goes around both, unnormalised, to be added back.",
    ]


RESIDUAL = Kind(
    "residual",
    "residual connection",
    said(
        "The sublayer's output is added back to the stream it read (pre-norm): the stream itself is "
        "never normalised, so the sum of every sublayer's contribution reaches the top."
    ),
    lambda m: "output = X + sublayer",
    lambda m: [r"\mathrm{output} &= X + \mathrm{sublayer}"],
    residual_backward,
    residual_second,
    {"X": explain_stream, "sublayer": explain_sublayer, "output": explain_sum},
)
