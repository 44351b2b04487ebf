"""The logit lens (nostalgebraist, 2020): what the model would predict if it stopped after layer N.

After each layer of the top stack — the decoder's, or an encoder-only model's encoder (BERT) —
every position's residual stream is put through what sits on top of that stack, as if the layers
above it were not there: the final norm when the model has one (``ModelConfig.has_final_norm``),
BERT's transform (``output_transform``), then the output layer and the softmax:

    lens_N = softmax(Top(x_N)·W + b)        x_N: the output of layer N, (n, d_model)
                                            Top: the final norm, or BERT's transform, or nothing

The last layer's lens is the model's own prediction; the ones below it show when the answer forms.
In the encoder–decoder the lens reads the decoder's layers: the encoder's output is never turned
into words (each cross-attention reads it), and its rows are the source's tokens, not next tokens.
In BERT a row is not a next token but the word at that position: at a blank, the hidden word.

Everything is computed from a recorded trace, and with the model's own stage functions: each
layer's output is the stage after its last sublayer (``architecture.connection(...).after``); the
top is ``transformer.final_norm``, ``transformer.output_layer`` and ``transformer.softmax`` run
again on those rows, fed the very arrays the trace recorded (``Recorded``), into a trace of their
own under the model's stage ids (``Lens.top``): ``explain`` reads a lens cell from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import WalkthroughError
from .architecture import DECODER, ENCODER, OUTPUT, connection, num_layers, stage_id, sublayers, top_stack
from .trace import Trace, top_k

if TYPE_CHECKING:
    from ..config import ModelConfig
    from .trace import Stage

LOGITS = stage_id(OUTPUT, "logits")
TRANSFORM = stage_id(OUTPUT, "transform")
PROBABILITIES = stage_id(OUTPUT, "probabilities")


def layer_outputs(m: ModelConfig, side: str = DECODER) -> list[str]:
    """The stage whose output is the residual stream after each layer of ``side``, bottom to top:
    the residual connection (or add & norm) around the layer's last sublayer."""
    last = len(sublayers(side, m))
    return [connection(side, i, last, m).after for i in range(num_layers(side, m))]


