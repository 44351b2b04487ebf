"""The matrix renderer as it was before issue 13, frozen: one ``rich.table.Table`` per matrix.

Kept only as the reference the new renderer is compared with (tests/test_render.py) and measured
against (benchmarks/bench_render.py): its plain text, and its colours, are what the walkthrough
showed. Copied from transformer_walkthrough/render.py at 9a8fd9a; do not "improve" it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator

import numpy as np
from rich import box
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from transformer_walkthrough.model.trace import Matrix, Stage, Trace
from transformer_walkthrough.views.palette import diverging, sequential
from transformer_walkthrough.views.stages import prediction_table, stage_header
from transformer_walkthrough.views.widgets import View

LABEL = "bold cyan"
TITLE = "bold"
NEG_INF = "red"
ELLIPSIS = "…"
MAX_ROWS = 24
GAP = 3
COL_GAP = 3


def format_value(v: float, precision: int) -> str:
    if math.isinf(v):
        return "-∞" if v < 0 else "∞"
    return f"{v:.{precision}f}"


def text_widths(values: np.ndarray, precision: int) -> np.ndarray:
    finite = np.isfinite(values)
    magnitude = np.where(finite, np.abs(np.round(values, precision)), 0.0)
    digits = np.floor(np.log10(np.maximum(magnitude, 1.0))) + 1
    widths = digits + (precision + 1 if precision else 0) + (np.signbit(values) & finite)
    return np.where(finite, widths, np.where(values < 0, 2, 1)).max(axis=0).astype(int)


def summarise(widths: list[int], budget: int, ellipsis: int) -> list[int]:
    n = len(widths)
    if sum(widths) <= budget:
        return list(range(n))
    head: list[int] = []
    tail: list[int] = []
    used = ellipsis
    for k in range(n):
        j = k // 2 if k % 2 == 0 else n - 1 - k // 2
        if k > 0 and used + widths[j] > budget:
            break
        used += widths[j]
        (head if k % 2 == 0 else tail).append(j)
    return [*head, -1, *tail[::-1]]


class Block:
    def __init__(self, console: Console, table: Table, width: int) -> None:
        self.width = width
        self.lines = console.render_lines(table, console.options.update(width=width), pad=True)


class SideBySide:
    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = blocks

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        gap = Segment(" " * GAP)
        height = max(len(b.lines) for b in self.blocks)
        for i in range(height):
            for k, block in enumerate(self.blocks):
                if k:
                    yield gap
                if i < len(block.lines):
                    yield from block.lines[i]
                else:
                    yield Segment(" " * block.width)
            yield Segment.line()


def _shading(name: str, values: np.ndarray, view: View) -> Callable[[float], str] | None:
    weights = re.fullmatch(r"A\d+", name) or name == "probabilities"
    # Changed on purpose (issue 22): under --heatmap, weights keep the fixed 0–1 scale and a
    # constant matrix is left plain; the old renderer is lent the new rule, as its number format.
    if view.heatmap and not weights:
        finite = values[np.isfinite(values)]
        if finite.size and np.all(finite == finite.flat[0]):
            return None
        scale = float(np.max(np.abs(finite))) if finite.size else 0.0
        return lambda v: "black on rgb({},{},{})".format(*diverging(v, scale))
    if (view.shade_weights or view.heatmap) and weights:
        return lambda v: "black on rgb({},{},{})".format(*sequential(v))
    return None


def matrix_table(name: str, matrix: Matrix, view: View) -> tuple[Table, int]:
    r, c = matrix.values.shape
    row_index = list(range(r)) if view.full else summarise([1] * r, MAX_ROWS, 1)
    shown = matrix.values[[i for i in row_index if i >= 0]]
    estimate = np.maximum(text_widths(shown, view.precision), [len(label) for label in matrix.cols])
    label_width = max(len(s) for s in matrix.rows)
    if view.full:
        columns = list(range(c))
    else:
        columns = summarise(
            [int(w) + COL_GAP for w in estimate], view.width - label_width, len(ELLIPSIS) + COL_GAP
        )
    kept = [j for j in columns if j >= 0]
    cells = [[format_value(v, view.precision) for v in row] for row in shown[:, kept].tolist()]
    width_of = {j: max(len(matrix.cols[j]), *(len(row[k]) for row in cells)) for k, j in enumerate(kept)}
    width_of[-1] = len(ELLIPSIS)

    shade = _shading(name, shown, view)

    def line(texts: list[str], values: list[float] | None = None) -> Text:
        out = Text((" " * COL_GAP).join(t.rjust(width_of[j]) for j, t in zip(columns, texts, strict=True)))
        if "-∞" in texts or (shade and values):
            end, k = 0, 0
            for j, text in zip(columns, texts, strict=True):
                end += width_of[j]
                if text == "-∞":
                    out.stylize(NEG_INF, end - 2, end)
                elif shade and values and j >= 0:
                    out.stylize(shade(values[k]), end - width_of[j], end)
                k += j >= 0
                end += COL_GAP
        return out

    header = line([ELLIPSIS if j < 0 else matrix.cols[j] for j in columns])
    title = f"{name}  ({r}×{c})"
    table = Table(
        title=Text(title, style=TITLE, no_wrap=True, overflow="ignore"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style=LABEL,
    )
    table.add_column(Text(""), style=LABEL, no_wrap=True, width=label_width)
    table.add_column(header, no_wrap=True, width=header.cell_len)
    numbers = iter(cells)
    for i in row_index:
        if i < 0:
            table.add_row(Text("⋮"), line(["⋮"] * len(columns)))
            continue
        row = next(numbers)
        texts, k = [], 0
        for j in columns:
            if j < 0:
                texts.append(ELLIPSIS)
            else:
                texts.append(row[k])
                k += 1
        table.add_row(Text(matrix.rows[i]), line(texts, matrix.values[i, kept].tolist() if shade else None))
    return table, max(label_width + 3 + header.cell_len, len(title))


def side_by_side(console: Console, tables: list[tuple[Table, int]], width: int) -> Iterator[RenderableType]:
    row: list[Block] = []
    used = 0
    for table, w in tables:
        if row and used + GAP + w > width:
            yield SideBySide(row)
            row, used = [], 0
        row.append(Block(console, table, w))
        used += w + (GAP if len(row) > 1 else 0)
    if row:
        yield SideBySide(row)


def render_stage(
    console: Console, stage: Stage, view: View, grads: dict[str, np.ndarray] | None = None
) -> Iterator[RenderableType]:
    yield stage_header(stage)
    grad_view = dataclasses.replace(view, precision=view.precision + 2)
    tables = []
    for name, m in stage.matrices.items():
        tables.append(matrix_table(name, m, view))
        if grads is not None:
            tables.append(matrix_table(f"dL/d{name}", Matrix(grads[name], m.rows, m.cols), grad_view))
    yield from side_by_side(console, tables, view.width)
    yield Text("")


def render_trace(
    console: Console,
    trace: Trace,
    stages: list[Stage],
    view: View,
    prediction: bool = True,
    grads: object | None = None,
) -> Iterator[RenderableType]:
    for stage in stages:
        yield from render_stage(console, stage, view, None if grads is None else grads.stages[stage.id])
    if prediction and trace.prediction:
        yield prediction_table(trace, view)
    if grads is not None:
        yield Text(
            f"loss = mean over the positions with a next token of −log p(next token) = {grads.loss:.6g}"
        )
