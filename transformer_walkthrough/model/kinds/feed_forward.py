"""The position-wise feed-forward network: everything about the kind, in both its forms.

``model.feed_forward`` chooses the form: ``standard``, the paper's two layers (eq. 2),
``act(X·W_1 + b_1)·W_2 + b_2``; or ``gated``, a gated linear unit (Shazeer, 2020),
``(act(X·W_gate + b_gate) ⊙ (X·W_up + b_up))·W_down + b_down``: SwiGLU with SiLU (Llama), GeGLU
with GELU, ReGLU with ReLU. ``model.ffn_bias: false`` drops the biases of either. Each form's
parameters, forward, backward, second computation, formula and LaTeX are below, side by side;
every function that depends on the form asks ``_form``, which refuses a value it does not know.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, cache_of
from .hand import Check, gap, linear, mm

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from ..weights import Weights

STANDARD, GATED = "standard", "gated"

# Each activation as a function of its argument, written {x}: the standard form bends pre, the
# gated form bends gate. Its formula, its LaTeX, and its value one number at a time with ``math``
# (verify's second computation); and the name of the gated unit it makes.
ACTIVATION_FORMULAS = {
    "relu": "max(0, {x})    (ReLU)",
    "gelu": "{x}·Φ({x}) = {x}·(1 + erf({x}/√2))/2    (GELU)",
    "gelu-tanh": "{x}·(1 + tanh(√(2/π)·({x} + 0.044715·{x}³)))/2    (GELU, tanh form)",
    "silu": "{x}·σ({x}) = {x} / (1 + e^(−{x}))    (SiLU, or swish)",
}
ACTIVATION_LATEX = {
    "relu": r"\max(0,\ {x}) \quad \text{(ReLU)}",
    "gelu": r"{x} \cdot \Phi({x}) = {x} \cdot \tfrac{1}{2}"
    r"\left(1 + \operatorname{erf}({x}/\sqrt{2})\right) \quad \text{(GELU)}",
    "gelu-tanh": r"\tfrac{1}{2}\,{x}\left(1 + \tanh\left(\sqrt{2/\pi}\,"
    r"({x} + 0.044715\,{x}^3)\right)\right) \quad \text{(GELU, tanh form)}",
    "silu": r"{x} \cdot \sigma({x}) = \frac{{x}}{1 + e^{-{x}}} \quad \text{(SiLU)}",
}
ACTIVATIONS_BY_HAND: dict[str, Callable[[float], float]] = {
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2,
    "gelu-tanh": lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v * v * v))) / 2,
    "silu": lambda v: v / (1 + math.exp(-v)) if v > -700 else 0.0,
}
GATED_UNITS = {"relu": "ReGLU", "gelu": "GeGLU", "gelu-tanh": "GeGLU, tanh form", "silu": "SwiGLU, as Llama"}


def activation_formula(activation: str, x: str) -> str:
    """The activation applied to ``x`` ("pre", "gate"), as the formula writes it."""
    return ACTIVATION_FORMULAS[activation].replace("{x}", x)


def activation_latex(activation: str, x: str) -> str:
    """The activation applied to ``x`` (r"\\mathrm{pre}"), in LaTeX."""
    return ACTIVATION_LATEX[activation].replace("{x}", x)


def _form(m: ModelConfig) -> str:
    """``m.feed_forward``, checked: a value added to the config and forgotten here raises."""
    if m.feed_forward not in (STANDARD, GATED):
        raise ValueError(f"unknown feed_forward {m.feed_forward!r}")
    return m.feed_forward


def activation_by_hand(x: np.ndarray, activation: str) -> np.ndarray:
    """The feed-forward's nonlinearity, one cell at a time."""
    if activation not in ACTIVATIONS_BY_HAND:
        raise ValueError(f"unknown activation {activation!r}")
    f = ACTIVATIONS_BY_HAND[activation]
    return np.array([[f(v) for v in row] for row in x.tolist()]).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Parameters, forward, backward.
# ---------------------------------------------------------------------------------------------


