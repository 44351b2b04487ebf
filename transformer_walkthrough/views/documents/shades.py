"""How the HTML report shades a matrix's cells, and the line under a stage that says so.

The report writes a shade as a class of its stylesheet (``SHADES_CSS``): ``g0`` … ``g20`` on the
fixed 0–1 scale of attention weights and probabilities, ``n8`` … ``p8`` each side of 0 on a
matrix's own scale. The logit lens and the attention overview (``views.lens``,
``views.overview``) shade their cells with the same classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..blocks import is_shaded, largest
from ..palette import css, diverging, sequential
from ..widgets import View

if TYPE_CHECKING:
    from ...model.trace import Matrix

# How a matrix is shaded. Attention weights and probabilities on the terminal's fixed scale,
# white at 0 to green at 1 (``palette.sequential``), so that 0.30 never looks like 1.00; any other
# matrix as a heatmap on its own scale, its largest |value| the deepest red or blue; a matrix of
# one value throughout (gamma = 1 before training) not at all: it has nothing to tell apart.
FIXED, OWN = "fixed", "own"
LEVELS = 8  # heatmap shades each side of 0: a class per shade keeps a large report small
STEPS = 20  # shades of the fixed scale, 0.05 apart
SHADES_CSS = "\n".join(
    [
        *(
            f".{sign}{k} {{ background: {css(diverging(t * k / LEVELS, 1.0))}; }}"
            for sign, t in (("p", 1), ("n", -1))
            for k in range(1, LEVELS + 1)
        ),
        *(f".g{k} {{ background: {css(sequential(k / STEPS))}; }}" for k in range(STEPS + 1)),
    ]
)
# Each cell opens with the one before it closing: a row is then one join, the fast way for the
# millions of cells of a base-size report. Indexed by the shade: −8 … 8 (+ LEVELS), or 0 … 20.
OPENINGS = {
    OWN: ["</td><td>" if k == 0 else f'</td><td class="{"p" if k > 0 else "n"}{abs(k)}">' for k in range(-LEVELS, LEVELS + 1)],
    FIXED: [f'</td><td class="g{k}">' for k in range(STEPS + 1)],
    None: ["</td><td>"],
}  # fmt: skip


def shading(m: Matrix, values: np.ndarray) -> str | None:
    """How the report shades ``m`` (``values``: the cells it shows): FIXED for the weights that are
    probabilities (as the terminal shades them, by their role), OWN for any other matrix whose
    finite numbers differ, None for one whose numbers are all the same (or none is finite)."""
    if is_shaded(m, View()):
        return FIXED
    finite = values[np.isfinite(values)]
    return OWN if finite.size and finite.min() != finite.max() else None


def cell_shades(kind: str | None, values: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Each cell's index into ``OPENINGS[kind]``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == FIXED:
            return np.where(finite, np.rint(np.clip(values, 0, 1) * STEPS), 0).astype(int)
        if kind == OWN:
            scaled = np.clip(values / largest(values), -1, 1)
            return np.where(finite, np.rint(scaled * LEVELS), 0).astype(int) + LEVELS
    return np.zeros(values.shape, dtype=int)


def legend(kinds: set[str | None]) -> str:
    """The line under a stage's matrices that says what their colours mean, and on which scale."""
    said = []
    if FIXED in kinds:
        swatches = "".join(f'<span class="g{k}"></span>' for k in range(0, STEPS + 1, 4))
        said.append(
            f"attention weights and probabilities: 0 {swatches} 1, one fixed scale for every such matrix "
            "(as in the terminal)"
        )
    if OWN in kinds:
        swatches = "".join(f'<span class="n{k}"></span>' for k in range(LEVELS, 0, -2))
        swatches += "<span></span>" + "".join(f'<span class="p{k}"></span>' for k in range(2, LEVELS + 1, 2))
        said.append(
            f"other matrices: − {swatches} +, each on its own scale, the deepest colour at its largest |value|"
        )
    if None in kinds:
        said.append("a matrix of one value throughout is not shaded")
    return f'<p class="legend">Shading — {"; ".join(said)}.</p>' if said else ""
