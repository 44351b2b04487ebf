"""How a number is written, the same in the terminal, in documents and in ``explain``."""

from __future__ import annotations

import math

import numpy as np

LARGE = 1e6  # from here on a number is shown as 1.23e+06: 300 digits of 1e300 would hide the matrix


def format_value(v: float, precision: int, minus: str = "-") -> str:
    """A number at ``precision`` decimals, or in scientific notation from 10⁶ on; ±∞ as "-∞" and "∞"
    (the mask's value); never "-0.00", which reads as a number below zero that the eye cannot find.

    ``minus`` is the sign a negative number gets: "-" in the terminal's matrices, "−" in prose.
    """
    if math.isinf(v):
        return f"{minus}∞" if v < 0 else "∞"
    text = f"{v:.{precision}f}" if abs(v) < LARGE else f"{v:.{precision}e}"
    if text.startswith("-"):
        return minus + text[1:] if text.strip("-0.") else text[1:]
    return text


def text_widths(values: np.ndarray, precision: int) -> np.ndarray:
    """The widest formatted number of each column, without formatting them: (rows, cols) -> (cols,).

    Digits before the point, a sign where the number is negative once rounded (-0.00 is shown as
    0.00), the point and the decimals; from 10⁶ on, one digit, the decimals and an exponent of 2 or
    3 digits (e+06, e+300); 2 for ±∞. Exact but for a half-way case, whose rounding could carry a
    digit or a sign.
    """
    finite = np.isfinite(values)
    magnitude = np.where(finite, np.abs(values), 0.0)
    large = magnitude >= LARGE
    rounded = np.round(values, precision)
    digits = np.floor(np.log10(np.maximum(np.where(large, 1.0, np.abs(rounded)), 1.0))) + 1
    exponent = np.where(large, 4 + (magnitude >= 1e100), 0)  # e+06, e+100
    widths = digits + exponent + (precision + 1 if precision else 0) + ((rounded < 0) & finite)
    return np.where(finite, widths, np.where(values < 0, 2, 1)).max(axis=0).astype(int)
