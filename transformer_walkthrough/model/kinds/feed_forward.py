"""The position-wise feed-forward network: everything about the kind, in both its forms.

``model.feed_forward`` chooses the form: ``standard``, the paper's two layers (eq. 2),
``act(X·W_1 + b_1)·W_2 + b_2``; or ``gated``, a gated linear unit (Shazeer, 2020),
``(act(X·W_gate + b_gate) ⊙ (X·W_up + b_up))·W_down + b_down``: SwiGLU with SiLU (Llama), GeGLU
with GELU, ReGLU with ReLU. ``model.ffn_bias: false`` drops the biases of either. Each form's
parameters, forward, backward, second computation, formula and steps are below, side by side;
every function that depends on the form asks ``_form``, which refuses a value it does not know.
The activation is a piece of its own (``Activation``, one per ``model.activation``): its formula,
its value by hand and a cell's arithmetic, which BERT's transform (``output``) applies too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import functional as F
from ..formula import Formula, Sym, Term, call, formula, frac, line, neg, num, power, sqrt, sym, word
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, linear_step, named, one, step
from .hand import Check, gap, linear, mm

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights

STANDARD, GATED = "standard", "gated"


# ---------------------------------------------------------------------------------------------
# The activation (``model.activation``): one piece the standard form applies to pre, the gated
# form to gate and BERT's transform to dense, cell by cell.
# ---------------------------------------------------------------------------------------------


class Activation(NamedTuple):
    """One value of ``model.activation``: its formula, its value one number at a time with ``math``
    (verify's second computation), its arithmetic written out for a cell, the gated unit it makes."""

    formula: Callable[[Sym], list[Term | str]]  # applied to x ("pre", "gate"), as terms
    by_hand: Callable[[float], float]
    # a cell: (cell, x, the argument's name, each first line's lead, the value) -> the lines
    explain: Callable[[Cell, float, str, str, float], list[str]]
    gated: str  # the gated unit it makes: "SwiGLU, as Llama"


PI = sym("π", tex=r"\pi")


def _relu(x: Sym) -> list[Term | str]:
    return [call("max", num(0), x), "    ", word("(ReLU)")]


def _explain_relu(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    off = "   (negative: this unit is off here)" if x < 0 else ""
    return [f"{lead}ReLU({arg}) = max(0, {arg}): max(0, {c.f(x)}) = {c.f(value)}{off}"]


def _gelu(x: Sym) -> list[Term | str]:
    cdf = frac([num(1), "+", call("erf", frac(x, sqrt(num(2))))], num(2))
    return [x, "·", call("Φ", x), "=", x, "·", cdf, "    ", word("(GELU)")]


def _explain_gelu(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    cdf = (1 + math.erf(x / math.sqrt(2))) / 2
    return [
        f"{lead}GELU({arg}) = {arg}·Φ({arg}), Φ(x) = (1 + erf(x/√2))/2 the chance that a standard normal is below x",
        f"  Φ({c.f(x)}) = (1 + erf({c.f(x)}/√2))/2 = {c.f(cdf)}",
        f"  {c._factor(x)}·{c.f(cdf)} = {c.f(value)}",
    ]


def _gelu_tanh(x: Sym) -> list[Term | str]:
    inner = [sqrt(frac(num(2), PI)), "·", "(", x, "+", num(0.044715), "·", sym(x.name, sup="3"), ")"]
    return [x, "·", frac([num(1), "+", call("tanh", inner)], num(2)), "    ", word("(GELU, tanh form)")]


def _explain_gelu_tanh(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return [
        f"{lead}{arg}·(1 + tanh(√(2/π)·({arg} + 0.044715·{arg}³)))/2 (GELU, the tanh form GPT-2 uses)",
        f"  √(2/π)·({c.f(x)} + 0.044715·{c._factor(x)}³) = {c.f(u)}; tanh({c.f(u)}) = {c.f(math.tanh(u))}",
        f"  {c._factor(x)}·(1 + {c.f(math.tanh(u))})/2 = {c.f(value)}",
    ]


def _silu(x: Sym) -> list[Term | str]:
    return [x, "·", call("σ", x), "=", x, "/", "(", num(1), "+", power("e", neg(x)), ")", "    ",
            word("(SiLU, or swish)")]  # fmt: skip


def _explain_silu(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    sig = 1 / (1 + math.exp(-x)) if x > -700 else 0.0
    return [
        f"{lead}SiLU({arg}) = {arg}·σ({arg}), σ(x) = 1/(1 + e^(−x))   (Marian's swish)",
        f"  σ({c.f(x)}) = 1/(1 + e^({c.f(-x)})) = {c.f(sig)}",
        f"  {c._factor(x)}·{c.f(sig)} = {c.f(value)}",
    ]


# Every value of model.activation (config.ACTIVATIONS), by value.
ACTIVATION_PIECES: dict[str, Activation] = {
    "relu": Activation(_relu, lambda v: max(v, 0.0), _explain_relu, "ReGLU"),
    "gelu": Activation(_gelu, lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2, _explain_gelu, "GeGLU"),
    "gelu-tanh": Activation(
        _gelu_tanh,
        lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v * v * v))) / 2,
        _explain_gelu_tanh,
        "GeGLU, tanh form",
    ),
    "silu": Activation(
        _silu, lambda v: v / (1 + math.exp(-v)) if v > -700 else 0.0, _explain_silu, "SwiGLU, as Llama"
    ),
}


def activation_of(activation: str) -> Activation:
    """The activation the config names (``model.activation``)."""
    if activation not in ACTIVATION_PIECES:
        raise ValueError(f"unknown activation {activation!r}")
    return ACTIVATION_PIECES[activation]


def activation_formula(activation: str, x: str) -> list[Term | str]:
    """The activation applied to ``x`` ("pre", "gate"), as the formula's terms."""
    return activation_of(activation).formula(sym(x))


def activation_by_hand(x: np.ndarray, activation: str) -> np.ndarray:
    """The feed-forward's nonlinearity, one cell at a time."""
    f = activation_of(activation).by_hand
    return np.array([[f(v) for v in row] for row in x.tolist()]).reshape(x.shape)


def activation_lines(c: Cell, x: float, arg: str, lead: str, value: float, activation: str) -> list[str]:
    """act(x) written out, x being the cell of ``arg`` ("pre", "gate"): each first line begins with
    ``lead`` ("hidden = ", "act(gate) = ") and the last ends on ``value``."""
    return activation_of(activation).explain(c, x, arg, lead, value)


def _form(m: ModelConfig) -> str:
    """``m.feed_forward``, checked: a value added to the config and forgotten here raises."""
    if m.feed_forward not in (STANDARD, GATED):
        raise ValueError(f"unknown feed_forward {m.feed_forward!r}")
    return m.feed_forward


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
        g = F.gated_feed_forward_backward(
            d_out, stage["X"], p["W_gate"], p["W_up"], p["W_down"], stage.cache, m.activation
        )
        params = {"W_gate": g.W_gate, "b_gate": g.b_gate, "W_up": g.W_up, "b_up": g.b_up}
        params |= {"W_down": g.W_down, "b_down": g.b_down}
        shown = {"X": g.x, "gate": g.gate, "up": g.up, "hidden": g.hidden, "output": d_out}
    else:
        dx, dW_1, db_1, dW_2, db_2, d_pre, d_hidden = F.feed_forward_backward(
            d_out, stage["X"], p["W_1"], p["W_2"], stage.cache, m.activation
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


def _bias(m: ModelConfig, bias: str) -> str:
    return f" + {bias}" if m.ffn_bias else ""


def _projection(c: Cell, trace: Trace, W: str, b: str) -> list[str]:
    """A cell of X·W + b: every term of row i of X times column j of W, then the bias."""
    return linear(
        c, f"{c.name} = X·{W}{_bias(trace.config.model, b)}: row {c.i} of X ({c.row}) times column {c.j} of {W}",
        c.stage["X"][c.i], c.stage[W][:, c.j], b,
    )  # fmt: skip


def explain_pre(c: Cell, trace: Trace) -> list[str]:
    return _projection(c, trace, "W_1", "b_1")


def explain_gate(c: Cell, trace: Trace) -> list[str]:
    return [*_projection(c, trace, "W_gate", "b_gate"), "  (the gate: bent by the activation, it scales up)"]


def explain_up(c: Cell, trace: Trace) -> list[str]:
    return [*_projection(c, trace, "W_up", "b_up"), "  (up: no bend of its own; the bent gate scales it)"]


def explain_hidden(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    if _form(m) == STANDARD:
        return activation_lines(c, float(c.stage["pre"][c.i, c.j]), "pre", "hidden = ", c.value, m.activation)
    act = activation_of(m.activation)
    gate, up = float(c.stage["gate"][c.i, c.j]), float(c.stage["up"][c.i, c.j])
    bent = act.by_hand(gate)
    return [
        f"hidden = act(gate) ⊙ up, cell by cell ({activation_of(m.activation).gated}): gate[{c.i}, {c.j}] = {c.f(gate)}, "
        f"up[{c.i}, {c.j}] = {c.f(up)}",
        *activation_lines(c, gate, "gate", "act(gate) = ", bent, m.activation),
        f"  hidden = act(gate)·up = {c._factor(bent)}·{c._factor(up)} = {c.f(c.value)}",
    ]


def explain_output(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    W, b = ("W_down", "b_down") if _form(m) == GATED else ("W_2", "b_2")
    return linear(
        c, f"output = hidden·{W}{_bias(m, b)}: row {c.i} of hidden times column {c.j} of {W}",
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
        f"Each position goes on its own through the same gated network ({activation_of(m.activation).gated}): two "
        "projections widen it to d_ff, the gate and up; the gate is bent by the nonlinearity and "
        "scales up cell by cell, and the product comes back to d_model."
    )


def _w(name: str) -> Sym:
    """A parameter of the form as a symbol, with its LaTeX (W_gate as W_{gate}, not W^{gate})."""
    return sym(name, tex=TEX[name].format())


def _plus(m: ModelConfig, bias: str) -> list[Term | str]:
    return ["+", _w(bias)] if m.ffn_bias else []


def _formula(m: ModelConfig) -> Formula:
    if _form(m) == GATED:
        return formula(
            line("gate", "=", "X", "·", _w("W_gate"), *_plus(m, "b_gate")),
            line("up", "=", "X", "·", _w("W_up"), *_plus(m, "b_up")),
            line(
                "hidden",
                "=",
                call("act", "gate"),
                "⊙",
                "up",
                "    ",
                word(f"({activation_of(m.activation).gated})"),
            ),
            line(call("act", "gate"), "=", *activation_formula(m.activation, "gate")),
            line("output", "=", "hidden", "·", _w("W_down"), *_plus(m, "b_down")),
        )
    return formula(
        line("pre", "=", "X", "·", _w("W_1"), *_plus(m, "b_1")),
        line("hidden", "=", *activation_formula(m.activation, "pre")),
        line("output", "=", "hidden", "·", _w("W_2"), *_plus(m, "b_2")),
    )


# Each parameter's LaTeX symbol, as ``Kind.tex`` holds it: a format string (its braces doubled).
TEX = {
    "W_1": "W_1", "W_2": "W_2", "b_1": "b_1", "b_2": "b_2",
    "W_gate": r"W_{{\mathrm{{gate}}}}", "W_up": r"W_{{\mathrm{{up}}}}", "W_down": r"W_{{\mathrm{{down}}}}",
    "b_gate": r"b_{{\mathrm{{gate}}}}", "b_up": r"b_{{\mathrm{{up}}}}", "b_down": r"b_{{\mathrm{{down}}}}",
}  # fmt: skip


def hidden_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    """act(pre), or act(gate) ⊙ up: the same cell of each."""
    if stage.has("gate"):
        return step("activation", one("gate", i, j), one(named(stage, "up"), i, j))
    return step("activation", one(named(stage, "pre"), i, j))


def output_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    W, b = ("W_down", "b_down") if stage.has("W_down") else ("W_2", "b_2")
    return linear_step("hidden", W, b)(stage, trace, name, i, j)


STEPS = {
    "pre": linear_step("X", "W_1", "b_1"), "gate": linear_step("X", "W_gate", "b_gate"),
    "up": linear_step("X", "W_up", "b_up"), "hidden": hidden_step, "output": output_step,
}  # fmt: skip

EXPLAIN = {"pre": explain_pre, "gate": explain_gate, "up": explain_up, "hidden": explain_hidden,
           "output": explain_output}  # fmt: skip

FEED_FORWARD = Kind(
    "feed-forward",
    "position-wise feed-forward",
    _explanation,
    _formula,
    feed_forward_backward,
    feed_forward_second,
    EXPLAIN,
    params=_params,
    steps=STEPS,
    tex=TEX,
)