def _specs(m: ModelConfig) -> dict[str, Spec]:
    """The parameters of the form, in the order the stage uses them; no biases without ``ffn_bias``."""
    d, f = m.d_model, m.d_ff
    if _form(m) == GATED:
        specs = {
            "W_gate": Spec((d, f), "xavier"),
            "b_gate": Spec((f,), "bias", d),
            "W_up": Spec((d, f), "xavier"),
            "b_up": Spec((f,), "bias", d),
            "W_down": Spec((f, d), "xavier"),
            "b_down": Spec((d,), "bias", f),
        }
    else:
        specs = {
            "W_1": Spec((d, f), "xavier"),
            "b_1": Spec((f,), "bias", d),
            "W_2": Spec((f, d), "xavier"),
            "b_2": Spec((d,), "bias", f),
        }
    return specs if m.ffn_bias else {name: s for name, s in specs.items() if s.init != "bias"}


def _params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return _specs(m)


def feed_forward(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """FFN(x), the same for every position (§3.3): act(x·W_1 + b_1)·W_2 + b_2, or gated:
    (act(x·W_gate + b_gate) ⊙ (x·W_up + b_up))·W_down + b_down."""
    p = {name: w.take(stage, name) for name in _specs(m)}
    D, H = dims(x.shape[1]), dims(m.d_ff, "f")

    def weight(name: str, rows: tuple[str, ...], cols: tuple[str, ...]) -> None:
        if name in p:  # a bias only with ffn_bias
            stage.weight(name, p[name], rows, cols)

    stage.input("X", x, tokens, D)
    # stage.cache: what the forward returned (F.GatedFeedForward or F.FeedForward), for the backward
    if _form(m) == GATED:
        biases = (p.get("b_gate"), p.get("b_up"), p.get("b_down"))  # None without ffn_bias
        g = F.gated_feed_forward(x, p["W_gate"], p["W_up"], p["W_down"], m.activation, *biases)
        stage.cache = g
        weight("W_gate", D, H)
        weight("b_gate", ("b_gate",), H)
        stage.rec("gate", g.gate, tokens, H)
        weight("W_up", D, H)
        weight("b_up", ("b_up",), H)
        stage.rec("up", g.up, tokens, H)
        stage.rec("hidden", g.hidden, tokens, H)
        weight("W_down", H, D)
        weight("b_down", ("b_down",), D)
        return stage.out("output", g.output, tokens, D)
    r = F.feed_forward(x, p["W_1"], p.get("b_1"), p["W_2"], p.get("b_2"), m.activation)
    stage.cache = r
    weight("W_1", D, H)
    weight("b_1", ("b_1",), H)
    stage.rec("pre", r.pre, tokens, H)
    stage.rec("hidden", r.hidden, tokens, H)
    weight("W_2", H, D)
    weight("b_2", ("b_2",), D)
    return stage.out("output", r.output, tokens, D)


def feed_forward_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    if _form(m) == GATED:
        kept = cache_of(stage, F.GatedFeedForward)
        g = F.gated_feed_forward_backward(
            d_out, stage["X"], p["W_gate"], p["W_up"], p["W_down"], kept, m.activation
        )
        params = {"W_gate": g.W_gate, "b_gate": g.b_gate, "W_up": g.W_up, "b_up": g.b_up}
        params |= {"W_down": g.W_down, "b_down": g.b_down}
        shown = {"X": g.x, "gate": g.gate, "up": g.up, "hidden": g.hidden, "output": d_out}
    else:
        dx, dW_1, db_1, dW_2, db_2, d_pre, d_hidden = F.feed_forward_backward(
            d_out, stage["X"], p["W_1"], p["W_2"], cache_of(stage, F.FeedForward), m.activation
        )
        params = {"W_1": dW_1, "b_1": db_1, "W_2": dW_2, "b_2": db_2}
        shown = {"X": dx, "pre": d_pre, "hidden": d_hidden, "output": d_out}
    shown |= {name: grad[None] if grad.ndim == 1 else grad for name, grad in params.items()}
    return Grads(
        {name: shown[name] for name in stage.matrices},  # in the stage's own order
        {name: grad for name, grad in params.items() if name in p},
    )


# ---------------------------------------------------------------------------------------------
# verify's second computation: products as einsum sums, the activation cell by cell with math.
# ---------------------------------------------------------------------------------------------


def feed_forward_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    def affine(x: np.ndarray, W: str, b: str) -> np.ndarray:
        return mm(x, stage[W]) + stage.get(b, 0)

    if _form(m) == GATED:
        gate = affine(stage["X"], "W_gate", "b_gate")
        up = affine(stage["X"], "W_up", "b_up")
        hidden = activation_by_hand(gate, m.activation) * up
        out = affine(hidden, "W_down", "b_down")
        worst = max(gap(stage["gate"], gate), gap(stage["up"], up), gap(stage["hidden"], hidden))
        what = f"gate, up, hidden = {m.activation}(gate) ⊙ up and output recomputed"
    else:
        pre = affine(stage["X"], "W_1", "b_1")
        hidden = activation_by_hand(pre, m.activation)
        out = affine(hidden, "W_2", "b_2")
        worst = max(gap(stage["pre"], pre), gap(stage["hidden"], hidden))
        what = f"pre, hidden = {m.activation}(pre) and output recomputed"
    return [Check(stage.id, what, max(worst, gap(stage["output"], out)))]


# ---------------------------------------------------------------------------------------------
# explain: a cell's arithmetic, by the matrix's base name.
# ---------------------------------------------------------------------------------------------


def _plus(m: ModelConfig, bias: str) -> str:
    return f" + {bias}" if m.ffn_bias else ""


def _projection(c: Cell, trace: Trace, W: str, b: str) -> list[str]:
    """A cell of X·W + b: every term of row i of X times column j of W, then the bias."""
    return linear(
        c, f"{c.name} = X·{W}{_plus(trace.config.model, b)}: row {c.i} of X ({c.row}) times column {c.j} of {W}",
        c.stage["X"][c.i], c.stage[W][:, c.j], b,
    )  # fmt: skip


def explain_pre(c: Cell, trace: Trace) -> list[str]:
    return _projection(c, trace, "W_1", "b_1")


def explain_gate(c: Cell, trace: Trace) -> list[str]:
    return [*_projection(c, trace, "W_gate", "b_gate"), "  (the gate: bent by the activation, it scales up)"]


def explain_up(c: Cell, trace: Trace) -> list[str]:
    return [*_projection(c, trace, "W_up", "b_up"), "  (up: no bend of its own; the bent gate scales it)"]


def activation_lines(c: Cell, x: float, arg: str, lead: str, value: float, activation: str) -> list[str]:
    """act(x) written out, x being the cell of ``arg`` ("pre", "gate"): each first line begins with
    ``lead`` ("hidden = ", "act(gate) = ") and the last ends on ``value``."""
    if activation == "relu":
        off = "   (negative: this unit is off here)" if x < 0 else ""
        return [f"{lead}ReLU({arg}) = max(0, {arg}): max(0, {c.f(x)}) = {c.f(value)}{off}"]
    if activation == "gelu":
        cdf = (1 + math.erf(x / math.sqrt(2))) / 2
        return [
            f"{lead}GELU({arg}) = {arg}·Φ({arg}), Φ(x) = (1 + erf(x/√2))/2 the chance that a standard normal is below x",
            f"  Φ({c.f(x)}) = (1 + erf({c.f(x)}/√2))/2 = {c.f(cdf)}",
            f"  {c.operand(x)}·{c.f(cdf)} = {c.f(value)}",
        ]
    if activation == "gelu-tanh":
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return [
            f"{lead}{arg}·(1 + tanh(√(2/π)·({arg} + 0.044715·{arg}³)))/2 (GELU, the tanh form GPT-2 uses)",
            f"  √(2/π)·({c.f(x)} + 0.044715·{c.operand(x)}³) = {c.f(u)}; tanh({c.f(u)}) = {c.f(math.tanh(u))}",
            f"  {c.operand(x)}·(1 + {c.f(math.tanh(u))})/2 = {c.f(value)}",
        ]
    if activation == "silu":
        sig = 1 / (1 + math.exp(-x)) if x > -700 else 0.0
        return [
            f"{lead}SiLU({arg}) = {arg}·σ({arg}), σ(x) = 1/(1 + e^(−x))   (Marian's swish)",
            f"  σ({c.f(x)}) = 1/(1 + e^({c.f(-x)})) = {c.f(sig)}",
            f"  {c.operand(x)}·{c.f(sig)} = {c.f(value)}",
        ]
    raise ValueError(f"unknown activation {activation!r}")


def explain_hidden(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    if _form(m) == STANDARD:
        return activation_lines(c, float(c.stage["pre"][c.i, c.j]), "pre", "hidden = ", c.value, m.activation)
    if m.activation not in ACTIVATIONS_BY_HAND:
        raise ValueError(f"unknown activation {m.activation!r}")
    gate, up = float(c.stage["gate"][c.i, c.j]), float(c.stage["up"][c.i, c.j])
    bent = ACTIVATIONS_BY_HAND[m.activation](gate)
    return [
        f"hidden = act(gate) ⊙ up, cell by cell ({GATED_UNITS[m.activation]}): gate[{c.i}, {c.j}] = {c.f(gate)}, "
        f"up[{c.i}, {c.j}] = {c.f(up)}",
        *activation_lines(c, gate, "gate", "act(gate) = ", bent, m.activation),
        f"  hidden = act(gate)·up = {c.operand(bent)}·{c.operand(up)} = {c.f(c.value)}",
    ]


def explain_output(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    W, b = ("W_down", "b_down") if _form(m) == GATED else ("W_2", "b_2")
    return linear(
        c, f"output = hidden·{W}{_plus(m, b)}: row {c.i} of hidden times column {c.j} of {W}",
        c.stage["hidden"][c.i], c.stage[W][:, c.j], b,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What the stage says it is, under the config.
# ---------------------------------------------------------------------------------------------


def _explanation(m: ModelConfig) -> str:
    if _form(m) == STANDARD:
        return (
            "Each position goes on its own through the same two-layer network: widen to d_ff, bend "
            "with a nonlinearity, come back to d_model."
        )
    return (
        f"Each position goes on its own through the same gated network ({GATED_UNITS[m.activation]}): two "
        "projections widen it to d_ff, the gate and up; the gate is bent by the nonlinearity and "
        "scales up cell by cell, and the product comes back to d_model."
    )


def _formula(m: ModelConfig) -> str:
    if _form(m) == GATED:
        return "\n".join([
            f"gate = X·W_gate{_plus(m, 'b_gate')}",
            f"up = X·W_up{_plus(m, 'b_up')}",
            f"hidden = act(gate) ⊙ up    ({GATED_UNITS[m.activation]})",
            f"act(gate) = {activation_formula(m.activation, 'gate')}",
            f"output = hidden·W_down{_plus(m, 'b_down')}",
        ])  # fmt: skip
    return "\n".join([
        f"pre = X·W_1{_plus(m, 'b_1')}",
        f"hidden = {activation_formula(m.activation, 'pre')}",
        f"output = hidden·W_2{_plus(m, 'b_2')}",
    ])  # fmt: skip


def _latex(m: ModelConfig) -> list[str]:
    def plus(b: str) -> str:
        return f" + {_symbol(b)}" if m.ffn_bias else ""

    if _form(m) == GATED:
        gate = r"\mathrm{gate}"
        return [
            rf"{gate} &= X {_symbol('W_gate')}{plus('b_gate')}",
            rf"\mathrm{{up}} &= X {_symbol('W_up')}{plus('b_up')}",
            rf"\mathrm{{hidden}} &= \mathrm{{act}}({gate}) \odot \mathrm{{up}} \quad \text{{({GATED_UNITS[m.activation]})}}",
            rf"\mathrm{{act}}({gate}) &= {activation_latex(m.activation, gate)}",
            rf"\mathrm{{output}} &= \mathrm{{hidden}}\, {_symbol('W_down')}{plus('b_down')}",
        ]
    pre = r"\mathrm{pre}"
    return [
        rf"{pre} &= X W_1{plus('b_1')}",
        rf"\mathrm{{hidden}} &= {activation_latex(m.activation, pre)}",
        rf"\mathrm{{output}} &= \mathrm{{hidden}}\, W_2{plus('b_2')}",
    ]


# Each parameter's LaTeX symbol, as ``Kind.tex`` holds it: a format string (its braces doubled).
TEX = {
    "W_1": "W_1", "W_2": "W_2", "b_1": "b_1", "b_2": "b_2",
    "W_gate": r"W_{{\mathrm{{gate}}}}", "W_up": r"W_{{\mathrm{{up}}}}", "W_down": r"W_{{\mathrm{{down}}}}",
    "b_gate": r"b_{{\mathrm{{gate}}}}", "b_up": r"b_{{\mathrm{{up}}}}", "b_down": r"b_{{\mathrm{{down}}}}",
}  # fmt: skip


def _symbol(name: str) -> str:
    return TEX[name].format()


EXPLAIN = {"pre": explain_pre, "gate": explain_gate, "up": explain_up, "hidden": explain_hidden,
           "output": explain_output}  # fmt: skip

FEED_FORWARD = Kind(
    "feed-forward",
    "position-wise feed-forward",
    _explanation,
    _formula,
    _latex,
    feed_forward_backward,
    feed_forward_second,
    EXPLAIN,
    params=_params,
    tex=TEX,
)
