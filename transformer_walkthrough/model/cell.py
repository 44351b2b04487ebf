"""One cell of a recorded matrix, as its kind's explainer receives it: where the cell is, and how
its numbers are written in the arithmetic that explains it.

The kinds write the arithmetic (``model/kinds``); ``views.explain`` finds the cell a person asked
for and hands it to them. The type lives here, with the model, so that a kind needs nothing from
the views to say what one of its numbers is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .numbers import format_value

if TYPE_CHECKING:
    from .trace import Stage

TERMS = 8  # a dot product longer than this shows its first and last terms around "…"


class Cell:
    """A cell of a named matrix: where it is and how to print numbers."""

    def __init__(self, stage: Stage, name: str, i: int, j: int, digits: int, all_terms: bool = False) -> None:
        self.stage, self.name, self.i, self.j, self.digits = stage, name, i, j, digits
        self.all_terms = all_terms
        self.matrix = m = stage.matrices[name]  # its base name, head and role say what it is
        self.row, self.col = m.rows[i], m.cols[j]
        self.value = float(m.values[i, j])

    def f(self, v: float) -> str:
        """A number as shown: rounded, with one minus sign, −, for negative numbers and operators
        alike, and never "−0.00"."""
        return format_value(v, self.digits, minus="−")

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
