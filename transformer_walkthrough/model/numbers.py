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
    text = f"{v:.{precision}f}" if -LARGE < v < LARGE else f"{v:.{precision}e}"
    if text[0] != "-":
        return text
    if not text.strip("-0."):  # -0.00
        return text[1:]
    return text if minus == "-" else minus + text[1:]


def format_values(values: list[float], precision: int) -> list[str]:
    """``format_value`` of each number, as a matrix's row writes them: one ``format`` for each
    ordinary number (finite, below 10⁶), ``format_value`` for the others, and "-0.00" made "0.00"."""
    spec = f".{precision}f"
    texts = [format(v, spec) if -LARGE < v < LARGE else format_value(v, precision) for v in values]
    negative_zero = "-" + format(0.0, spec)  # the one text of an ordinary number that is only -, 0, .
    if negative_zero in texts:
        texts = [text[1:] if text == negative_zero else text for text in texts]
    return texts


def text_widths(values: np.ndarray, precision: int) -> np.ndarray:
    """The widest formatted number of each column, without formatting them: (rows, cols) -> (cols,).

    Digits before the point, a sign where the number is negative once rounded (-0.00 is shown as
    0.00), the point and the decimals; from 10⁶ on, one digit, the decimals and an exponent of 2 or
    3 digits (e+06, e+100: from 9.5e99 on, which may round up to it); 2 for ±∞, 3 for nan. Exact
    but for a half-way case, whose rounding could carry a digit or a sign.
    """
    values = values.astype(np.float64, copy=False)  # 1e100 is no float32
    finite = np.isfinite(values)
    large = np.abs(values) >= LARGE  # written d.dde+XX (±∞ too, set apart below)
    some_large = bool(large.any())
    rounded = np.round(np.where(large, 0.0, values) if some_large else values, precision)
    digits = np.floor(np.log10(np.maximum(np.abs(rounded), 1.0))) + 1
    negative = rounded < 0  # once rounded: -0.00 is shown as 0.00
    if some_large:  # one digit before the point, then e+06 or e+100
        digits = np.where(large, 5 + (np.abs(values) >= 9.5e99), digits)
        negative = np.where(large, values < 0, negative)
    widths = digits + (precision + 1 if precision else 0) + (negative & finite)
    not_finite = np.where(np.isnan(values), 3, np.where(values < 0, 2, 1))  # nan, -∞, ∞
    return np.where(finite, widths, not_finite).max(axis=0).astype(int)
