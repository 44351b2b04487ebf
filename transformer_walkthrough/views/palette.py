"""The colours of shaded cells: one palette for the terminal (``blocks``) and the HTML report
(``documents.shades``), so that a learner sees the same green for the same attention weight in
both.

Two scales, each a function of the value alone (never of the output format):

- ``sequential(p)``: for numbers in [0, 1] that are probabilities (attention weights A_h, the
  softmax output): white at 0 to deep green at 1.
- ``diverging(v, scale)``: for any matrix under ``--heatmap``: white at 0, red for positive and
  blue for negative values, by |v| / scale (the matrix's largest |value|, or the stage's with
  ``--shared-scale``).

Both darken monotonically: CIE lightness L* falls as the value moves away from 0 (pinned by a
test). A terminal of 256 colours cannot show the RGB colours; left to Rich, the nearest colour of
its palette wanders in hue (a grey, then a cyan, on the way to green). ``sequential_256`` and
``diverging_256`` step instead along ramps chosen from the xterm colour cube that keep the hue and
darken at every step. HTML takes the RGB (``css``).
"""

from __future__ import annotations

# xterm-256 colour numbers, white first, each darker than the one before and of the same hue.
GREENS_256 = (231, 194, 157, 151, 114, 108, 71)  # (255,255,255) … (95,175,95)
REDS_256 = (231, 224, 217, 210, 203)  # (255,255,255) … (255,95,95)
BLUES_256 = (231, 189, 147, 111, 69)  # (255,255,255) … (95,135,255)


def _strength(v: float, scale: float) -> float:
    """|v| / scale within [0, 1], eased so that small values are already visible; its sign kept."""
    t = 0.0 if scale == 0 else max(-1.0, min(1.0, v / scale))
    return (abs(t) ** 0.8) * (1 if t >= 0 else -1)


def _weight(p: float) -> float:
    return max(0.0, min(1.0, p)) ** 0.7


def diverging(v: float, scale: float) -> tuple[int, int, int]:
    """Red for positive, blue for negative, white at 0, by |v| / scale (the matrix's largest |v|)."""
    t = _strength(v, scale)
    strength = abs(t)
    if t >= 0:
        return 255, round(255 - 150 * strength), round(255 - 170 * strength)
    return round(255 - 170 * strength), round(255 - 120 * strength), 255


def sequential(p: float) -> tuple[int, int, int]:
    """White at 0 to deep green at 1: for weights that are probabilities (attention, softmax)."""
    t = _weight(p)
    return round(255 - 190 * t), round(255 - 90 * t), round(255 - 170 * t)


def diverging_256(v: float, scale: float) -> int:
    """``diverging`` on a 256-colour terminal: a step of the red or the blue ramp."""
    t = _strength(v, scale)
    ramp = REDS_256 if t >= 0 else BLUES_256
    return ramp[round(abs(t) * (len(ramp) - 1))]


def sequential_256(p: float) -> int:
    """``sequential`` on a 256-colour terminal: a step of the green ramp."""
    return GREENS_256[round(_weight(p) * (len(GREENS_256) - 1))]


def css(rgb: tuple[int, int, int]) -> str:
    """A colour of the palette as HTML writes it: ``rgb(65,165,85)``."""
    return "rgb({},{},{})".format(*rgb)
