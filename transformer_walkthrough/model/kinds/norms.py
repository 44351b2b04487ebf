"""Residual connections and their norms, where ``model.norm_placement`` puts them.

The norm is one piece that four kinds call: ``add-norm`` (Norm(X + sublayer), post-norm, the
paper), ``layer-norm`` (before a sublayer, on a sublayer's output, or on top of a stack),
``embedding-norm`` (of the embeddings' sum, BERT) and, with no norm at all, ``residual`` (X +
sublayer, the sum of every other placement). ``model.norm`` says which norm: LayerNorm (the paper),
RMSNorm (no mean subtracted, no beta) or Gemma's RMSNorm, whose weight is 1 + gamma; the stage ids
and kinds are the same for all three.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import functional as F
from ..formula import Line, Note, Term, call, formula, line, note, num, sqrt, sym
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, StepOf, named, one, row, step, sum_step
from .hand import Check, gap, mean_square_rows, rms_norm_by_hand, where_from

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from .base import Weights


# ---------------------------------------------------------------------------------------------
# The norm (``model.norm``): its parameters, arithmetic, gradient, second computation, formula.
# ---------------------------------------------------------------------------------------------


class Norm(NamedTuple):
    """One value of ``model.norm``: everything the three kinds ask of it."""

    name: str  # "LayerNorm", as the texts call it
    a: str  # "a LayerNorm": the name with its article
    params: tuple[str, ...]  # its parameters, each (d_model,): gamma, and beta for LayerNorm
    row: str  # what it does to each row, as the kinds' explanations say it
    forward: Callable[[np.ndarray, Arrays, float], np.ndarray]  # x, parameters (d,), eps -> output
    backward: Callable[[np.ndarray, np.ndarray, Arrays, float], Arrays]  # d_out, x, p, eps -> dx, dp
    by_hand: Callable[[np.ndarray, float], list[list[float]]]  # x, eps -> rows before gamma, with math
    formula: Callable[[str], list[Line | Note]]  # the arithmetic, of the input named x
    explain: Callable[[Cell, str, float], list[str]]  # a cell of output, of the input named x
    # The weight as applied is offset + gamma: 1 for Gemma's RMSNorm, which stores gamma as its
    # offset from 1 (so a new model's zeros mean "scale by 1"); its stage records both.
    offset: float = 0.0


def applied(norm: Norm, gamma: np.ndarray) -> np.ndarray:
    """The norm's weight as it multiplies: gamma as stored, or 1 + gamma (Gemma), in gamma's dtype."""
    return gamma + norm.offset if norm.offset else gamma


def _layer_norm_by_hand(x: np.ndarray, eps: float) -> list[list[float]]:
    return [[(v - mean) / math.sqrt(var + eps) for v in row]
            for row, (mean, var) in zip(x.tolist(), mean_square_rows(x), strict=True)]  # fmt: skip


def _explain_layer_norm(c: Cell, x: str, eps: float) -> list[str]:
    row = c.stage[x][c.i].tolist()
    d = len(row)
    mean = math.fsum(row) / d
    var = math.fsum((v - mean) ** 2 for v in row) / d
    gamma, beta = float(c.stage["gamma"][0, c.j]), float(c.stage["beta"][0, c.j])
    normed = (row[c.j] - mean) / math.sqrt(var + eps)
    return [
        f"output = gamma ⊙ ({x} − mean) / √(var + eps) + beta, over row {c.i} ({c.row}) of {x}",
        f"  mean = ({c.sum_of([c.operand(v) for v in row])}) / {d} = {c.r(mean)}",
        f"  var = Σ (v − mean)² / {d} = {c.r(var)}   (divided by d, not d − 1, as torch.nn.LayerNorm)",
        f"  ({x}[{c.i}, {c.j}] − mean) / √(var + eps) = ({c.f(row[c.j])} − {c.operand(mean)}) / √({c.f(var)} + {eps:g}) = {c.r(normed)}",
        f"  × gamma[{c.j}] {c.f(gamma)} + beta[{c.j}] {c.operand(beta)} = {c.r(c.value)}",
    ]


def _explain_rms_norm(c: Cell, x: str, eps: float, offset: float = 0.0) -> list[str]:
    row = c.stage[x][c.i].tolist()
    d = len(row)
    mean_square = math.fsum(v * v for v in row) / d
    root = math.sqrt(mean_square + eps)
    gamma = float(c.stage["gamma"][0, c.j])
    weight = "(1 + gamma)" if offset else "gamma"
    scale = (
        f"  × (1 + gamma[{c.j}]) = (1 + {c.operand(gamma)}) = {c.r(1 + gamma)}, gamma as stored plus 1 "
        f"(scale[{c.j}], the weight as applied): {c.r(c.value)}"
        if offset
        else f"  × gamma[{c.j}] {c.f(gamma)} = {c.r(c.value)}"
    )
    return [
        f"output = {weight} ⊙ {x} / √(mean({x}²) + eps), over row {c.i} ({c.row}) of {x} "
        "(RMSNorm: no mean subtracted, no beta)",
        f"  mean({x}²) = ({c.sum_of([f'{c.operand(v)}²' for v in row])}) / {d} = {c.r(mean_square)}",
        f"  √(mean({x}²) + eps) = √({c.f(mean_square)} + {eps:g}) = {c.r(root)}",
        f"  {x}[{c.i}, {c.j}] / √(mean({x}²) + eps) = {c.f(row[c.j])} / {c.f(root)} = {c.r(row[c.j] / root)}",
        scale,
    ]


def _explain_scale(c: Cell, trace: Trace) -> list[str]:
    gamma = float(c.stage["gamma"][0, c.j])
    return [
        f"scale = 1 + gamma: the weight each column is multiplied by, gamma as stored plus 1 (Gemma's "
        f"RMSNorm keeps only the offset from 1): 1 + {c.operand(gamma)} = {c.r(c.value)}"
    ]


def _layer_norm_backward(d_out: np.ndarray, x: np.ndarray, p: Arrays, eps: float) -> Arrays:
    dx, d_gamma, d_beta = F.layer_norm_backward(d_out, x, p["gamma"], eps)
    return {"x": dx, "gamma": d_gamma, "beta": d_beta}


def _rms_norm_backward(d_out: np.ndarray, x: np.ndarray, p: Arrays, eps: float) -> Arrays:
    dx, d_gamma = F.rms_norm_backward(d_out, x, p["gamma"], eps)
    return {"x": dx, "gamma": d_gamma}


def _rms_norm_plus_one_backward(d_out: np.ndarray, x: np.ndarray, p: Arrays, eps: float) -> Arrays:
    """As RMSNorm's with the weight 1 + gamma: d(1 + gamma)/dgamma = 1, so gamma's gradient is the
    applied weight's."""
    dx, d_gamma = F.rms_norm_backward(d_out, x, 1 + p["gamma"], eps)
    return {"x": dx, "gamma": d_gamma}


