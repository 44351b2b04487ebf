"""Every backward pass against central finite differences, in float64 (relative error < 1e-6)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from transformer_walkthrough.config import ACTIVATIONS, ModelConfig
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.kinds.attention import attention, attention_grads

RNG = np.random.default_rng(2017)


def numeric_grad(f: Callable[[], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """dL/dx by central differences, nudging x in place one entry at a time."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f()
        x[i] = old - h
        down = f()
        x[i] = old
        g[i] = (up - down) / (2 * h)
    return g


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """‖a − b‖ / (‖a‖ + ‖b‖): per array, so that an entry that is 0 (the gradient of a key bias,
    to which softmax is blind) does not turn finite-difference noise into a large ratio."""
    return float(np.linalg.norm(a - b) / max(1e-12, np.linalg.norm(a) + np.linalg.norm(b)))


def check(analytic: np.ndarray, loss: Callable[[], float], x: np.ndarray) -> None:
    numeric = numeric_grad(loss, x)
    assert rel_error(analytic, numeric) < 1e-6, (analytic, numeric)


def test_linear_backward() -> None:
    x, W, b = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 5)), RNG.normal(size=5)
    R = RNG.normal(size=(3, 5))  # L = Σ R ⊙ y: a scalar whose dL/dy is R
    dx, dW, db = F.linear_backward(R, x, W)
    for analytic, wrt in ((dx, x), (dW, W), (db, b)):
        check(analytic, lambda: float(np.sum(R * F.linear(x, W, b))), wrt)


def test_softmax_backward_with_a_masked_entry() -> None:
    x = RNG.normal(size=(3, 4))
    x[0, 3] = -np.inf
    R = RNG.normal(size=(3, 4))
    y = F.softmax(x)
    dx = F.softmax_backward(R, y)
    assert dx[0, 3] == 0.0
    finite = x.copy()
    finite[0, 3] = -50.0  # as good as -inf for the others, and differentiable
    check(F.softmax_backward(R, F.softmax(finite)), lambda: float(np.sum(R * F.softmax(finite))), finite)


def test_layer_norm_backward() -> None:
    x, gamma, beta = RNG.normal(size=(3, 5)), RNG.normal(size=5), RNG.normal(size=5)
    R = RNG.normal(size=(3, 5))
    dx, dgamma, dbeta = F.layer_norm_backward(R, x, gamma, 1e-5)
    for analytic, wrt in ((dx, x), (dgamma, gamma), (dbeta, beta)):
        check(analytic, lambda: float(np.sum(R * F.layer_norm(x, gamma, beta, 1e-5))), wrt)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_backward(masked: bool) -> None:
    Q, K, V = RNG.normal(size=(2, 4, 3)), RNG.normal(size=(2, 4, 3)), RNG.normal(size=(2, 4, 3))
    mask = F.causal_mask(4) if masked else None
    R = RNG.normal(size=(2, 4, 3))
    r = F.scaled_dot_product_attention(Q, K, V, mask)
    dQ, dK, dV, _, _ = F.scaled_dot_product_attention_backward(R, Q, K, V, r.weights)
    for analytic, wrt in ((dQ, Q), (dK, K), (dV, V)):
        check(analytic, lambda: float(np.sum(R * F.scaled_dot_product_attention(Q, K, V, mask).output)), wrt)


@pytest.mark.parametrize("cross", [False, True])
def test_multi_head_attention_backward(cross: bool) -> None:
    x = RNG.normal(size=(4, 6))
    memory = RNG.normal(size=(3, 6)) if cross else x
    W_QKV, W_O = RNG.normal(size=(6, 18)) * 0.5, RNG.normal(size=(6, 6)) * 0.5
    b_QKV, b_O = RNG.normal(size=18), RNG.normal(size=6)
    mask = None if cross else F.causal_mask(4)
    R = RNG.normal(size=(4, 6))

    m = ModelConfig(d_model=6, num_heads=3, attention_bias=True)
    p = {"W_QKV": W_QKV, "W_O": W_O, "b_QKV": b_QKV, "b_O": b_O}  # the arrays check() nudges in place

    def loss() -> float:
        return float(np.sum(R * attention(m, x, p, memory if cross else None, mask).output))

    g = attention_grads(attention(m, x, p, memory if cross else None, mask), R)
    for analytic, wrt in ((g.x, x), *((g.params[name], p[name]) for name in p)):  # x feeds Q, K and V
        check(analytic, loss, wrt)
    if cross:
        check(g.kv, loss, memory)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_feed_forward_backward(activation: str) -> None:
    x, W_1, b_1 = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 6)), RNG.normal(size=6)
    W_2, b_2 = RNG.normal(size=(6, 4)), RNG.normal(size=4)
    R = RNG.normal(size=(3, 4))
    r = F.feed_forward(x, W_1, b_1, W_2, b_2, activation)
    assert (r.pre < 0).any() and (r.pre > 0).any()  # both sides of the bend are exercised
    dx, dW_1, db_1, dW_2, db_2, _, _ = F.feed_forward_backward(R, x, W_1, W_2, r, activation)
    for analytic, wrt in ((dx, x), (dW_1, W_1), (db_1, b_1), (dW_2, W_2), (db_2, b_2)):
        check(
            analytic, lambda: float(np.sum(R * F.feed_forward(x, W_1, b_1, W_2, b_2, activation).output)), wrt
        )


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_activation_backward_by_finite_differences(activation: str) -> None:
    x = np.array([[-3.0, -0.7, -1e-3, 0.4, 1.3, 5.0]])
    R = RNG.normal(size=x.shape)
    check(F.activation_backward(R, x, activation), lambda: float(np.sum(R * F.ACTIVATIONS[activation](x))), x)


def test_cross_entropy_by_hand_and_its_gradient() -> None:
    logits = np.array([[0.0, np.log(3.0)], [1.0, 1.0], [5.0, -5.0]])
    targets = np.array([1, 0, -1])  # the last row has no next token
    loss, d = F.cross_entropy(logits, targets)
    # p = (1/4, 3/4) and (1/2, 1/2): L = -(log 3/4 + log 1/2) / 2
    assert loss == pytest.approx(-(np.log(0.75) + np.log(0.5)) / 2)
    assert (d[2] == 0).all()
    check(d, lambda: F.cross_entropy(logits, targets)[0], logits)
