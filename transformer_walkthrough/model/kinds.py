"""Each kind of stage defined once: what it is, its formula under the config, how it computes and
records its matrices (forward), and how its gradient flows back (backward, beside its forward).

A forward function reads its weights through ``Weights.take`` (which notes the parameter in the
stage), records its inputs with ``stage.input`` (which notes the stage they came from), its own
matrices with ``stage.rec`` and its output with ``stage.out``, and returns the output. A backward
function gets dL/d(output) and the parameters the stage used, and returns dL/d(every matrix of the
stage) and dL/d(every parameter): ``backprop`` routes the inputs' gradients to the stages they came
from and the parameters' to the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import functional as F
from .trace import ATTENTION, CONSTANT, MASK, PROBABILITIES, Stage, dims, head_dims, positions

if TYPE_CHECKING:
    from ..config import ModelConfig
    from .weights import Weights

Arrays = dict[str, np.ndarray]


class Grads(NamedTuple):
    matrices: Arrays  # dL/d(matrix) for the stage's matrices, by name (inputs among them)
    params: Arrays  # dL/d(parameter), by the stage's local parameter name (W_QKV, gamma, …)


class Kind(NamedTuple):
    id: str  # "masked-attention"
    title: str  # shown in the header: "Decoder layer 0 · <title>"
    explanation: str  # one plain-English sentence
    formula: Callable[[ModelConfig], str]  # the arithmetic under this config; lines split by "\n"
    latex: Callable[[ModelConfig], list[str]]  # the same, as the lines of a LaTeX align*
    backward: Callable[[Stage, np.ndarray, Arrays, ModelConfig], Grads] | None


def open_stage(trace: object, stage_id: str, kind: Kind, m: ModelConfig) -> Stage:
    """A new stage of ``kind`` in ``trace``, titled and explained as the kind says under ``m``."""
    return trace.stage(stage_id, kind.id, kind.title, kind.explanation, kind.formula(m))  # type: ignore[attr-defined]


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


EMBEDDING = Kind(
    "embedding",
    "embedding",
    "Each token looks up its row of the embedding table E, a vector of d_model numbers "
    "(random until the model is trained).",
    lambda m: (
        "output[i] = E[token_i]"
        + ("·√d_model" if m.scale_embeddings else "")
        + (
            "\n    (E is the one table of both stacks and of the output layer: tied)"
            if m.tie_embeddings
            else ""
        )
    ),
    lambda m: [
        r"\mathrm{output}_i &= E[\mathrm{token}_i]"
        + (r" \cdot \sqrt{d_\mathrm{model}}" if m.scale_embeddings else "")
    ],
    embed_backward,
)


# ---------------------------------------------------------------------------------------------
# Positional encoding: a pattern that differs from position to position, added to each row.
# ---------------------------------------------------------------------------------------------


def add_positions(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """X + PE: fixed sinusoids (§3.5, interleaved or in halves), or the first rows of a learned P."""
    D = dims(m.d_model)
    stage.input("X", x, tokens, D)
    if m.positional_encoding == "learned":
        P = stage.weight("P", w.take(stage, "P"), tuple(f"pos {k}" for k in range(m.max_positions)), D)
        pe = stage.rec("PE", P[: len(tokens)], positions(tokens), D)
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        halves = m.positional_encoding == "sinusoidal-halves"
        table = F.positional_encoding(len(tokens), m.d_model, x.dtype, halves)
        pe = stage.rec("PE", table, positions(tokens), D, CONSTANT)
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


POSITIONAL_ENCODING = Kind(
    "positional-encoding",
    "positional encoding",
    "Attention by itself ignores word order, so a pattern different for every position is added "
    "to each token's vector: fixed sines and cosines, or a table learned like any weight.",
    _positions_formula,
    _positions_latex,
    positions_backward,
)


# ---------------------------------------------------------------------------------------------
# Multi-head attention: self, masked self, and cross.
# ---------------------------------------------------------------------------------------------


def attend(stage: Stage, w: Weights, x: np.ndarray, q_tokens: tuple[str, ...], m: ModelConfig,
           memory: np.ndarray | None = None, kv_tokens: tuple[str, ...] = (),
           mask: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Multi-head attention with queries from x and keys/values from memory (x itself when None).

    Rows of every per-head matrix are the query tokens; columns of S, A are the key tokens.
    """
    W_QKV, W_O = w.take(stage, "W_QKV"), w.take(stage, "W_O")
    b_QKV = w.take(stage, "b_QKV") if m.attention_bias else None
    b_O = w.take(stage, "b_O") if m.attention_bias else None
    kv, kv_tokens = (x, q_tokens) if memory is None else (memory, kv_tokens)
    r = F.multi_head_attention(x, kv, W_QKV, W_O, m.num_heads, mask, b_QKV, b_O)
    if not stage.records:  # nothing is kept: skip the per-head views, made only to be shown
        return r.output
    # What the backward pass needs; not the heads' outputs, which concat already holds.
    stage.cache = r._replace(heads=r.heads._replace(output=None))
    # d0… are the model's d_model columns, k0… a head's d_k columns, h2.k1 a column of concat.
    d, D, Dk, Hk = m.d_model, dims(m.d_model), dims(m.d_k, "k"), head_dims(m.num_heads, m.d_k)
    stage.input("X", x, q_tokens, D)
    if memory is not None:
        stage.input("memory", memory, kv_tokens, D)
    if mask is not None:
        stage.rec("M", mask, q_tokens, kv_tokens, MASK)
    for h in range(m.num_heads):
        n, block = h + 1, slice(h * m.d_k, (h + 1) * m.d_k)
        for k, name in enumerate("QKV"):  # head h's block of d_k columns of W_Q, W_K, W_V
            cols = slice(k * d + block.start, k * d + block.stop)
            stage.weight(f"W_{name}{n}", W_QKV[:, cols], D, Dk)
            if b_QKV is not None:
                stage.weight(f"b_{name}{n}", b_QKV[cols], (f"b_{name}{n}",), Dk)
        stage.rec(f"Q{n}", r.Q[h], q_tokens, Dk)
        stage.rec(f"K{n}", r.K[h], kv_tokens, Dk)
        stage.rec(f"V{n}", r.V[h], kv_tokens, Dk)
        stage.rec(f"S{n}", r.heads.scores[h], q_tokens, kv_tokens)
        if r.heads.masked_scores is not None:
            stage.rec(f"S{n}+M", r.heads.masked_scores[h], q_tokens, kv_tokens)
        stage.rec(f"A{n}", r.heads.weights[h], q_tokens, kv_tokens, ATTENTION)
        stage.rec(f"O{n}", r.concat[:, block], q_tokens, Dk)  # the same numbers, kept once: in concat
    stage.rec("concat", r.concat, q_tokens, Hk)
    stage.weight("W_O", W_O, Hk, D)
    if b_O is not None:
        stage.weight("b_O", b_O, ("b_O",), D)
    return stage.out("output", r.output, q_tokens, D)