MEAN, VAR = sym("mean", tex=r"\mu"), sym("var", tex=r"\sigma^2")  # of a row


def _mean_square(x: str) -> Term:
    return call("mean", sym(x, sup="2"))


# Every value of model.norm (config.NORMS), by value.
NORM_PIECES: dict[str, Norm] = {
    "layernorm": Norm(
        "LayerNorm",
        "a LayerNorm",
        ("gamma", "beta"),
        "normalised to mean 0 and variance 1, scaled by gamma and shifted by beta",
        lambda x, p, eps: F.layer_norm(x, p["gamma"], p["beta"], eps),
        _layer_norm_backward,
        _layer_norm_by_hand,
        lambda x: [
            line(
                "output", "=", "gamma", "⊙", "(", x, "−", MEAN, ")", "/", sqrt(VAR, "+", "eps"), "+", "beta"
            ),
            note(
                "(",
                MEAN,
                " and ",
                VAR,
                " of each row of ",
                sym(x),
                "; ",
                VAR,
                " divides by ",
                sym("d_model"),
                ")",
            ),
        ],
        _explain_layer_norm,
    ),
    "rmsnorm": Norm(
        "RMSNorm",
        "an RMSNorm",
        ("gamma",),
        "divided by its root mean square and scaled by gamma (RMSNorm: no mean subtracted, no beta)",
        lambda x, p, eps: F.rms_norm(x, p["gamma"], eps),
        _rms_norm_backward,
        rms_norm_by_hand,
        lambda x: [
            line("output", "=", "gamma", "⊙", x, "/", sqrt(_mean_square(x), "+", "eps")),
            note(
                "(",
                _mean_square(x),
                ": the mean of the squares of each row of ",
                sym(x),
                "; no ",
                sym("beta"),
                ")",
            ),
        ],
        _explain_rms_norm,
    ),
    "rmsnorm-plus-one": Norm(
        "RMSNorm (1 + gamma)",
        "an RMSNorm with weight 1 + gamma",
        ("gamma",),
        "divided by its root mean square and scaled by 1 + gamma (Gemma's RMSNorm: gamma is stored as "
        "its offset from 1; no mean subtracted, no beta)",
        lambda x, p, eps: F.rms_norm(x, 1 + p["gamma"], eps),
        _rms_norm_plus_one_backward,
        rms_norm_by_hand,
        lambda x: [
            line(
                "output", "=", "(", num(1), "+", "gamma", ")", "⊙", x, "/", sqrt(_mean_square(x), "+", "eps")
            ),
            note(
                "(",
                _mean_square(x),
                ": the mean of the squares of each row of ",
                sym(x),
                "; ",
                sym("gamma"),
                " is stored as the weight's offset from 1, so zeros scale by 1; no ",
                sym("beta"),
                ")",
            ),
        ],
        lambda c, x, eps: _explain_rms_norm(c, x, eps, offset=1.0),
        offset=1.0,
    ),
}


