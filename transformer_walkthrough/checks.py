"""A check of one computation against another: what was compared, and the largest difference."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

# Largest difference that still counts as equal: float64 agrees to ~1e-15, float32 to ~1e-6.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


class Check(NamedTuple):
    stage: str
    what: str
    max_diff: float
    tolerance: float = TOLERANCE["float64"]

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance


def gap(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore"):  # -inf - -inf is nan; those cells are equal
        gap = np.where(a == b, 0.0, np.abs(a - b))
    return float(np.max(np.nan_to_num(gap, nan=math.inf), initial=0.0))