def attention_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """dL/dX (and dL/d(memory) in cross-attention) and the gradients of W_QKV, W_O (and biases)."""
    x = stage["X"]
    kv = stage.get("memory", x)  # x itself, the same object, takes the self-attention path
    # stage.cache: the forward's intermediates, as it returned them
    gr = F.multi_head_attention_backward(d_out, x, kv, p["W_QKV"], p["W_O"], stage.cache)
    d, dk = m.d_model, m.d_k
    grads = {"X": gr.x_q if kv is not x else gr.x_q + gr.x_kv}
    if kv is not x:
        grads["memory"] = gr.x_kv
    if "M" in stage:
        grads["M"] = gr.S.sum(axis=0)  # S_h + M for every head: M collects each head's gradient
    for h in range(m.num_heads):
        n = h + 1
        for k, name in enumerate("QKV"):
            cols = slice(k * d + h * dk, k * d + (h + 1) * dk)
            grads[f"W_{name}{n}"] = gr.W_QKV[:, cols]
            grads[f"b_{name}{n}"] = gr.b_QKV[None, cols]
        grads[f"Q{n}"], grads[f"K{n}"], grads[f"V{n}"] = gr.Q[h], gr.K[h], gr.V[h]
        grads[f"S{n}"] = grads[f"S{n}+M"] = gr.S[h]
        grads[f"A{n}"], grads[f"O{n}"] = gr.A[h], gr.O[h]
    grads |= {"concat": gr.concat, "W_O": gr.W_O, "b_O": gr.b_O[None], "output": d_out}
    params = {"W_QKV": gr.W_QKV, "W_O": gr.W_O, "b_QKV": gr.b_QKV, "b_O": gr.b_O}
    return Grads(
        {name: grads[name] for name in stage.matrices},  # in the stage's own order
        {name: g for name, g in params.items() if name in p},
    )


