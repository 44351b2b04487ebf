"""The position-wise feed-forward network: everything about the kind."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, said
from .hand import Check, gap, linear, mm

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights


# Each activation: its formula, its LaTeX, and its value one number at a time with ``math``
# (verify's second computation).
ACTIVATION_FORMULAS = {
    "relu": "hidden = max(0, pre)    (ReLU)",
    "gelu": "hidden = pre·Φ(pre) = pre·(1 + erf(pre/√2))/2    (GELU)",
    "gelu-tanh": "hidden = pre·(1 + tanh(√(2/π)·(pre + 0.044715·pre³)))/2    (GELU, tanh form)",
    "silu": "hidden = pre·σ(pre) = pre / (1 + e^(−pre))    (SiLU, or swish)",
}
ACTIVATION_LATEX = {
    "relu": r"\mathrm{hidden} &= \max(0,\ \mathrm{pre}) \quad \text{(ReLU)}",
    "gelu": r"\mathrm{hidden} &= \mathrm{pre} \cdot \Phi(\mathrm{pre}) = \mathrm{pre} \cdot \tfrac{1}{2}"
    r"\left(1 + \operatorname{erf}(\mathrm{pre}/\sqrt{2})\right) \quad \text{(GELU)}",
    "gelu-tanh": r"\mathrm{hidden} &= \tfrac{1}{2}\,\mathrm{pre}\left(1 + \tanh\left(\sqrt{2/\pi}\,"
    r"(\mathrm{pre} + 0.044715\,\mathrm{pre}^3)\right)\right) \quad \text{(GELU, tanh form)}",
    "silu": r"\mathrm{hidden} &= \mathrm{pre} \cdot \sigma(\mathrm{pre}) = "
    r"\frac{\mathrm{pre}}{1 + e^{-\mathrm{pre}}} \quad \text{(SiLU)}",
}
ACTIVATIONS_BY_HAND: dict[str, Callable[[float], float]] = {
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2,
    "gelu-tanh": lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v * v * v))) / 2,
    "silu": lambda v: v / (1 + math.exp(-v)) if v > -700 else 0.0,
}


def activation_by_hand(x: np.ndarray, activation: str) -> np.ndarray:
    """The feed-forward's nonlinearity, one cell at a time."""
    if activation not in ACTIVATIONS_BY_HAND:
        raise ValueError(f"unknown activation {activation!r}")
    f = ACTIVATIONS_BY_HAND[activation]
    return np.array([[f(v) for v in row] for row in x.tolist()]).reshape(x.shape)


