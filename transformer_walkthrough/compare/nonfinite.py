"""Where a forward pass first stopped being numbers: the stage that produced a NaN or an infinity.

A model with huge weights overflows somewhere and then prints tables of ``nan``; saying which
stage did it first is what tells the reader why. The mask's −∞ is a number the walkthrough means
(e^−∞ = 0), so a −∞ where the stage's mask puts one (in ``M`` itself and in the masked scores
``S1+M``) is not counted.
"""

from __future__ import annotations

import numpy as np

from ..model.trace import MASK, Trace


def first_non_finite(trace: Trace) -> tuple[str, str] | None:
    """The (stage id, matrix name) of the first NaN or infinity in the trace's order, or None."""
    for stage in trace:
        masks = [m.values == -np.inf for m in stage.matrices.values() if m.role == MASK]
        for name, m in stage.matrices.items():
            values = m.values
            bad = np.isnan(values) | (values == np.inf)
            meant = next((k for k in masks if k.shape == values.shape), None)
            bad |= (values == -np.inf) if meant is None else (values == -np.inf) & ~meant
            if bad.any():
                return stage.id, name
    return None


def warning(trace: Trace) -> str | None:
    """One line for stderr when the trace holds a value that is not a number, else None."""
    found = first_non_finite(trace)
    if found is None:
        return None
    stage, name = found
    return (
        f"{stage} is the first stage whose {name} is not finite (NaN or ±∞): the numbers overflowed "
        f"{trace.config.model.dtype}; every stage after it is meaningless"
    )
