"""One cell of a gradient, dL/d(matrix), as micrograd would show it: which gradients flowed into it
and which local derivative multiplied them, with the numbers of the recorded backward pass
(``model.backprop``). The rule of each kind is written beside its forward in ``model/kinds``; here a
few are shown term by term — the loss, the softmax, a linear layer, the residual sum, a stage's
output gathered from its readers — and every other cell says in one line which rule made it.
"""

from __future__ import annotations

import numpy as np

from ..errors import StageError
from ..model.backprop import Backward, next_tokens
from ..model.cell import Cell
from ..model.kinds.attention import kv_head
from ..model.trace import Stage, Trace
from .explain import parse_cell

PREFIX = "dL/d"


def explain_gradient(
    trace: Trace,
    grads: Backward,
    stage_id: str,
    name: str,
    cell: str,
    digits: int = 4,
    all_terms: bool = False,
) -> list[str]:
    """The chain rule of dL/d``name`` at one cell: the first line its value, then the arithmetic."""
    stage = trace[stage_id]
    base = name.removeprefix(PREFIX)
    recorded = grads.stages.get(stage.id, {})
    if base not in stage.matrices:
        raise StageError(f"stage {stage.id} has no matrix {base!r}; it has {', '.join(stage.matrices)}")
    if base not in recorded or stage.matrices[base].is_constant:
        raise StageError(f"{name}: {base} of {stage.id} is a constant, which nothing learns (no gradient)")
    i, j = parse_cell(cell, stage, base)
    value = float(recorded[base][i, j])
    c = Cell(stage, base, i, j, digits, all_terms, value)  # its decimals: the gradient's
    head = f"{stage.id} · {name}[{c.row}, {c.col}] = {name}[{i}, {j}] = {c.r(value)}"
    return [head, *_rule(c, trace, grads, recorded, value)]


def _rule(c: Cell, trace: Trace, grads: Backward, g: dict[str, np.ndarray], value: float) -> list[str]:
    stage, base, i, j = c.stage, c.name, c.i, c.j
    m = c.matrix
    if base == "logits" and stage.kind in ("logits", "probabilities"):
        return _loss(c, trace)
    model = trace.config.model
    if m.base == "S" and m.head is not None and stage.has("cap_S", m.head):  # through the soft cap
        return _softcap(c, g, _of(stage, "cap_S", m.head), model.attention_softcap)
    if m.base in ("S", "cap_S", "S+M") and m.head is not None:
        return _softmax(c, g)
    if stage.kind == "logits" and base == "uncapped":
        return _softcap(c, g, "logits", model.logit_softcap)
    if stage.kind == "logits" and base in ("X", "W"):
        return _linear(c, "uncapped" if "uncapped" in stage else "logits", "W", "X", g, model.output_bias)
    if stage.kind.endswith("attention") and base == "concat":
        return _linear(c, "output", "W_O", "concat", g, model.attention_bias)
    if stage.kind.endswith("attention") and m.base == "A" and m.head is not None:
        # O_h = A_h·V_g: query head h reads key/value head g (grouped-query attention)
        o, v = _of(stage, "O", m.head), _of(stage, "V", kv_head(model, m.head))
        return _linear(c, o, v, base, g, False)
    if stage.kind == "residual" and base in ("X", "sublayer"):
        return [
            f"output = X + sublayer, so ∂output/∂{base} = 1: {PREFIX}{base}[{i}, {j}] = "
            f"{PREFIX}output[{i}, {j}] = {c.r(float(g['output'][i, j]))}"
        ]
    if base == stage.output:
        return _gathered(c, trace, grads, value)
    return [
        f"{PREFIX}{base} comes from {PREFIX}{stage.output} by the chain rule through the {stage.kind} "
        f"stage's backward (model/kinds, beside its forward); its terms are not shown here, the value "
        f"is the recorded gradient."
    ]


def _loss(c: Cell, trace: Trace) -> list[str]:
    """dL/dlogits = (p − one-hot(next token)) / n over the n positions that have a next token."""
    targets = next_tokens(trace)
    n = int(np.sum(targets >= 0))
    probs = trace["output.probabilities"]["probabilities"]
    line = (
        f"L = mean over the {n} positions with a next token of −log p[next]: "
        f"{PREFIX}logits = (p − onehot) / {n}"
    )
    if targets[c.i] < 0:
        return [line, f"row {c.i} ({c.row}) has no next token: it adds nothing to L, so the gradient is 0"]
    nxt = trace.vocabulary[targets[c.i]]
    hot = 1 if targets[c.i] == c.j else 0
    p = float(probs[c.i, c.j])
    said = "is" if hot else "is not"
    return [
        line,
        f"the next token after row {c.i} ({c.row}) is {nxt}; "
        f"column {c.j} ({c.col}) {said} it: onehot = {hot}",
        f"{PREFIX}logits[{c.i}, {c.j}] = ({c.f(p)} − {hot}) / {n} = {c.r((p - hot) / n)}",
    ]


def _of(stage: Stage, base: str, head: int) -> str:
    return next(k for k, v in stage.matrices.items() if v.base == base and v.head == head)


