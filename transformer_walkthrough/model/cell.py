"""One cell of a recorded matrix, as its kind's explainer receives it: where the cell is, and how
its numbers are written in the arithmetic that explains it.

The kinds write the arithmetic (``model/kinds``); ``views.explain`` finds the cell a person asked
for and hands it to them. The type lives here, with the model, so that a kind needs nothing from
the views to say what one of its numbers is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .numbers import format_value

if TYPE_CHECKING:
    from .trace import Stage

TERMS = 8  # a dot product longer than this shows its first and last terms around "…"
GUARD = 2  # decimals an operand shows beyond its result's
MORE_PLACES = 6  # decimals a tiny operand may take beyond the cell's own (e^−700 is not 300 zeros)


def significant_places(v: float, digits: int) -> int:
    """The decimals that show ``digits`` significant digits of v: 4 for 0.4212, 7 for 0.0004790,
    0 for 1234 (and for 0 or ±∞, which have none to show)."""
    if digits <= 0 or v == 0 or not math.isfinite(v):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(v))))


class Cell:
    """A cell of a named matrix: where it is and how to print numbers.

    Its arithmetic reproduces its results at the precision they are printed: a result (``r``)
    shows ``digits`` decimals, or ``digits`` significant digits when the cell's value is small (a
    gradient of 0.000479 is 0.0004790, not 0.0005), and each operand (``f``) one decimal more
    unless it is written exactly in fewer, so that the rounding of the operands cannot reach the
    result's last digit."""

    def __init__(
        self, stage: Stage, name: str, i: int, j: int, digits: int, all_terms: bool = False,
        value: float | None = None, fixed: bool = False,
    ) -> None:  # fmt: skip
        self.stage, self.name, self.i, self.j, self.digits = stage, name, i, j, digits
        self.all_terms = all_terms
        self.matrix = m = stage.matrices[name]  # its base name, head and role say what it is
        self.row, self.col = m.rows[i], m.cols[j]
        # the number explained: the cell's, or its gradient's (``views.gradients``)
        self.value = float(m.values[i, j]) if value is None else value
        # ``fixed``: results at ``digits`` decimals and operands at ``GUARD`` more, whatever their
        # size: a worksheet's key, whose operands are the numbers its sheet shows at those decimals
        self.fixed = fixed
        self.places = digits if fixed else max(digits, significant_places(self.value, digits))

    def r(self, v: float) -> str:
        """A result as shown: at the cell's decimals, or more for a number smaller than the cell's
        value (a LayerNorm's variance 0.0007234 beside a result of −0.1219), up to ``MORE_PLACES``
        more; a number larger than it, at no more than ``digits`` + 5 significant digits (a softmax's
        sum 41.7397546 beside a probability of 0.000003353); with one minus sign, −, for negative
        numbers and operators alike, and never "−0.00"."""
        # A result smaller than the cell's value (a dot product's sum before its bias) shows no more
        # decimals than its operands' guard gives back: its own significant digits may cancel.
        return format_value(v, min(self._places(v), self.places + GUARD), minus="−")

    def f(self, v: float) -> str:
        """An operand as shown: as a result (``r``), with ``GUARD`` more decimals unless it is exact
        in fewer (1.00 stays 1.00; 0.27331 is not 0.2733)."""
        places = self._places(v)
        if self.fixed:
            return format_value(v, places + GUARD, minus="−")
        for more in range(GUARD):
            if math.isfinite(v) and round(v, places + more) == v:
                return format_value(v, places + more, minus="−")
        return format_value(v, places + GUARD, minus="−")

    def _places(self, v: float) -> int:
        if self.fixed:
            return self.places
        d = self.digits
        places = max(self.places, significant_places(v, d))
        return min(places, max(d, significant_places(v, d + 5)), self.places + MORE_PLACES)

    def times(self, a: float, b: float) -> str:
        return f"{self.operand(a)}·{self.operand(b)}"

    def operand(self, v: float) -> str:
        """A number as an operand: in parentheses when negative ("0.56 − (−0.08)", "3.14 + (−∞)")."""
        text = self.f(v)
        return f"({text})" if text.startswith("−") else text

    def shown(self, n: int) -> list[int]:
        """Which of n terms ``sum_of`` writes out: all, or the first few and the last."""
        if n > TERMS and not self.all_terms:
            return [*range(TERMS - 2), n - 1]
        return list(range(n))

    def listing(self, shown: Sequence[int], n: int, text: Callable[[int], str]) -> str:
        """Items ``shown`` (sorted indices) of n, each as ``text`` writes it, joined by commas; a gap
        between two of them said as "… (12 more) …" (a 200,000-word row is written in a few)."""
        if self.all_terms:
            shown = range(n)
        parts: list[str] = []
        last = -1
        for k in shown:
            if k > last + 1:
                parts.append(f"… ({k - last - 1:,} more) …")
            parts.append(text(k))
            last = k
        if last < n - 1:
            parts.append(f"… ({n - 1 - last:,} more) …")
        return ", ".join(parts)

    def sum_of(self, terms: Sequence[str]) -> str:
        if len(terms) > TERMS and not self.all_terms:
            terms = [*terms[: TERMS - 2], f"… ({len(terms) - TERMS + 1} more terms) …", *terms[-1:]]
        return " + ".join(terms)
