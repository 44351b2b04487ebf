"""Multi-head attention, self, masked self and cross: a recipe of pieces, each owning itself.

    attention = project → [qk-norm] → [rotate] → scores → [relative-bias] → [softcap] → [mask]
                → softmax → weigh → concat → project-out

A piece (``Piece``) is one step inside the stage. It owns everything about itself: its parameters,
its forward (reading and writing the ``Flow`` that passes through the recipe), the matrices it
records for each head, its backward beside its forward, verify's second computation of its step,
the explainer of every cell it records, its formula lines, its TeX symbols and its screen group.
The kind (``_kind``) is the recipe the config selects (``recipe``) and loops over the pieces;
adding a step to attention adds a piece and its place in ``PIECES``, not branches through the kind.

The pieces that turn the queries and keys (qk-norm, rotate) each make a new matrix of them
(``norm_Q``, ``rot_Q``): the scores read the last one (``attended``), the explainers the one
before (``turned_from``), both found by the recipe's order, not by spelling.

    flow     what a piece is (``Piece``), what passes through forward (``Flow``) and back (``Back``)
    pieces   project, qk-norm, rotate, scores, and ``PIECES``: the recipe's order
    relative relative-bias: T5's positions, a bias of the scores by bucket of distance
    mixing   softcap, mask, softmax, weigh, concat, project-out: from the scores to the output
    here     the kind: the recipe run and recorded (``attend``), differentiated, checked by hand
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import functional as F
from ...formula import Formula
from ...trace import MASK, Stage, dims
from ..base import Arrays, Grads, Kind, Sizes, Spec
from ..hand import Check, gap, mm
from .flow import At, Back, ByHand, Flow, Piece, columns, kv_head, readers
from .pieces import PIECES, RELATIVE_BIAS, SCORES, WEIGH, attended, recipe, scale

if TYPE_CHECKING:
    from ....config import ModelConfig
    from ...cell import Cell
    from ...trace import Trace
    from ..base import Weights

# ---------------------------------------------------------------------------------------------
# The kind: the recipe run, recorded, differentiated and checked.
# ---------------------------------------------------------------------------------------------


def attention(m: ModelConfig, x: np.ndarray, p: Arrays, memory: np.ndarray | None = None,
              mask: np.ndarray | None = None, cache: Any = None, layer: int | None = None,
              heads: Sequence[int] | None = None) -> Flow:  # fmt: skip
    """Multi-head attention as a pure function: the recipe's pieces run in turn on x (queries) and
    memory (keys and values; x itself when None), with the parameters ``p`` by local name (W_QKV,
    W_O, …). Returns everything the pieces computed (``Flow``); nothing is recorded.

    ``heads`` are the query heads whose scores and weights are made whole: every head's (None; what
    a recorded stage shows and its backward reads), none (``()``: a stage nothing keeps) or one
    (``(h,)``: ``--head``). Short of every head, the output of each comes from the scores of a
    block of queries at a time (``functional.attention_in_blocks``): n_q × n_k × h numbers are
    never held at once, and a causal layer multiplies only the keys each block sees."""
    f = Flow(
        m, x, x if memory is None else memory, p, mask, cache, 0 if cache is None else cache.cache.rows, layer
    )
    pieces = recipe(m, At(memory is not None, mask is not None))
    if heads is None:
        for piece in pieces:
            piece.forward(f)
        return f
    if cache is not None:
        raise ValueError("a cached step makes every head's scores: its cache notes them")
    scored, weighed = pieces.index(SCORES), pieces.index(WEIGH)
    for piece in pieces[:scored]:  # Q, K and V: n × d numbers, made whole
        piece.forward(f)
    if heads:
        (h,) = heads
        _one_head(f, h, pieces[scored:weighed])
    f.O = _in_blocks(f, pieces)
    for piece in pieces[weighed + 1 :]:  # concat, W_O
        piece.forward(f)
    return f


def _one_head(f: Flow, h: int, scored: Sequence[Piece]) -> None:
    """Query head h's scores and weights into ``f`` ((1, n_q, n_k) each), made by the same pieces as
    every head's, from its queries and its key/value head's keys and values."""
    g = kv_head(f.m, h)
    p = dict(f.p)
    if "R" in p:  # T5's table of biases: a column per head
        p["R"] = p["R"][:, h - 1 : h]
    one = dataclasses.replace(f, Q=f.Q[h - 1 : h], K=f.K[g - 1 : g], V=f.V[g - 1 : g], p=p, kept={})
    for piece in scored:
        piece.forward(one)
    f.S, f.B, f.biased, f.masked, f.A, f.one = one.S, one.B, one.biased, one.masked, one.A, h
    f.kept |= one.kept  # the scores as made (a soft cap makes its own), T5's buckets


def _in_blocks(f: Flow, pieces: Sequence[Piece]) -> np.ndarray:
    """Every head's output O = A·V, (h, n_q, d_k), from the scores of a block of queries at a time,
    under the config's pieces: the scale, T5's bias, the soft cap, the causal mask (and its window)."""
    m = f.m
    return F.attention_in_blocks(
        f.Q, f.K, f.V, scale(m), causal=f.causal, window=m.window(f.layer) if f.causal else None,
        bias=RELATIVE_BIAS.bias(f) if RELATIVE_BIAS in pieces else None, cap=m.attention_softcap,
    )  # fmt: skip


def attention_grads(f: Flow, d_output: np.ndarray) -> Back:
    """The pieces' backward passes in reverse order, from dL/d(output) of the ``Flow`` ``attention``
    returned: dL/dx, dL/d(memory), every parameter's gradient and every intermediate's."""
    d = Back(output=d_output)
    for piece in reversed(recipe(f.m, At(not f.self_attention, f.mask is not None))):
        piece.backward(f, d)
    return d


def attend(stage: Stage, w: Weights, x: np.ndarray, q_tokens: tuple[str, ...], m: ModelConfig,
           memory: np.ndarray | None = None, kv_tokens: tuple[str, ...] = (),
           mask: np.ndarray | None = None, cache: Any = None, layer: int | None = None) -> np.ndarray:  # fmt: skip
    """Multi-head attention with queries from x and keys/values from memory (x itself when None):
    MultiHead = Concat(head_1, …, head_h)·W_O, head_i = Attention(X·W_Qi, memory·W_Ki, memory·W_Vi).

    Rows of every per-head matrix are the query tokens; columns of S, A are the key tokens. With a
    key/value ``cache`` (one layer's, ``generation.Cache.layer``) the keys and values of x join the
    cached ones and the queries attend over all of them; the cache notes what the step computed.
    """
    pieces = recipe(m, At(memory is not None, mask is not None))
    p = {local: w.take(stage, local) for piece in pieces for local in piece.params(m)}
    if not stage.records and cache is None:  # nothing is kept: no head's scores made whole
        return attention(m, x, p, memory, mask, layer=layer, heads=()).output
    one = stage.only_head
    f = attention(m, x, p, memory, mask, cache, layer, None if one is None else (one,))
    if cache is not None:
        cache.note(f)
    if not stage.records:  # a cached step kept by nothing: skip the per-head views, made only to be shown
        return f.output
    kv_tokens = q_tokens if memory is None else kv_tokens
    stage.cache = f  # what the backward pass reads again
    stage.input("X", x, q_tokens, dims(m.d_model))
    if memory is not None:
        stage.input("memory", memory, kv_tokens, dims(m.d_model))
    if mask is not None:
        stage.rec("M", mask, q_tokens, kv_tokens, MASK)
    for piece in pieces:
        piece.record_before(stage, f, q_tokens, kv_tokens)
    # Query head by query head; a key/value head where its first reader is (every head, ungrouped),
    # or beside the one head kept.
    for h in range(1, m.num_heads + 1) if one is None else (one,):
        g = kv_head(m, h)
        first = h == readers(m, g)[0] or one is not None
        for piece in pieces:
            piece.record(stage, f, h, g, first, q_tokens, kv_tokens)
    for piece in pieces:
        piece.record_after(stage, f, q_tokens)
    return stage.out("output", f.output, q_tokens, dims(m.d_model))


def attention_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """Each piece's backward in reverse order: dL/dX (and dL/d(memory)), every parameter's gradient,
    and the gradient of every matrix the stage shows."""
    d = attention_grads(stage.cache, d_out)
    grads: Arrays = {"X": d.x, "concat": d.concat, "output": d_out}
    if "memory" in stage:
        grads["memory"] = d.kv
    if "M" in stage:
        grads["M"] = d.M
    for constant in ("cos", "sin", "buckets"):  # fixed numbers: nothing learns them, nothing is shown
        if constant in stage:
            grads[constant] = np.zeros_like(stage[constant])
    for name, matrix in stage.matrices.items():
        if name in grads:
            continue
        if matrix.param in ("W_QKV", "b_QKV"):  # head h's block of W_QKV or b_QKV
            block = d.params[matrix.param][..., columns(m, matrix.base[-1], matrix.head)]
            grads[name] = block if matrix.param == "W_QKV" else block[None]
        elif matrix.head is not None:
            grads[name] = d.per_head[matrix.base][matrix.head - 1]
        else:  # a whole parameter: W_O, b_O, gamma_Q, …
            grads[name] = d.params[matrix.base].reshape(matrix.values.shape)
    return Grads(
        {name: grads[name] for name in stage.matrices},  # in the stage's own order
        {name: d.params[name] for name in p},
    )


def attention_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    """Each head recomputed from the stage's inputs and its own blocks of the weights, piece by piece
    (einsum products, softmax one exp at a time), then the heads side by side and W_O."""
    pieces = recipe(m, At("memory" in stage, "M" in stage))
    checks = [c for piece in pieces for c in piece.before(stage, m)]
    heads = []
    for h in range(1, m.num_heads + 1):
        b = ByHand(h, kv_head(m, h))  # g is h itself, unless query heads share their keys and values
        for piece in pieces:
            piece.by_hand(stage, m, b)
        heads.append(b.o)
        shared = f" (key/value head {b.g}, shared)" if m.kv_heads < m.num_heads else ""
        names = [name for name, _ in b.checked]
        checks.append(Check(stage.id, f"head {h}: {', '.join(names[:-1])} and {names[-1]} recomputed{shared}",
                            max(diff for _, diff in b.checked)))  # fmt: skip
    concat = np.concatenate(heads, axis=1)
    out = mm(concat, stage["W_O"]) + (stage.get("b_O", 0))
    checks.append(Check(stage.id, "concat sets the heads side by side; output = concat·W_O", max(
        gap(stage["concat"], concat), gap(stage["output"], out))))  # fmt: skip
    return checks


def explain_memory(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    return [
        f"memory is the encoder's output (from {source}), the same for every decoder layer: it gives the keys and values."
    ]


def _formula(at: At) -> Callable[[ModelConfig], Formula]:
    def formula(m: ModelConfig) -> Formula:
        return Formula(tuple(item for piece in recipe(m, at) for item in piece.formula(m, at)))

    return formula


def _explanation(text: str, at: At) -> Callable[[ModelConfig], str]:
    def explanation(m: ModelConfig) -> str:
        said = text
        if m.encoder_only:
            said += (
                " No mask: every token sees every token, those after it too, so a blank is read "
                "from both sides (BERT; a decoder's masked attention sees only the past)."
            )
        return said + "".join(piece.said(m, at) for piece in recipe(m, at))

    return explanation


def _params(at: At) -> Callable[[ModelConfig, Sizes], dict[str, Spec]]:
    def params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
        """Every piece's parameters in a stage that is ``at`` (cross-attention has no relative bias
        table), weights before biases: the order they were first drawn in, which fixes the random draws."""
        specs = [item for piece in recipe(m, at) for item in piece.params(m).items()]
        return dict(sorted(specs, key=lambda item: item[0].startswith("b_")))

    return params


def _merged(attribute: str) -> dict[str, Any]:
    return {key: value for piece in PIECES for key, value in getattr(piece, attribute).items()}


def _layer_type(m: ModelConfig, layer: int) -> tuple[str, str]:
    """What a decoder layer's masked attention is under ``layer_types``: sliding (a band of
    sliding_window positions, its rotary base local_rope_theta) or full (everything before it)."""
    if m.layer_types is None:
        return "", ""
    base = f"{m.theta(layer):.15g}"  # 1000000, not 1e+06
    theta = f", θ {base}" if m.local_rope_theta is not None else ""
    turned = (
        f" Its queries and keys turn by the rotary base {base} ({'local_rope_theta' if m.local(layer) else 'rope_theta'})."
        if m.local_rope_theta is not None else ""
    )  # fmt: skip
    if m.layer_types[layer] == "sliding":
        w = m.sliding_window
        return f"sliding: window {w}{theta}", (
            f"Layer {layer} is a sliding layer (layer_types): each position sees itself and the {w - 1} "
            f"before it, and M shows the band.{turned}"
        )
    return (
        f"full{theta}",
        f"Layer {layer} is a full layer (layer_types): each position sees every earlier one.{turned}",
    )


def _kind(id: str, title: str, explanation: str, cross: bool = False, article: str = "") -> Kind:
    at = At(cross, id == "masked-attention")
    return Kind(
        id, title, _explanation(explanation, at), _formula(at), attention_backward,
        attention_second, {**_merged("explain"), "memory": explain_memory}, params=_params(at),
        steps=_merged("steps"), groups=_merged("groups"), tex=_merged("tex"), article=article,
        layered=_layer_type if at.masked else None,
    )  # fmt: skip


SELF_ATTENTION = _kind(
    "self-attention",
    "multi-head self-attention",
    "Every token scores every token (query against key), turns the scores into weights with "
    "softmax and takes the weighted mix of their values; each head does this in its own "
    "d_k-dimensional subspace.",
)
MASKED = (
    "Self-attention where the mask M puts −∞ above the diagonal, so no position can look at "
    "a later one: softmax turns −∞ into a weight of exactly 0."
)
MASKED_ATTENTION = _kind(
    "masked-attention",
    "masked multi-head self-attention",
    MASKED,
    article="(The article says the decoder takes one token at a time: that is generating, `walkthrough "
    "generate`. Here, as in training, the whole target goes in at once; the mask makes the two the same.)",
)
CROSS_ATTENTION = _kind(
    "cross-attention",
    "multi-head cross-attention",
    "The decoder's tokens ask the questions (queries from X) and the encoder output answers "
    "(keys and values from memory): this is how the source sentence reaches the decoder.",
    cross=True,
    article="(The article says it the other way round; that cannot work when the sentences differ in length.)",
)

__all__ = [
    "CROSS_ATTENTION", "MASKED_ATTENTION", "PIECES", "SELF_ATTENTION", "At", "Back", "ByHand", "Flow", "Piece",
    "attend", "attended", "attention", "attention_backward", "attention_grads", "attention_second", "columns", "kv_head", "readers", "recipe",
]  # fmt: skip