def _softmax(c: Cell, g: dict[str, np.ndarray]) -> list[str]:
    """A = softmax(row): dS[i, j] = A[i, j]·(dA[i, j] − Σ_k A[i, k]·dA[i, k])."""
    a_name = _of(c.stage, "A", c.matrix.head)
    A, dA = c.stage[a_name][c.i], g[a_name][c.i]
    terms = [c.times(float(a), float(d)) for a, d in zip(A, dA, strict=True)]
    dot = float(np.dot(A, dA))
    dS = float(A[c.j]) * (float(dA[c.j]) - dot)
    d = f"{PREFIX}{a_name}"
    head = c.matrix.head
    of = c.name if c.matrix.base == "S+M" or not c.stage.has("S+M", head) else _of(c.stage, "S+M", head)
    constant = f" (M is a constant: {PREFIX}{c.name} = {PREFIX}{of})" if of != c.name else ""
    return [
        f"{a_name} = softmax of each row of {of}{constant}: "
        f"{PREFIX}{c.name}[i, j] = {a_name}[i, j]·({d}[i, j] − Σ_k {a_name}[i, k]·{d}[i, k])",
        f"  Σ_k {a_name}[{c.i}, k]·{d}[{c.i}, k] = {c.sum_of(terms)} = {c.r(dot)}",
        f"  {PREFIX}{c.name}[{c.i}, {c.j}] = {c.operand(float(A[c.j]))}·({c.f(float(dA[c.j]))} − "
        f"{c.operand(dot)}) = {c.r(dS)}",
    ]


def _softcap(c: Cell, g: dict[str, np.ndarray], capped: str, cap: float) -> list[str]:
    """Y = c·tanh(X / c): dX = dY·(1 − tanh²(X / c)) = dY·(1 − (Y / c)²) (``softcap_backward``)."""
    y, dy = float(c.stage[capped][c.i, c.j]), float(g[capped][c.i, c.j])
    slope = 1 - (y / cap) ** 2
    rule = f"{PREFIX}{c.name} = {PREFIX}{capped}·(1 − ({capped} / {cap:g})²)"
    return [
        f"{capped} = {cap:g}·tanh({c.name} / {cap:g}), so {rule}",
        f"  {PREFIX}{c.name}[{c.i}, {c.j}] = {c.f(dy)}·(1 − ({c.f(y)} / {cap:g})²) "
        f"= {c.operand(dy)}·{c.f(slope)} = {c.f(dy * slope)}",
    ]


def _linear(c: Cell, y: str, w: str, x: str, g: dict[str, np.ndarray], bias: bool) -> list[str]:
    """Y = X·W (+ b): dX = dY·Wᵀ, dX[i, j] = Σ_k dY[i, k]·W[j, k]; and dW = Xᵀ·dY,
    dW[j, k] = Σ_i X[i, j]·dY[i, k] (``linear_backward``)."""
    dY, W, X = g[y], c.stage[w], c.stage[x]
    if c.name == x:
        pairs = list(zip(dY[c.i], W[c.j], strict=True))
        rule = f"{PREFIX}{x} = {PREFIX}{y}·{w}ᵀ: {PREFIX}{x}[i, j] = Σ_k {PREFIX}{y}[i, k]·{w}[j, k]"
    else:
        pairs = list(zip(X[:, c.i], dY[:, c.j], strict=True))
        rule = f"{PREFIX}{w} = {x}ᵀ·{PREFIX}{y}: {PREFIX}{w}[j, k] = Σ_i {x}[i, j]·{PREFIX}{y}[i, k]"
    terms = [c.times(float(a), float(b)) for a, b in pairs]
    total = float(sum(float(a) * float(b) for a, b in pairs))
    return [
        f"{y} = {x}·{w}{' + b' if bias else ''}, so " + rule,
        f"  {PREFIX}{c.name}[{c.i}, {c.j}] = {c.sum_of(terms)} = {c.r(total)}",
    ]


def _gathered(c: Cell, trace: Trace, grads: Backward, value: float) -> list[str]:
    """A stage's output read by several stages (the residual stream): the sum of their dL/dX."""
    readers = [(s.id, name) for s in trace for name, source in s.sources.items() if source == c.stage.id]
    if not readers:
        return [f"{PREFIX}{c.name} is the gradient handed down from the loss to this stage's output"]
    parts = [(f"{sid}'s {PREFIX}{name}", float(grads.stages[sid][name][c.i, c.j])) for sid, name in readers]
    if len(parts) == 1:
        who, v = parts[0]
        return [
            f"one stage reads this output: {PREFIX}{c.name}[{c.i}, {c.j}] = {who}[{c.i}, {c.j}] = {c.r(v)}"
        ]
    return [
        f"{len(parts)} stages read this output, so its gradient is the sum of theirs (micrograd's +=):",
        *(f"  {who}[{c.i}, {c.j}] = {c.r(v)}" for who, v in parts),
        f"  {PREFIX}{c.name}[{c.i}, {c.j}] = "
        + " + ".join(c.operand(v) for _, v in parts)
        + f" = {c.r(value)}",
    ]
