"""The position-wise feed-forward network: everything about the kind, in both its forms.

``model.feed_forward`` chooses the form: ``standard``, the paper's two layers (eq. 2),
``act(X·W_1 + b_1)·W_2 + b_2``; or ``gated``, a gated linear unit (Shazeer, 2020),
``(act(X·W_gate + b_gate) ⊙ (X·W_up + b_up))·W_down + b_down``: SwiGLU with SiLU (Llama), GeGLU
with GELU, ReGLU with ReLU. ``model.ffn_bias: false`` drops the biases of either.

The kind is a recipe of pieces, each owning its parameters, forward, record, backward, second
computation, formula lines, explainer and step: the projections in (``pre``, or ``gate`` and
``up``), the bend (``hidden``: the activation, times up when gated) and the projection back
(``output``). The form selects the pieces (``recipe``), asking ``_form``, which refuses a value it
does not know. The activation is a piece of its own (``Activation``, one per ``model.activation``),
which BERT's transform (``output``) applies too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import functional as F
from ..formula import Formula, Line, Sym, Term, call, formula, frac, line, neg, num, power, sqrt, sym, word
from ..trace import Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, linear_step, named, one, step
from .hand import Check, gap, linear, mm

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from .base import Weights

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
    return [f"{lead}ReLU({arg}) = max(0, {arg}): max(0, {c.f(x)}) = {c.r(value)}{off}"]


def _gelu(x: Sym) -> list[Term | str]:
    cdf = frac([num(1), "+", call("erf", frac(x, sqrt(num(2))))], num(2))
    return [x, "·", call("Φ", x), "=", x, "·", cdf, "    ", word("(GELU)")]


def _explain_gelu(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    cdf = (1 + math.erf(x / math.sqrt(2))) / 2
    return [
        f"{lead}GELU({arg}) = {arg}·Φ({arg}), Φ(x) = (1 + erf(x/√2))/2 the chance that a standard normal is below x",
        f"  Φ({c.f(x)}) = (1 + erf({c.f(x)}/√2))/2 = {c.r(cdf)}",
        f"  {c.operand(x)}·{c.f(cdf)} = {c.r(value)}",
    ]


def _gelu_tanh(x: Sym) -> list[Term | str]:
    inner = [sqrt(frac(num(2), PI)), "·", "(", x, "+", num(0.044715), "·", sym(x.name, sup="3"), ")"]
    return [x, "·", frac([num(1), "+", call("tanh", inner)], num(2)), "    ", word("(GELU, tanh form)")]


def _explain_gelu_tanh(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return [
        f"{lead}{arg}·(1 + tanh(√(2/π)·({arg} + 0.044715·{arg}³)))/2 (GELU, the tanh form GPT-2 uses)",
        f"  √(2/π)·({c.f(x)} + 0.044715·{c.operand(x)}³) = {c.r(u)}; tanh({c.f(u)}) = {c.r(math.tanh(u))}",
        f"  {c.operand(x)}·(1 + {c.f(math.tanh(u))})/2 = {c.r(value)}",
    ]


def _silu(x: Sym) -> list[Term | str]:
    return [x, "·", call("σ", x), "=", x, "/", "(", num(1), "+", power("e", neg(x)), ")", "    ",
            word("(SiLU, or swish)")]  # fmt: skip


def _explain_silu(c: Cell, x: float, arg: str, lead: str, value: float) -> list[str]:
    sig = 1 / (1 + math.exp(-x)) if x > -700 else 0.0
    return [
        f"{lead}SiLU({arg}) = {arg}·σ({arg}), σ(x) = 1/(1 + e^(−x))   (SiLU, also called swish)",
        f"  σ({c.f(x)}) = 1/(1 + e^({c.f(-x)})) = {c.r(sig)}",
        f"  {c.operand(x)}·{c.f(sig)} = {c.r(value)}",
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
# The pieces: three projections and the bend between them. Each owns its parameters, forward,
# record, backward, second computation, formula lines, explainer and step; the kind loops over
# the recipe the config selects.
# ---------------------------------------------------------------------------------------------


def _bias(m: ModelConfig, bias: str) -> str:
    return f" + {bias}" if m.ffn_bias else ""


def _w(name: str) -> Sym:
    """A parameter of the form as a symbol, with its LaTeX (W_gate as W_{gate}, not W^{gate})."""
    return sym(name, tex=TEX[name].format())


class Project(NamedTuple):
    """out = x·W + b, with the W and b of the form (the output projection is W_2 or W_down)."""

    out: str  # "pre", "gate", "up", "output"
    x: str  # what it reads: "X" or "hidden"
    weights: dict[str, tuple[str, str]]  # form -> (W, b): the forms that have this projection
    aside: str = ""  # what explain adds under a cell's arithmetic

    def on(self, m: ModelConfig) -> bool:
        return _form(m) in self.weights

    def names(self, m: ModelConfig) -> tuple[str, str]:
        return self.weights[_form(m)]

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        """W, then b (none without ``ffn_bias``): d_model to d_ff, or back."""
        W, b = self.names(m)
        d_in, d_out = (m.d_model, m.d_ff) if self.x == "X" else (m.d_ff, m.d_model)
        bias = {b: Spec((d_out,), "bias", d_in)} if m.ffn_bias else {}
        return {W: Spec((d_in, d_out), "xavier"), **bias}

    def forward(self, values: Arrays, p: Arrays, m: ModelConfig) -> None:
        W, b = self.names(m)
        values[self.out] = F.linear(values[self.x], p[W], p.get(b))

    def record(
        self, stage: Stage, values: Arrays, p: Arrays, m: ModelConfig, tokens: tuple[str, ...]
    ) -> None:
        D, H = dims(m.d_model), dims(m.d_ff, "f")
        rows, cols = (D, H) if self.x == "X" else (H, D)
        W, b = self.names(m)
        stage.weight(W, p[W], rows, cols)
        if b in p:  # a bias only with ffn_bias
            stage.weight(b, p[b], (b,), cols)
        if self.out == "output":
            stage.out(self.out, values[self.out], tokens, cols)
        else:
            stage.rec(self.out, values[self.out], tokens, cols)

    def backward(self, values: Arrays, d: Arrays, p: Arrays, m: ModelConfig) -> None:
        """dx = dy·Wᵀ (added to what x already has: X feeds both gate and up), dW = xᵀ·dy, db = Σ dy."""
        W, b = self.names(m)
        dx, d[W], d[b] = F.linear_backward(d[self.out], values[self.x], p[W])
        d[self.x] = dx if self.x not in d else d[self.x] + dx

    def by_hand(self, stage: Stage, hand: Arrays, m: ModelConfig) -> None:
        W, b = self.names(m)
        hand[self.out] = mm(hand[self.x], stage[W]) + stage.get(b, 0)

    def checked(self, m: ModelConfig) -> str:
        return self.out

    def formula(self, m: ModelConfig) -> list[Line]:
        W, b = self.names(m)
        return [line(self.out, "=", self.x, "·", _w(W), *(["+", _w(b)] if m.ffn_bias else []))]

    def explain(self, c: Cell, trace: Trace) -> list[str]:
        """A cell of x·W + b: every term of row i of x times column j of W, then the bias."""
        m = trace.config.model
        W, b = self.names(m)
        of_x = f"row {c.i} of X ({c.row})" if self.x == "X" else f"row {c.i} of {self.x}"
        lines = linear(
            c, f"{c.name} = {self.x}·{W}{_bias(m, b)}: {of_x} times column {c.j} of {W}",
            c.stage[self.x][c.i], c.stage[W][:, c.j], b,
        )  # fmt: skip
        return [*lines, self.aside] if self.aside else lines

    def step(self, stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return linear_step(self.x, *self.names(trace.config.model))(stage, trace, name, i, j)


class Bend:
    """hidden = act(pre), or, gated, act(gate) ⊙ up: the activation, cell by cell."""

    out = "hidden"

    def on(self, m: ModelConfig) -> bool:
        return True

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        return {}

    def forward(self, values: Arrays, p: Arrays, m: ModelConfig) -> None:
        if _form(m) == GATED:
            values["hidden"] = F.ACTIVATIONS[m.activation](values["gate"])
            values["hidden"] *= values["up"]  # in place: the activation made a new array
        else:
            values["hidden"] = F.ACTIVATIONS[m.activation](values["pre"])

    def record(
        self, stage: Stage, values: Arrays, p: Arrays, m: ModelConfig, tokens: tuple[str, ...]
    ) -> None:
        stage.rec("hidden", values["hidden"], tokens, dims(m.d_ff, "f"))

    def backward(self, values: Arrays, d: Arrays, p: Arrays, m: ModelConfig) -> None:
        """Standard: d(pre) = act'(pre) ⊙ d(hidden). Gated: d(up) = d(hidden) ⊙ act(gate),
        d(gate) = act'(gate) ⊙ d(hidden) ⊙ up."""
        if _form(m) == GATED:
            d["up"] = d["hidden"] * F.ACTIVATIONS[m.activation](values["gate"])
            d["gate"] = F.activation_backward(d["hidden"] * values["up"], values["gate"], m.activation)
        else:
            d["pre"] = F.activation_backward(d["hidden"], values["pre"], m.activation)

    def by_hand(self, stage: Stage, hand: Arrays, m: ModelConfig) -> None:
        if _form(m) == GATED:
            hand["hidden"] = activation_by_hand(hand["gate"], m.activation) * hand["up"]
        else:
            hand["hidden"] = activation_by_hand(hand["pre"], m.activation)

    def checked(self, m: ModelConfig) -> str:
        return f"hidden = {m.activation}(gate) ⊙ up" if _form(m) == GATED else f"hidden = {m.activation}(pre)"

    def formula(self, m: ModelConfig) -> list[Line]:
        if _form(m) == STANDARD:
            return [line("hidden", "=", *activation_formula(m.activation, "pre"))]
        unit = word(f"({activation_of(m.activation).gated})")
        return [
            line("hidden", "=", call("act", "gate"), "⊙", "up", "    ", unit),
            line(call("act", "gate"), "=", *activation_formula(m.activation, "gate")),
        ]

    def explain(self, c: Cell, trace: Trace) -> list[str]:
        m = trace.config.model
        if _form(m) == STANDARD:
            return activation_lines(
                c, float(c.stage["pre"][c.i, c.j]), "pre", "hidden = ", c.value, m.activation
            )
        act = activation_of(m.activation)
        gate, up = float(c.stage["gate"][c.i, c.j]), float(c.stage["up"][c.i, c.j])
        bent = act.by_hand(gate)
        return [
            f"hidden = act(gate) ⊙ up, cell by cell ({act.gated}): gate[{c.i}, {c.j}] = {c.r(gate)}, "
            f"up[{c.i}, {c.j}] = {c.r(up)}",
            *act.explain(c, gate, "gate", "act(gate) = ", bent),
            f"  hidden = act(gate)·up = {c.operand(bent)}·{c.operand(up)} = {c.r(c.value)}",
        ]

    def step(self, stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        """The same cell of pre, or of gate and up."""
        if stage.has("gate"):
            return step("activation", one("gate", i, j), one(named(stage, "up"), i, j))
        return step("activation", one(named(stage, "pre"), i, j))


Piece = Project | Bend

# The recipe, in computing order; each form takes the pieces that are ``on`` for it.
PIECES: tuple[Piece, ...] = (
    Project("pre", "X", {STANDARD: ("W_1", "b_1")}),
    Project("gate", "X", {GATED: ("W_gate", "b_gate")}, "  (the gate: bent by the activation, it scales up)"),
    Project("up", "X", {GATED: ("W_up", "b_up")}, "  (up: no bend of its own; the bent gate scales it)"),
    Bend(),
    Project("output", "hidden", {STANDARD: ("W_2", "b_2"), GATED: ("W_down", "b_down")}),
)


def recipe(m: ModelConfig) -> list[Piece]:
    """The pieces of the config's form, in order."""
    return [piece for piece in PIECES if piece.on(m)]


# ---------------------------------------------------------------------------------------------
# The kind: a loop over its recipe, forward, back and by hand.
# ---------------------------------------------------------------------------------------------


def _specs(m: ModelConfig) -> dict[str, Spec]:
    """The parameters of the form, in the order the stage uses them; no biases without ``ffn_bias``."""
    return {name: spec for piece in recipe(m) for name, spec in piece.params(m).items()}


def _params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return _specs(m)


def feed_forward(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """FFN(x), the same for every position (§3.3): act(x·W_1 + b_1)·W_2 + b_2, or gated:
    (act(x·W_gate + b_gate) ⊙ (x·W_up + b_up))·W_down + b_down."""
    pieces = recipe(m)
    p = {name: w.take(stage, name) for name in _specs(m)}
    stage.input("X", x, tokens, dims(x.shape[1]))
    values = {"X": x}
    for piece in pieces:
        piece.forward(values, p, m)
    stage.cache = values  # every piece's result, by name: what the backward reads again
    for piece in pieces:
        piece.record(stage, values, p, m, tokens)
    return values["output"]


def feed_forward_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    d = {"output": d_out}
    for piece in reversed(recipe(m)):
        piece.backward(stage.cache, d, p, m)
    shown = {name: grad[None] if grad.ndim == 1 else grad for name, grad in d.items()}
    return Grads(
        {name: shown[name] for name in stage.matrices},  # in the stage's own order
        {name: d[name] for name in _specs(m) if name in p},
    )


# ---------------------------------------------------------------------------------------------
# verify's second computation: products as einsum sums, the activation cell by cell with math.
# ---------------------------------------------------------------------------------------------


def feed_forward_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    pieces, hand = recipe(m), {"X": stage["X"]}
    for piece in pieces:
        piece.by_hand(stage, hand, m)
    worst = max(gap(stage[piece.out], hand[piece.out]) for piece in pieces)
    what = ", ".join(piece.checked(m) for piece in pieces[:-1]) + " and output recomputed"
    return [Check(stage.id, what, worst)]


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


def _formula(m: ModelConfig) -> Formula:
    return formula(*(item for piece in recipe(m) for item in piece.formula(m)))


# Each parameter's LaTeX symbol, as ``Kind.tex`` holds it: a format string (its braces doubled).
TEX = {
    "W_1": "W_1", "W_2": "W_2", "b_1": "b_1", "b_2": "b_2",
    "W_gate": r"W_{{\mathrm{{gate}}}}", "W_up": r"W_{{\mathrm{{up}}}}", "W_down": r"W_{{\mathrm{{down}}}}",
    "b_gate": r"b_{{\mathrm{{gate}}}}", "b_up": r"b_{{\mathrm{{up}}}}", "b_down": r"b_{{\mathrm{{down}}}}",
}  # fmt: skip


FEED_FORWARD = Kind(
    "feed-forward",
    "position-wise feed-forward",
    _explanation,
    _formula,
    feed_forward_backward,
    feed_forward_second,
    {piece.out: piece.explain for piece in PIECES},
    params=_params,
    steps={piece.out: piece.step for piece in PIECES},
    tex=TEX,
    article=lambda m: (
        ""
        if m.feed_forward == "gated"
        else "(The article draws one linear layer here; the paper, and this walkthrough, have two, "
        "with the activation between them.)"
    ),
)
