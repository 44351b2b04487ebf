"""A check of one computation against another: what was compared, and the largest difference."""

from __future__ import annotations

import numpy as np

from ..model.kinds.hand import TOLERANCE, Check, gap
from ..model.trace import Stage

__all__ = ["TOLERANCE", "Check", "gap", "scale"]


def scale(stage: Stage) -> float:
    """The largest finite |value| among the stage's matrices, at least 1: what rounding is relative to.

    Rounding error grows with the numbers a result is computed from, not with the result: softmax
    of scores near 3.6e6 is exact only to about 3.6e6 × 2⁻⁵² in float64, though its values are ≤ 1.
    """
    finite = (m.values[np.isfinite(m.values)] for m in stage.matrices.values())
    return max(1.0, *(float(np.max(np.abs(v), initial=0.0)) for v in finite))
