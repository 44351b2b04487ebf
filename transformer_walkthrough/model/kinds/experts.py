"""A mixture of experts (Shazeer et al., 2017; Mixtral, 2024): a router sends each token to k of E
feed-forward networks and adds their outputs up, weighed by the router.

In a sparse layer (``ModelConfig.sparse``) the stage ``experts`` takes the feed-forward's place:

    router_logits   = X·W_router                       (tokens × E: one score per expert)
    router_probs    = softmax(router_logits)           (row by row)
    chosen          = the k largest of each row        (ties broken as torch.topk breaks them)
    routing_weights = their probabilities, divided by their sum when ``norm_topk`` (Mixtral, Qwen3-MoE)
    output          = Σ over the k chosen experts e of routing_weight · FFN_e(x)
                      (+ σ(x·W_shared_gate) · FFN_shared(x), Qwen2-MoE's shared expert)

Each expert is a feed-forward of the config's form (``feed_forward``'s pieces, run on the rows of
the tokens routed to it, at width ``expert_d_ff``), and records its matrices under its own prefix
(``expert2.gate``: rows are the tokens it received; none, for an expert no token chose). The kind
is a recipe of pieces, as the feed-forward's: the router, the choice, the experts, the shared
expert, the sum. The backward holds the choice fixed, as autograd does: the gradient reaches the
router only through the k chosen probabilities, and an expert no token chose gets a gradient of 0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import functional as F
from ..formula import Formula, Line, call, formula, frac, line, note, sym, word
from ..topk import topk as top_k
from ..trace import CONSTANT, Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, cache_of, linear_step, row, step
from .feed_forward import TEX as FFN_TEX
from .feed_forward import Piece, recipe
from .hand import Check, gap, linear, mm, softmax_cell, softmax_rows

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from .base import Weights


def experts_of(m: ModelConfig) -> list[str]:
    """Each expert's prefix, ``expert0`` … ``expert{E-1}``: its parameters and matrices are named under it."""
    return [f"expert{e}" for e in range(m.experts)]


SHARED = "shared"


@functools.lru_cache(maxsize=64)
def as_feed_forward(m: ModelConfig, width: int) -> ModelConfig:
    """The config one expert computes under: the model's feed-forward, ``width`` wide, no experts."""
    return dataclasses.replace(
        m, d_ff=width, experts=0, experts_per_token=None, expert_d_ff=None, shared_experts=0,
        shared_expert_d_ff=None,
    )  # fmt: skip


def routing_weights(probs: np.ndarray, chosen: np.ndarray, norm_topk: bool) -> np.ndarray:
    """The chosen experts' probabilities, divided by their sum when ``norm_topk``."""
    top = np.take_along_axis(probs, chosen, axis=-1)
    return top / top.sum(axis=-1, keepdims=True) if norm_topk else top


def load_balancing_loss(probs: list[np.ndarray], chosen: list[np.ndarray], E: int) -> float:
    """Switch Transformer's load-balancing loss over every sparse layer's rows, as transformers'
    ``load_balancing_loss_func`` computes it: E · Σᵢ fᵢ·Pᵢ, fᵢ the share of the routing slots that
    went to expert i, Pᵢ the mean router probability of expert i (both over all layers' rows)."""
    rows = sum(p.shape[0] for p in probs)
    f = sum(np.bincount(c.ravel(), minlength=E) for c in chosen) / rows
    P = sum(p.sum(axis=0) for p in probs) / rows
    return float(E * np.sum(f * P))


def load_balancing_grads(probs: list[np.ndarray], chosen: list[np.ndarray], E: int) -> list[np.ndarray]:
    """dL_aux/d(router_probs) of each layer: E · fᵢ / rows (the counts f are held fixed, as autograd
    holds the top-k indices)."""
    rows = sum(p.shape[0] for p in probs)
    f = sum(np.bincount(c.ravel(), minlength=E) for c in chosen) / rows
    return [np.broadcast_to(E * f / rows, p.shape).astype(p.dtype) for p in probs]


# ---------------------------------------------------------------------------------------------
# The pieces: the router, the choice, the experts, the shared expert, the sum.
# ---------------------------------------------------------------------------------------------


