"""Drawing the next token instead of taking the most likely: transformers' ``generate(do_sample=True)``.

Its warpers run in this order (``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``), each on what the one before left, and then one draw:

    z = logits / T                  temperature: T < 1 sharpens the distribution, T > 1 flattens it
    keep z_i ≥ the k-th largest z   top-k: every token tied with the k-th is kept too
    keep the most likely tokens until their probabilities add up to ≥ p
                                    top-p (nucleus): the token that reaches p is kept
    q_i = e^z_i / Σ_kept e^z_j      the softmax over the tokens kept: they sum to 1 again
    u ~ U[0, 1); the token drawn is the first kept one, most likely first, whose running sum of q
    exceeds u: each token owns a stretch of [0, 1) as long as its probability.

Greedy is the limit T → 0: z / T grows without bound, and the softmax puts all its weight on the
largest logit. ``--temperature 0`` is therefore greedy decoding (transformers refuses 0 and says
to turn sampling off), and nothing is drawn.

The random numbers come from numpy's ``default_rng(seed)`` (PCG64): the same seed gives the same
numbers, and so the same text, on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from ..errors import WalkthroughError
from . import functional as F


@dataclass(frozen=True)
class Sampling:
    """How each next token is drawn: the temperature, the top k and the top p (None: not cut), the seed.

    ``temperature`` 0 is greedy decoding (``greedy``); the checks are the command line's.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise WalkthroughError(f"--temperature: must be 0 (greedy) or more, got {self.temperature:g}")
        if self.top_k is not None and self.top_k < 1:
            raise WalkthroughError(f"--top-k: must be 1 or more, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:  # NaN is refused too
            raise WalkthroughError(f"--top-p: must be more than 0 and at most 1, got {self.top_p:g}")
        if self.seed < 0:  # numpy's generators take any integer from 0 up
            raise WalkthroughError(f"--seed: must be 0 or more, got {self.seed}")

    @property
    def greedy(self) -> bool:
        """T = 0: all the probability on the most likely token; nothing to draw."""
        return self.temperature == 0

    def check(self, vocabulary: int) -> None:
        """Refuse a top k larger than the vocabulary (transformers would quietly keep them all)."""
        if self.top_k is not None and self.top_k > vocabulary:
            raise WalkthroughError(
                f"--top-k: must be 1 to {vocabulary}, the vocabulary's size, got {self.top_k}"
            )


class Uniform(Protocol):
    """What a draw needs of a generator: numpy's ``Generator.random``, one number in [0, 1)."""

    def random(self) -> float: ...


def temperature(logits: np.ndarray, T: float) -> np.ndarray:  # (vocab,), T > 0 -> (vocab,)
    """z = logits / T, as ``TemperatureLogitsWarper``: softmax(z) is sharper for T < 1, flatter for T > 1."""
    return logits / T


def top_k_mask(logits: np.ndarray, k: int) -> np.ndarray:  # (vocab,), k -> (vocab,) bool
    """The tokens ``TopKLogitsWarper`` keeps: every logit ≥ the k-th largest, so a tie with the k-th
    keeps all the tied tokens (more than k); k is at least 1 (``min_tokens_to_keep``) and at most
    the vocabulary."""
    n = logits.size
    k = min(max(k, 1), n)
    kth = np.partition(logits, n - k)[n - k]  # the k-th largest
    return logits >= kth


def ranked(logits: np.ndarray) -> np.ndarray:  # (n,) -> (n,)
    """The ids from the most likely to the least, equal logits in id order (as ``argmax`` picks).

    ``np.argsort(kind="stable")`` is that, and five times slower on a vocabulary of 50,257 than
    the quicksort, which leaves ties in any order: so the quicksort, then each run of ties put in
    id order (a few in real logits; past ``TIED_RUNS`` of them, the stable sort is quicker)."""
    order = np.argsort(-logits)
    v = logits[order]
    tied = np.flatnonzero(v[1:] == v[:-1])  # position i ties with i + 1
    if tied.size:
        runs = np.split(tied, np.flatnonzero(np.diff(tied) != 1) + 1)
        if len(runs) > TIED_RUNS:
            return np.argsort(-logits, kind="stable")
        for run in runs:
            order[run[0] : run[-1] + 2].sort()
    return order


TIED_RUNS = 64


def top_p_mask(logits: np.ndarray, p: float, order: np.ndarray | None = None) -> np.ndarray:
    """The tokens ``TopPLogitsWarper`` keeps: the fewest most likely ones whose probabilities add up to
    ≥ p, the one that reaches p included, and always the most likely (``min_tokens_to_keep`` = 1).
    (logits: (n,), 0 < p ≤ 1, ``order``: ``ranked(logits)`` when the caller has it -> (n,) bool.)

    Computed as transformers does, so that the same sums are rounded the same way: the softmax in
    ascending order, its running sums, and a token removed when the sum up to it is ≤ 1 − p (all
    that it and the less likely ones hold fits in 1 − p). Among tokens of equal probability the
    lower id counts as the more likely (as ``argmax``): it is kept when only some of them are.
    (torch.sort, which transformers uses, is not stable: which of the tied tokens it keeps is not
    a rule.) A token of probability 0 (its logit −∞, or an exp that underflows) is never kept."""
    ascending = (ranked(logits) if order is None else order)[::-1]  # ties: the highest id first
    running = np.cumsum(F.softmax(logits[ascending]))
    removed = running <= 1 - p
    removed[-1] = False  # the most likely token stays, whatever p
    keep = np.ones(logits.size, dtype=bool)
    keep[ascending[removed]] = False
    return keep


def cumulative(q: np.ndarray) -> np.ndarray:  # (m,) -> (m,)
    """The running sums of q, divided by the last so that it is exactly 1 (as ``Generator.choice``):
    candidate i owns [sum before i, sum up to i), and a draw u < 1 always lands in one."""
    c = np.cumsum(q, dtype=np.float64)
    return c / c[-1]


def draw(q: np.ndarray, rng: Uniform) -> tuple[float, int]:  # (m,) -> u, index
    """One uniform u in [0, 1) and the candidate it falls on: the first whose running sum exceeds u.

    A candidate of probability 0 owns an empty stretch and is never drawn."""
    u = float(rng.random())
    return u, int(np.searchsorted(cumulative(q), u, side="right"))


class Draw(NamedTuple):
    """One step of sampling, everything a learner needs to redo it by hand."""

    scaled: np.ndarray  # (vocab,): z = logits / T (−∞ for a token ruled out before: banned, forced)
    after_top_k: int  # how many tokens top-k kept (every allowed one without --top-k)
    p: np.ndarray | None  # (vocab,): softmax(z) over what top-k kept, which top-p reads; None without it
    kept: np.ndarray  # (m,): the ids kept by top-k and then top-p, most likely first (ties: lowest id)
    q: np.ndarray  # (m,): their probabilities renormalised, the softmax of z over the kept
    cumulative: np.ndarray  # (m,): the running sums of q, the last exactly 1
    u: float  # the uniform number drawn
    index: int  # where u fell: kept[index] is the token drawn

    @property
    def chosen(self) -> int:
        return int(self.kept[self.index])


def sample(logits: np.ndarray, sampling: Sampling, rng: Uniform) -> Draw:  # (vocab,) -> Draw
    """Temperature, then top-k, then top-p (transformers' order, each on what is left), the
    softmax over the kept tokens, one draw. ``logits`` holds −∞ for a token that may not come
    next: it is never kept. Not for T = 0 (``Sampling.greedy``)."""
    if np.isnan(logits).any() or np.isposinf(logits).any() or not (logits > -np.inf).any():
        raise WalkthroughError("the logits are not finite numbers: the model's numbers overflowed")
    T = sampling.temperature
    with np.errstate(over="ignore"):
        z = temperature(logits, T)
    if np.isposinf(z).any() or np.isnan(z).any():
        raise WalkthroughError(
            f"--temperature {T:g}: the logits divided by it overflow; give 0 for greedy, or a larger T"
        )
    candidates = np.flatnonzero(z > -np.inf)  # a token ruled out before is no candidate
    if sampling.top_k is not None:
        candidates = candidates[top_k_mask(z[candidates], sampling.top_k)]
    candidates = candidates[ranked(z[candidates])]  # most likely first: the order of the draw
    kept, p = candidates, None
    if sampling.top_p is not None:
        # top-p on what top-k left (the others are −∞ to it, of probability 0: never kept)
        left = z[candidates]
        kept = candidates[top_p_mask(left, sampling.top_p, np.arange(left.size))]
        p = np.zeros_like(z)
        p[candidates] = F.softmax(left)
    q = F.softmax(z[kept])
    u, index = draw(q, rng)
    return Draw(z, candidates.size, p, kept, q, cumulative(q), u, index)
