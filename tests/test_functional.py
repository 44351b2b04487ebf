"""The math functions against small cases computed by hand, and their invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_walkthrough.config import ModelConfig
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.kinds.attention import attention


def test_softmax_by_hand() -> None:
    # e^0 : e^(ln 2) : e^(ln 3) = 1 : 2 : 3
    np.testing.assert_allclose(
        F.softmax(np.array([[0.0, math.log(2), math.log(3)]])), [[1 / 6, 2 / 6, 3 / 6]]
    )


def test_softmax_minus_infinity_gets_exactly_zero() -> None:
    out = F.softmax(np.array([[2.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf]]))
    assert out.tolist() == [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]


def test_softmax_does_not_overflow_and_ignores_shifts() -> None:
    big = F.softmax(np.array([[1000.0, 1000.0, 999.0]]))
    np.testing.assert_allclose(big, F.softmax(np.array([[1.0, 1.0, 0.0]])))
    assert np.isfinite(big).all()


def test_layer_norm_by_hand() -> None:
    # mean 2.5; population variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    ones, zeros = np.ones(4), np.zeros(4)
    expected = np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25)
    np.testing.assert_allclose(F.layer_norm(x, ones, zeros, 0.0), [expected])
    # eps sits inside the square root: sqrt(1.25 + 1.25)
    np.testing.assert_allclose(
        F.layer_norm(x, ones, zeros, 1.25), [np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(2.5)]
    )
    # gamma scales, beta shifts, per column
    gamma, beta = np.array([2.0, 2.0, 1.0, 1.0]), np.array([1.0, 0.0, 0.0, -1.0])
    np.testing.assert_allclose(F.layer_norm(x, gamma, beta, 0.0), [expected * gamma + beta])


def test_layer_norm_rows_have_mean_zero_and_variance_one() -> None:
    x = np.random.default_rng(0).normal(3.0, 5.0, size=(6, 8))
    out = F.layer_norm(x, np.ones(8), np.zeros(8), 1e-12)
    np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=1), 1.0, atol=1e-9)


def test_causal_mask_by_hand() -> None:
    inf = -math.inf
    assert F.causal_mask(3).tolist() == [[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, 0.0]]


def test_positional_encoding_by_hand() -> None:
    pe = F.positional_encoding(3, 4)
    # d_model 4: columns 0, 1 use 10000^(0/4) = 1; columns 2, 3 use 10000^(2/4) = 100
    expected = [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)]
    np.testing.assert_allclose(pe, expected, rtol=0, atol=1e-15)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_positional_encoding_odd_width_ends_on_a_sine() -> None:
    pe = F.positional_encoding(2, 3)
    np.testing.assert_allclose(pe[1], [math.sin(1), math.cos(1), math.sin(1 / 10000 ** (2 / 3))])


def test_one_attention_head_by_hand() -> None:
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])
    K = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0]])
    r = F.scaled_dot_product_attention(Q, K, V)
    s = 1 / math.sqrt(2)  # Q·Kᵀ = I, divided by √d_k = √2
    np.testing.assert_allclose(r.scores, [[s, 0.0], [0.0, s]])
    a = math.exp(s) / (math.exp(s) + 1)  # softmax([s, 0])[0]
    np.testing.assert_allclose(r.weights, [[a, 1 - a], [1 - a, a]])
    np.testing.assert_allclose(
        r.output, [[a * 1 + (1 - a) * 3, a * 2 + (1 - a) * 4], [(1 - a) * 1 + a * 3, (1 - a) * 2 + a * 4]]
    )
    assert r.masked_scores is None


def test_masked_attention_first_row_sees_only_itself() -> None:
    Q = K = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0]])
    r = F.scaled_dot_product_attention(Q, K, V, F.causal_mask(2))
    assert r.weights[0].tolist() == [1.0, 0.0]
    assert r.output[0].tolist() == [1.0, 2.0]
    assert r.masked_scores is not None and r.masked_scores[0, 1] == -math.inf


def test_split_and_merge_heads_use_contiguous_blocks() -> None:
    x = np.arange(12.0).reshape(2, 6)
    heads = F.split_heads(x, 3)
    assert heads.shape == (3, 2, 2)
    assert heads[1].tolist() == [[2.0, 3.0], [8.0, 9.0]]
    assert F.merge_heads(heads).tolist() == x.tolist()


def test_multi_head_attention_equals_heads_computed_one_by_one() -> None:
    rng = np.random.default_rng(7)
    x, memory = rng.normal(size=(4, 6)), rng.normal(size=(3, 6))
    W_Q, W_K, W_V, W_O = (rng.normal(size=(6, 6)) for _ in range(4))
    r = attention(
        ModelConfig(d_model=6, num_heads=3), x, {"W_QKV": np.hstack([W_Q, W_K, W_V]), "W_O": W_O}, memory
    )
    outputs = []
    for h in range(3):
        cols = slice(2 * h, 2 * h + 2)
        q, k, v = x @ W_Q[:, cols], memory @ W_K[:, cols], memory @ W_V[:, cols]
        s = q @ k.T / math.sqrt(2)
        a = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
        outputs.append(a @ v)
        np.testing.assert_allclose(r.A[h], a, rtol=1e-12)
    np.testing.assert_allclose(r.concat, np.hstack(outputs), rtol=1e-12)
    np.testing.assert_allclose(r.output, np.hstack(outputs) @ W_O, rtol=1e-12)


def test_feed_forward_by_hand() -> None:
    x = np.array([[1.0, -1.0]])
    r = F.feed_forward(x, np.eye(2), np.array([0.5, 0.5]), np.array([[2.0], [3.0]]), np.array([10.0]))
    assert r.hidden.tolist() == [[1.5, 0.0]]  # ReLU(1 + 0.5, -1 + 0.5)
    assert r.output.tolist() == [[13.0]]  # 1.5·2 + 0·3 + 10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_functions_keep_the_dtype(dtype: type) -> None:
    x = np.ones((2, 4), dtype=dtype)
    assert F.softmax(x).dtype == dtype
    assert F.layer_norm(x, np.ones(4, dtype), np.zeros(4, dtype), 1e-5).dtype == dtype
    assert F.positional_encoding(2, 4, dtype).dtype == dtype
    assert F.causal_mask(2, dtype).dtype == dtype


def test_self_attention_projects_in_one_product() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 4))
    W_QKV, W_O, b_QKV = rng.normal(size=(4, 12)), rng.normal(size=(4, 4)), rng.normal(size=12)
    m, p = (
        ModelConfig(d_model=4, num_heads=2, attention_bias="qkv"),
        {"W_QKV": W_QKV, "W_O": W_O, "b_QKV": b_QKV},
    )
    r = attention(m, x, p)
    np.testing.assert_allclose(F.merge_heads(r.Q), x @ W_QKV[:, :4] + b_QKV[:4], rtol=1e-12)
    np.testing.assert_allclose(F.merge_heads(r.K), x @ W_QKV[:, 4:8] + b_QKV[4:8], rtol=1e-12)
    np.testing.assert_allclose(F.merge_heads(r.V), x @ W_QKV[:, 8:] + b_QKV[8:], rtol=1e-12)
    # a copy of x is another array: the cross-attention path, same numbers
    other = attention(m, x, p, memory=x.copy())
    np.testing.assert_allclose(other.output, r.output, rtol=1e-12)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float64 steps apart a and b are (the same sign: erf's sign is x's)."""
    return np.abs(a.view(np.int64) - b.view(np.int64))


