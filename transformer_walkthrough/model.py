"""The encoder–decoder transformer of Figure 1 (Vaswani et al., 2017), wired from ``functional``.

Post-norm, as in the paper: each sublayer is wrapped as ``x = LayerNorm(x + Sublayer(x))``.
Every function records what it computes into a trace stage, under the names the article uses
(``Q1``, ``S1``, ``M``, ``A1``, ``O1``, ``concat``, ``W_O``), and returns the stage's output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import functional as F
from .config import Config, ModelConfig
from .errors import WalkthroughError
from .trace import NullTrace, Stage, Trace, dims, is_weight

# ---------------------------------------------------------------------------------------------
# Weights. Projections act on the right (X·W), so every W is stored (d_in, d_out).
# ---------------------------------------------------------------------------------------------


@dataclass
class AttentionWeights:
    """W_QKV: (d_model, 3·d_model) = [W_Q | W_K | W_V], one product for all three (as PyTorch's
    in_proj_weight); W_O: (d_model, d_model). Head h uses the h-th block of d_k columns of W_Q,
    W_K and W_V: the paper's per-head W_i^Q (d_model, d_k), side by side."""

    W_QKV: np.ndarray
    W_O: np.ndarray
    b_QKV: np.ndarray | None = None  # (3·d_model,) and (d_model,), with model.attention_bias
    b_O: np.ndarray | None = None

    @property
    def d_model(self) -> int:
        return self.W_O.shape[0]

    def _block(self, a: np.ndarray | None, k: int) -> np.ndarray | None:
        d = self.d_model
        return None if a is None else a[..., k * d : (k + 1) * d]

    W_Q = property(lambda self: self._block(self.W_QKV, 0), doc="(d_model, d_model), a view")
    W_K = property(lambda self: self._block(self.W_QKV, 1), doc="(d_model, d_model), a view")
    W_V = property(lambda self: self._block(self.W_QKV, 2), doc="(d_model, d_model), a view")
    b_Q = property(lambda self: self._block(self.b_QKV, 0), doc="(d_model,) or None")
    b_K = property(lambda self: self._block(self.b_QKV, 1), doc="(d_model,) or None")
    b_V = property(lambda self: self._block(self.b_QKV, 2), doc="(d_model,) or None")


@dataclass
class LayerNormWeights:
    gamma: np.ndarray  # (d_model,)
    beta: np.ndarray  # (d_model,)


@dataclass
class FeedForwardWeights:
    W_1: np.ndarray  # (d_model, d_ff)
    b_1: np.ndarray  # (d_ff,)
    W_2: np.ndarray  # (d_ff, d_model)
    b_2: np.ndarray  # (d_model,)


@dataclass
class EncoderLayerWeights:
    self_attention: AttentionWeights
    norm_1: LayerNormWeights
    feed_forward: FeedForwardWeights
    norm_2: LayerNormWeights


@dataclass
class DecoderLayerWeights:
    masked_attention: AttentionWeights
    norm_1: LayerNormWeights
    cross_attention: AttentionWeights
    norm_2: LayerNormWeights
    feed_forward: FeedForwardWeights
    norm_3: LayerNormWeights


@dataclass
class Weights:
    """Every parameter of the model."""

    encoder_embedding: np.ndarray  # E: (vocab, d_model)
    decoder_embedding: np.ndarray  # E: (vocab, d_model)
    encoder: list[EncoderLayerWeights]
    decoder: list[DecoderLayerWeights]
    W: np.ndarray  # output layer: (d_model, vocab); (T·d_model, vocab) for the flatten head
    b: np.ndarray  # (vocab,)


