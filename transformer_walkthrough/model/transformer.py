"""The transformer of Figure 1 (Vaswani et al., 2017), wired from the kinds of stage in ``kinds``.

Each sublayer sits inside a residual connection with a norm, and ``model.norm_placement`` says
where the norm goes: after the sum (post-norm, the paper: ``x = Norm(x + Sublayer(x))``), before
the sublayer (pre-norm, GPT-2 and most models since: ``x = x + Sublayer(Norm(x))``), on both sides
of it (Gemma 2 and 3) or on its output only (OLMo 2).
Which stacks exist, which sublayers a layer has, which stage comes after which and what each
reads come from the walk of ``architecture``; every stage records its matrices into the trace
and returns its output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..config import Config, ModelConfig
from ..errors import WalkthroughError
from . import architecture as A
from . import functional as F
from . import kinds as K
from .architecture import DECODER, ENCODER, OUTPUT, Block, Place, stacks
from .heap import keep_freed_memory
from .trace import EVERYTHING, Keep, LastRows, NothingMoreKept, NullTrace, Stage, Trace, token_labels
from .weights import Weights, init_weights

__all__ = [
    "Weights", "final_norm", "forward", "init_weights", "output_layer", "run_forward",
    "softmax", "transformer",
]  # fmt: skip

Sublayer = Callable[[Stage, np.ndarray], np.ndarray]  # (its stage, its input) -> its output


class Stack(NamedTuple):
    """What every stage of one stack reads besides its input: where it records, which tokens its
    rows are, the weights and the config; for a cached generation step, the position of its first
    row and the key/value cache."""

    trace: Trace
    side: str
    tokens: tuple[str, ...]
    w: Weights
    m: ModelConfig
    start: int = 0  # the position of the first row (a cached step's new token is at start)
    cache: Any = None  # generation.Cache: each layer's keys and values so far

    def open(self, place: Place) -> Stage:
        """The stage of ``place``, opened in the trace by its kind."""
        return K.KINDS[place.kind].open(self.trace, place.id, self.m, place.inputs)


def sublayer_connection(s: Stack, block: Block, x: np.ndarray, sublayer: Sublayer) -> np.ndarray:
    """A sublayer with its residual connection and its norms, where ``norm_placement`` puts them.

    post (the paper):    x = Norm(x + Sublayer(x))        stages: sublayer, add-norm-k
    pre (GPT-2, Llama):  x = x + Sublayer(Norm(x))        stages: norm-k, sublayer, residual-k
    both (Gemma 2, 3):   x = x + Norm(Sublayer(Norm(x)))  stages: norm-k, sublayer, output-norm-k, residual-k
    output (OLMo 2):     x = x + Norm(Sublayer(x))        stages: sublayer, output-norm-k, residual-k
    """
    if s.m.norm_placement == "post":
        out = sublayer(s.open(block.stage), x)
        return K.add_norm(s.open(block.after), s.w, x, out, s.tokens, s.m)
    read = x if block.norm is None else K.layer_norm(s.open(block.norm), s.w, x, s.tokens, s.m)
    out = sublayer(s.open(block.stage), read)
    if block.output_norm is not None:
        out = K.layer_norm(s.open(block.output_norm), s.w, out, s.tokens, s.m)
    return K.residual(s.open(block.after), x, out, s.tokens)


def layer(s: Stack, i: int, x: np.ndarray, memory: np.ndarray | None) -> np.ndarray:
    """One encoder or decoder layer: its sublayers (``architecture.layer``) in turn.

    Encoder: self-attention, feed-forward. Decoder: masked self-attention, cross-attention
    (queries from the decoder, keys and values from the encoder's output, ``memory``),
    feed-forward; a decoder-only model has no cross-attention.
    """
    w, m, tokens = s.w, s.m, s.tokens

    def sublayer(how: A.Sublayer) -> Sublayer:
        """The sublayer's computation, fed what the walk says it reads besides x."""
        if how.kind == "experts":
            return lambda stage, x: K.experts(stage, w, x, tokens, m)
        if how.keys is None:
            return lambda stage, x: K.feed_forward(stage, w, x, tokens, m)
        if how.keys == A.MEMORY:  # a cached step reads the keys and values projected at step 0
            kept = None if s.cache is None else s.cache.memory_of(i)
            return lambda stage, x: K.attend(stage, w, x, tokens, m, memory=memory,
                                             kv_tokens=s.trace.source_tokens, cache=kept)  # fmt: skip
        if not how.causal:
            return lambda stage, x: K.attend(stage, w, x, tokens, m)
        cache = None if s.cache is None else s.cache.layer(i)
        window = m.window(i)  # sliding_window, or none in a full layer of layer_types
        mask = F.causal_mask(len(tokens), x.dtype, s.start, window)
        if s.cache is not None and len(tokens) == 1 and (window is None or s.start < window):
            mask = None  # one new token sees every cached one (all within its window): no mask
        return lambda stage, x: K.attend(stage, w, x, tokens, m, mask=mask, cache=cache, layer=i)

    for block in A.layer(s.side, i, m):
        x = sublayer_connection(s, block, x, sublayer(block.sublayer))
    return x


def stack(s: Stack, ids: list[int], memory: np.ndarray | None = None) -> np.ndarray:
    """One stack of Figure 1, bottom to top: embed, add positions (and BERT's segments), the norm
    of the sum if any (``architecture.bottom``), the layers, the final norm if any."""
    m, segments = s.m, s.trace.segment_ids if s.side == ENCODER else ()
    bottom = {place.kind: place for place in A.bottom(s.side, m)}
    x = K.embed(s.open(bottom["embedding"]), s.w, ids, s.tokens, s.trace.vocabulary_of(s.side), m,
                s.start, segments)  # fmt: skip
    if "positional-encoding" in bottom:  # else inside each attention, or summed already
        x = K.add_positions(s.open(bottom["positional-encoding"]), s.w, x, s.tokens, m, s.start)
    if "embedding-norm" in bottom:
        x = K.layer_norm(s.open(bottom["embedding-norm"]), s.w, x, s.tokens, m)
    for i in range(A.num_layers(s.side, s.m)):
        x = layer(s, i, x, memory)
    return final_norm(s, x)


def final_norm(s: Stack, x: np.ndarray) -> np.ndarray:
    """The norm on top of a stack, when the model has one (``ModelConfig.has_final_norm``: a
    pre-norm stack's last residual is never normed otherwise); else x itself."""
    for place in A.final_norm(s.side, s.m):
        x = K.layer_norm(s.open(place), s.w, x, s.tokens, s.m)
    return x


def output_layer(
    trace: Trace, w: Weights, m: ModelConfig, y: np.ndarray, tokens: tuple[str, ...]
) -> np.ndarray:
    """The top of Figure 1 up to the logits: BERT's transform (if any), then the output layer, on
    the rows y of the top stack (its tokens ``tokens``). Returns the logits, (rows, vocab)."""
    out = Stack(trace, OUTPUT, tokens, w, m)
    head = {place.kind: place for place in A.head(m)}
    if "transform" in head:
        y = K.transform(out.open(head["transform"]), w, y, tokens, m)
    return K.logits(out.open(head["logits"]), w, y, tokens, trace.vocabulary_of(OUTPUT), m)


def softmax(trace: Trace, m: ModelConfig, scores: np.ndarray, rows: tuple[str, ...]) -> np.ndarray:
    """The softmax on top: each row of logits into probabilities over the vocabulary."""
    place = A.head(m)[-1]
    stage = K.KINDS[place.kind].open(trace, place.id, m, place.inputs)
    return K.probabilities(stage, scores, rows, trace.vocabulary_of(OUTPUT))


def encode(trace: Trace, w: Weights, m: ModelConfig, source_ids: list[int]) -> np.ndarray:
    """The encoder stack on the source ids: its output, (source tokens, d_model), the memory that
    every cross-attention of the decoder reads."""
    return stack(Stack(trace, ENCODER, trace.source_tokens, w, m), source_ids)


def decode(
    trace: Trace, w: Weights, m: ModelConfig, source_ids: list[int], target_ids: list[int],
    start: int = 0, cache: Any = None, memory: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """Figure 1 up to the logits: the encoder stack (if any), the decoder stack (if any), BERT's
    transform (if any), the output layer.

    Returns the logits, (tokens of the top stack, vocab): the decoder's, or an encoder-only model's
    encoder's; with ``task: encode`` (no output layer), the encoder's output itself. A cached
    generation step (``generation``) feeds the new tokens alone, from position ``start``, with the
    cache of what came before and the encoder's output computed once (``memory``), and gets the
    last row's logits only: the next token's.
    """
    if memory is None and ENCODER in stacks(m):
        memory = encode(trace, w, m, source_ids)
    if m.encoder_only:
        y, tokens = memory, trace.source_tokens
    else:
        y = stack(Stack(trace, DECODER, trace.target_tokens, w, m, start, cache), target_ids, memory)
        tokens = trace.target_tokens
    if m.task == "encode":
        return y
    if cache is not None:  # a generation step needs the next token after the last row only
        y, tokens = y[-1:], tokens[-1:]
    return output_layer(trace, w, m, y, tokens)


def transformer(
    trace: Trace, w: Weights, m: ModelConfig, source_ids: list[int], target_ids: list[int]
) -> np.ndarray:
    """Figure 1, bottom to top, and the softmax on top.

    Returns the probabilities, (tokens of the top stack, vocab): of the next token after each
    decoder position, or of the word at each encoder position (fill-mask); with ``task: encode``,
    the encoder's output. Everything is recorded into ``trace``.
    """
    scores = decode(trace, w, m, source_ids, target_ids)
    if m.task == "encode":
        return scores
    rows = trace.source_tokens if m.encoder_only else trace.target_tokens
    rows = ("flattened",) if m.output_head == "flatten" else rows
    return softmax(trace, m, scores, rows)


def _ids(config: Config, ids: Sequence[int] | None, side: str) -> tuple[list[int], tuple[str, ...]]:
    """The token ids the stack ``side`` reads (the config's sentence when None), checked against
    that side's vocabulary, and their labels (``token_labels`` of its pieces)."""
    text = "source" if side == ENCODER else "target"
    vocabulary = config.vocabulary_of(side)
    if side == ENCODER and config.model.decoder_only:
        if ids:
            raise WalkthroughError("source ids: a decoder-only model has no encoder to feed")
        return [], ()
    if side == DECODER and config.model.encoder_only:
        if ids:
            raise WalkthroughError("target ids: an encoder-only model has no decoder to feed")
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
    rows = m.max_positions - m.position_offset  # RoBERTa's first position reads row 2
    if m.positional_encoding == "learned" and len(ids) > rows:
        raise WalkthroughError(
            f"{text} ids: {len(ids)} tokens, but the learned positions have {rows} rows "
            "(model.max_positions" + (" − model.position_offset)" if m.position_offset else ")")
        )
    if side == DECODER and config.model.output_head == "flatten" and len(ids) != len(config.target_tokens):
        raise WalkthroughError(
            f"target ids: the flatten head is sized for {len(config.target_tokens)} decoder tokens"
        )
    return ids, token_labels([vocabulary[i] for i in ids])


def _answers(
    config: Config, source_ids: Sequence[int] | None, answer_ids: Sequence[int] | None
) -> tuple[int, ...]:
    """What each row of a fill-mask model should predict (-1: nothing): given, or the config's own
    sentence's hidden words; () when unknown (a checkpoint's prompt)."""
    if not config.model.encoder_only:
        return ()
    if answer_ids is None:
        if source_ids is not None:
            return ()
        return tuple(-1 if a is None else config.index[a] for a in config.answers)
    return tuple(int(a) for a in answer_ids)


def run_forward(
    config: Config,
    weights: Weights | None = None,
    *,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
    segment_ids: Sequence[int] | None = None,
    answer_ids: Sequence[int] | None = None,
    keep: Keep = EVERYTHING,
    weights_source: str | None = None,
    weights_checkpoint: bool = False,
) -> Trace:
    """The whole forward pass, every stage recorded in a Trace (or what ``keep`` keeps of it).

    By default on the config's sentence; ``source_ids`` and ``target_ids`` (rows of the encoder's
    and the decoder's vocabulary, ``config.vocabulary_of``: a checkpoint's tokenizer gives them)
    feed any other input, of any length. An encoder-only model also reads ``segment_ids`` (each
    token's sentence, all 0 when None) and is trained towards ``answer_ids`` (each row's hidden
    word, -1 where there is none; the config's blanks when None). Rows and columns are labelled by
    the tokens, ``piece@position`` where a piece repeats; ``weights_source`` says where the weights
    came from (None: drawn from the seed; a checkpoint's folder when ``weights_checkpoint``). A
    ``keep`` policy that keeps some stages only stops the pass once it has them all: the layers
    above are never computed.
    """
    src, source_tokens = _ids(config, source_ids, ENCODER)
    tgt, target_tokens = _ids(config, target_ids, DECODER)
    segments = _segments(config, segment_ids, len(src))
    trace = Trace(config, source_tokens, target_tokens, source_ids=tuple(src), target_ids=tuple(tgt),
                  segment_ids=segments, answer_ids=_answers(config, source_ids, answer_ids),
                  keep=keep, weights_source=weights_source,
                  weights_checkpoint=weights_checkpoint)  # fmt: skip
    keep_freed_memory()  # the next pass reuses this trace's memory once it is dropped: ``heap``
    w = weights if weights is not None else init_weights(config)
    with contextlib.suppress(NothingMoreKept):  # every stage kept is recorded: nothing above is shown
        transformer(trace, w, config.model, src, tgt)
    trace.finish()
    return trace


def _segments(config: Config, segment_ids: Sequence[int] | None, n: int) -> tuple[int, ...]:
    """Each encoder token's segment, checked against the segment table's rows; () for all 0."""
    if segment_ids is None:
        return ()
    segments = tuple(int(k) for k in segment_ids)
    rows = config.model.segments
    if len(segments) != n or any(not 0 <= k < rows for k in segments):
        raise WalkthroughError(
            f"segment ids: need {n} ids from 0 to {rows - 1} (model.segments), one per token; "
            f"got {list(segments)[:8]}"
            if rows
            else "segment ids: this model has no segment table (model.segments: 0)"
        )
    return segments


def _unrecorded(
    config: Config, source_ids: Sequence[int] | None, target_ids: Sequence[int] | None
) -> tuple[NullTrace, list[int], list[int]]:
    """A trace that records nothing, over the checked ids (``_ids``), and the ids."""
    src, source_tokens = _ids(config, source_ids, ENCODER)
    tgt, target_tokens = _ids(config, target_ids, DECODER)
    null = NullTrace(config, source_tokens, target_tokens, source_ids=tuple(src), target_ids=tuple(tgt))
    return null, src, tgt


def forward(
    config: Config,
    weights: Weights,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> np.ndarray:
    """The same arithmetic with nothing recorded: just the next-token probabilities."""
    null, src, tgt = _unrecorded(config, source_ids, target_ids)
    return transformer(null, weights, config.model, src, tgt)


def forward_logits(
    config: Config,
    weights: Weights,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> np.ndarray:
    """``forward`` up to the output layer: the logits (decoder tokens, vocab), which sampling divides by T."""
    null, src, tgt = _unrecorded(config, source_ids, target_ids)
    return decode(null, weights, config.model, src, tgt)


ROUTING = ("chosen", "routing_weights")  # what generation shows of a sparse layer's routing


def routed_logits(
    config: Config,
    weights: Weights,
    source_ids: Sequence[int] | None = None,
    target_ids: Sequence[int] | None = None,
) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
    """``forward_logits``, and each sparse layer's routing of the last row, under its stage id (its
    ``chosen`` experts and their ``routing_weights``; none without experts)."""
    null, src, tgt = _unrecorded(config, source_ids, target_ids)
    routed = LastRows(null.config, null.source_tokens, null.target_tokens, source_ids=null.source_ids,
                      target_ids=null.target_ids, kind="experts", names=ROUTING)  # fmt: skip
    return decode(routed, weights, config.model, src, tgt), routed.rows