class ExpertsCache(NamedTuple):
    """What the forward keeps for the backward: the choice, each expert's tokens and matrices, and
    dL/d(router_probs) of the load-balancing loss (``backprop`` sets it when training adds that loss)."""

    chosen: np.ndarray
    kept: dict[str, tuple[Routed, Arrays]]
    aux_grad: np.ndarray | float = 0.0


class Routed(NamedTuple):
    """One expert's share of the tokens: which rows it got, in which slot of their top k."""

    tokens: np.ndarray  # the rows of X routed to it, in order
    slots: np.ndarray  # the place of this expert among each such row's k chosen


def routed(chosen: np.ndarray, e: int) -> Routed:
    tokens, slots = np.nonzero(chosen == e)
    return Routed(tokens, slots)


def routes(chosen: np.ndarray, E: int) -> list[Routed]:
    """Every expert's share at once, as ``routed`` gives each: the places (token, slot) of the
    choice, read row by row, sorted by expert, stably, so that each expert's tokens stay in order."""
    k = chosen.shape[1]
    order = np.argsort(chosen.ravel(), kind="stable")
    ends = np.cumsum(np.bincount(chosen.ravel(), minlength=E))[:-1]
    return [Routed(*np.divmod(places, k)) for places in np.split(order, ends)]