def norm_of(m: ModelConfig) -> Norm:
    """The norm the config names (``model.norm``)."""
    if m.norm not in NORM_PIECES:
        raise ValueError(f"unknown norm {m.norm!r}")
    return NORM_PIECES[m.norm]


def _norm_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    # Gemma's gamma is the weight's offset from 1: zeros, so that a new model scales by 1 too.
    init = {"gamma": "zeros" if norm_of(m).offset else "ones", "beta": "zeros"}
    return {name: Spec((m.d_model,), init[name]) for name in norm_of(m).params}


def normalize(stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig) -> np.ndarray:
    """The norm of each row of x, with the stage's gamma (and beta) recorded, as the stage's output."""
    D = dims(x.shape[1])
    norm = norm_of(m)
    p = {name: stage.weight(name, w.take(stage, name), (name,), D).ravel() for name in norm.params}
    if norm.offset:  # the weight as applied, beside gamma as stored
        stage.rec("scale", applied(norm, p["gamma"])[None], ("scale",), D)
    return stage.out("output", norm.forward(x, p, m.layer_norm_eps), tokens, D)


def normalize_backward(
    d_out: np.ndarray, x: np.ndarray, p: Arrays, m: ModelConfig
) -> tuple[np.ndarray, Arrays]:
    """dL/dx and dL/d(each of the norm's parameters)."""
    grads = norm_of(m).backward(d_out, x, p, m.layer_norm_eps)
    return grads.pop("x"), grads


def shown_gradients(d_params: Arrays, m: ModelConfig) -> Arrays:
    """dL/d(each parameter) as a stage shows them, one row each; dL/dscale is dL/dgamma (scale = 1 + gamma)."""
    shown = {k: g[None] for k, g in d_params.items()}
    return shown | ({"scale": shown["gamma"]} if norm_of(m).offset else {})


def normalize_by_hand(x: np.ndarray, stage: Stage, m: ModelConfig) -> np.ndarray:
    """The norm again, row by row with ``math`` (verify's second computation)."""
    norm = norm_of(m)
    gamma = stage["gamma"]
    if norm.offset:  # the weight as applied, from gamma as stored, in plain floats
        gamma = np.array([[norm.offset + float(g) for g in gamma.ravel()]])
    out = np.array(norm.by_hand(x, m.layer_norm_eps)) * gamma
    return out + stage["beta"] if "beta" in norm.params else out