def init_weights(config: Config) -> Weights:
    """Draw every weight from one ``numpy.random.Generator`` seeded with ``config.seed``.

    Embeddings uniform in [0, 1) (the article); weight matrices Glorot/Xavier uniform, as PyTorch
    initialises nn.Transformer; feed-forward and output biases uniform in ±1/√fan_in (PyTorch's
    nn.Linear); attention biases 0 (PyTorch's nn.MultiheadAttention); LayerNorm gamma 1, beta 0.
    The draws happen in a fixed order, so the same seed gives the same numbers everywhere.
    """
    m = config.model
    rng = np.random.default_rng(config.seed)
    vocab = len(config.vocabulary or ())
    dtype = np.dtype(m.dtype)  # drawn in float64, then rounded: float32 weights equal float64's, rounded

    def xavier(fan_in: int, fan_out: int) -> np.ndarray:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(dtype, copy=False)

    def bias(fan_in: int, n: int) -> np.ndarray:
        a = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-a, a, size=n).astype(dtype, copy=False)

    def attention() -> AttentionWeights:
        d = m.d_model
        W_QKV = np.hstack([xavier(d, d), xavier(d, d), xavier(d, d)])  # each its own d×d Glorot draw
        w = AttentionWeights(W_QKV, xavier(d, d))
        if m.attention_bias:
            w.b_QKV, w.b_O = np.zeros(3 * d, dtype), np.zeros(d, dtype)
        return w

    def norm() -> LayerNormWeights:
        return LayerNormWeights(np.ones(m.d_model, dtype), np.zeros(m.d_model, dtype))

    def feed_forward() -> FeedForwardWeights:
        W_1, b_1 = xavier(m.d_model, m.d_ff), bias(m.d_model, m.d_ff)
        W_2, b_2 = xavier(m.d_ff, m.d_model), bias(m.d_ff, m.d_model)
        return FeedForwardWeights(W_1, b_1, W_2, b_2)

    encoder_embedding = rng.random((vocab, m.d_model)).astype(dtype, copy=False)
    decoder_embedding = rng.random((vocab, m.d_model)).astype(dtype, copy=False)
    encoder = [
        EncoderLayerWeights(attention(), norm(), feed_forward(), norm()) for _ in range(m.num_encoder_layers)
    ]
    decoder = [
        DecoderLayerWeights(attention(), norm(), attention(), norm(), feed_forward(), norm())
        for _ in range(m.num_decoder_layers)
    ]
    head_in = m.d_model * (len(config.target_tokens) if m.output_head == "flatten" else 1)
    W, b = xavier(head_in, vocab), bias(head_in, vocab)
    return Weights(encoder_embedding, decoder_embedding, encoder, decoder, W, b)


# ---------------------------------------------------------------------------------------------
# Stages: each computes one box of Figure 1 and records its matrices.
# ---------------------------------------------------------------------------------------------


def embed(
    stage: Stage,
    E: np.ndarray,
    tokens: tuple[str, ...],
    ids: list[int],
    m: ModelConfig,
    vocabulary: tuple[str, ...],
) -> np.ndarray:
    """Look up each token's row of E (times √d_model when the config scales, as the paper §3.4)."""
    stage.rec("E", E, vocabulary, dims(m.d_model))
    # math.sqrt gives a Python float, which keeps float32 arrays float32 (a NumPy float64 would not).
    x = E[ids] * math.sqrt(m.d_model) if m.scale_embeddings else E[ids]
    return stage.rec("output", x, tokens, dims(m.d_model))


def add_positional_encoding(stage: Stage, x: np.ndarray, tokens: tuple[str, ...]) -> np.ndarray:
    """X + PE: the same sinusoids for the encoder and the decoder (paper §3.5)."""
    labels = dims(x.shape[1])
    stage.rec("X", x, tokens, labels)
    pe = stage.rec("PE", F.positional_encoding(len(tokens), x.shape[1], x.dtype), tokens, labels)
    return stage.rec("output", x + pe, tokens, labels)


