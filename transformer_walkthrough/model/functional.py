"""The transformer's arithmetic as pure NumPy functions (Vaswani et al., 2017).

Arrays and ints in, arrays out: no config, no trace, no printing. Weights act on the right, as
in the paper (``X @ W_Q``), so a weight is stored ``(d_in, d_out)``. ``n`` counts positions
(tokens); ``h`` counts heads; ``d_k = d_model / h``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .erf import erf, erf32


def row_sums(x: np.ndarray) -> np.ndarray:
    """Σ_j x[..., j] as the product x·1 with a column of ones; x: (..., n) -> (..., 1).

    The sums of ``x.sum(axis=-1)`` up to rounding, in one BLAS call: NumPy reduces short rows one
    at a time, three times slower at a softmax's 128 columns or a LayerNorm's 512. The BLAS adds in
    an order of its own, which can depend on how many rows come at once: a row summed alone and
    the same row among others may differ in their last bit."""
    return (x @ np.ones(x.shape[-1], x.dtype))[..., None]


def softmax(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """softmax(x)_i = exp(x_i) / Σ_j exp(x_j), row by row (the last axis); x: (..., n) -> (..., n).

    An entry of -inf gets a weight of exactly 0, which is how the causal mask works. ``out`` (x
    itself, for scores made only to be weighed) receives the weights: no array the size of x made.
    """
    # Subtracting the row maximum cancels in the quotient and keeps exp() from overflowing.
    e = np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True), out=out)
    np.exp(e, out=e)  # in place: e is ours, and large attention stacks are memory-bound
    e /= row_sums(e)
    return e


def softcap(x: np.ndarray, c: float) -> np.ndarray:
    """c·tanh(x / c): x kept within ±c, smoothly (Gemma 2's soft cap of scores and logits).

    Near 0 it is x itself (tanh(t) ≈ t); far from 0 it flattens towards ±c, so no score or logit
    can run away. Computed as transformers writes it: divide, tanh, multiply."""
    return np.tanh(x / c) * c


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm(x) = gamma ⊙ (x - mean) / sqrt(var + eps) + beta, per row; x: (n, d) -> (n, d).

    The variance is the population variance (divide by d) and eps sits inside the square root,
    exactly as ``torch.nn.LayerNorm``; gamma, beta: (d,) or (1, d).
    """
    d = x.shape[-1]
    out = x - row_sums(x) / d
    var = np.einsum("...i,...i->...", out, out)[..., None] / d  # Σ (x - mean)², no squared copy of x
    out *= 1 / np.sqrt(var + eps)  # one division per row, then a product per number
    out *= gamma
    out += beta
    return out


def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm(x) = gamma ⊙ x / sqrt(mean(x²) + eps), per row (Zhang & Sennrich, 2019); x: (n, d) -> (n, d).

    No mean is subtracted and there is no beta: each row is divided by its root mean square, eps
    inside the root, exactly as ``torch.nn.RMSNorm``; gamma: (d,) or (1, d).
    """
    mean_square = np.einsum("...i,...i->...", x, x)[..., None] / x.shape[-1]  # no squared copy of x
    out = x * (1 / np.sqrt(mean_square + eps))  # one division per row, then a product per number
    out *= gamma
    return out


@functools.lru_cache(maxsize=16)
def positional_encoding(
    n: int, d_model: int, dtype: np.dtype | type = np.float64, halves: bool = False
) -> np.ndarray:
    """Sinusoidal PE (paper §3.5): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(…).

    Returns (n, d_model). Column j uses the angle of its even partner 2·⌊j/2⌋, so an odd
    d_model simply ends on a sine column. ``halves`` puts the same sines in the first ⌈d_model/2⌉
    columns and the cosines in the rest (Marian's layout): column i and column ⌈d/2⌉ + i share
    the angle pos / 10000^(2i/d_model). It depends on the shape alone, so it is computed once per
    shape and handed out read-only.
    """
    pos = np.arange(n, dtype=np.float64)[:, None]
    if halves:
        sines = (d_model + 1) // 2
        angle = pos / np.power(10000.0, 2 * np.arange(sines, dtype=np.float64) / d_model)
        pe = np.hstack([np.sin(angle), np.cos(angle[:, : d_model - sines])]).astype(dtype)
    else:
        two_i = (np.arange(d_model) // 2 * 2).astype(np.float64)
        angle = pos / np.power(10000.0, two_i / d_model)
        pe = np.where(np.arange(d_model) % 2 == 0, np.sin(angle), np.cos(angle)).astype(dtype)
    pe.flags.writeable = False
    return pe


@functools.lru_cache(maxsize=16)
def causal_mask(
    n: int, dtype: np.dtype | type = np.float64, past: int = 0, window: int | None = None
) -> np.ndarray:
    """M: (n, past + n), 0 where position past + i may look (at j ≤ past + i) and -inf above:
    n new positions after ``past`` cached ones see every cached one and the new ones up to themselves.

    With a sliding ``window`` (Mistral), position p sees only p − window < j ≤ p: a band of width
    ``window`` (transformers' ``sliding_window_overlay``). Read-only, and computed once per size."""
    mask = np.triu(np.full((n, past + n), -np.inf, dtype=dtype), k=past + 1)
    if window is not None:
        mask[np.tril(np.ones(mask.shape, dtype=bool), k=past - window)] = -np.inf
    mask.flags.writeable = False
    return mask


def linear(x: np.ndarray, W: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """x·W + b; x: (n, d_in), W: (d_in, d_out), b: (d_out,) or (1, d_out) -> (n, d_out)."""
    y = x @ W
    if b is not None:
        y += b  # in place: the product is a new array
    return y


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """(n, h·d_k) -> (h, n, d_k): head h owns the h-th contiguous block of d_k columns."""
    n, d = x.shape
    return x.reshape(n, num_heads, d // num_heads).transpose(1, 0, 2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(h, n, d_k) -> (n, h·d_k): the heads side by side, head 1 leftmost (the paper's Concat)."""
    h, n, d_k = x.shape
    return x.transpose(1, 0, 2).reshape(n, h * d_k)


class Attention(NamedTuple):
    """Every intermediate of scaled dot-product attention, for one head or a stack of heads."""

    scores: np.ndarray  # S = Q·Kᵀ / √d_k            (..., n_q, n_k)
    masked_scores: np.ndarray | None  # S + M, or None without a mask
    weights: np.ndarray  # A = softmax(S + M)          (..., n_q, n_k)
    output: np.ndarray  # O = A·V                      (..., n_q, d_v)


def scaled_dot_product_attention(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, mask: np.ndarray | None = None
) -> Attention:
    """Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + M)·V (paper eq. 1).

    Q: (..., n_q, d_k), K: (..., n_k, d_k), V: (..., n_k, d_v), mask: (n_q, n_k) or None.
    Dividing by √d_k keeps the scores' variance near 1 whatever d_k is, for q and k of independent
    unit-variance entries (the paper's footnote 4), so softmax does not saturate.
    """
    scores = Q @ np.swapaxes(K, -1, -2)
    scores *= 1 / math.sqrt(Q.shape[-1])  # a Python float keeps float32 float32
    masked = None if mask is None else scores + mask
    weights = softmax(scores if masked is None else masked)
    return Attention(scores, masked, weights, weights @ V)


SCORES_AT_ONCE = 1 << 22  # attention in blocks holds this many scores at once: 16 MiB of float32
CAUSAL_ROWS = 256  # and, in a causal layer, at most this many queries a block


def attention_in_blocks(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, scale: float = 1.0, *, causal: bool = False,
    window: int | None = None, bias: Callable[[slice, slice], np.ndarray] | None = None,
    cap: float | None = None, block: int | None = None,
) -> np.ndarray:  # fmt: skip
    """softmax(cap(Q·Kᵀ·scale + B) + M)·V of every head, its scores and weights never whole: a block
    of query rows at a time. Q: (h, n_q, d_k), K: (G, n_k, d_k), V: (G, n_k, d_v) -> O: (h, n_q, d_v).

    The same arithmetic as the pieces Scores … Weigh, in their order, with nothing kept: the scores
    of a block live only until its weights have weighed V (softmax in place), so memory holds
    ``block`` scores at a time (query rows × keys × the h/G query heads of one key/value head),
    not h·n_q·n_k. ``causal`` (position i sees keys j ≤ i; only those past i − ``window`` with a
    sliding window) computes each block against only the keys its rows see: about half of the
    products Q·Kᵀ and A·V of a long prompt, and the band alone under a window. ``bias(rows, keys)``
    gives B for those (h, rows, keys) (T5's relative positions); ``cap`` soft-caps the scores
    (Gemma 2). The h/G query heads of a group meet their key/value head in one product each.
    ``block``: the scores held at once, ``SCORES_AT_ONCE`` when None.
    """
    h, n_q, d_k = Q.shape
    G, n_k, _ = K.shape
    share = h // G  # the query heads that read one key/value head
    O = np.empty((h, n_q, V.shape[-1]), dtype=np.result_type(Q, V))
    rows_at_once = max(1, (block or SCORES_AT_ONCE) // (share * n_k))
    if causal:  # the smaller the blocks, the more keys after their last query skipped: ~n_q·n_k/2 in all
        rows_at_once = min(rows_at_once, CAUSAL_ROWS)
    for first in range(0, n_q, rows_at_once):
        rows = slice(first, min(first + rows_at_once, n_q))
        keys = _keys_seen(rows, n_k, causal, window)
        hidden = None  # where M is −∞: a later key, or one past the window
        if causal:  # query i is position i, key j position j
            query, key = np.arange(rows.start, rows.stop)[:, None], np.arange(keys.start, keys.stop)
            hidden = key > query
            if window is not None:
                hidden |= key <= query - window
        B = None if bias is None else bias(rows, keys)
        for g in range(G):
            heads = slice(g * share, (g + 1) * share)
            q = Q[heads, rows].reshape(-1, d_k)  # the group's heads' rows one above the other: one product
            S = (q @ K[g, keys].T).reshape(share, -1, keys.stop - keys.start)
            if scale != 1.0:
                S *= scale  # a Python float keeps float32 float32
            if B is not None:
                S += B[heads]
            if cap is not None:  # c·tanh(S / c), in place
                S /= cap
                np.tanh(S, out=S)
                S *= cap
            if hidden is not None:
                np.copyto(S, -np.inf, where=hidden)  # S + M: M is −∞ there, 0 elsewhere
            A = softmax(S, out=S)
            O[heads, rows] = (A.reshape(-1, A.shape[-1]) @ V[g, keys]).reshape(share, -1, V.shape[-1])
    return O


def _keys_seen(rows: slice, n_k: int, causal: bool, window: int | None) -> slice:
    """The keys any of the query ``rows`` sees: all, or causal up to the last row (and from the
    first row's window on)."""
    if not causal:
        return slice(0, n_k)
    start = 0 if window is None else max(0, rows.start - window + 1)
    return slice(start, rows.stop)


class Rotation(NamedTuple):
    """The rotary tables: row p holds the cos and sin of position p's angle for every column."""

    cos: np.ndarray  # (n, d_k)
    sin: np.ndarray  # (n, d_k)


class RopeScaling(NamedTuple):
    """rotary's frequencies: the base theta and how they are stretched (transformers' ``rope_type``)."""

    theta: float = 10000.0
    kind: str = "default"  # "default", "linear" or "llama3" (config.ROPE_SCALINGS)
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only, as the three below
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192


UNSCALED = RopeScaling()  # theta 10,000, no scaling (the paper of Su et al.)


def rotary_frequencies(d_k: int, rope: RopeScaling) -> np.ndarray:
    """θ_i, i < d_k/2: how fast pair i turns per position, θ_i = theta^(−2i/d_k), then scaled.

    ``linear`` divides every θ_i by the factor (positions stretched: pos/factor). ``llama3`` (Llama
    3.1) divides only the slow pairs, whose wavelength 2π/θ_i exceeds original/low_freq_factor, keeps
    the fast ones (wavelength below original/high_freq_factor), and blends linearly between, as
    transformers' ``_compute_llama3_parameters``."""
    inv_freq = 1.0 / rope.theta ** (np.arange(0, d_k, 2, dtype=np.float64) / d_k)
    if rope.kind == "default":
        return inv_freq
    if rope.kind == "linear":
        return inv_freq / rope.factor
    if rope.kind == "llama3":
        wavelength = 2 * math.pi / inv_freq
        old = rope.original_max_positions
        smooth = (old / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        blended = (1 - smooth) * inv_freq / rope.factor + smooth * inv_freq
        slow, fast = wavelength > old / rope.low_freq_factor, wavelength < old / rope.high_freq_factor
        return np.where(slow, inv_freq / rope.factor, np.where(fast, inv_freq, blended))
    raise ValueError(f"unknown rope scaling {rope.kind!r}")


@functools.lru_cache(maxsize=16)
def rotary(
    n: int, d_k: int, rope: RopeScaling = UNSCALED, dtype: np.dtype | type = np.float64, start: int = 0
) -> Rotation:
    """The rotary tables of positions start … start + n − 1: cos and sin, (n, d_k) each (Su et al., 2021).

    Pair i of a head's d_k dimensions (i < d_k/2) turns by the angle pos·θ_i (``rotary_frequencies``):
    column i and column i + d_k/2 hold the same angle, as Hugging Face's Llama lays them out
    (``rotate_half``). Computed in float64, then rounded to ``dtype``; read-only, and computed once
    per size (each layer of a pass reads the same tables).
    """
    if d_k % 2:
        raise ValueError(f"rotary turns pairs of dimensions: d_k must be even, got {d_k}")
    angles = np.arange(start, start + n, dtype=np.float64)[:, None] * rotary_frequencies(d_k, rope)[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    cos.flags.writeable = sin.flags.writeable = False  # computed once per size and shared: read-only
    return Rotation(cos, sin)


def rotate_half(x: np.ndarray) -> np.ndarray:
    """(x_1, x_2) -> (−x_2, x_1), the halves of the last axis: column i pairs with i + d_k/2."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x: np.ndarray, r: Rotation) -> np.ndarray:
    """Each pair (x_i, x_{i+d_k/2}) of each row turned by its angle: x·cos + rotate_half(x)·sin.

    x: (..., n, d_k); the tables (n, d_k) broadcast over the heads."""
    return x * r.cos + rotate_half(x) * r.sin


def apply_rotary_backward(dy: np.ndarray, r: Rotation) -> np.ndarray:
    """dL/dx of y = x·cos + rotate_half(x)·sin: a rotation's transpose turns back by the same angle,
    so dx = dy·cos + rotate_halfᵀ(dy·sin), rotate_halfᵀ(g) = (g_2, −g_1)."""
    g = dy * r.sin
    half = g.shape[-1] // 2
    return dy * r.cos + np.concatenate([g[..., half:], -g[..., :half]], axis=-1)


def relative_buckets(
    queries: np.ndarray, keys: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int
) -> np.ndarray:
    """T5's bucket of each (query, key) pair (Raffel et al., 2020, §2.1); positions (n_q,), (n_k,)
    -> (n_q, n_k) ints in [0, num_buckets).

    The distance is key − query. Bidirectional (the encoder): keys after the query take the upper
    half of the buckets, keys before it the lower, each by |distance|; causal (the decoder): only
    keys before it count, a later key is distance 0. Of a direction's b buckets, the first b/2 hold
    one distance each (exact); the rest are log-spaced up to max_distance, beyond which every
    distance shares the last:

        bucket = b/2 + ⌊ln(distance / (b/2)) / ln(max_distance / (b/2)) · (b − b/2)⌋

    In float32, as T5 computes it (Mesh TensorFlow, transformers): a distance on a bucket's edge
    (16 of 32 buckets up to 128) falls where float32's rounding puts it.
    """
    relative = keys[None, :] - queries[:, None]
    bucket = np.zeros(relative.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        bucket += (relative > 0) * num_buckets
        distance = np.abs(relative)
    else:
        distance = np.maximum(-relative, 0)
    exact = num_buckets // 2
    small = distance < exact
    spread = np.log(np.maximum(distance, exact).astype(np.float32) / np.float32(exact))
    spread = spread / np.float32(math.log(max_distance / exact)) * np.float32(num_buckets - exact)
    logged = np.minimum(exact + spread.astype(np.int64), num_buckets - 1)
    return bucket + np.where(small, distance, logged)


def relative_bias(table: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Each head's bias B_h[i, j] = table[bucket(i, j), h]; table (num_buckets, h), buckets (n_q, n_k)
    -> (h, n_q, n_k)."""
    return np.moveaxis(table[buckets], -1, 0)


def relative_bias_backward(dB: np.ndarray, buckets: np.ndarray, num_buckets: int) -> np.ndarray:
    """dL/d(table): each row (bucket) gathers dB of every cell that read it, head by head;
    dB (h, n_q, n_k) -> (num_buckets, h)."""
    d_table = np.zeros((num_buckets, dB.shape[0]), dtype=dB.dtype)
    np.add.at(d_table, buckets.ravel(), dB.reshape(dB.shape[0], -1).T)
    return d_table


def group(x: np.ndarray, G: int) -> np.ndarray:
    """(h, n, d) -> (G, h/G·n, d): the h/G query heads that read one key/value head, one above the
    other, so that each group meets its keys or values (G, m, d) in one product (one BLAS call per
    group, not a broadcast over heads, which NumPy multiplies a few times slower). A view when x
    is contiguous."""
    h, n, d = x.shape
    return x.reshape(G, h // G * n, d)


# The feed-forward's nonlinearity. Each takes the pre-activation and returns a new array.
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def relu(x: np.ndarray) -> np.ndarray:
    """max(0, x) (the paper)."""
    # Against a row of zeros, not the number 0: NumPy's vector loop for maximum wants two arrays,
    # and with a scalar runs twice as slow.
    return np.maximum(x, np.zeros(x.shape[-1], x.dtype))


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x) = (1 + erf(x/√2))/2, the standard normal's CDF, in x's dtype (float32 in float32)."""
    if x.dtype == np.float32:
        return 0.5 * (1.0 + erf32(x * np.float32(1 / math.sqrt(2.0))))
    return 0.5 * (1.0 + erf(x * (1 / math.sqrt(2.0))).astype(x.dtype))


def gelu(x: np.ndarray) -> np.ndarray:
    """x·Φ(x), Φ the standard normal's CDF (torch's "gelu")."""
    return x * normal_cdf(x)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2: GPT-2's approximation of GELU."""
    # x·x·x, as PyTorch's kernel: NumPy's x**3 calls pow() cell by cell, 50 times slower
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """σ(x) = 1/(1 + e^(−x)); where e^(−x) overflows (x below about −88 in float32, −709 in float64)
    it is ∞ and 1/∞ is the limit, 0: torch's own formula, with no branch to pay for."""
    with np.errstate(over="ignore"):
        e = np.exp(-x)
    e += 1.0
    return np.reciprocal(e, out=e)


def silu(x: np.ndarray) -> np.ndarray:
    """x·σ(x) = x / (1 + e^(−x)) (Marian's "swish", Llama's SwiGLU); x / ∞ is −0 where e^(−x) overflows."""
    with np.errstate(over="ignore"):
        e = np.exp(-x)
    e += 1.0
    return np.divide(x, e, out=e)


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu-tanh": gelu_tanh, "silu": silu}


def activation_backward(dy: np.ndarray, x: np.ndarray, activation: str) -> np.ndarray:
    """dL/dx of y = activation(x), given dL/dy."""
    if activation == "relu":
        return dy * (x > 0)  # ReLU passes gradient only where it passed the value
    if activation == "gelu":  # d/dx x·Φ(x) = Φ(x) + x·φ(x)
        return dy * (normal_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    if activation == "gelu-tanh":
        t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x))
    if activation == "silu":  # d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))
        s = sigmoid(x)
        return dy * (s * (1 + x * (1 - s)))
    raise ValueError(f"unknown activation {activation!r}")


class FeedForward(NamedTuple):
    pre: np.ndarray  # X·W_1 + b_1             (n, d_ff)
    hidden: np.ndarray  # activation(pre)       (n, d_ff)
    output: np.ndarray  # hidden·W_2 + b_2      (n, d_model)


def feed_forward(
    x: np.ndarray,
    W_1: np.ndarray,
    b_1: np.ndarray | None,
    W_2: np.ndarray,
    b_2: np.ndarray | None,
    activation: str = "relu",
) -> FeedForward:
    """FFN(x) = act(x·W_1 + b_1)·W_2 + b_2, act = ReLU in the paper (eq. 2).

    x: (n, d_model), W_1: (d_model, d_ff), b_1: (d_ff,), W_2: (d_ff, d_model), b_2: (d_model,);
    a bias of None is none (``ffn_bias: false``)."""
    pre = linear(x, W_1, b_1)
    hidden = ACTIVATIONS[activation](pre)
    return FeedForward(pre, hidden, linear(hidden, W_2, b_2))


class GatedFeedForward(NamedTuple):
    gate: np.ndarray  # X·W_gate + b_gate         (n, d_ff)
    up: np.ndarray  # X·W_up + b_up               (n, d_ff)
    hidden: np.ndarray  # activation(gate) ⊙ up   (n, d_ff)
    output: np.ndarray  # hidden·W_down + b_down  (n, d_model)


def gated_feed_forward(
    x: np.ndarray,
    W_gate: np.ndarray,
    W_up: np.ndarray,
    W_down: np.ndarray,
    activation: str = "silu",
    b_gate: np.ndarray | None = None,
    b_up: np.ndarray | None = None,
    b_down: np.ndarray | None = None,
) -> GatedFeedForward:
    """FFN(x) = (act(x·W_gate + b_gate) ⊙ (x·W_up + b_up))·W_down + b_down: a gated linear unit
    (Shazeer, 2020, "GLU Variants Improve Transformer"): SwiGLU with SiLU (Llama), GeGLU with GELU,
    ReGLU with ReLU. The bent gate scales the up projection cell by cell.

    x: (n, d_model), W_gate, W_up: (d_model, d_ff), W_down: (d_ff, d_model); b_gate, b_up: (d_ff,)
    and b_down: (d_model,), or None (Llama has none)."""
    gate = linear(x, W_gate, b_gate)
    up = linear(x, W_up, b_up)
    hidden = ACTIVATIONS[activation](gate)
    hidden *= up  # in place: the activation made a new array
    return GatedFeedForward(gate, up, hidden, linear(hidden, W_down, b_down))


# ---------------------------------------------------------------------------------------------
# Backward passes, each beside nothing but its forward's inputs and outputs: given dL/d(output),
# return dL/d(every input). Shapes as in the forward.
# ---------------------------------------------------------------------------------------------


def linear_backward(
    dy: np.ndarray, x: np.ndarray, W: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y = x·W + b  =>  dx = dy·Wᵀ, dW = xᵀ·dy, db = Σ_rows dy."""
    return dy @ W.T, x.T @ dy, dy.sum(axis=0)


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y = softmax(x) row-wise  =>  dx = y ⊙ (dy − Σ_j dy_j·y_j). A weight of 0 passes no gradient."""
    return y * (dy - np.sum(dy * y, axis=-1, keepdims=True))


def softcap_backward(dy: np.ndarray, y: np.ndarray, c: float) -> np.ndarray:
    """y = c·tanh(x / c)  =>  dx = dy·(1 − tanh²(x / c)) = dy·(1 − (y / c)²): the slope is 1 at 0 and
    falls towards 0 as y nears ±c."""
    t = y / c
    return dy * (1 - t * t)


def layer_norm_backward(
    dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dL/dx, dL/dgamma, dL/dbeta of y = gamma ⊙ x̂ + beta, x̂ = (x − mean) / √(var + eps), per row."""
    d = x.shape[-1]
    centered = x - x.mean(axis=-1, keepdims=True)
    inv_std = 1.0 / np.sqrt(np.einsum("...i,...i->...", centered, centered)[..., None] / d + eps)
    x_hat = centered * inv_std
    dx_hat = dy * gamma
    # x̂ depends on x through the mean and the variance too: remove the parts along 1 and along x̂.
    dx = inv_std * (
        dx_hat - dx_hat.mean(axis=-1, keepdims=True) - x_hat * (dx_hat * x_hat).mean(axis=-1, keepdims=True)
    )
    return dx, (dy * x_hat).sum(axis=0), dy.sum(axis=0)


def rms_norm_backward(
    dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """dL/dx (…, n, d) and dL/dgamma (d,) of y = gamma ⊙ x̂, x̂ = x / √(mean(x²) + eps), per row;
    gamma's gradient gathers every row's, of every head when x is (heads, n, d) (QK-norm)."""
    inv_rms = 1.0 / np.sqrt(np.einsum("...i,...i->...", x, x)[..., None] / x.shape[-1] + eps)
    x_hat = x * inv_rms
    dx_hat = dy * gamma
    # x̂ depends on x through the mean square too: remove the part along x̂.
    dx = inv_rms * (dx_hat - x_hat * (dx_hat * x_hat).mean(axis=-1, keepdims=True))
    return dx, (dy * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)


def scaled_dot_product_attention_backward(
    dO: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, A: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV, and dA, dS (S before the mask; a masked score gets 0) of O = softmax(S + M)·V."""
    dA = dO @ np.swapaxes(V, -1, -2)
    dV = np.swapaxes(A, -1, -2) @ dO
    dS = softmax_backward(dA, A)
    scale = 1 / math.sqrt(Q.shape[-1])
    return dS @ K * scale, np.swapaxes(dS, -1, -2) @ Q * scale, dV, dA, dS


def feed_forward_backward(
    dy: np.ndarray, x: np.ndarray, W_1: np.ndarray, W_2: np.ndarray, r: FeedForward, activation: str = "relu"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """dx, dW_1, db_1, dW_2, db_2, d(pre) and d(hidden) of FFN(x) = act(x·W_1 + b_1)·W_2 + b_2."""
    d_hidden, dW_2, db_2 = linear_backward(dy, r.hidden, W_2)
    d_pre = activation_backward(d_hidden, r.pre, activation)
    dx, dW_1, db_1 = linear_backward(d_pre, x, W_1)
    return dx, dW_1, db_1, dW_2, db_2, d_pre, d_hidden


class GatedFeedForwardGrads(NamedTuple):
    x: np.ndarray  # (n, d_model): through both projections
    W_gate: np.ndarray
    b_gate: np.ndarray
    W_up: np.ndarray
    b_up: np.ndarray
    W_down: np.ndarray
    b_down: np.ndarray
    gate: np.ndarray  # (n, d_ff), and so on: every intermediate, to show
    up: np.ndarray
    hidden: np.ndarray


def gated_feed_forward_backward(
    dy: np.ndarray, x: np.ndarray, W_gate: np.ndarray, W_up: np.ndarray, W_down: np.ndarray,
    r: GatedFeedForward, activation: str = "silu",
) -> GatedFeedForwardGrads:  # fmt: skip
    """The gradients of ``gated_feed_forward`` given its inputs and its forward result ``r``:
    hidden = act(gate) ⊙ up  =>  d(up) = d(hidden) ⊙ act(gate), d(gate) = act'(gate) ⊙ d(hidden) ⊙ up;
    x feeds both projections, so dx is the sum of theirs."""
    d_hidden, dW_down, db_down = linear_backward(dy, r.hidden, W_down)
    d_up = d_hidden * ACTIVATIONS[activation](r.gate)
    d_gate = activation_backward(d_hidden * r.up, r.gate, activation)
    dx_gate, dW_gate, db_gate = linear_backward(d_gate, x, W_gate)
    dx_up, dW_up, db_up = linear_backward(d_up, x, W_up)
    return GatedFeedForwardGrads(
        dx_gate + dx_up, dW_gate, db_gate, dW_up, db_up, dW_down, db_down, d_gate, d_up, d_hidden
    )


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean of −log softmax(logits)[i, targets[i]] over the rows that have a target (targets ≥ 0),
    and its gradient dL/dlogits = (softmax − one-hot) / count on those rows, 0 on the others."""
    rows = np.flatnonzero(targets >= 0)
    p = softmax(logits)
    loss = -float(np.mean(np.log(p[rows, targets[rows]])))
    d = np.zeros_like(logits)
    d[rows] = p[rows]
    d[rows, targets[rows]] -= 1.0
    d[rows] /= len(rows)
    return loss, d
