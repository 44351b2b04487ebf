"""The transformer's arithmetic as pure NumPy functions (Vaswani et al., 2017).

Arrays and ints in, arrays out: no config, no trace, no printing. Weights act on the right, as
in the paper (``X @ W_Q``), so a weight is stored ``(d_in, d_out)``. ``n`` counts positions
(tokens); ``h`` counts heads; ``d_k = d_model / h``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax(x)_i = exp(x_i) / Σ_j exp(x_j), along ``axis``; x: (..., n) -> (..., n).

    An entry of -inf gets a weight of exactly 0, which is how the causal mask works.
    """
    # Subtracting the row maximum cancels in the quotient and keeps exp() from overflowing.
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm(x) = gamma ⊙ (x - mean) / sqrt(var + eps) + beta, per row; x: (n, d) -> (n, d).

    The variance is the population variance (divide by d) and eps sits inside the square root,
    exactly as ``torch.nn.LayerNorm``; gamma, beta: (d,) or (1, d).
    """
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def positional_encoding(n: int, d_model: int, dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Sinusoidal PE (paper §3.5): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(…).

    Returns (n, d_model). Column j uses the angle of its even partner 2·⌊j/2⌋, so an odd
    d_model simply ends on a sine column.
    """
    pos = np.arange(n, dtype=np.float64)[:, None]
    two_i = (np.arange(d_model) // 2 * 2).astype(np.float64)
    angle = pos / np.power(10000.0, two_i / d_model)
    pe = np.where(np.arange(d_model) % 2 == 0, np.sin(angle), np.cos(angle))
    return pe.astype(dtype, copy=False)


def causal_mask(n: int, dtype: np.dtype | type = np.float64) -> np.ndarray:
    """M: (n, n), 0 on and below the diagonal and -inf above: position i may look at j ≤ i only."""
    return np.triu(np.full((n, n), -np.inf, dtype=dtype), k=1)


def linear(x: np.ndarray, W: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """x·W + b; x: (n, d_in), W: (d_in, d_out), b: (d_out,) or (1, d_out) -> (n, d_out)."""
    y = x @ W
    return y if b is None else y + b


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
    Dividing by √d_k keeps the scores' variance near 1 whatever d_k is, so softmax does not saturate.
    """
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # a Python float keeps float32 float32
    masked = None if mask is None else scores + mask
    weights = softmax(scores if masked is None else masked)
    return Attention(scores, masked, weights, weights @ V)


class MultiHeadAttention(NamedTuple):
    """Every intermediate of multi-head attention; per-head arrays have the head first."""

    Q: np.ndarray  # (h, n_q, d_k)
    K: np.ndarray  # (h, n_k, d_k)
    V: np.ndarray  # (h, n_k, d_k)
    heads: Attention  # scores, masked scores, weights (h, n_q, n_k); output (h, n_q, d_k)
    concat: np.ndarray  # (n_q, d_model)
    output: np.ndarray  # (n_q, d_model)


def multi_head_attention(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    W_Q: np.ndarray,
    W_K: np.ndarray,
    W_V: np.ndarray,
    W_O: np.ndarray,
    num_heads: int,
    mask: np.ndarray | None = None,
    b_Q: np.ndarray | None = None,
    b_K: np.ndarray | None = None,
    b_V: np.ndarray | None = None,
    b_O: np.ndarray | None = None,
) -> MultiHeadAttention:
    """MultiHead = Concat(head_1, …, head_h)·W_O, head_i = Attention(X_q·W_Qi, X_kv·W_Ki, X_kv·W_Vi).

    x_q: (n_q, d_model) is where the queries come from; x_kv: (n_k, d_model) gives keys and
    values (the same array in self-attention, the encoder output in cross-attention).
    W_Q, W_K, W_V, W_O: (d_model, d_model); head i uses the i-th block of d_k columns of W_Q,
    W_K, W_V, which is the paper's per-head W_i^Q (d_model, d_k) computed in one product.
    """
    Q = split_heads(linear(x_q, W_Q, b_Q), num_heads)
    K = split_heads(linear(x_kv, W_K, b_K), num_heads)
    V = split_heads(linear(x_kv, W_V, b_V), num_heads)
    heads = scaled_dot_product_attention(Q, K, V, mask)
    concat = merge_heads(heads.output)
    return MultiHeadAttention(Q, K, V, heads, concat, linear(concat, W_O, b_O))


class FeedForward(NamedTuple):
    hidden: np.ndarray  # ReLU(X·W_1 + b_1)   (n, d_ff)
    output: np.ndarray  # hidden·W_2 + b_2     (n, d_model)


def feed_forward(
    x: np.ndarray, W_1: np.ndarray, b_1: np.ndarray, W_2: np.ndarray, b_2: np.ndarray
) -> FeedForward:
    """FFN(x) = max(0, x·W_1 + b_1)·W_2 + b_2 (paper eq. 2); x: (n, d_model), W_1: (d_model, d_ff)."""
    hidden = np.maximum(linear(x, W_1, b_1), 0.0)
    return FeedForward(hidden, linear(hidden, W_2, b_2))
