"""A check of one computation against another: what was compared, and the largest difference."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..model.trace import Stage

# Largest difference that still counts as equal, as a fraction of the largest number the stage
# computed with (at least 1): float64 agrees to ~1e-15 of it, float32 to ~1e-6.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


class Check(NamedTuple):
    stage: str
    what: str
    max_diff: float  # the largest |a − b|; inf when either side has NaN
    tolerance: float = TOLERANCE["float64"]  # absolute: TOLERANCE × the stage's scale

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance  # False for NaN too


def gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference of two matrices; inf if either has a NaN (a NaN agrees with nothing)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):  # -inf - -inf is nan; those cells are equal
        diff = np.where(a == b, 0.0, np.abs(a - b))
    diff[np.isnan(a) | np.isnan(b)] = math.inf
    return float(np.max(np.nan_to_num(diff, nan=math.inf, posinf=math.inf), initial=0.0))


def scale(stage: Stage) -> float:
    """The largest finite |value| among the stage's matrices, at least 1: what rounding is relative to.

    Rounding error grows with the numbers a result is computed from, not with the result: softmax
    of scores near 3.6e6 is exact only to about 3.6e6 × 2⁻⁵² in float64, though its values are ≤ 1.
    """
    finite = (m.values[np.isfinite(m.values)] for m in stage.matrices.values())
    return max(1.0, *(float(np.max(np.abs(v), initial=0.0)) for v in finite))