def _attention_latex(kv: str, s: str) -> Callable[[ModelConfig], list[str]]:
    def latex(m: ModelConfig) -> list[str]:
        b = (lambda x: f" + b^{x}") if m.attention_bias else (lambda x: "")
        return [
            rf"Q_h &= X\,W^Q_h{b('Q_h')}, \quad K_h = {kv}\,W^K_h{b('K_h')}, "
            rf"\quad V_h = {kv}\,W^V_h{b('V_h')} \qquad (h = 1, \ldots, {m.num_heads})",
            r"S_h &= Q_h K_h^{\top} / \sqrt{d_k}",
            rf"A_h &= \operatorname{{softmax}}({s}) \quad \text{{(row-wise)}}",
            r"O_h &= A_h V_h",
            rf"\mathrm{{output}} &= [O_1 \cdots O_{{{m.num_heads}}}]\, W^O{b('O')}",
        ]

    return latex


def _attention_formula(kv: str, s: str) -> Callable[[ModelConfig], str]:
    def formula(m: ModelConfig) -> str:
        b = (lambda name: f" + b_{name}") if m.attention_bias else (lambda name: "")
        return (
            f"Q_h = X·W_Qh{b('Qh')},  K_h = {kv}·W_Kh{b('Kh')},  V_h = {kv}·W_Vh{b('Vh')}"
            "    (h = 1 … num_heads)\n"
            "S_h = Q_h·K_hᵀ / √d_k\n"
            f"A_h = softmax({s})    (row-wise)\n"
            "O_h = A_h·V_h\n"
            f"output = concat(O_1, …, O_num_heads)·W_O{b('O')}"
        )

    return formula


SELF_ATTENTION = Kind(
    "self-attention",
    "multi-head self-attention",
    "Every token scores every token (query against key), turns the scores into weights with "
    "softmax and takes the weighted mix of their values; each head does this in its own "
    "d_k-dimensional subspace.",
    _attention_formula("X", "S_h"),
    _attention_latex("X", "S_h"),
    attention_backward,
)
MASKED_ATTENTION = Kind(
    "masked-attention",
    "masked multi-head self-attention",
    "Self-attention where the mask M puts −∞ above the diagonal, so no position can look at "
    "a later one: softmax turns −∞ into a weight of exactly 0.",
    _attention_formula("X", "S_h + M"),
    _attention_latex("X", "S_h + M"),
    attention_backward,
)
CROSS_ATTENTION = Kind(
    "cross-attention",
    "multi-head cross-attention",
    "The decoder's tokens ask the questions (queries from X) and the encoder output answers "
    "(keys and values from memory): this is how the source sentence reaches the decoder. "
    "(The article says it the other way round; that cannot work when the sentences differ in length.)",
    _attention_formula("memory", "S_h"),
    _attention_latex(r"\mathrm{memory}", "S_h"),
    attention_backward,
)


# ---------------------------------------------------------------------------------------------
# Residual connections and layer normalisation: add & norm (post-norm), or norm, then add (pre-norm).
# ---------------------------------------------------------------------------------------------