def test_erf_matches_math_erf_to_four_ulp_on_every_interval() -> None:
    """Cody's three approximations and their seams (0.46875, 4, 26.543), against the C library's erf."""
    from transformer_walkthrough.model.erf import erf

    grid = np.concatenate([
        np.linspace(-30, 30, 300_001),
        np.geomspace(1e-300, 30, 20_001),
        np.nextafter(np.repeat([0.46875, 4.0, 26.543], 3), [[0], [np.inf], [100]]).ravel(),
        [0.46875, 4.0, 26.543, 5e-324, 1e-17, 0.5, 1.0, 2.0],
    ])  # fmt: skip
    grid = np.concatenate([grid, -grid])
    expected = np.array([math.erf(v) for v in grid])
    got = erf(grid)
    assert got.dtype == np.float64 and np.all(np.sign(got) == np.sign(expected))
    assert _ulps(got, expected).max() <= 4  # 3 at worst, about 4e-16 relative


def test_erf32_is_within_four_float32_ulp_of_math_erf() -> None:
    """The float32 evaluation, against the C library's erf rounded to float32, every interval and
    seam; and float32 GELU against float64's rounded."""
    from transformer_walkthrough.model.erf import erf32

    seams = np.nextafter(np.float32([0.46875, 4.0]), [[0], [np.inf]]).ravel()
    grid = np.concatenate(
        [np.linspace(-30, 30, 200_001), np.geomspace(1e-38, 30, 20_001), seams, [0.46875, 4.0]]
    )
    grid = np.concatenate([grid, -grid]).astype(np.float32)
    expected = np.array([math.erf(v) for v in grid.astype(np.float64)]).astype(np.float32)
    got = erf32(grid)
    assert got.dtype == np.float32 and np.all(np.sign(got) == np.sign(expected))
    assert np.abs(got.view(np.int32).astype(np.int64) - expected.view(np.int32)).max() <= 4
    edges = erf32(np.float32([0.0, -0.0, np.inf, -np.inf, np.nan]))
    assert edges[0] == 0 and np.signbit(edges[1]) and (edges[2], edges[3]) == (1, -1) and np.isnan(edges[4])
    x = np.linspace(-8, 8, 4001, dtype=np.float32)
    np.testing.assert_allclose(F.gelu(x), F.gelu(x.astype(np.float64)), rtol=1e-6, atol=1e-7)


