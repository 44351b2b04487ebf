"""Backpropagation through a trace: dL/d(every matrix of every stage), Figure 1 walked top to bottom.

The loss is the mean cross-entropy of the next token with teacher forcing, over the decoder
positions that have one (<start> → sleeping, sleeping → comfortably, comfortably → <end>; the
<end> row has none). Each stage's backward reads what its forward recorded in the trace and calls
the backward beside its forward in ``functional``. A residual connection adds its gradient to the
sublayer's: ``x + Sublayer(x)`` passes dL/d(sum) to x along two roads.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import functional as F
from .config import ModelConfig
from .errors import WalkthroughError
from .model import (
    AttentionWeights,
    DecoderLayerWeights,
    EncoderLayerWeights,
    FeedForwardWeights,
    LayerNormWeights,
    Weights,
)
from .trace import Stage, Trace

Grads = dict[str, dict[str, np.ndarray]]  # stage id -> matrix name -> dL/d(matrix), same shape


class Backward(NamedTuple):
    loss: float
    weights: Weights  # dL/d(every parameter), shaped like the model's weights
    stages: Grads  # dL/d(every matrix of every stage), for showing and exporting


def next_tokens(trace: Trace) -> np.ndarray:
    """The target of each decoder position: the next token's id, or -1 where there is none."""
    following = trace.config.token_ids(trace.target_tokens[1:])
    return np.array([*following, -1])


def backward(trace: Trace, w: Weights) -> Backward:
    """The loss of the traced forward pass and its gradient with respect to everything in it."""
    m = trace.config.model
    if m.output_head == "flatten":
        raise WalkthroughError(
            "the flatten head cannot be trained to predict each next word: its one prediction sees "
            "every decoder position, future words included; use output_head: per-position"
        )
    g: Grads = {s.id: {} for s in trace}
    targets = next_tokens(trace)
    loss, d_logits = F.cross_entropy(trace["output.logits"]["logits"], targets)

    probs = trace["output.probabilities"]["probabilities"]
    rows = np.flatnonzero(targets >= 0)
    d_probs = np.zeros_like(probs)  # L = −mean log p[target]: only the targets' probabilities matter
    d_probs[rows, targets[rows]] = -1.0 / (len(rows) * probs[rows, targets[rows]])
    g["output.probabilities"] = {"logits": d_logits, "probabilities": d_probs}

    head = trace["output.logits"]
    dy, dW, db = F.linear_backward(d_logits, head["X"], head["W"])
    g["output.logits"] = {"X": dy, "W": dW, "b": db[None], "logits": d_logits}

    d_memory = np.zeros_like(trace[f"encoder.{m.num_encoder_layers - 1}.add-norm-2"]["output"])
    decoder = []
    for i in reversed(range(m.num_decoder_layers)):
        dy, d_mem, layer = decoder_layer_backward(trace, i, dy, w.decoder[i], m, g)
        d_memory += d_mem
        decoder.insert(0, layer)
    dE_decoder = input_embedding_backward(trace, "decoder", dy, m, g)

    dx, encoder = d_memory, []
    for i in reversed(range(m.num_encoder_layers)):
        dx, layer = encoder_layer_backward(trace, i, dx, w.encoder[i], m, g)
        encoder.insert(0, layer)
    dE_encoder = input_embedding_backward(trace, "encoder", dx, m, g)
    return Backward(loss, Weights(dE_encoder, dE_decoder, encoder, decoder, dW, db), g)


def add_norm_backward(
    stage: Stage, d_out: np.ndarray, w: LayerNormWeights, eps: float, g: Grads
) -> tuple[np.ndarray, LayerNormWeights]:
    """output = LayerNorm(X + sublayer): dL/d(sum) reaches both X and the sublayer unchanged."""
    d_sum, d_gamma, d_beta = F.layer_norm_backward(d_out, stage["sum"], w.gamma, eps)
    g[stage.id] = {
        "X": d_sum,
        "sublayer": d_sum,
        "sum": d_sum,
        "gamma": d_gamma[None],
        "beta": d_beta[None],
        "output": d_out,
    }
    return d_sum, LayerNormWeights(d_gamma, d_beta)


def feed_forward_backward(
    stage: Stage, d_out: np.ndarray, w: FeedForwardWeights, g: Grads
) -> tuple[np.ndarray, FeedForwardWeights]:
    dx, dW_1, db_1, dW_2, db_2, d_hidden = F.feed_forward_backward(
        d_out, stage["X"], w.W_1, w.W_2, stage["hidden"]
    )
    g[stage.id] = {
        "X": dx,
        "W_1": dW_1,
        "b_1": db_1[None],
        "hidden": d_hidden,
        "W_2": dW_2,
        "b_2": db_2[None],
        "output": d_out,
    }
    return dx, FeedForwardWeights(dW_1, db_1, dW_2, db_2)