def feed_forward(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """FFN(x) = act(x·W_1 + b_1)·W_2 + b_2, the same for every position (§3.3)."""
    W_1, b_1, W_2, b_2 = (w.take(stage, name) for name in ("W_1", "b_1", "W_2", "b_2"))
    D, H = dims(x.shape[1]), dims(W_1.shape[1], "f")
    stage.input("X", x, tokens, D)
    r = F.feed_forward(x, W_1, b_1, W_2, b_2, m.activation)
    stage.cache = r
    stage.weight("W_1", W_1, D, H)
    stage.weight("b_1", b_1, ("b_1",), H)
    stage.rec("pre", r.pre, tokens, H)
    stage.rec("hidden", r.hidden, tokens, H)
    stage.weight("W_2", W_2, H, D)
    stage.weight("b_2", b_2, ("b_2",), D)
    return stage.out("output", r.output, tokens, D)


def feed_forward_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    dx, dW_1, db_1, dW_2, db_2, d_pre, d_hidden = F.feed_forward_backward(
        d_out, stage["X"], p["W_1"], p["W_2"], stage.cache, m.activation
    )
    shown = {"X": dx, "W_1": dW_1, "b_1": db_1[None], "pre": d_pre, "hidden": d_hidden}
    shown |= {"W_2": dW_2, "b_2": db_2[None], "output": d_out}
    return Grads(shown, {"W_1": dW_1, "b_1": db_1, "W_2": dW_2, "b_2": db_2})


def feed_forward_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    pre = mm(stage["X"], stage["W_1"]) + stage["b_1"]
    hidden = activation_by_hand(pre, m.activation)
    out = mm(hidden, stage["W_2"]) + stage["b_2"]
    worst = max(gap(stage["pre"], pre), gap(stage["hidden"], hidden), gap(stage["output"], out))
    return [Check(stage.id, f"pre, hidden = {m.activation}(pre) and output recomputed", worst)]


def explain_pre(c: Cell, trace: Trace) -> list[str]:
    return linear(
        c, f"pre = X·W_1 + b_1: row {c.i} of X ({c.row}) times column {c.j} of W_1",
        c.stage["X"][c.i], c.stage["W_1"][:, c.j], "b_1",
    )  # fmt: skip


def explain_activation(c: Cell, trace: Trace) -> list[str]:
    x = float(c.stage["pre"][c.i, c.j])
    activation = trace.config.model.activation
    if activation == "relu":
        off = "   (negative: this unit is off here)" if x < 0 else ""
        return [f"hidden = ReLU(pre) = max(0, pre): max(0, {c.f(x)}) = {c.f(c.value)}{off}"]
    if activation == "gelu":
        cdf = (1 + math.erf(x / math.sqrt(2))) / 2
        return [
            "hidden = GELU(pre) = pre·Φ(pre), Φ(x) = (1 + erf(x/√2))/2 the chance that a standard normal is below x",
            f"  Φ({c.f(x)}) = (1 + erf({c.f(x)}/√2))/2 = {c.f(cdf)}",
            f"  {c._factor(x)}·{c.f(cdf)} = {c.f(c.value)}",
        ]
    if activation == "gelu-tanh":
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return [
            "hidden = pre·(1 + tanh(√(2/π)·(pre + 0.044715·pre³)))/2 (GELU, the tanh form GPT-2 uses)",
            f"  √(2/π)·({c.f(x)} + 0.044715·{c._factor(x)}³) = {c.f(u)}; tanh({c.f(u)}) = {c.f(math.tanh(u))}",
            f"  {c._factor(x)}·(1 + {c.f(math.tanh(u))})/2 = {c.f(c.value)}",
        ]
    if activation == "silu":
        sig = 1 / (1 + math.exp(-x)) if x > -700 else 0.0
        return [
            "hidden = SiLU(pre) = pre·σ(pre), σ(x) = 1/(1 + e^(−x))   (Marian's swish)",
            f"  σ({c.f(x)}) = 1/(1 + e^({c.f(-x)})) = {c.f(sig)}",
            f"  {c._factor(x)}·{c.f(sig)} = {c.f(c.value)}",
        ]
    raise ValueError(f"unknown activation {activation!r}")


def explain_output(c: Cell, trace: Trace) -> list[str]:
    return linear(
        c, f"output = hidden·W_2 + b_2: row {c.i} of hidden times column {c.j} of W_2",
        c.stage["hidden"][c.i], c.stage["W_2"][:, c.j], "b_2",
    )  # fmt: skip


def _params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    d = m.d_model
    return {
        "W_1": Spec((d, m.d_ff), "xavier"),
        "b_1": Spec((m.d_ff,), "bias", d),
        "W_2": Spec((m.d_ff, d), "xavier"),
        "b_2": Spec((d,), "bias", m.d_ff),
    }


FEED_FORWARD = Kind(
    "feed-forward",
    "position-wise feed-forward",
    said(
        "Each position goes on its own through the same two-layer network: widen to d_ff, bend "
        "with a nonlinearity, come back to d_model."
    ),
    lambda m: f"pre = X·W_1 + b_1\n{ACTIVATION_FORMULAS[m.activation]}\noutput = hidden·W_2 + b_2",
    lambda m: [
        r"\mathrm{pre} &= X W_1 + b_1",
        ACTIVATION_LATEX[m.activation],
        r"\mathrm{output} &= \mathrm{hidden}\, W_2 + b_2",
    ],
    feed_forward_backward,
    feed_forward_second,
    {"pre": explain_pre, "hidden": explain_activation, "output": explain_output},
    params=_params,
    tex={"W_1": "W_1", "W_2": "W_2", "b_1": "b_1", "b_2": "b_2"},
)