class Recorded:
    """The parameters a trace recorded, handed out as ``Weights.take`` hands out a model's: what
    the lens runs on top of each layer is the model's own stage functions with the very arrays the
    forward pass used (a vector was recorded as one row: every caller ravels it)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def take(self, stage: Stage, local: str) -> np.ndarray:
        used = self.trace[stage.id]
        stage.params[local] = used.params[local]  # the same parameter: tied W = Eᵀ stays tied
        return used[local]


def run_top(trace: Trace, x: np.ndarray, tokens: tuple[str, ...]) -> Trace:
    """What sits on top of the top stack, run again on the rows x (rows, d_model) labelled
    ``tokens``: the final norm (if any), BERT's transform (if any), the output layer, the softmax.

    Recorded into a trace of its own, with the stage ids of ``trace``'s own top (decoder.final-norm,
    output.transform, output.logits, output.probabilities); the lens reads its arrays and
    ``explain`` its cells. All rows go through at once: a (layers·n, d) by (d, vocab) product runs
    at the machine's GEMM speed, where one per layer would read W from memory once a layer.
    """
    from .transformer import Stack, final_norm, output_layer, softmax  # transformer imports the kinds

    m, w = trace.config.model, Recorded(trace)
    top = Trace(
        trace.config,
        trace.source_tokens,
        trace.target_tokens,
        weights_source=trace.weights_source,
        weights_checkpoint=trace.weights_checkpoint,
    )
    y = final_norm(Stack(top, top_stack(m), tokens, w, m), x)  # type: ignore[arg-type]
    softmax(top, m, output_layer(top, w, m, y, tokens), tokens)  # type: ignore[arg-type]
    return top


class Lens(NamedTuple):
    """The logit lens of one trace: for each layer of the top stack, each position's distribution
    over the vocabulary (the next token's; in an encoder-only model, the word's at that position)."""

    side: str  # the stack whose layers are read: the decoder, or an encoder-only model's encoder
    stages: tuple[str, ...]  # per layer, the stage whose output was read (decoder.N.residual-2)
    norm: str | None  # the final norm's stage (decoder.final-norm), or None: no final norm
    transform: str | None  # BERT's transform before the output layer (output.transform), or None
    output: str  # the stage whose W (and b) project to the vocabulary: output.logits
    tokens: tuple[str, ...]  # the positions (their tokens' labels)
    ids: tuple[int, ...]  # the token read at each position (its embedding row)
    vocabulary: tuple[str, ...]
    expected: tuple[int | None, ...]  # per position, the id of the token that really belongs there
    residual: np.ndarray  # (layers, n, d_model): x_N, as recorded
    read: np.ndarray | None  # (layers, n, d_model): Top(x_N), what W reads; None with nothing on top
    logits: np.ndarray  # (layers, n, vocab)
    probabilities: np.ndarray  # (layers, n, vocab)

    @property
    def layers(self) -> int:
        return len(self.stages)

    def hides(self, position: int) -> bool:
        """Whether the token read at ``position`` hides the one that belongs there: a blank of an
        encoder-only model (a decoder's expected token is the next one, never the one read)."""
        return self.side == ENCODER and self.ids[position] != self.expected[position]

    def top(self, k: int = 1) -> np.ndarray:
        """The ids of the k most likely tokens of every cell, most likely first: (layers, n, k)."""
        return top_tokens(self.probabilities, k)

    def rank(self, layer: int, position: int, token: int) -> int:
        """Where ``token`` stands in the cell's distribution: 1 is the most likely (ties: lower id first)."""
        row = self.probabilities[layer, position]
        p = row[token]
        return int(np.count_nonzero(row > p) + np.count_nonzero(row[:token] == p)) + 1


def top_tokens(p: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest entries of each row of p (..., vocab), largest first, ties in id
    order, as ``trace.top_k`` chooses them (the prediction table's rule): (..., k).

    k = 1 is one ``argmax`` over every row at once (it takes the lowest id among ties, as top_k
    does); a NaN, which argmax would pick, counts as the smallest.
    """
    if k == 1:
        q = np.where(np.isnan(p), -np.inf, p) if np.isnan(p).any() else p
        return q.argmax(axis=-1)[..., None]
    rows = p.reshape(-1, p.shape[-1])
    return np.stack([top_k(row, k) for row in rows]).reshape(*p.shape[:-1], min(k, p.shape[-1]))


def expected_tokens(trace: Trace) -> tuple[int | None, ...]:
    """The token that really belongs at each position of the top stack: after a decoder position
    the next one fed (the toy's sentence, a prompt's next token, the translation's next piece),
    None after the last; at an encoder-only model's blank the word hidden there (None when it is
    not known, a checkpoint's prompt), elsewhere the word read there."""
    if trace.config.model.encoder_only:
        mask = trace.config.mask_id  # at a blank, the word hidden there; elsewhere the word read
        return tuple(trace.answer(i) if token == mask else token for i, token in enumerate(trace.source_ids))
    ids = trace.target_ids
    return tuple(ids[i + 1] if i + 1 < len(ids) else None for i in range(len(trace.target_tokens)))


def logit_lens(trace: Trace) -> Lens:
    """The lens of every layer of the top stack, computed from what ``trace`` recorded (see the module)."""
    m = trace.config.model
    if m.output_head == "flatten":
        raise WalkthroughError(
            "the logit lens reads each position alone, and the flatten head's W reads every position "
            "at once (output_head: flatten): use output_head: per-position"
        )
    if m.task == "encode":
        raise WalkthroughError(
            "the logit lens turns each layer's output into words, and this model has no output layer "
            "(task: encode)"
        )
    side = top_stack(m)
    stages = layer_outputs(m, side)
    if not stages:
        raise WalkthroughError(f"the logit lens reads the {side}'s layers, and this model has none")
    residual = np.stack([trace[s][trace[s].output] for s in stages])  # (layers, n, d)
    layers, n, d = residual.shape
    tokens = trace.source_tokens if side == ENCODER else trace.target_tokens
    # every layer's rows at once: row N·n + i is layer N, position i
    top = run_top(trace, residual.reshape(layers * n, d), tokens * layers)
    norm = stage_id(side, "final-norm") if m.has_final_norm else None
    transform = TRANSFORM if m.output_transform else None
    logits, probabilities = top[LOGITS]["logits"], top[PROBABILITIES]["probabilities"]
    vocab = logits.shape[1]
    return Lens(
        side,
        tuple(stages),
        norm,
        transform,
        LOGITS,
        tokens,
        trace.source_ids if side == ENCODER else trace.target_ids,
        trace.vocabulary_of(OUTPUT),
        expected_tokens(trace),
        residual,
        top[LOGITS]["X"].reshape(layers, n, d) if norm or transform else None,
        logits.reshape(layers, n, vocab),
        probabilities.reshape(layers, n, vocab),
    )