def attend(
    stage: Stage,
    x: np.ndarray,
    q_tokens: tuple[str, ...],
    w: AttentionWeights,
    m: ModelConfig,
    memory: np.ndarray | None = None,
    kv_tokens: tuple[str, ...] = (),
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Multi-head attention with queries from x and keys/values from memory (x itself when None).

    Rows of every per-head matrix are the query tokens; columns of S, A are the key tokens.
    """
    kv, kv_tokens = (x, q_tokens) if memory is None else (memory, kv_tokens)
    r = F.multi_head_attention(x, kv, w.W_QKV, w.W_O, m.num_heads, mask, w.b_QKV, w.b_O)
    if not stage.records:  # nothing is kept: skip the per-head views, made only to be shown
        return r.output
    # What the backward pass needs; not the heads' outputs, which concat already holds.
    stage.cache = r._replace(heads=r.heads._replace(output=None))
    if w.b_QKV is not None:  # the paper's attention has no biases; PyTorch's has them
        for name in "QKV":
            stage.formula = stage.formula.replace(f"·W_{name}h", f"·W_{name}h + b_{name}h")
        stage.formula = stage.formula.replace("·W_O", "·W_O + b_O")
    D, Dk = dims(m.d_model), dims(m.d_k)
    stage.rec("X", x, q_tokens, D)
    if memory is not None:
        stage.rec("memory", memory, kv_tokens, D)
    if mask is not None:
        stage.rec("M", mask, q_tokens, kv_tokens)
    for h in range(m.num_heads):
        n, block = h + 1, slice(h * m.d_k, (h + 1) * m.d_k)
        for name, W, b in (("Q", w.W_Q, w.b_Q), ("K", w.W_K, w.b_K), ("V", w.W_V, w.b_V)):
            stage.rec(f"W_{name}{n}", W[:, block], D, Dk)
            if b is not None:
                stage.rec(f"b_{name}{n}", b[block], (f"b_{name}{n}",), Dk)
        stage.rec(f"Q{n}", r.Q[h], q_tokens, Dk)
        stage.rec(f"K{n}", r.K[h], kv_tokens, Dk)
        stage.rec(f"V{n}", r.V[h], kv_tokens, Dk)
        stage.rec(f"S{n}", r.heads.scores[h], q_tokens, kv_tokens)
        if r.heads.masked_scores is not None:
            stage.rec(f"S{n}+M", r.heads.masked_scores[h], q_tokens, kv_tokens)
        stage.rec(f"A{n}", r.heads.weights[h], q_tokens, kv_tokens)
        stage.rec(f"O{n}", r.concat[:, block], q_tokens, Dk)  # the same numbers, kept once: in concat
    stage.rec("concat", r.concat, q_tokens, D)
    stage.rec("W_O", w.W_O, D, D)
    if w.b_O is not None:
        stage.rec("b_O", w.b_O, ("b_O",), D)
    return stage.rec("output", r.output, q_tokens, D)


def add_norm(
    stage: Stage,
    x: np.ndarray,
    sublayer: np.ndarray,
    w: LayerNormWeights,
    tokens: tuple[str, ...],
    eps: float,
) -> np.ndarray:
    """LayerNorm(x + Sublayer(x)): the residual connection, then layer normalisation (§5.4)."""
    D = dims(x.shape[1])
    stage.rec("X", x, tokens, D)
    stage.rec("sublayer", sublayer, tokens, D)
    total = stage.rec("sum", x + sublayer, tokens, D)
    stage.rec("gamma", w.gamma, ("gamma",), D)
    stage.rec("beta", w.beta, ("beta",), D)
    return stage.rec("output", F.layer_norm(total, w.gamma, w.beta, eps), tokens, D)


def feed_forward(stage: Stage, x: np.ndarray, w: FeedForwardWeights, tokens: tuple[str, ...]) -> np.ndarray:
    """FFN(x) = max(0, x·W_1 + b_1)·W_2 + b_2, the same for every position (§3.3)."""
    D, H = dims(x.shape[1]), dims(w.W_1.shape[1])
    stage.rec("X", x, tokens, D)
    r = F.feed_forward(x, w.W_1, w.b_1, w.W_2, w.b_2)
    stage.rec("W_1", w.W_1, D, H)
    stage.rec("b_1", w.b_1, ("b_1",), H)
    stage.rec("hidden", r.hidden, tokens, H)
    stage.rec("W_2", w.W_2, H, D)
    stage.rec("b_2", w.b_2, ("b_2",), D)
    return stage.rec("output", r.output, tokens, D)


# ---------------------------------------------------------------------------------------------
# Figure 1: the encoder stack, the decoder stack, the output layer.
# ---------------------------------------------------------------------------------------------


def encoder_layer(trace: Trace, i: int, x: np.ndarray, w: EncoderLayerWeights, m: ModelConfig) -> np.ndarray:
    """x = LayerNorm(x + SelfAttention(x)); x = LayerNorm(x + FFN(x))."""
    tokens, eps = trace.source_tokens, m.layer_norm_eps
    a = attend(trace.stage(f"encoder.{i}.self-attention", "self-attention"), x, tokens, w.self_attention, m)
    x = add_norm(trace.stage(f"encoder.{i}.add-norm-1", "add-norm"), x, a, w.norm_1, tokens, eps)
    f = feed_forward(trace.stage(f"encoder.{i}.feed-forward", "feed-forward"), x, w.feed_forward, tokens)
    return add_norm(trace.stage(f"encoder.{i}.add-norm-2", "add-norm"), x, f, w.norm_2, tokens, eps)


def decoder_layer(
    trace: Trace, i: int, y: np.ndarray, memory: np.ndarray, w: DecoderLayerWeights, m: ModelConfig
) -> np.ndarray:
    """y = LayerNorm(y + MaskedSelfAttention(y)); y = LayerNorm(y + CrossAttention(y, memory));
    y = LayerNorm(y + FFN(y)). Cross-attention: queries from y, keys and values from memory."""
    tokens, eps = trace.target_tokens, m.layer_norm_eps
    mask = F.causal_mask(len(tokens), y.dtype)
    a = attend(
        trace.stage(f"decoder.{i}.masked-attention", "masked-attention"),
        y,
        tokens,
        w.masked_attention,
        m,
        mask=mask,
    )
    y = add_norm(trace.stage(f"decoder.{i}.add-norm-1", "add-norm"), y, a, w.norm_1, tokens, eps)
    c = attend(
        trace.stage(f"decoder.{i}.cross-attention", "cross-attention"),
        y,
        tokens,
        w.cross_attention,
        m,
        memory=memory,
        kv_tokens=trace.source_tokens,
    )
    y = add_norm(trace.stage(f"decoder.{i}.add-norm-2", "add-norm"), y, c, w.norm_2, tokens, eps)
    f = feed_forward(trace.stage(f"decoder.{i}.feed-forward", "feed-forward"), y, w.feed_forward, tokens)
    return add_norm(trace.stage(f"decoder.{i}.add-norm-3", "add-norm"), y, f, w.norm_3, tokens, eps)


def output_head(trace: Trace, y: np.ndarray, w: Weights, m: ModelConfig) -> np.ndarray:
    """Logits and next-token probabilities: per position (the paper) or flattened (the article)."""
    tokens, vocabulary = trace.target_tokens, trace.vocabulary
    if m.output_head == "flatten":
        stage = trace.stage("output.logits", "logits", "flattened = X as one row\nlogits = flattened·W + b")
        stage.rec("X", y, tokens, dims(m.d_model))
        flat_labels = tuple(f"p{p}.d{j}" for p in range(len(tokens)) for j in range(m.d_model))
        x, rows = stage.rec("flattened", y.reshape(1, -1), ("flattened",), flat_labels), ("flattened",)
        W_rows = flat_labels
    else:
        stage = trace.stage("output.logits", "logits")
        x, rows, W_rows = stage.rec("X", y, tokens, dims(m.d_model)), tokens, dims(m.d_model)
    stage.rec("W", w.W, W_rows, vocabulary)
    stage.rec("b", w.b, ("b",), vocabulary)
    logits = stage.rec("logits", F.linear(x, w.W, w.b), rows, vocabulary)
    stage = trace.stage("output.probabilities", "probabilities")
    stage.rec("logits", logits, rows, vocabulary)
    return stage.rec("probabilities", F.softmax(logits), rows, vocabulary)


def input_embedding(
    trace: Trace, side: str, E: np.ndarray, tokens: tuple[str, ...], ids: list[int], m: ModelConfig
) -> np.ndarray:
    """The bottom of either stack in Figure 1: embed the tokens, then add the positional encoding."""
    scaled = "output[i] = E[token_i]·√d_model" if m.scale_embeddings else None
    x = embed(trace.stage(f"{side}.embedding", "embedding", scaled), E, tokens, ids, m, trace.vocabulary)
    return add_positional_encoding(
        trace.stage(f"{side}.positional-encoding", "positional-encoding"), x, tokens
    )


def transformer(
    trace: Trace, w: Weights, m: ModelConfig, source_ids: list[int], target_ids: list[int]
) -> np.ndarray:
    """Figure 1, bottom to top: the encoder stack, the decoder stack, the output layer.

    Returns the next-token probabilities, (decoder tokens, vocab); everything is recorded into ``trace``.
    """
    x = input_embedding(trace, "encoder", w.encoder_embedding, trace.source_tokens, source_ids, m)
    for i, layer in enumerate(w.encoder):
        x = encoder_layer(trace, i, x, layer, m)
    memory = x  # the encoder's output: keys and values of every cross-attention

    y = input_embedding(trace, "decoder", w.decoder_embedding, trace.target_tokens, target_ids, m)
    for i, layer in enumerate(w.decoder):
        y = decoder_layer(trace, i, y, memory, layer, m)
    return output_head(trace, y, w, m)


def _ids(
    config: Config, ids: Sequence[int] | None, tokens: tuple[str, ...], side: str
) -> tuple[list[int], tuple[str, ...]]:
    """Token ids (the config's sentence when None), checked, and their words as labels."""
    vocabulary = config.vocabulary or ()
    if ids is None:
        return config.token_ids(tokens), tokens
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < len(vocabulary)]
    if not ids or bad:
        raise WalkthroughError(
            f"{side} ids: need 1 or more ids from 0 to {len(vocabulary) - 1}; got {bad or 'none'}"
        )
    if side == "target" and config.model.output_head == "flatten" and len(ids) != len(config.target_tokens):
        raise WalkthroughError(
            f"target ids: the flatten head is sized for {len(config.target_tokens)} decoder tokens"
        )
    return ids, tuple(vocabulary[i] for i in ids)


def run_forward(
    config: Config,
    weights: Weights | None = None,
    *,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> Trace:
    """The whole forward pass, every stage recorded in a Trace.

    By default on the config's sentence; ``source_ids`` and ``target_ids`` (rows of the
    vocabulary) feed any other input, of any length.
    """
    src, source_tokens = _ids(config, source_ids, config.source_tokens, "source")
    tgt, target_tokens = _ids(config, target_ids, config.target_tokens, "target")
    trace = Trace(config, source_tokens, target_tokens)
    w = weights if weights is not None else init_weights(config)
    transformer(trace, w, config.model, src, tgt)
    return trace


def forward(
    config: Config,
    weights: Weights,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> np.ndarray:
    """The same arithmetic with nothing recorded: just the next-token probabilities."""
    src, source_tokens = _ids(config, source_ids, config.source_tokens, "source")
    tgt, target_tokens = _ids(config, target_ids, config.target_tokens, "target")
    return transformer(NullTrace(config, source_tokens, target_tokens), weights, config.model, src, tgt)


# ---------------------------------------------------------------------------------------------
# Weights on disk: an .npz whose names are the trace's ("encoder.0.self-attention/W_Q1").
# ---------------------------------------------------------------------------------------------


def named_weights(trace: Trace) -> dict[str, np.ndarray]:
    """Every weight the trace used, under "{stage id}/{name}": views of the model's own arrays."""
    return {f"{s.id}/{name}": m.values for s in trace for name, m in s.matrices.items() if is_weight(name)}


def load_weights(config: Config, path: str | Path) -> Weights:
    """Weights for ``config`` from an .npz written by ``walkthrough train``, every name and shape checked."""
    from .npzfile import read_npz

    w = init_weights(config)
    slots = named_weights(run_forward(config, w))  # views into w: writing them fills w
    stored = read_npz(path, expected={name: view.shape for name, view in slots.items()})
    for name, view in slots.items():
        view[...] = stored[name]
    return w
