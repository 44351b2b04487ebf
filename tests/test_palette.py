"""Colour: shading darkens with the value on 256-colour terminals as on truecolor, keeps its hue,
says what it means (a legend), and can share one scale across a stage (--shared-scale)."""

from __future__ import annotations

import io
import re
from itertools import pairwise

import numpy as np
import pytest
from rich._palettes import EIGHT_BIT_PALETTE
from rich.console import Console
from typer.testing import CliRunner

from tests.test_render import hand_stage
from transformer_walkthrough.cli import app
from transformer_walkthrough.model.trace import ATTENTION, Matrix
from transformer_walkthrough.views import palette
from transformer_walkthrough.views.blocks import matrix_block
from transformer_walkthrough.views.stages import render_stage
from transformer_walkthrough.views.widgets import View


def lightness(rgb: tuple[int, int, int]) -> float:
    """CIE L* of an sRGB colour: 100 for white, 0 for black."""

    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116 * y ** (1 / 3) - 16 if y > 216 / 24389 else y * 24389 / 27


def backgrounds(values: list[float], system: str, heatmap: bool = False) -> list[tuple[int, int, int]]:
    """The background colour of each cell of a one-row matrix, as a terminal of ``system`` gets it."""
    console = Console(width=1000, force_terminal=True, color_system=system, file=io.StringIO())
    # attention weights keep the fixed 0–1 scale under --heatmap too: its palette shades other matrices
    m = Matrix(
        np.array([values]),
        ("a",),
        tuple(f"c{k}" for k in range(len(values))),
        *(() if heatmap else (ATTENTION,)),
    )
    colors = "truecolor" if system == "truecolor" else "256"
    view = View(width=1000, full=True, heatmap=heatmap, colors=colors)
    console.print(matrix_block("A1", m, view), crop=False)
    out = []
    for code in re.findall(r"\x1b\[([0-9;]*)m", console.file.getvalue()):
        if m2 := re.search(r"48;2;(\d+);(\d+);(\d+)", code):
            out.append(tuple(int(x) for x in m2.groups()))
        elif m5 := re.search(r"48;5;(\d+)", code):
            out.append(tuple(EIGHT_BIT_PALETTE[int(m5[1])]))
    assert len(out) == len(values)
    return out  # type: ignore[return-value]


STEPS = [k / 100 for k in range(101)]


@pytest.mark.parametrize("system", ["truecolor", "256"])
def test_attention_shading_darkens_monotonically_and_stays_green(system: str) -> None:
    colours = backgrounds(STEPS, system)
    ls = [lightness(c) for c in colours]
    assert colours[0] == (255, 255, 255) and ls[-1] < 70
    assert all(b <= a for a, b in pairwise(ls)), ls
    # and of one hue: every colour but white is green (no grey, no cyan on the way)
    assert all(g > r and g > b for r, g, b in colours if (r, g, b) != (255, 255, 255)), colours


@pytest.mark.parametrize("system", ["truecolor", "256"])
def test_heatmap_darkens_away_from_zero_red_above_blue_below(system: str) -> None:
    colours = backgrounds([-1 + k / 50 for k in range(101)], system, heatmap=True)
    ls = [lightness(c) for c in colours]
    below, above = ls[:51], ls[50:]
    assert all(b >= a for a, b in pairwise(below))
    assert all(b <= a for a, b in pairwise(above))
    assert colours[50] == (255, 255, 255)
    tinted = [(k, c) for k, c in enumerate(colours) if c != (255, 255, 255)]  # small |v| may be white
    assert all(b > r for k, (r, g, b) in tinted if k < 50) and all(r > b for k, (r, g, b) in tinted if k > 50)


def test_the_256_ramps_step_down_in_lightness() -> None:
    for ramp in (palette.GREENS_256, palette.REDS_256, palette.BLUES_256):
        ls = [lightness(tuple(EIGHT_BIT_PALETTE[n])) for n in ramp]
        assert all(b < a for a, b in pairwise(ls)), (ramp, ls)
    assert palette.sequential_256(0) == 231 and palette.sequential_256(1) == 71
    assert palette.diverging_256(-5, 5) == 69 and palette.diverging_256(5, 5) == 203


def test_html_writes_the_palette_as_css() -> None:
    assert palette.css(palette.sequential(1.0)) == "rgb(65,165,85)"
    assert palette.css(palette.diverging(0.0, 1.0)) == "rgb(255,255,255)"


def stage_text(view: View, colour: bool) -> str:
    terminal = {"force_terminal": True, "color_system": "truecolor"} if colour else {"no_color": True}
    console = Console(width=80, record=True, file=io.StringIO(), **terminal)  # type: ignore[arg-type]
    for r in render_stage(console, hand_stage(), view):
        console.print(r)
    return console.export_text(styles=colour)


def test_a_legend_under_shaded_matrices_on_a_colour_terminal_only() -> None:
    lines = stage_text(View(width=80), colour=False).splitlines()
    assert not any("shading" in line for line in lines)
    plain = Console(width=80, force_terminal=True, color_system="truecolor", record=True, file=io.StringIO())
    for r in render_stage(plain, hand_stage(), View(width=80)):
        plain.print(r)
    text = plain.export_text().splitlines()
    legend = [line for line in text if line.startswith("shading")]
    assert legend == ["shading: 0" + " " * 14 + "1  attention weights"]
    assert text.index(legend[0]) > max(k for k, line in enumerate(text) if "A1  (2×2)" in line)
    heat = Console(width=80, force_terminal=True, color_system="truecolor", record=True, file=io.StringIO())
    for r in render_stage(heat, hand_stage(), View(width=80, heatmap=True, shared_scale=True)):
        heat.print(r)
    shown = heat.export_text()
    assert "shading: −4.00                    +4.00  blue < 0 < red; one scale for the stage" in shown
    # attention weights keep their fixed 0–1 scale under --heatmap, and the legend says so
    assert "\nshading: 0" + " " * 14 + "1  attention weights" in shown


def test_shared_scale_gives_a_value_one_colour_across_the_stage() -> None:
    own = stage_text(View(width=80, heatmap=True), colour=True)
    shared = stage_text(View(width=80, heatmap=True, shared_scale=True), colour=True)
    full_red = "48;2;{};{};{}".format(*palette.diverging(1, 1))
    one_of_eight = "48;2;{};{};{}".format(*palette.diverging(0.5, 4))  # no matrix's own scale gives 1/8
    # each matrix's own scale: 1.0 is the largest of W_Q1, of Q1, of S1 and of A1, so full red there;
    # with the stage's scale (4.0, the largest of output) full red is output's 4.00 alone
    assert own.count(full_red) > 4 + 1 and shared.count(full_red) == 1 + 1  # + the legend's end
    assert one_of_eight in shared and one_of_eight not in own


def test_shared_scale_is_an_option_of_run_step_and_tour(runner: CliRunner) -> None:
    for command in ("run", "step", "tour"):
        assert "--shared-scale" in runner.invoke(app, [command, "--help"]).stdout
    result = runner.invoke(app, ["step", "-s", "output.probabilities", "--shared-scale", "--no-map"])
    assert result.exit_code == 0 and "probabilities  (4×7)" in result.stdout
