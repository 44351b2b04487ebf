"""check_finite refuses a parameter holding NaN or ±∞ wherever it sits, block edges included."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.family import FINITE_BLOCK, check_finite


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("at", [0, FINITE_BLOCK - 1, FINITE_BLOCK, -1])
def test_a_bad_number_anywhere_is_refused_naming_its_parameter(dtype, bad, at):
    w = np.ones(((2 * FINITE_BLOCK + 7) // 7, 7), dtype=dtype)  # two blocks and a tail, in rows of 7
    w.reshape(-1)[at] = bad
    weights = {"decoder.embedding/E": np.zeros((3, 2), dtype=dtype), "decoder.0.feed-forward/W_1": w}
    with pytest.raises(CheckpointError, match=r"^here: decoder\.0\.feed-forward/W_1 holds NaN"):
        check_finite(weights, "here")


def test_finite_weights_pass_and_are_left_as_they_were():
    w = np.arange(3 * FINITE_BLOCK, dtype=np.float32).reshape(3, -1) * np.float32(3e38 / 3 / FINITE_BLOCK)
    before = w.copy()
    check_finite({"x/W": w, "y/b": np.zeros(0)}, "here")  # the largest float32s, and an empty one
    assert np.array_equal(w, before)