def explain_norm(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    return norm_of(m).explain(c, "sum" if "sum" in c.stage else "X", m.layer_norm_eps)


NORM_TEX = {"gamma": r"\gamma", "beta": r"\beta"}


def norm_step(x: str) -> StepOf:
    """The step of a cell of Norm(x): all of row i of x, and column j of each of the norm's
    parameters (gamma, and LayerNorm's beta)."""

    def of(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        params = norm_of(trace.config.model).params
        if "scale" in stage:  # Gemma's: the weight as applied, 1 + gamma, is what multiplies
            params = tuple("scale" if p == "gamma" else p for p in params)
        return step("norm", row(stage, named(stage, x), i), *(one(named(stage, p), 0, j) for p in params))

    return of


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
    shown = {"X": d_sum, "sublayer": d_sum, "sum": d_sum, **shown_gradients(d_params, m)}
    return Grads(shown | {"output": d_out}, d_params)


def add_norm_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    total = stage["X"] + stage["sublayer"]
    worst = max(gap(stage["sum"], total), gap(stage["output"], normalize_by_hand(total, stage, m)))
    return [Check(stage.id, f"sum equals X + sublayer; output is {norm_of(m).name} of each row", worst)]


def explain_sum(c: Cell, trace: Trace) -> list[str]:
    x, s = float(c.stage["X"][c.i, c.j]), float(c.stage["sublayer"][c.i, c.j])
    return [f"{c.name} = X + sublayer (the residual connection): {c.f(x)} + {c.operand(s)} = {c.r(c.value)}"]


def explain_carried(c: Cell, trace: Trace) -> list[str]:
    where = where_from(c)
    return [f"X is the sublayer's input, {where}, carried around it by the residual connection."]


def explain_sublayer(c: Cell, trace: Trace) -> list[str]:
    where = where_from(c)
    return [f"sublayer is {where}, row {c.i}, column {c.j}."]


ADD_NORM = Kind(
    "add-norm",
    lambda m: "add & norm" if m.norm == "layernorm" else f"add & {norm_of(m).name}",
    lambda m: (
        "The sublayer's output is added back to its input (a residual connection), then each row "
        f"is {norm_of(m).row}, post-norm as in the paper."
    ),
    lambda m: formula(line("sum", "=", "X", "+", "sublayer"), *norm_of(m).formula("sum")),
    add_norm_backward,
    add_norm_second,
    {
        "X": explain_carried,
        "sublayer": explain_sublayer,
        "sum": explain_sum,
        "scale": _explain_scale,
        "output": explain_norm,
    },
    params=_norm_params,
    steps={"sum": sum_step("X", "sublayer"), "output": norm_step("sum")},
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
    return Grads({"X": dx, **shown_gradients(d_params, m), "output": d_out}, d_params)


def layer_norm_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    out = normalize_by_hand(stage["X"], stage, m)
    return [Check(stage.id, f"output is {norm_of(m).name} of each row of X", gap(stage["output"], out))]


def _norm_places(m: ModelConfig) -> str:
    """Where the config's layer-norm stages sit (``model.norm_placement``), as a phrase."""
    places = {
        "post": "on top of a stack (model.final_norm)",
        "pre": "before a sublayer (pre-norm), or on top of a stack",
        "both": "before a sublayer, on its output before the residual sum (norm_placement: both, Gemma "
        "2 and 3), or on top of a stack",
        "output": "on a sublayer's output before the residual sum (norm_placement: output, OLMo 2), or "
        "on top of a stack",
    }
    return places[m.norm_placement]


LAYER_NORM = Kind(
    "layer-norm",
    lambda m: "layer norm" if m.norm == "layernorm" else norm_of(m).name,
    lambda m: f"Each row is {norm_of(m).row}: {_norm_places(m)}.",
    lambda m: formula(*norm_of(m).formula("X")),
    layer_norm_backward,
    layer_norm_second,
    {"scale": _explain_scale, "output": explain_norm},
    params=_norm_params,
    steps={"output": norm_step("X")},
    tex=NORM_TEX,
)


EMBEDDING_NORM = Kind(
    "embedding-norm",
    lambda m: "embedding norm" if m.norm == "layernorm" else f"embedding {norm_of(m).name}",
    lambda m: (
        f"Each token's summed embedding is {norm_of(m).row}, before the first layer "
        "(BERT: the layers then read vectors of a steady size, whatever the tables' scales)."
    ),
    lambda m: formula(*norm_of(m).formula("X")),
    layer_norm_backward,
    layer_norm_second,
    {"scale": _explain_scale, "output": explain_norm},
    params=_norm_params,
    steps={"output": norm_step("X")},
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
    where = where_from(c)
    m = trace.config.model
    norm = norm_of(m).a
    through = {
        "pre": f"the sublayer read it through {norm} (pre-norm)",
        "both": f"the sublayer read it through {norm} and its output was normed again (both sides)",
        "output": f"the sublayer read it as it is and its output was normed by {norm} (OLMo 2)",
    }.get(m.norm_placement, "the sublayer read it")
    return [
        f"X is the residual stream, {where}: {through},",
        "and the stream itself goes around both, unnormalised, to be added back.",
    ]


def _residual_text(m: ModelConfig) -> str:
    stream = {
        "pre": "the stream it read (pre-norm)",
        "both": "the stream it read, after a norm of its own output (norms on both sides, Gemma 2 and 3)",
        "output": "the stream it read, after a norm of its own output (OLMo 2)",
    }.get(m.norm_placement, "the stream it read")
    return (
        f"The sublayer's output is added back to {stream}: the stream itself is never normalised, so the "
        "sum of every sublayer's contribution reaches the top."
    )


RESIDUAL = Kind(
    "residual",
    "residual connection",
    _residual_text,
    lambda m: formula(line("output", "=", "X", "+", "sublayer")),
    residual_backward,
    residual_second,
    {"X": explain_stream, "sublayer": explain_sublayer, "output": explain_sum},
    steps={"output": sum_step("X", "sublayer")},
)