def attention_backward(
    stage: Stage, d_out: np.ndarray, w: AttentionWeights, m: ModelConfig, g: Grads
) -> tuple[np.ndarray, np.ndarray | None, AttentionWeights]:
    """dL/dX (and dL/d(memory) in cross-attention) and the weights' gradients of one attention stage."""
    x = stage["X"]
    kv = stage.get("memory", x)  # x itself, the same object, takes the self-attention path
    r = stage.cache  # the forward's intermediates, as it returned them
    if r is None:  # a trace read back from elsewhere: compute them again
        r = F.multi_head_attention(x, kv, w.W_QKV, w.W_O, m.num_heads, stage.get("M"), w.b_QKV, w.b_O)
    gr = F.multi_head_attention_backward(d_out, x, kv, w.W_QKV, w.W_O, r)
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
            if w.b_QKV is not None:
                grads[f"b_{name}{n}"] = gr.b_QKV[None, cols]
        grads[f"Q{n}"], grads[f"K{n}"], grads[f"V{n}"] = gr.Q[h], gr.K[h], gr.V[h]
        grads[f"S{n}"] = gr.S[h]
        if "M" in stage:
            grads[f"S{n}+M"] = gr.S[h]
        grads[f"A{n}"], grads[f"O{n}"] = gr.A[h], gr.O[h]
    grads["concat"], grads["W_O"] = gr.concat, gr.W_O
    if w.b_O is not None:
        grads["b_O"] = gr.b_O[None]
    grads["output"] = d_out
    g[stage.id] = {name: grads[name] for name in stage.matrices}  # in the stage's own order
    weights = AttentionWeights(
        gr.W_QKV, gr.W_O, gr.b_QKV if w.b_QKV is not None else None, gr.b_O if w.b_O is not None else None
    )
    return grads["X"], grads.get("memory"), weights


def encoder_layer_backward(
    trace: Trace, i: int, d_out: np.ndarray, w: EncoderLayerWeights, m: ModelConfig, g: Grads
) -> tuple[np.ndarray, EncoderLayerWeights]:
    """Back through x1 = LN(x + SelfAttn(x)); out = LN(x1 + FFN(x1))."""
    eps = m.layer_norm_eps
    d_sum2, norm_2 = add_norm_backward(trace[f"encoder.{i}.add-norm-2"], d_out, w.norm_2, eps, g)
    d_ffn_in, ffn = feed_forward_backward(trace[f"encoder.{i}.feed-forward"], d_sum2, w.feed_forward, g)
    d_x1 = d_sum2 + d_ffn_in  # the residual road and the sublayer's road
    d_sum1, norm_1 = add_norm_backward(trace[f"encoder.{i}.add-norm-1"], d_x1, w.norm_1, eps, g)
    d_attn_in, _, attention = attention_backward(
        trace[f"encoder.{i}.self-attention"], d_sum1, w.self_attention, m, g
    )
    return d_sum1 + d_attn_in, EncoderLayerWeights(attention, norm_1, ffn, norm_2)


def decoder_layer_backward(
    trace: Trace, i: int, d_out: np.ndarray, w: DecoderLayerWeights, m: ModelConfig, g: Grads
) -> tuple[np.ndarray, np.ndarray, DecoderLayerWeights]:
    """Back through y1 = LN(y + MaskedAttn(y)); y2 = LN(y1 + CrossAttn(y1, memory));
    out = LN(y2 + FFN(y2)). Returns dL/dy, dL/d(memory) and the layer's weight gradients."""
    eps = m.layer_norm_eps
    d_sum3, norm_3 = add_norm_backward(trace[f"decoder.{i}.add-norm-3"], d_out, w.norm_3, eps, g)
    d_ffn_in, ffn = feed_forward_backward(trace[f"decoder.{i}.feed-forward"], d_sum3, w.feed_forward, g)
    d_sum2, norm_2 = add_norm_backward(trace[f"decoder.{i}.add-norm-2"], d_sum3 + d_ffn_in, w.norm_2, eps, g)
    d_cross_in, d_memory, cross = attention_backward(
        trace[f"decoder.{i}.cross-attention"], d_sum2, w.cross_attention, m, g
    )
    d_sum1, norm_1 = add_norm_backward(
        trace[f"decoder.{i}.add-norm-1"], d_sum2 + d_cross_in, w.norm_1, eps, g
    )
    d_masked_in, _, masked = attention_backward(
        trace[f"decoder.{i}.masked-attention"], d_sum1, w.masked_attention, m, g
    )
    assert d_memory is not None  # cross-attention always has memory
    layer = DecoderLayerWeights(masked, norm_1, cross, norm_2, ffn, norm_3)
    return d_sum1 + d_masked_in, d_memory, layer


def input_embedding_backward(trace: Trace, side: str, dx: np.ndarray, m: ModelConfig, g: Grads) -> np.ndarray:
    """Back through output = E[tokens]·(√d_model) + PE: each row of E gathers its tokens' gradients."""
    g[f"{side}.positional-encoding"] = {"X": dx, "PE": dx, "output": dx}
    stage = trace[f"{side}.embedding"]
    tokens = trace.source_tokens if side == "encoder" else trace.target_tokens
    dE = np.zeros_like(stage["E"])
    # np.add.at, not dE[ids] += …: a token used twice (the the) must add both gradients.
    np.add.at(dE, trace.config.token_ids(tokens), dx * (math.sqrt(m.d_model) if m.scale_embeddings else 1.0))
    g[stage.id] = {"E": dE, "output": dx}
    return dE