class Prefixed:
    """A stage seen under one expert's prefix: ``stage["W_gate"]`` is ``stage["expert2.W_gate"]``,
    and what is recorded as ``gate`` is recorded as ``expert2.gate``: the feed-forward's pieces record
    and compute an expert by hand as they do a feed-forward."""

    def __init__(self, stage: Stage, prefix: str) -> None:
        self.stage, self.prefix = stage, prefix

    def __getitem__(self, name: str) -> np.ndarray:
        return self.stage[f"{self.prefix}.{name}"]

    def get(self, name: str, default: Any = None) -> Any:
        return self.stage.get(f"{self.prefix}.{name}", default)

    def rec(self, name: str, values: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        return self.stage.rec(f"{self.prefix}.{name}", values, *args, **kwargs)

    def weight(self, name: str, values: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        return self.stage.weight(f"{self.prefix}.{name}", values, *args, **kwargs)

    out = rec  # an expert's output is not the stage's: the sum of them is


def _ffn_params(prefix: str, m: ModelConfig, width: int) -> dict[str, Spec]:
    ffn = as_feed_forward(m, width)
    return {f"{prefix}.{name}": spec for piece in recipe(ffn) for name, spec in piece.params(ffn).items()}


def _params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    """W_router, each expert's feed-forward, the shared expert's and its gate."""
    specs = {"W_router": Spec((m.d_model, m.experts), "xavier")}
    for prefix in experts_of(m):
        specs |= _ffn_params(prefix, m, m.d_expert)
    if m.shared_experts:
        specs |= _ffn_params(SHARED, m, m.d_shared)
        specs["W_shared_gate"] = Spec((m.d_model, 1), "xavier")
    return specs


def _local(p: Arrays, prefix: str) -> Arrays:
    """An expert's parameters under the feed-forward's own names."""
    start = f"{prefix}."
    return {name.removeprefix(start): a for name, a in p.items() if name.startswith(start)}


@functools.lru_cache(maxsize=64)
def _ffn_param_names(ffn: ModelConfig) -> tuple[str, ...]:
    """An expert's parameters, under the feed-forward's own names, in the order its pieces use them."""
    return tuple(name for piece in recipe(ffn) for name in piece.params(ffn))


def _take(stage: Stage, w: Weights, prefix: str, ffn: ModelConfig) -> Arrays:
    """One expert's parameters, taken under its prefix (``expert2.W_gate``) and named as the
    feed-forward names them (``W_gate``)."""
    return {name: w.take(stage, f"{prefix}.{name}") for name in _ffn_param_names(ffn)}


def _expert_forward(x: np.ndarray, p: Arrays, ffn: ModelConfig, pieces: list[Piece] | None = None) -> Arrays:
    values = {"X": x}
    for piece in recipe(ffn) if pieces is None else pieces:
        piece.forward(values, p, ffn)
    return values


def _expert_backward(values: Arrays, d_out: np.ndarray, p: Arrays, ffn: ModelConfig) -> Arrays:
    """dL/d(each matrix and parameter of one expert), under the feed-forward's names."""
    d = {"output": d_out}
    for piece in reversed(recipe(ffn)):
        piece.backward(values, d, p, ffn)
    return d


def _ffn_names(ffn: ModelConfig) -> list[str]:
    """An expert's matrices in the order it records them: X, then each piece's."""
    return ["X", *(piece.out for piece in recipe(ffn))]


def expert_names(m: ModelConfig, prefix: str) -> list[str]:
    """The matrices one expert records (``expert2.X``, ``expert2.gate``, …)."""
    ffn = as_feed_forward(m, m.d_shared if prefix == SHARED else m.d_expert)
    return [f"{prefix}.{name}" for name in _ffn_names(ffn)]


def experts(stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig) -> np.ndarray:
    """The mixture of experts on the rows x (tokens × d_model): route, compute each expert on its
    tokens, add their outputs up weighed by the router (and the gated shared expert's)."""
    ffn = as_feed_forward(m, m.d_expert)
    W_router = w.take(stage, "W_router")
    own = {prefix: _take(stage, w, prefix, ffn) for prefix in experts_of(m)}  # in _params' order
    D, E = dims(m.d_model), tuple(f"e{e}" for e in range(m.experts))
    k = m.experts_per_token
    assert k is not None  # the config requires it with experts
    stage.input("X", x, tokens, D)
    stage.weight("W_router", W_router, D, E)
    logits = stage.rec("router_logits", F.linear(x, W_router), tokens, E)
    probs = stage.rec("router_probs", F.softmax(logits), tokens, E)
    chosen = top_k(probs, k)
    slots = tuple(f"top{j + 1}" for j in range(k))
    stage.rec("chosen", chosen.astype(x.dtype), tokens, slots, CONSTANT)
    weights = stage.rec("routing_weights", routing_weights(probs, chosen, m.norm_topk), tokens, slots)

    out = np.zeros_like(x)
    kept: dict[str, tuple[Routed, Arrays]] = {}
    pieces = recipe(ffn)
    for prefix, share in zip(experts_of(m), routes(chosen, m.experts), strict=True):
        values = _expert_forward(x[share.tokens], own[prefix], ffn, pieces)
        kept[prefix] = (share, values)
        rows = tuple([tokens[t] for t in share.tokens.tolist()])
        _record_expert(stage, prefix, own[prefix], values, ffn, rows, pieces)
        # top-k never picks an expert twice for one token: its rows are distinct, and a plain += adds
        # each contribution once, in expert order, as np.add.at would (at a fraction of its cost)
        out[share.tokens] += weights[share.tokens, share.slots, None] * values["output"]
    if m.shared_experts:
        shared = as_feed_forward(m, m.d_shared)
        local = _take(stage, w, SHARED, shared)
        W_shared_gate = w.take(stage, "W_shared_gate")
        values = _expert_forward(x, local, shared)
        _record_expert(stage, SHARED, local, values, shared, tokens)
        stage.weight("W_shared_gate", W_shared_gate, D, ("gate",))
        gate = stage.rec("shared_gate", F.sigmoid(F.linear(x, W_shared_gate)), tokens, ("gate",))
        out += gate * values["output"]
        kept[SHARED] = (Routed(np.arange(len(tokens)), np.zeros(len(tokens), int)), values)
    stage.cache = ExpertsCache(chosen, kept)
    return stage.out("output", out, tokens, D)


def _record_expert(
    stage: Stage, prefix: str, local: Arrays, values: Arrays, ffn: ModelConfig, rows: tuple[str, ...],
    pieces: list[Piece] | None = None,
) -> None:  # fmt: skip
    """One expert's parameters (``local``: under the feed-forward's names) and matrices, recorded by
    the feed-forward's own pieces under its prefix."""
    under = Prefixed(stage, prefix)
    under.rec("X", values["X"], rows, dims(ffn.d_model))
    for piece in recipe(ffn) if pieces is None else pieces:
        piece.record(under, values, local, ffn, rows)  # type: ignore[arg-type]


def experts_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """The gradient with the choice held fixed (as autograd holds torch.topk's indices):

        d(expert e's output)[r] = w[t, slot] · d(output)[t]       for each row r = token t it got
        d(routing_weights)[t, slot] = d(output)[t] · (expert e's output)[r]
        norm_topk, w = top / s:  d(top)_j = (d(w)_j − Σ_i d(w)_i·w_i) / s
        d(router_probs) = d(top) at the chosen columns, 0 elsewhere
        d(router_logits) = softmax's backward;  d(W_router) = Xᵀ·d(router_logits)
        d(X) = d(router_logits)·W_routerᵀ + every expert's d(X) at its tokens (+ the shared expert's)

    An expert no token chose has no rows: its parameters' gradient is 0."""
    chosen, kept, aux_grad = cache_of(stage, ExpertsCache)
    x, probs, weights = stage["X"], stage["router_probs"], stage["routing_weights"]
    g: Arrays = {"output": d_out}
    params: Arrays = {}
    d_x = np.zeros_like(x)
    d_weights = np.zeros_like(weights)
    ffn = as_feed_forward(m, m.d_expert)
    for prefix in experts_of(m):
        share, values = kept[prefix]
        w = weights[share.tokens, share.slots, None]
        d_weights[share.tokens, share.slots] = np.sum(d_out[share.tokens] * values["output"], axis=1)
        local = _local(p, prefix)
        d = _expert_backward(values, w * d_out[share.tokens], local, ffn)
        d_x[share.tokens] += d["X"]  # its rows are distinct (see the forward)
        _expert_grads(g, params, prefix, d, local, ffn)
    if m.shared_experts:
        _, values = kept[SHARED]
        gate = stage["shared_gate"]
        d_gate = np.sum(d_out * values["output"], axis=1, keepdims=True)
        d_gate_logit = d_gate * gate * (1 - gate)
        local, shared = _local(p, SHARED), as_feed_forward(m, m.d_shared)
        d = _expert_backward(values, gate * d_out, local, shared)
        d_x += d["X"] + d_gate_logit @ p["W_shared_gate"].T
        params["W_shared_gate"] = x.T @ d_gate_logit
        g["shared_gate"] = d_gate
        _expert_grads(g, params, SHARED, d, local, shared)
    d_top = d_weights
    if m.norm_topk:
        top = np.take_along_axis(probs, chosen, axis=-1)
        total = top.sum(axis=-1, keepdims=True)
        d_top = (d_weights - np.sum(d_weights * weights, axis=-1, keepdims=True)) / total
    d_probs = np.zeros_like(probs)
    np.put_along_axis(d_probs, chosen, d_top, axis=-1)
    d_probs += aux_grad  # the load-balancing loss's, when training adds it
    d_logits = F.softmax_backward(d_probs, probs)
    d_x += d_logits @ p["W_router"].T
    params["W_router"] = x.T @ d_logits
    g |= {"X": d_x, "router_logits": d_logits, "router_probs": d_probs, "routing_weights": d_weights,
          "chosen": np.zeros_like(weights)}  # fmt: skip
    shown = {name: g[name] if name in g else np.zeros_like(stage[name]) for name in stage.matrices}
    for name, value in params.items():  # the weights' gradients, shown as the stage records them
        if name in stage.matrices:
            shown[name] = value if value.ndim == 2 else value[None]
    return Grads(shown, params)


def _expert_grads(g: Arrays, params: Arrays, prefix: str, d: Arrays, p: Arrays, ffn: ModelConfig) -> None:
    for name in _ffn_names(ffn):
        g[f"{prefix}.{name}"] = d[name]
    for name in p:
        params[f"{prefix}.{name}"] = d[name]


# ---------------------------------------------------------------------------------------------
# verify's second computation: the routing from the recorded logits, one row at a time, and every
# expert token by token with the feed-forward's own by-hand pieces.
# ---------------------------------------------------------------------------------------------


def experts_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x, k = stage["X"], m.experts_per_token
    assert k is not None
    logits = mm(x, stage["W_router"])
    probs = softmax_rows(stage["router_logits"])
    checks = [
        Check(stage.id, "router_logits = X·W_router", gap(stage["router_logits"], logits)),
        Check(
            stage.id, "router_probs = softmax(router_logits), row by row", gap(stage["router_probs"], probs)
        ),
    ]
    chosen = np.rint(stage["chosen"]).astype(int)
    wrong = 0.0  # each row's chosen: k distinct experts, none of the others more probable
    for r, row_probs in enumerate(stage["router_probs"].tolist()):
        picked = chosen[r].tolist()
        worst_in = min(row_probs[e] for e in picked)
        best_out = max((v for e, v in enumerate(row_probs) if e not in picked), default=-math.inf)
        if len(set(picked)) != k or best_out > worst_in:
            wrong = math.inf
    checks.append(Check(stage.id, f"chosen: each token's {k} most probable experts", wrong))
    weights = []
    for r, row_probs in enumerate(stage["router_probs"].tolist()):
        top = [row_probs[e] for e in chosen[r]]
        total = math.fsum(top) if m.norm_topk else 1.0
        weights.append([v / total for v in top])
    what = "routing_weights = the chosen probabilities" + (" over their sum" if m.norm_topk else "")
    checks.append(Check(stage.id, what, gap(stage["routing_weights"], np.array(weights))))
    out = np.zeros_like(x)
    ffn = as_feed_forward(m, m.d_expert)
    for e, prefix in enumerate(experts_of(m)):
        share = routed(chosen, e)
        hand = {"X": x[share.tokens]}
        for piece in recipe(ffn):
            piece.by_hand(Prefixed(stage, prefix), hand, ffn)  # type: ignore[arg-type]
        worst = max([gap(stage[f"{prefix}.{name}"], hand[name]) for name in _ffn_names(ffn)])
        got = len(share.tokens)
        checks.append(
            Check(stage.id, f"{prefix}: its {got} token{'' if got == 1 else 's'}, every matrix", worst)
        )
        for r, t in enumerate(share.tokens.tolist()):
            out[t] += stage["routing_weights"][t, share.slots[r]] * hand["output"][r]
    if m.shared_experts:
        shared = as_feed_forward(m, m.d_shared)
        hand = {"X": x}
        for piece in recipe(shared):
            piece.by_hand(Prefixed(stage, SHARED), hand, shared)  # type: ignore[arg-type]
        gate = np.array([[1 / (1 + math.exp(-v))] for v in mm(x, stage["W_shared_gate"])[:, 0].tolist()])
        worst = max([gap(stage[f"{SHARED}.{name}"], hand[name]) for name in _ffn_names(shared)])
        checks.append(Check(stage.id, "the shared expert, every matrix", worst))
        checks.append(Check(stage.id, "shared_gate = σ(X·W_shared_gate)", gap(stage["shared_gate"], gate)))
        out += gate * hand["output"]
    checks.append(Check(stage.id, "output = Σ routing_weight · expert output", gap(stage["output"], out)))
    return checks


# ---------------------------------------------------------------------------------------------
# explain: a routing weight, and a cell of the output.
# ---------------------------------------------------------------------------------------------


def _explain_logits(c: Cell, trace: Trace) -> list[str]:
    return linear(
        c, f"{c.name} = X·W_router: row {c.i} of X ({c.row}) times column {c.j} of W_router (expert {c.j})",
        c.stage["X"][c.i], c.stage["W_router"][:, c.j], None,
    )  # fmt: skip


def _explain_probs(c: Cell, trace: Trace) -> list[str]:
    return softmax_cell(c, "router_logits")


def _explain_chosen(c: Cell, trace: Trace) -> list[str]:
    probs = c.stage["router_probs"][c.i]
    order = top_k(probs[None], len(probs))[0].tolist()
    ranked = ", ".join(f"e{e} {c.f(float(probs[e]))}" for e in order)
    return [
        f"chosen[{c.i}, {c.j}]: the expert in place {c.j + 1} of row {c.i} of router_probs ({c.row}), "
        "largest first",
        f"  experts by probability: {ranked}",
        f"  place {c.j + 1}: expert {int(c.value)}",
    ]


def _explain_weight(c: Cell, trace: Trace) -> list[str]:
    """The softmax over the router's row, the top-k cut, the renormalisation when on."""
    m = trace.config.model
    probs, chosen = c.stage["router_probs"][c.i], np.rint(c.stage["chosen"][c.i]).astype(int)
    e = int(chosen[c.j])
    top = [float(probs[k]) for k in chosen]
    lines = [
        f"{c.name}[{c.i}, {c.j}]: the weight of expert {e}, place {c.j + 1} of the {len(chosen)} experts "
        f"row {c.i} ({c.row}) is sent to",
        *(f"  {line}" for line in softmax_cell(_cell_of(c, "router_probs", e), "router_logits")[1:]),
        "  the top-k cut keeps "
        + ", ".join(f"e{k} {c.f(v)}" for k, v in zip(chosen.tolist(), top, strict=True))
        + "; every other expert gets no weight and computes nothing for this token",
    ]
    if m.norm_topk:
        total = math.fsum(top)
        lines += [
            f"  renormalised (norm_topk): divided by their sum {c.sum_of([c.f(v) for v in top])} = {c.f(total)}",
            f"  {c.f(top[c.j])} / {c.f(total)} = {c.f(c.value)}",
        ]
    else:
        lines.append(f"  kept as it is (norm_topk: false): {c.f(c.value)}")
    return lines


def _cell_of(c: Cell, name: str, j: int) -> Cell:
    from ..cell import Cell

    return Cell(c.stage, name, c.i, j, c.digits, c.all_terms)


def _explain_output(c: Cell, trace: Trace) -> list[str]:
    """The k experts' contributions to one cell, with their weights, added up."""
    m = trace.config.model
    chosen = np.rint(c.stage["chosen"][c.i]).astype(int).tolist()
    weights = c.stage["routing_weights"][c.i].tolist()
    lines = [
        f"output[{c.i}, {c.j}] = Σ over the experts row {c.i} ({c.row}) was sent to of weight · expert output"
    ]
    terms, values = [], []
    for e, w in zip(chosen, weights, strict=True):
        share = routed(np.rint(c.stage["chosen"]).astype(int), e)
        r = int(np.flatnonzero(share.tokens == c.i)[0])
        v = float(c.stage[f"expert{e}.output"][r, c.j])
        lines.append(
            f"  expert {e}: weight {c.f(w)}, its output[{c.j}] (row {r} of expert{e}.output) {c.f(v)}"
        )
        terms.append(c.times(w, v))
        values.append(w * v)
    if m.shared_experts:
        g, v = float(c.stage["shared_gate"][c.i, 0]), float(c.stage["shared.output"][c.i, c.j])
        lines.append(f"  the shared expert: gate σ(X·W_shared_gate) {c.f(g)}, its output[{c.j}] {c.f(v)}")
        terms.append(c.times(g, v))
        values.append(g * v)
    lines.append(f"  = {c.sum_of(terms)} = {c.f(math.fsum(values))}")
    return lines


def _explain_gate(c: Cell, trace: Trace) -> list[str]:
    z = float(F.linear(c.stage["X"][c.i : c.i + 1], c.stage["W_shared_gate"])[0, 0])
    return [
        f"shared_gate[{c.i}] = σ(X·W_shared_gate): row {c.i} of X ({c.row}) times W_shared_gate = {c.f(z)}",
        f"  σ({c.f(z)}) = 1/(1 + e^({c.f(-z)})) = {c.f(c.value)}",
    ]


def _logits_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    return linear_step("X", "W_router", "")(stage, trace, name, i, j)


def _probs_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    return step("softmax", row(stage, "router_logits", i))


# ---------------------------------------------------------------------------------------------
# What the stage says it is.
# ---------------------------------------------------------------------------------------------


def _explanation(m: ModelConfig) -> str:
    k = m.experts_per_token
    renorm = "divided by their sum" if m.norm_topk else "as they are"
    shared = (
        " Every token also goes through the shared expert, scaled by a sigmoid gate of its own."
        if m.shared_experts
        else ""
    )
    return (
        f"A router scores each token against {m.experts} experts; the token goes to the {k} most probable, "
        f"and their outputs are added up, each weighed by its probability ({renorm}). The other experts "
        f"compute nothing for it.{shared}"
    )


SUM = sym("Σ", tex=r"\sum")


def _formula(m: ModelConfig) -> Formula:
    chosen = ["router_probs", "[", "chosen", "]"]
    lines: list[Line] = [
        line("router_logits", "=", "X", "·", sym("W_router", tex=r"W_{\mathrm{router}}")),
        line("router_probs", "=", call("softmax", "router_logits"), "    ", word("(row-wise)")),
        line("chosen", "=", call("topk", "router_probs", "k"), "    ", word(f"(k = {m.experts_per_token})")),
        line("routing_weights", "=", frac(chosen, [SUM, *chosen]))
        if m.norm_topk
        else line("routing_weights", "=", *chosen),
    ]
    total: list[Any] = ["output", "=", SUM, "routing_weights", "·", call("FFN", "X")]
    if m.shared_experts:
        gate = sym("W_shared_gate", tex=r"W_{\mathrm{shared\,gate}}")
        total += ["+", call("σ", ["X", "·", gate]), "·", call("FFN_shared", "X")]
    lines.append(line(*total))
    return formula(
        *lines,
        note(
            "the sum over the k chosen experts; each FFN is one expert's feed-forward, on the tokens routed to it"
        ),
    )


def _tex(m: ModelConfig | None = None) -> dict[str, str]:
    return {"W_router": r"W_{{\mathrm{{router}}}}", **FFN_TEX}


class _Expert:
    """One expert's matrices seen without its prefix (``gate`` is ``expert2.gate``), for the
    feed-forward's own explainers: an expert computes as a feed-forward does, on its routed rows."""

    def __init__(self, stage: Stage, prefix: str) -> None:
        self.id, self.prefix = stage.id, prefix
        self.matrices = {
            name.removeprefix(f"{prefix}."): matrix
            for name, matrix in stage.matrices.items()
            if name.startswith(f"{prefix}.")
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.matrices[name].values

    def __contains__(self, name: str) -> bool:
        return name in self.matrices

    def has(self, name: str, head: int | None = None) -> bool:
        return name in self.matrices


def _explain_expert_matrix(c: Cell, trace: Trace) -> list[str]:
    """A cell of one expert's matrices: its input rows are the tokens routed to it, copied from X;
    the rest is the feed-forward's arithmetic, told by the feed-forward's own pieces."""
    from ..cell import Cell

    if c.matrix.is_weight:
        return []  # a weight is told where it came from, as every weight (``views.explain``)
    prefix, base = c.matrix.base.split(".", 1)
    who = "the shared expert" if prefix == SHARED else f"expert {prefix.removeprefix('expert')}"
    if base == "X":
        t = c.stage.matrices["X"].rows.index(c.row)
        routed = "every token" if prefix == SHARED else "the tokens routed to it"
        return [
            f"{c.name} holds the rows of X that {who} computes, {routed}: its row {c.i} is X's row {t} "
            f"({c.row}), copied: X[{t}, {c.j}] = {c.r(c.value)}"
        ]
    view = _Expert(c.stage, prefix)
    own = Cell(view, base, c.i, c.j, c.digits, c.all_terms, fixed=c.fixed)  # type: ignore[arg-type]
    piece = next(piece for piece in recipe(as_feed_forward(trace.config.model, 1)) if piece.out == base)
    return [
        f"({who}'s feed-forward on its rows, its matrices named without the prefix {prefix}.)",
        *piece.explain(own, trace),
    ]


class _Explainers(dict):
    """The kind's explainers, and for any expert's matrix (``expert2.gate``, ``shared.up``) the
    feed-forward's, seen through that expert."""

    def get(self, base: str, default: Any = None) -> Any:
        if base in self:
            return self[base]
        owner = base.split(".", 1)[0]
        if "." in base and (owner == SHARED or (owner.startswith("expert") and owner[6:].isdigit())):
            return _explain_expert_matrix
        return default


EXPERTS = Kind(
    "experts",
    "mixture of experts",
    _explanation,
    _formula,
    experts_backward,
    experts_second,
    _Explainers(
        router_logits=_explain_logits,
        router_probs=_explain_probs,
        chosen=_explain_chosen,
        routing_weights=_explain_weight,
        shared_gate=_explain_gate,
        output=_explain_output,
    ),
    params=_params,
    steps={"router_logits": _logits_step, "router_probs": _probs_step},
    tex=_tex(),
)