def test_erf_by_hand_at_its_edges() -> None:
    from transformer_walkthrough.model.erf import erf

    got = erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 40.0]))
    assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])
    assert (got[2], got[3]) == (1.0, -1.0) and np.isnan(got[4])
    # erf(1) = 0.8427007929497148693412206350826…, erf(40) = 1 to far beyond float64
    assert abs(got[5] - 0.8427007929497149) <= 1.2e-16 and got[6] == -got[5] and got[7] == 1.0
    assert erf(np.float32(0.5)).dtype == np.float64  # float64 inside; GELU casts back


def test_gelu_agrees_with_math_erf_cell_by_cell_and_keeps_float32() -> None:
    x = np.linspace(-8, 8, 4001).reshape(1, -1)
    expected = np.array([[v * (1 + math.erf(v / math.sqrt(2))) / 2 for v in x[0]]])
    # where x < 0, 1 + erf cancels: erf's last bits (ulps of 1) become the result's absolute error
    np.testing.assert_allclose(F.gelu(x), expected, rtol=1e-15, atol=4e-16)
    assert F.gelu(x.astype(np.float32)).dtype == np.float32


def test_erf_of_any_layout_and_of_a_0d_array() -> None:
    """Transposed, strided, Fortran-ordered and 0-d inputs, with values past 4 in each: the tail is
    written where those values are, whatever the layout."""
    from transformer_walkthrough.model.erf import erf

    a = np.random.default_rng(0).normal(0, 4, (50, 70))
    assert np.sum(np.abs(a) > 4) > 100
    for view in (a.T, a[:, ::3], np.asfortranarray(a), a.reshape(5, 10, 70).transpose(2, 0, 1)):
        expected = np.vectorize(math.erf)(view)
        assert _ulps(erf(view), expected).max() <= 4
    assert erf(np.array(4.5)) == pytest.approx(math.erf(4.5), rel=4e-16, abs=0)
    with np.errstate(all="raise"):  # no overflow on the way for the largest numbers
        assert erf(np.array([1e308, -5e304])).tolist() == [1.0, -1.0]
