"""Heatmap colours, shared by the terminal and the HTML report."""

from __future__ import annotations


def diverging(v: float, scale: float) -> tuple[int, int, int]:
    """Red for positive, blue for negative, white at 0, by |v| / scale (the matrix's largest |v|)."""
    t = 0.0 if scale == 0 else max(-1.0, min(1.0, v / scale))
    strength = abs(t) ** 0.8
    if t >= 0:
        return 255, round(255 - 150 * strength), round(255 - 170 * strength)
    return round(255 - 170 * strength), round(255 - 120 * strength), 255


def sequential(p: float) -> tuple[int, int, int]:
    """White at 0 to deep green at 1: for weights that are probabilities (attention, softmax)."""
    t = max(0.0, min(1.0, p)) ** 0.7
    return round(255 - 190 * t), round(255 - 90 * t), round(255 - 170 * t)
