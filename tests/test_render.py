"""What the terminal shows, compared as plain text from a 100-column console without colour."""

from __future__ import annotations

import io

import numpy as np
from rich.console import Console

from transformer_walkthrough.render import View, matrix_table, prediction_table, render_trace, side_by_side
from transformer_walkthrough.trace import Matrix, Trace


def plain(*renderables: object, width: int = 100) -> str:
    console = Console(width=width, no_color=True, record=True, file=io.StringIO())
    for r in renderables:
        console.print(r)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def show(name: str, matrix: Matrix, view: View) -> str:
    console = Console(width=view.width, no_color=True, record=True, file=io.StringIO())
    for r in side_by_side(console, [matrix_table(name, matrix, view)], view.width):
        console.print(r, crop=False)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def test_a_small_matrix_exactly() -> None:
    m = Matrix(np.array([[1.0, -np.inf], [0.5, -0.25]]), ("a", "bb"), ("x", "y"))
    assert show("m", m, View(precision=2)) == "\n".join([
        "m  (2×2)",
        "        x       y",
        "─────────────────",
        "a    1.00      -∞",
        "bb   0.50   -0.25",
    ])  # fmt: skip


def test_precision_changes_the_digits() -> None:
    m = Matrix(np.array([[1 / 3]]), ("r",), ("c",))
    assert show("m", m, View(precision=4)).splitlines()[-1] == "r   0.3333"
    assert show("m", m, View(precision=0)).splitlines()[-1] == "r   0"


def test_tokens_show_as_themselves_not_as_markup() -> None:
    m = Matrix(np.zeros((2, 2)), ("<start>", "[bold]x[/bold]"), ("<end>", "[red]"))
    text = show("S1", m, View())
    assert "[bold]x[/bold]" in text and "[red]" in text and "<start>" in text and "<end>" in text


def test_wide_matrix_is_summarised_like_numpy_unless_full() -> None:
    m = Matrix(np.arange(30.0).reshape(1, 30), ("r",), tuple(f"d{j}" for j in range(30)))
    header = show("wide", m, View(precision=0, width=40)).splitlines()[1]
    # 39 columns of text for the numbers; each column costs its width + 3, the ellipsis 4:
    # d0, d29, d1, d28, d2, d27 fit (4+5+6+5+6+5+6 = 37), d3 would not.
    assert header.split() == ["d0", "d1", "d2", "…", "d27", "d28", "d29"]
    full = show("wide", m, View(precision=0, width=40, full=True))
    assert "…" not in full and all(f"d{j}" in full for j in range(30))


def test_tall_matrix_shows_first_and_last_rows() -> None:
    m = Matrix(np.arange(30.0).reshape(30, 1), tuple(f"r{i}" for i in range(30)), ("c",))
    labels = [line.split()[0] for line in show("tall", m, View(precision=0)).splitlines()[3:]]
    assert labels == [f"r{i}" for i in range(12)] + ["⋮"] + [f"r{i}" for i in range(19, 30)]


def test_small_matrices_sit_side_by_side_when_they_fit() -> None:
    a = Matrix(np.ones((2, 2)), ("a", "b"), ("x", "y"))
    console = Console(width=100, no_color=True, record=True, file=io.StringIO())
    tables = [matrix_table(n, a, View()) for n in ("Q1", "K1", "V1")]
    for r in side_by_side(console, tables, 100):
        console.print(r)
    first = console.export_text().splitlines()[0]
    assert first.split() == ["Q1", "(2×2)", "K1", "(2×2)", "V1", "(2×2)"]
    narrow = Console(width=30, no_color=True, record=True, file=io.StringIO())
    for r in side_by_side(narrow, tables, 30):
        narrow.print(r)
    titles = [line.split()[0] for line in narrow.export_text().splitlines() if "(2×2)" in line]
    assert titles == ["Q1", "K1", "V1"]  # one per row: two would not fit in 30 columns


def test_stage_shows_id_title_explanation_formula_and_matrices(trace: Trace) -> None:
    stage = trace["decoder.0.masked-attention"]
    console = Console(width=100, no_color=True, record=True, file=io.StringIO())
    for r in render_trace(console, trace, [stage], View(), prediction=False):
        console.print(r)
    text = console.export_text()
    assert text.splitlines()[0].startswith(
        "Decoder layer 0 · masked multi-head self-attention  decoder.0.masked-attention"
    )
    assert "A_h = softmax(S_h + M)" in text and "exactly 0" in text
    for name in ("M  (4×4)", "S1+M  (4×4)", "A2  (4×4)", "concat  (4×4)", "W_O  (4×4)", "output  (4×4)"):
        assert name in text
    assert text.count("-∞") == 3 * 6  # M, S1+M, S2+M: the 3 + 2 + 1 cells above the diagonal


def test_prediction_table(trace: Trace) -> None:
    text = plain(prediction_table(trace, View()))
    rows = [
        line.split() for line in text.splitlines() if line.split() and line.split()[0] in trace.target_tokens
    ]
    assert [r[0] for r in rows] == list(trace.target_tokens)
    probs = trace["output.probabilities"]["probabilities"]
    for row, pred, p in zip(rows, trace.prediction, probs, strict=True):
        assert row[1] == trace.vocabulary[int(np.argmax(p))]
        assert row[2] == f"{p.max():.2f}"
        assert row[3] == (pred.expected or "—")


def test_loss_curve_is_a_log_scale_dot_plot() -> None:
    from transformer_walkthrough.render import loss_curve

    lines = loss_curve([100.0, 10.0, 1.0, 0.1], width=4, height=4).plain.splitlines()
    assert lines[0] == "loss, log scale, over 3 steps"
    assert [line.rstrip() for line in lines[1:6]] == [
        "100 │•",
        "    │ •",
        "    │  •",
        "0.1 │   •",
        "    └────",
    ]


def coloured(name: str, matrix: Matrix, view: View) -> str:
    console = Console(
        width=100, force_terminal=True, color_system="truecolor", record=True, file=io.StringIO()
    )
    table, _ = matrix_table(name, matrix, view)
    console.print(table)
    return console.export_text(styles=True)


def test_attention_weights_are_shaded_and_heatmap_colours_everything() -> None:
    weights = Matrix(np.array([[1.0, 0.0], [0.25, 0.75]]), ("a", "b"), ("a", "b"))
    scores = Matrix(np.array([[2.0, -1.0], [0.5, -np.inf]]), ("a", "b"), ("a", "b"))
    assert "48;2;65;165;85" in coloured("A1", weights, View())  # weight 1: the deepest green
    assert "48;2;255;255;255" in coloured("A1", weights, View())  # weight 0: white
    assert "48;2" not in coloured("S1", scores, View())  # scores are not weights: plain by default
    hot = coloured("S1", scores, View(heatmap=True))
    assert "48;2;255;105;85" in hot  # the largest positive: full red
    assert "48;2;" in hot and "-∞" in hot
    assert "48;2" not in coloured("A1", weights, View(shade_weights=False))
    # and with no colour (a pipe, NO_COLOR) the same table is plain text
    assert "\x1b[" not in show("A1", weights, View(heatmap=True))