def _layer_norm_weights(stage: Stage, w: Weights, D: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    gamma = stage.weight("gamma", w.take(stage, "gamma"), ("gamma",), D)
    beta = stage.weight("beta", w.take(stage, "beta"), ("beta",), D)
    return gamma, beta


def add_norm(stage: Stage, w: Weights, x: np.ndarray, sublayer: np.ndarray, tokens: tuple[str, ...],
             m: ModelConfig) -> np.ndarray:  # fmt: skip
    """LayerNorm(x + Sublayer(x)): the residual connection, then layer normalisation (§5.4)."""
    D = dims(x.shape[1])
    stage.input("X", x, tokens, D)
    stage.input("sublayer", sublayer, tokens, D)
    total = stage.rec("sum", x + sublayer, tokens, D)
    gamma, beta = _layer_norm_weights(stage, w, D)
    return stage.out("output", F.layer_norm(total, gamma.ravel(), beta.ravel(), m.layer_norm_eps), tokens, D)


def add_norm_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = LayerNorm(X + sublayer): dL/d(sum) reaches both X and the sublayer unchanged."""
    d_sum, d_gamma, d_beta = F.layer_norm_backward(d_out, stage["sum"], p["gamma"], m.layer_norm_eps)
    return Grads(
        {
            "X": d_sum,
            "sublayer": d_sum,
            "sum": d_sum,
            "gamma": d_gamma[None],
            "beta": d_beta[None],
            "output": d_out,
        },
        {"gamma": d_gamma, "beta": d_beta},
    )


_NORM_TEX = (
    r"\mathrm{{output}} &= \gamma \odot \frac{{{x} - \mu}}{{\sqrt{{\sigma^2 + \epsilon}}}} + \beta"
    r" \quad \text{{(per row; }} \sigma^2 \text{{ divides by }} d_\mathrm{{model}}\text{{)}}"
)
_NORM = (
    "output = gamma ⊙ ({x} − mean) / √(var + eps) + beta\n"
    "    (mean and var of each row of {x}; var divides by d_model)"
)

ADD_NORM = Kind(
    "add-norm",
    "add & norm",
    "The sublayer's output is added back to its input (a residual connection), then each row "
    "is normalised to mean 0 and variance 1, scaled by gamma and shifted by beta (post-norm, the paper).",
    lambda m: "sum = X + sublayer\n" + _NORM.format(x="sum"),
    lambda m: [r"\mathrm{sum} &= X + \mathrm{sublayer}", _NORM_TEX.format(x=r"\mathrm{sum}")],
    add_norm_backward,
)


def layer_norm(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig
) -> np.ndarray:
    """LayerNorm(x) on its own: before a pre-norm sublayer, or at the top of a stack."""
    D = dims(x.shape[1])
    stage.input("X", x, tokens, D)
    gamma, beta = _layer_norm_weights(stage, w, D)
    return stage.out("output", F.layer_norm(x, gamma.ravel(), beta.ravel(), m.layer_norm_eps), tokens, D)


def layer_norm_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    dx, d_gamma, d_beta = F.layer_norm_backward(d_out, stage["X"], p["gamma"], m.layer_norm_eps)
    return Grads(
        {"X": dx, "gamma": d_gamma[None], "beta": d_beta[None], "output": d_out},
        {"gamma": d_gamma, "beta": d_beta},
    )


LAYER_NORM = Kind(
    "layer-norm",
    "layer norm",
    "Each row is normalised to mean 0 and variance 1, then scaled by gamma and shifted by beta: "
    "before a sublayer in a pre-norm model, or on top of a stack (model.final_norm).",
    lambda m: _NORM.format(x="X"),
    lambda m: [_NORM_TEX.format(x="X")],
    layer_norm_backward,
)


def residual(stage: Stage, x: np.ndarray, sublayer: np.ndarray, tokens: tuple[str, ...]) -> np.ndarray:
    """x + Sublayer(LayerNorm(x)): the pre-norm residual connection, with no norm after it."""
    D = dims(x.shape[1])
    stage.input("X", x, tokens, D)
    stage.input("sublayer", sublayer, tokens, D)
    return stage.out("output", x + sublayer, tokens, D)


def residual_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = X + sublayer passes its gradient to both, unchanged."""
    return Grads({"X": d_out, "sublayer": d_out, "output": d_out}, {})


RESIDUAL = Kind(
    "residual",
    "residual connection",
    "The sublayer's output is added back to the stream it read (pre-norm): the stream itself is "
    "never normalised, so the sum of every sublayer's contribution reaches the top.",
    lambda m: "output = X + sublayer",
    lambda m: [r"\mathrm{output} &= X + \mathrm{sublayer}"],
    residual_backward,
)


# ---------------------------------------------------------------------------------------------
# The position-wise feed-forward network.
# ---------------------------------------------------------------------------------------------

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


FEED_FORWARD = Kind(
    "feed-forward",
    "position-wise feed-forward",
    "Each position goes on its own through the same two-layer network: widen to d_ff, bend "
    "with a nonlinearity, come back to d_model.",
    lambda m: f"pre = X·W_1 + b_1\n{ACTIVATION_FORMULAS[m.activation]}\noutput = hidden·W_2 + b_2",
    lambda m: [
        r"\mathrm{pre} &= X W_1 + b_1",
        ACTIVATION_LATEX[m.activation],
        r"\mathrm{output} &= \mathrm{hidden}\, W_2 + b_2",
    ],
    feed_forward_backward,
)


# ---------------------------------------------------------------------------------------------
# The output layer: logits, then probabilities.
# ---------------------------------------------------------------------------------------------


def logits(stage: Stage, w: Weights, y: np.ndarray, tokens: tuple[str, ...], vocabulary: tuple[str, ...],
           m: ModelConfig) -> np.ndarray:  # fmt: skip
    """One linear layer to a score for every word: per position (the paper) or flattened (the article)."""
    D = dims(m.d_model)
    stage.input("X", y, tokens, D)
    if m.output_head == "flatten":
        flat_labels = tuple(f"p{p}.d{j}" for p in range(len(tokens)) for j in range(m.d_model))
        x, rows = stage.rec("flattened", y.reshape(1, -1), ("flattened",), flat_labels), ("flattened",)
        W_rows = flat_labels
    else:
        x, rows, W_rows = y, tokens, D
    W = stage.weight("W", w.take(stage, "W"), W_rows, vocabulary)
    b = stage.weight("b", w.take(stage, "b"), ("b",), vocabulary).ravel() if m.output_bias else None
    return stage.out("logits", F.linear(x, W, b), rows, vocabulary)


def logits_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    x = stage.get("flattened", stage["X"])
    dx, dW, db = F.linear_backward(d_out, x, p["W"])
    grads = {"X": dx.reshape(stage["X"].shape), "W": dW, "b": db[None], "logits": d_out}
    if "flattened" in stage:
        grads["flattened"] = dx
    return Grads(
        {name: grads[name] for name in stage.matrices}, {"W": dW, "b": db} if "b" in p else {"W": dW}
    )


def _logits_formula(m: ModelConfig) -> str:
    tied = "\n    (W = Eᵀ: the embedding table, transposed — tied)" if m.tie_embeddings else ""
    b = " + b" if m.output_bias else ""
    if m.output_head == "flatten":
        return (
            f"flattened = X as one row\nlogits = flattened·W{b}" + tied + "\n"
            "    (the article's leak: one row of all positions, so the prediction sees the future\n"
            "    tokens, the very words it should predict; the paper's head reads each position alone)"
        )
    return f"logits = X·W{b}" + tied


def _logits_latex(m: ModelConfig) -> list[str]:
    b = " + b" if m.output_bias else ""
    tied = [r"W &= E^{\top} \quad \text{(tied to the embedding table)}"] if m.tie_embeddings else []
    if m.output_head == "flatten":
        return [r"\mathrm{flattened} &= \text{the rows of } X \text{ end to end}",
                rf"\mathrm{{logits}} &= \mathrm{{flattened}}\, W{b}", *tied]  # fmt: skip
    return [rf"\mathrm{{logits}} &= X W{b}", *tied]


LOGITS = Kind(
    "logits",
    "output linear layer",
    "One linear layer turns each decoder position's vector into a score (logit) for every "
    "word of the vocabulary.",
    _logits_formula,
    _logits_latex,
    logits_backward,
)


def probabilities(
    stage: Stage, scores: np.ndarray, rows: tuple[str, ...], vocabulary: tuple[str, ...]
) -> np.ndarray:
    stage.input("logits", scores, rows, vocabulary)
    return stage.out("probabilities", F.softmax(scores), rows, vocabulary, PROBABILITIES)


PROBABILITIES_KIND = Kind(
    "probabilities",
    "softmax over the vocabulary",
    "Softmax turns each row of logits into probabilities that sum to 1; the most likely "
    "word is the prediction for the next token.",
    lambda m: "probabilities = softmax(logits)    (row-wise)",
    lambda m: [r"\mathrm{probabilities} &= \operatorname{softmax}(\mathrm{logits}) \quad \text{(row-wise)}"],
    None,  # the loss starts from the logits: cross-entropy differentiates softmax and log together
)


# Every kind of stage, in the order they first appear in a forward pass.
KINDS: dict[str, Kind] = {
    k.id: k
    for k in (
        EMBEDDING, POSITIONAL_ENCODING, LAYER_NORM, SELF_ATTENTION, ADD_NORM, RESIDUAL, FEED_FORWARD,
        MASKED_ATTENTION, CROSS_ATTENTION, LOGITS, PROBABILITIES_KIND,
    )
}  # fmt: skip
