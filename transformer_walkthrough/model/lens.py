"""The logit lens (nostalgebraist, 2020): what the model would predict if it stopped after layer N.

After each decoder layer, every position's residual stream is put through what sits on top of the
stack — the final norm when the model has one (``ModelConfig.has_final_norm``), then the output
layer and the softmax — as if the layers above it were not there:

    lens_N = softmax(Norm(x_N)·W + b)          x_N: the output of decoder layer N, (n, d_model)

The last layer's lens is the model's own prediction; the ones below it show when the answer forms.
In the encoder–decoder the lens reads the decoder's layers: the encoder's output is never turned
into words (each cross-attention reads it), and its rows are the source's tokens, not next tokens.

Everything is computed from a recorded trace, with the model's own pieces: each layer's output is
the stage after its last sublayer (``architecture.connection(...).after``), the norm is
``norms.norm_of(m).forward`` with the final norm's recorded gamma (and beta), the output layer is
``functional.linear`` with the logits stage's recorded W (and b), as ``kinds.output`` computes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import WalkthroughError
from . import functional as F
from .architecture import DECODER, OUTPUT, connection, num_layers, stage_id, sublayers
from .kinds.norms import norm_of
from .trace import top_k

if TYPE_CHECKING:
    from ..config import ModelConfig
    from .trace import Trace

LOGITS = stage_id(OUTPUT, "logits")
FINAL_NORM = stage_id(DECODER, "final-norm")


def layer_outputs(m: ModelConfig) -> list[str]:
    """The stage whose output is the residual stream after each decoder layer, bottom to top: the
    residual connection (or add & norm) around the layer's last sublayer."""
    last = len(sublayers(DECODER, m))
    return [connection(DECODER, i, last, m).after for i in range(num_layers(DECODER, m))]


def project(
    x: np.ndarray, normalize: Callable[[np.ndarray], np.ndarray] | None, W: np.ndarray, b: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Norm(x)·W + b and its softmax, row by row; x: (rows, d_model), W: (d_model, vocab), b: (vocab,).

    ``normalize`` is the final norm with its parameters (rows -> rows), or None for a stack without
    one. Returns (the normed rows or None, the logits, the probabilities). All layers' rows go in
    one product: a (layers·n, d) by (d, vocab) product runs at the machine's GEMM speed, where one
    per layer would read W from memory once a layer.
    """
    normed = None if normalize is None else normalize(x)
    logits = F.linear(x if normed is None else normed, W, b)
    return normed, logits, F.softmax(logits)


class Lens(NamedTuple):
    """The logit lens of one trace: for each decoder layer, each position's next-token distribution."""

    stages: tuple[str, ...]  # per layer, the stage whose output was read (decoder.N.residual-2)
    norm: str | None  # the final norm's stage (decoder.final-norm), or None: no final norm
    output: str  # the stage whose W (and b) project to the vocabulary: output.logits
    tokens: tuple[str, ...]  # the decoder's positions (their tokens' labels)
    vocabulary: tuple[str, ...]
    expected: tuple[int | None, ...]  # per position, the id of the token that really comes next
    residual: np.ndarray  # (layers, n, d_model): x_N, as recorded
    normed: np.ndarray | None  # (layers, n, d_model): Norm(x_N), or None without a final norm
    logits: np.ndarray  # (layers, n, vocab)
    probabilities: np.ndarray  # (layers, n, vocab)

    @property
    def layers(self) -> int:
        return len(self.stages)

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


def _norm(forward: Callable[..., np.ndarray], params: dict[str, np.ndarray], eps: float,
          x: np.ndarray) -> np.ndarray:  # fmt: skip
    return forward(x, params, eps)


def expected_tokens(trace: Trace) -> tuple[int | None, ...]:
    """The token that really follows each decoder position: the next one fed (the toy's sentence,
    a prompt's next token, the translation's next piece); None after the last."""
    ids = trace.target_ids
    return tuple(ids[i + 1] if i + 1 < len(ids) else None for i in range(len(trace.target_tokens)))


def logit_lens(trace: Trace) -> Lens:
    """The lens of every decoder layer, computed from what ``trace`` recorded (see the module)."""
    m = trace.config.model
    if m.output_head == "flatten":
        raise WalkthroughError(
            "the logit lens reads each position alone, and the flatten head's W reads every position "
            "at once (output_head: flatten): use output_head: per-position"
        )
    stages = layer_outputs(m)
    if not stages:
        raise WalkthroughError("the logit lens reads the decoder's layers, and this model has none")
    residual = np.stack([trace[s][trace[s].output] for s in stages])  # (layers, n, d)
    layers, n, d = residual.shape
    normalize = None
    if m.has_final_norm:
        norm, top = norm_of(m), trace[FINAL_NORM]
        params = {name: top[name].ravel() for name in norm.params}  # gamma (and beta), (d_model,)
        normalize = functools.partial(_norm, norm.forward, params, m.layer_norm_eps)
    out = trace[LOGITS]
    b = out["b"].ravel() if "b" in out else None
    normed, logits, probabilities = project(residual.reshape(layers * n, d), normalize, out["W"], b)
    vocab = logits.shape[1]
    return Lens(
        tuple(stages),
        FINAL_NORM if normalize is not None else None,
        LOGITS,
        trace.target_tokens,
        trace.vocabulary_of(OUTPUT),
        expected_tokens(trace),
        residual,
        None if normed is None else normed.reshape(layers, n, d),
        logits.reshape(layers, n, vocab),
        probabilities.reshape(layers, n, vocab),
    )
