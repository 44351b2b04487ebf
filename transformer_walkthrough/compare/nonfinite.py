"""Where a forward pass first stopped being numbers: the stage that produced a NaN or an infinity.

A model with huge weights overflows somewhere and then prints tables of ``nan``; saying which
stage did it first is what tells the reader why. The mask's −∞ is a number the walkthrough means
(e^−∞ = 0), so a −∞ where the stage's mask puts one (in ``M`` itself and in the masked scores
``S1+M``) is not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..model.trace import MASK, Stage, Trace


def first_non_finite(stages: Iterable[Stage]) -> tuple[str, str] | None:
    """The (stage id, matrix name) of the first NaN or infinity in the stages' order (a trace's), or None."""
    for stage in stages:
        masks = [m.values == -np.inf for m in stage.matrices.values() if m.role == MASK]
        for name, m in stage.matrices.items():
            values = m.values
            bad = np.isnan(values) | (values == np.inf)
            meant = next((k for k in masks if k.shape == values.shape), None)
            bad |= (values == -np.inf) if meant is None else (values == -np.inf) & ~meant
            if bad.any():
                return stage.id, name
    return None


class Watch:
    """A streamed pass's stages looked at as they go by (``trace.Keep.stream``), before ``then``
    shows and drops them: the first that is not finite is remembered for ``warning``."""

    def __init__(self, then: Callable[[Stage], None]) -> None:
        self.then = then
        self.found: tuple[str, str] | None = None

    def __call__(self, stage: Stage) -> None:
        if self.found is None:
            self.found = first_non_finite([stage])
        self.then(stage)


def warning(trace: Trace, watched: Watch | None = None) -> str | None:
    """One line for stderr when the trace (or the stages ``watched`` saw go by) held a value that
    is not a number, else None."""
    found = first_non_finite(trace) if watched is None else watched.found or first_non_finite(trace)
    if found is None:
        return None
    stage, name = found
    return (
        f"{stage} is the first stage whose {name} is not finite (NaN or ±∞): the numbers overflowed "
        f"{trace.config.model.dtype}; every stage after it is meaningless"
    )
