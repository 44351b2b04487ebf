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
again on those rows, fed the very arrays the trace recorded (``Recorded``) or the model's weights,
into a trace of their own under the model's stage ids (``Lens.top``): ``explain`` reads a lens
cell from it.

The whole lens is layers × positions × vocabulary numbers, twice (logits and probabilities): 32
layers of 2,048 tokens over Llama 3's 128,256 pieces would be 67 GB. So the lens a command shows
keeps the top few tokens of each cell (``logit_lens(…, top=k)``), and the probability and rank of
the token that belongs there, computed a few layers at a time; the whole lens, for a notebook or a
test, is counted before it is allocated and refused past the memory limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..config import MAX_BYTES
from ..errors import WalkthroughError
from .architecture import DECODER, ENCODER, OUTPUT, connection, num_layers, stage_id, sublayers, top_stack
from .trace import Trace, top_k

if TYPE_CHECKING:
    from ..config import ModelConfig
    from .trace import Stage
    from .weights import Weights

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


def run_top(trace: Trace, x: np.ndarray, tokens: tuple[str, ...], weights: Weights | None = None) -> Trace:
    """What sits on top of the top stack, run again on the rows x (rows, d_model) labelled
    ``tokens``: the final norm (if any), BERT's transform (if any), the output layer, the softmax.

    Recorded into a trace of its own, with the stage ids of ``trace``'s own top (decoder.final-norm,
    output.transform, output.logits, output.probabilities); the lens reads its arrays and
    ``explain`` its cells. All rows go through at once: a (layers·n, d) by (d, vocab) product runs
    at the machine's GEMM speed, where one per layer would read W from memory once a layer. The
    parameters are the trace's own (``Recorded``), or ``weights``' when the trace kept no top.
    """
    from .transformer import Stack, final_norm, output_layer, softmax  # transformer imports the kinds

    m, w = trace.config.model, Recorded(trace) if weights is None else weights
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
    over the vocabulary (the next token's; in an encoder-only model, the word's at that position):
    whole, or its most likely tokens only (``logits`` and ``probabilities`` None)."""

    side: str  # the stack whose layers are read: the decoder, or an encoder-only model's encoder
    stages: tuple[str, ...]  # per layer, the stage whose output was read (decoder.N.residual-2)
    norm: str | None  # the final norm's stage (decoder.final-norm), or None: no final norm
    transform: str | None  # BERT's transform before the output layer (output.transform), or None
    output: str  # the stage whose W (and b) project to the vocabulary: output.logits
    tokens: tuple[str, ...]  # the positions (their tokens' labels)
    ids: tuple[int, ...]  # the token read at each position (its embedding row)
    vocabulary: tuple[str, ...]
    expected: tuple[int | None, ...]  # per position, the id of the token that really belongs there
    residual: tuple[np.ndarray, ...]  # per layer (n, d_model): x_N, the trace's own (not copied)
    # (layers, n, d_model): Top(x_N), what W reads; None with nothing on top, and in a top-k lens
    # (as large as ``residual`` again; ``explain_lens`` runs the top again on the cell it explains)
    read: np.ndarray | None
    logits: np.ndarray | None  # (layers, n, vocab); None: only the top tokens were kept
    probabilities: np.ndarray | None  # (layers, n, vocab); None: only the top tokens were kept
    best: np.ndarray  # (layers, n, k): each cell's most likely tokens, most likely first (``top``)
    best_p: np.ndarray  # (layers, n, k): their probabilities
    expected_p: np.ndarray  # (layers, n): the expected token's probability in each cell; NaN: none
    expected_rank: np.ndarray  # (layers, n): its rank there (1: the most likely); 0: none

    @property
    def layers(self) -> int:
        return len(self.stages)

    @property
    def kept(self) -> int:
        """How many tokens of each cell are known: the whole vocabulary, or the top k kept."""
        return len(self.vocabulary) if self.probabilities is not None else self.best.shape[-1]

    def hides(self, position: int) -> bool:
        """Whether the token read at ``position`` hides the one that belongs there: a blank of an
        encoder-only model (a decoder's expected token is the next one, never the one read)."""
        return self.side == ENCODER and self.ids[position] != self.expected[position]

    def top(self, k: int = 1) -> np.ndarray:
        """The ids of the k most likely tokens of every cell, most likely first: (layers, n, k)."""
        if k <= self.best.shape[-1]:
            return self.best[..., :k]
        if self.probabilities is None:
            raise WalkthroughError(
                f"--top-k: this lens kept the top {self.best.shape[-1]} of each cell, got {k}"
            )
        return top_tokens(self.probabilities, k)

    def probability(self, layer: int, position: int, token: int) -> float:
        """p(token) in the cell: from the whole lens, or from what the top-k lens kept of it."""
        if self.probabilities is not None:
            return float(self.probabilities[layer, position, token])
        if token == self.expected[position]:
            return float(self.expected_p[layer, position])
        return float(self.best_p[layer, position, self._slot(layer, position, token)])

    def rank(self, layer: int, position: int, token: int) -> int:
        """Where ``token`` stands in the cell's distribution: 1 is the most likely (ties: lower id first)."""
        if self.probabilities is None:
            if token == self.expected[position]:
                return int(self.expected_rank[layer, position])
            return self._slot(layer, position, token) + 1
        return rank_of(self.probabilities[layer, position], token)

    def _slot(self, layer: int, position: int, token: int) -> int:
        found = np.flatnonzero(self.best[layer, position] == token)
        if not found.size:
            raise WalkthroughError(
                f"the lens kept the top {self.kept} tokens of each cell, and id {token} is not one"
            )
        return int(found[0])


def rank_of(row: np.ndarray, token: int) -> int:
    """Where ``token`` stands in ``row``: 1 is the largest; ties: the lower id first (``top_k``'s order)."""
    p = row[token]
    return int(np.count_nonzero(row > p) + np.count_nonzero(row[:token] == p)) + 1


def top_tokens(p: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest entries of each row of p (..., vocab), largest first, ties in id
    order, as ``trace.top_k`` chooses them (the prediction table's rule): (..., k).

    A few (k up to ``FEW``) are found one at a time, every row at once: ``argmax`` takes the
    largest, lowest id among ties (top_k's order), which is then struck out (-inf) for the next.
    That reads each row k times, where ``argpartition`` costs a hundred reads of it (20 ms for a row
    of 200,000: the lens of 32 layers × 97 positions took 21 s). NaN counts as the smallest; a row
    that runs out of numbers above -inf is chosen again by ``top_k``, which puts -inf before NaN.
    More are partitioned, and a row with a tie at the k-th place (which argpartition may break
    either way), or with -inf or NaN there, is chosen again by ``top_k``.
    """
    k = min(k, p.shape[-1])
    rows = p.reshape(-1, p.shape[-1])
    if k <= FEW:
        q = np.where(np.isnan(rows), -np.inf, rows)  # a copy, struck out as the best are found
        best = np.empty((rows.shape[0], k), dtype=np.intp)
        every, spent = np.arange(rows.shape[0]), np.zeros(rows.shape[0], dtype=bool)
        for j in range(k):
            best[:, j] = q.argmax(axis=-1)
            spent |= q[every, best[:, j]] == -np.inf
            q[every, best[:, j]] = -np.inf
    else:
        q = np.where(np.isnan(rows), np.inf, -rows)  # ascending q is descending p, NaN last
        part = np.argpartition(q, k - 1, axis=1)[:, :k]
        values = np.take_along_axis(q, part, axis=1)
        best = np.take_along_axis(part, np.lexsort((part, values), axis=1), axis=1)
        kth = values.max(axis=1, keepdims=True)
        spent = ((q == kth).sum(axis=1) != (values == kth).sum(axis=1)) | (kth[:, 0] == np.inf)
    for r in np.flatnonzero(spent):
        best[r] = top_k(rows[r], k)
    return best.reshape(*p.shape[:-1], k)


FEW = 32  # up to this many top tokens are found one at a time (``top_tokens``)


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


TOP = 10  # the tokens of each cell a top-k lens keeps: `lens --top-k` shows up to this many
CHUNK = 32 * 2**20  # bytes of logits a top-k lens computes at once (one row at least)


def logit_lens(trace: Trace, top: int | None = None, weights: Weights | None = None) -> Lens:
    """The lens of every layer of the top stack, computed from what ``trace`` recorded (see the module):
    whole, or with ``top`` the ``top`` most likely tokens of each cell and the expected token's
    probability and rank, computed a few layers at a time. ``weights`` feed the top when the trace
    did not keep it (a trace that keeps each layer's output only, ``lens_stages``)."""
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
    residual = tuple(trace[s][trace[s].output] for s in stages)  # per layer (n, d): not copied
    layers, (n, _) = len(residual), residual[0].shape
    tokens = trace.source_tokens if side == ENCODER else trace.target_tokens
    vocabulary = trace.vocabulary_of(OUTPUT)
    expected = expected_tokens(trace)
    cell = len(vocabulary) * residual[0].itemsize
    if top is None and 2 * layers * n * cell > MAX_BYTES:
        raise WalkthroughError(
            f"the whole logit lens, {layers} layers × {n} positions × {len(vocabulary):,} tokens, would need "
            f"about {2 * layers * n * cell / 2**30:,.1f} GiB; keep the top k of each cell (`walkthrough lens "
            "--top-k`, logit_lens(trace, top=k)) instead"
        )
    norm = stage_id(side, "final-norm") if m.has_final_norm else None
    transform = TRANSFORM if m.output_transform else None
    # Each layer's positions through the top a chunk at a time: all at once for the whole lens,
    # about CHUNK bytes of logits each for a top-k one; row N·n + i of each part joined: layer N,
    # position i.
    rows = n if top is None else max(1, CHUNK // (3 * cell))
    parts = [
        _through_top(trace, x, range(i, min(i + rows, n)), tokens, expected, top, weights)
        for x in residual
        for i in range(0, n, rows)
    ]
    read, logits, probabilities, best, best_p, expected_p, expected_rank = (
        None if parts[0][k] is None else np.concatenate([p[k] for p in parts]).reshape(layers, n, -1)
        for k in range(7)
    )
    return Lens(
        side, tuple(stages), norm, transform, LOGITS, tokens,
        trace.source_ids if side == ENCODER else trace.target_ids, vocabulary, expected, residual,
        read if norm or transform else None, logits, probabilities, best, best_p, expected_p[..., 0],
        expected_rank[..., 0],
    )  # fmt: skip


def _through_top(
    trace: Trace, x: np.ndarray, rows: range, tokens: tuple[str, ...], expected: tuple[int | None, ...],
    top: int | None, weights: Weights | None,
) -> tuple[np.ndarray | None, ...]:  # fmt: skip
    """Some positions ``rows`` of one layer's output ``x`` (n, d_model) through the top (``run_top``):
    what W read, the logits and probabilities (None with ``top``), each row's ``top`` (or ``TOP``)
    most likely tokens and their probabilities, the expected token's probability and rank."""
    ran = run_top(trace, x[rows.start : rows.stop], tuple(tokens[r] for r in rows), weights)
    p = ran[PROBABILITIES]["probabilities"]
    best = top_tokens(p, min(top or TOP, p.shape[1]))
    # The expected token's probability and rank (``rank_of``) in every row at once; -1: none
    wanted = np.array([-1 if expected[r] is None else expected[r] for r in rows])
    known = wanted >= 0
    at = np.take_along_axis(p, np.maximum(wanted, 0)[:, None], axis=1)
    before = np.arange(p.shape[1]) < wanted[:, None]  # the ids below it: they come first among ties
    ranks = (p > at).sum(axis=1) + ((p == at) & before).sum(axis=1) + 1
    expected_p = np.where(known[:, None], at, np.nan)
    expected_rank = np.where(known, ranks, 0)[:, None]
    whole = top is None
    return (
        *((ran[LOGITS]["X"], ran[LOGITS]["logits"], p) if whole else (None, None, None)), best,
        np.take_along_axis(p, best, axis=-1), expected_p, expected_rank,
    )  # fmt: skip


def lens_stages(m: ModelConfig) -> list[str]:
    """The stages a lens reads, for a trace that keeps only those (``trace.Keep``): each layer's
    output; the top is run on the model's weights."""
    return layer_outputs(m, top_stack(m))
