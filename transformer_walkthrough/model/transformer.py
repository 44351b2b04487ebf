"""The transformer of Figure 1 (Vaswani et al., 2017), wired from the kinds of stage in ``kinds``.

Each sublayer sits inside a residual connection with a LayerNorm, and ``model.norm_first`` says
where the norm goes: after the sum (post-norm, the paper: ``x = LayerNorm(x + Sublayer(x))``) or
before the sublayer (pre-norm, GPT-2 and most models since: ``x = x + Sublayer(LayerNorm(x))``).
Which stacks exist and which sublayers a layer has come from ``architecture``; every stage
records its matrices into the trace and returns its output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..config import Config, ModelConfig
from ..errors import WalkthroughError
from . import functional as F
from . import kinds as K
from .architecture import DECODER, ENCODER, OUTPUT, connection, num_layers, stacks, stage_id, sublayers
from .heap import keep_freed_memory
from .trace import NullTrace, Stage, Trace, token_labels
from .weights import Weights, init_weights, load_weights

__all__ = ["Weights", "forward", "init_weights", "load_weights", "run_forward", "transformer"]

Sublayer = Callable[[Stage, np.ndarray], np.ndarray]  # (its stage, its input) -> its output


def sublayer_connection(
    trace: Trace, side: str, i: int, k: int, kind: str, x: np.ndarray, sublayer: Sublayer,
    w: Weights, tokens: tuple[str, ...], m: ModelConfig,
) -> np.ndarray:  # fmt: skip
    """Sublayer k of layer i with its residual connection and its norm, on the config's side of it.

    Post-norm (the paper):  x = LayerNorm(x + Sublayer(x))      stages: sublayer, add-norm-k
    Pre-norm:               x = x + Sublayer(LayerNorm(x))      stages: norm-k, sublayer, residual-k
    """
    c = connection(side, i, k, m)

    def run(x: np.ndarray) -> np.ndarray:
        return sublayer(K.open_stage(trace, stage_id(side, kind, i), K.KINDS[kind], m), x)

    if c.norm is None:
        out = run(x)
        return K.add_norm(K.open_stage(trace, c.after, K.ADD_NORM, m), w, x, out, tokens, m)
    out = run(K.layer_norm(K.open_stage(trace, c.norm, K.LAYER_NORM, m), w, x, tokens, m))
    return K.residual(K.open_stage(trace, c.after, K.RESIDUAL, m), x, out, tokens)


def layer(
    trace: Trace, side: str, i: int, x: np.ndarray, w: Weights, m: ModelConfig, memory: np.ndarray | None
) -> np.ndarray:
    """One encoder or decoder layer: its sublayers (``architecture.sublayers``) in turn.

    Encoder: self-attention, feed-forward. Decoder: masked self-attention, cross-attention
    (queries from the decoder, keys and values from the encoder's output, ``memory``),
    feed-forward; a decoder-only model has no cross-attention.
    """
    tokens = trace.source_tokens if side == ENCODER else trace.target_tokens
    mask = F.causal_mask(len(tokens), x.dtype) if side == DECODER else None
    run: dict[str, Sublayer] = {
        "self-attention": lambda stage, x: K.attend(stage, w, x, tokens, m),
        "masked-attention": lambda stage, x: K.attend(stage, w, x, tokens, m, mask=mask),
        "cross-attention": lambda stage, x: K.attend(
            stage, w, x, tokens, m, memory=memory, kv_tokens=trace.source_tokens
        ),
        "feed-forward": lambda stage, x: K.feed_forward(stage, w, x, tokens, m),
    }
    for k, kind in enumerate(sublayers(side, m), 1):
        x = sublayer_connection(trace, side, i, k, kind, x, run[kind], w, tokens, m)
    return x


def stack(
    trace: Trace, side: str, ids: list[int], w: Weights, m: ModelConfig, memory: np.ndarray | None = None
) -> np.ndarray:
    """One stack of Figure 1, bottom to top: embed, add positions, the layers, the final norm if any."""
    tokens = trace.source_tokens if side == ENCODER else trace.target_tokens
    embedding = K.open_stage(trace, stage_id(side, "embedding"), K.EMBEDDING, m)
    x = K.embed(embedding, w, ids, tokens, trace.vocabulary_of(side), m)
    positions = K.open_stage(trace, stage_id(side, "positional-encoding"), K.POSITIONAL_ENCODING, m)
    x = K.add_positions(positions, w, x, tokens, m)
    for i in range(num_layers(side, m)):
        x = layer(trace, side, i, x, w, m, memory)
    if m.has_final_norm:
        x = K.layer_norm(K.open_stage(trace, stage_id(side, "final-norm"), K.LAYER_NORM, m), w, x, tokens, m)
    return x


def transformer(
    trace: Trace, w: Weights, m: ModelConfig, source_ids: list[int], target_ids: list[int]
) -> np.ndarray:
    """Figure 1, bottom to top: the encoder stack (if any), the decoder stack, the output layer.

    Returns the next-token probabilities, (decoder tokens, vocab); everything is recorded into ``trace``.
    """
    memory = stack(trace, ENCODER, source_ids, w, m) if ENCODER in stacks(m) else None
    y = stack(trace, DECODER, target_ids, w, m, memory)
    tokens, vocabulary = trace.target_tokens, trace.vocabulary_of(OUTPUT)
    scores = K.logits(
        K.open_stage(trace, stage_id(OUTPUT, "logits"), K.LOGITS, m), w, y, tokens, vocabulary, m
    )
    rows = ("flattened",) if m.output_head == "flatten" else tokens
    return K.probabilities(K.open_stage(trace, stage_id(OUTPUT, "probabilities"), K.PROBABILITIES_KIND, m),
                           scores, rows, vocabulary)  # fmt: skip


def _ids(config: Config, ids: Sequence[int] | None, side: str) -> tuple[list[int], tuple[str, ...]]:
    """The token ids the stack ``side`` reads (the config's sentence when None), checked against
    that side's vocabulary, and their labels (``token_labels`` of its pieces)."""
    text = "source" if side == ENCODER else "target"
    vocabulary = config.vocabulary_of(side)
    if side == ENCODER and config.model.decoder_only:
        if ids:
            raise WalkthroughError("source ids: a decoder-only model has no encoder to feed")
        return [], ()
    if ids is None:
        tokens = config.source_tokens if side == ENCODER else config.target_tokens
        return config.token_ids(tokens), token_labels(tokens)
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < len(vocabulary)]
    if not ids or bad:
        raise WalkthroughError(
            f"{text} ids: need 1 or more ids from 0 to {len(vocabulary) - 1}; got {bad or 'none'}"
        )
    m = config.model
    if m.positional_encoding == "learned" and len(ids) > m.max_positions:
        raise WalkthroughError(
            f"{text} ids: {len(ids)} tokens, but the learned positions have {m.max_positions} rows "
            "(model.max_positions)"
        )
    if side == DECODER and config.model.output_head == "flatten" and len(ids) != len(config.target_tokens):
        raise WalkthroughError(
            f"target ids: the flatten head is sized for {len(config.target_tokens)} decoder tokens"
        )
    return ids, token_labels([vocabulary[i] for i in ids])


def run_forward(
    config: Config,
    weights: Weights | None = None,
    *,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> Trace:
    """The whole forward pass, every stage recorded in a Trace.

    By default on the config's sentence; ``source_ids`` and ``target_ids`` (rows of the encoder's
    and the decoder's vocabulary, ``config.vocabulary_of``: a checkpoint's tokenizer gives them)
    feed any other input, of any length. Rows and columns are labelled by the tokens,
    ``piece@position`` where a piece repeats.
    """
    src, source_tokens = _ids(config, source_ids, ENCODER)
    tgt, target_tokens = _ids(config, target_ids, DECODER)
    trace = Trace(config, source_tokens, target_tokens, source_ids=tuple(src), target_ids=tuple(tgt))
    keep_freed_memory()  # the next pass reuses this trace's memory once it is dropped: ``heap``
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
    src, source_tokens = _ids(config, source_ids, ENCODER)
    tgt, target_tokens = _ids(config, target_ids, DECODER)
    null = NullTrace(config, source_tokens, target_tokens, source_ids=tuple(src), target_ids=tuple(tgt))
    return transformer(null, weights, config.model, src, tgt)
