"""A matrix on the terminal: one block of lines, its rows and columns labelled, and blocks set side
by side in rows that fit the console.

A matrix is laid out here, as lines of Rich segments, in the look of a borderless Rich table.
Matrices wider than the console are summarised numpy-style, with an ellipsis column and a "⋮"
row (``summary``: the documents keep the same rows and columns), unless ``full`` is set. Cells
are shaded by value on the palette's scales (``palette``), and a legend says what a colour means.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator

import numpy as np
from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from ..model.numbers import format_values, text_widths
from ..model.trace import ATTENTION, PROBABILITIES, Matrix
from .palette import diverging, diverging_256, sequential, sequential_256
from .widgets import ELLIPSIS, LABEL, MAX_LABEL, NEG_INF, TITLE, View, cell_width, label, print_trimmed, trim

MAX_ROWS = 24  # taller matrices show their first and last rows around a "⋮"
GAP = 3  # spaces between matrices placed side by side
COL_GAP = 3  # spaces between the columns of a matrix
_ASCII_NUMBERS = {"-∞": "-inf", "∞": "inf"}  # a stream without "∞" (View.ascii)

# The matrix blocks' styles, parsed once.
_LABEL, _TITLE, _NEG_INF, _NULL = Style.parse(LABEL), Style.parse(TITLE), Style.parse(NEG_INF), Style()
_LABEL_PAD, _NULL_PAD = Segment(" ", _LABEL), Segment(" ", _NULL)
_NEWLINE = Segment.line()


def summarise(widths: list[int], budget: int, ellipsis: int) -> list[int]:
    """Indices to show when only ``budget`` fits: all, or the first and last few around a -1
    that stands for the ellipsis (itself ``ellipsis`` wide), numpy-style."""
    n = len(widths)
    if sum(widths) <= budget:
        return list(range(n))
    head: list[int] = []
    tail: list[int] = []
    used = ellipsis
    for k in range(n):  # alternate ends: 0, n-1, 1, n-2, …
        j = k // 2 if k % 2 == 0 else n - 1 - k // 2
        if k > 0 and used + widths[j] > budget:
            break
        used += widths[j]
        (head if k % 2 == 0 else tail).append(j)
    return [*head, -1, *tail[::-1]]


class SideBySide:
    """Blocks placed left to right with a gap, top-aligned: the lines are joined, not re-rendered."""

    def __init__(self, blocks: list[MatrixBlock]) -> None:
        self.blocks = blocks

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        yield from written(console, self.joined())

    def joined(self) -> Iterator[list[Segment]]:
        gap = Segment(" " * GAP)
        height = max(len(b.lines) for b in self.blocks)
        for i in range(height):
            line: list[Segment] = []
            for k, block in enumerate(self.blocks):
                if k:
                    line.append(gap)
                line += block.lines[i] if i < len(block.lines) else [Segment(" " * block.width)]
            yield line


class MatrixBlock:
    """One matrix as the terminal shows it: the title with its shape, the column labels over a
    rule, then one labelled line per row; every line ``width`` cells wide, ready to be set beside
    others.

    The lines are laid out here, as Rich ``Segment``s, instead of by a ``rich.table.Table``: a
    table measures and wraps every cell of every matrix, and at the paper's size (1,708 matrices)
    that was most of `walkthrough run`. The look is the table's, segment for segment: the tests
    compare both, plain and in colour. The Console still decides colour, width and pipes.
    """

    def __init__(self, width: int, lines: list[list[Segment]]) -> None:
        self.width = width
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        yield from written(console, self.lines)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)


def written(console: Console, lines: Iterable[list[Segment]]) -> Iterator[Segment]:
    """The lines as the console gets them: no line ends in spaces (``trim``), each ends in a newline.

    A console that writes no styles (a pipe, a file: no colour system, nothing recorded) would
    write each segment's text and nothing else; it gets those texts joined, one segment for all
    the lines, the same characters without Rich's work on each of the 250,000 segments of a
    Gemma 3 `run` (35,000 lines)."""
    if console.color_system is None and not console.record:
        yield Segment("".join([s.text for line in lines for s in (*trim(line), _NEWLINE)]))
        return
    for line in lines:
        yield from trim(line)
        yield Segment.line()


@functools.lru_cache(maxsize=4096)
def _labelled(text: str) -> tuple[str, int]:
    """A row's or a column's label as the terminal shows it (``label``) and its width in cells,
    worked out once: the same tokens and dimensions label most matrices of a pass."""
    shown = label(text)
    return shown, cell_width(shown)


def _labels(names: tuple[str, ...], picked: list[int]) -> tuple[dict[int, str], dict[int, int]]:
    """The labels of ``names[k]`` for each ``k`` in ``picked``, and their widths in cells, by ``k``."""
    labelled = {k: _labelled(names[k]) for k in picked}
    return {k: shown for k, (shown, _) in labelled.items()}, {k: cells for k, (_, cells) in labelled.items()}


def summary(matrix: Matrix, view: View) -> tuple[list[int], list[int]]:
    """The rows and the columns of ``matrix`` that ``view`` shows, in order, a -1 where the "⋮"
    row or the "…" column stands for the ones left out: numpy-style, the first and last few
    that fit ``view.width`` (and ``MAX_ROWS``), or all of them with ``view.full``. The terminal
    and the documents keep the same ones."""
    r, c = matrix.values.shape
    if view.full or c == 0:  # everything, or no columns to summarise
        return list(range(r)), list(range(c))
    row_index = summarise([1] * r, MAX_ROWS, 1) if r else []  # no rows: an idle expert's, its header only
    shown = matrix.values[[i for i in row_index if i >= 0]]
    # Labels are measured in terminal cells (▁猫 takes 3), and only those on screen: a long piece
    # among 58,101 hidden by the summary does not widen the column.
    label_width = max((_labelled(matrix.rows[i])[1] for i in row_index if i >= 0), default=0)
    ellipsis = "..." if view.ascii else ELLIPSIS
    # Only the columns that could fit are measured: a column is at least 1 + COL_GAP wide, so
    # no more than this many from either end (a 58,101-word vocabulary is measured at its ends).
    reach = max(1, view.width // (1 + COL_GAP) + 1)
    candidates = list(range(c)) if c <= 2 * reach else [*range(reach), *range(c - reach, c)]
    col_cells = [_labelled(matrix.cols[j])[1] for j in candidates]
    estimate = np.maximum(text_widths(shown[:, candidates], view.precision), col_cells) if r else col_cells
    # Each column costs its text and the gap before it.
    costs = [int(w) + COL_GAP for w in estimate]
    picked = summarise(costs, view.width - label_width, len(ellipsis) + COL_GAP)
    return row_index, [candidates[k] if k >= 0 else -1 for k in picked]


def matrix_block(name: str, matrix: Matrix, view: View) -> MatrixBlock:
    """One matrix titled with its name and shape, rows and columns labelled.

    Wider than the view, it is summarised numpy-style (an ellipsis column, a "⋮" row) unless
    ``view.full`` (``summary``). Only the numbers shown are formatted, so a 512-column matrix
    costs little more than a 4-column one. A line is one plain segment unless a cell in it is
    coloured.
    """
    r, c = matrix.values.shape
    if matrix.is_whole:  # ids (an expert's), not measurements: no decimals
        view = dataclasses.replace(view, precision=0)
    row_index, columns = summary(matrix, view)
    shown = matrix.values[[i for i in row_index if i >= 0]]
    row_labels, row_cells = _labels(matrix.rows, [i for i in row_index if i >= 0])
    label_width = max(row_cells.values(), default=0)  # no rows: an idle expert's
    ellipsis = "..." if view.ascii else ELLIPSIS
    col_labels, col_cells = _labels(matrix.cols, [j for j in columns if j >= 0])
    kept = [j for j in columns if j >= 0]
    numbers_shown = shown[:, kept].tolist()
    cells = [format_values(row, view.precision) for row in numbers_shown]
    neg_inf = "-∞"
    if view.ascii:  # measured as they will be written, so that the columns stay aligned
        cells = [[_ASCII_NUMBERS.get(t, t) for t in row] for row in cells]
        neg_inf = "-inf"
    longest = [max(map(len, column)) for column in zip(*cells, strict=True)] if cells else [0] * len(kept)
    width_of = {j: max(col_cells[j], longest[k]) for k, j in enumerate(kept)}
    width_of[-1] = len(ellipsis)
    widths = [width_of[j] for j in columns]
    # Where each column's text ends on the line: the spans that colour a cell.
    ends = list(itertools.accumulate(w + COL_GAP for w in widths))
    ends = [e - COL_GAP for e in ends]
    gap = " " * COL_GAP
    aligned = gap.join(f"{{:>{w}}}" for w in widths)  # a line of cells, each right-aligned in its width
    shade = _shading(name, matrix, shown, view)

    def numbers(texts: list[str], values: list[float] | None = None) -> list[Segment]:
        """A line of right-aligned cells; -∞ in red and, with ``values``, every cell shaded."""
        line = aligned.format(*texts)
        if not (neg_inf in texts or (shade and values)):
            return [Segment(line)]  # the common case: one run of text
        spans = []
        k = 0
        for j, text, w, end in zip(columns, texts, widths, ends, strict=True):
            if text == neg_inf:
                spans.append((end - len(neg_inf), end, _NEG_INF))
            elif shade and values and j >= 0:
                spans.append((end - w, end, shade(values[k])))
            k += j >= 0
        return _spans(line, spans)

    title = f"{label(name, 2 * MAX_LABEL)}  ({r}×{c})"
    header = gap.join(
        ellipsis.rjust(width_of[j]) if j < 0 else " " * (width_of[j] - col_cells[j]) + col_labels[j]
        for j in columns
    )
    table_width = label_width + 3 + sum(widths) + COL_GAP * (len(widths) - 1)
    title_width = cell_width(title)
    width = max(table_width, title_width)
    pad = [Segment(" " * (width - table_width))] if width > table_width else []
    # Between the labels and the numbers: the label column's padding, the divider, the numbers'
    # padding; in the header the numbers' padding is a label's (a table's header style).
    head_gap, row_gap = [_LABEL_PAD, _NULL_PAD, _LABEL_PAD], [_LABEL_PAD, _NULL_PAD, _NULL_PAD]
    lines = [
        [
            Segment(title, _TITLE),
            *([Segment(" " * (width - title_width))] if width > title_width else []),
        ],
        [Segment(" " * label_width, _LABEL), *head_gap, Segment(header, _LABEL), *pad],
        [Segment("─" * table_width, _NULL), *pad],
    ]
    cut = columns.index(-1) if -1 in columns else None  # where the "…" column stands, if it does
    body = zip(cells, numbers_shown, strict=True)
    for i in row_index:
        if i < 0:
            row_label, line = "⋮".ljust(label_width), numbers(["⋮"] * len(columns))
        else:
            row, values = next(body)
            texts = row if cut is None else [*row[:cut], ellipsis, *row[cut:]]
            row_label = row_labels[i] + " " * (label_width - row_cells[i])
            line = numbers(texts, values if shade else None)
        lines.append([Segment(row_label, _LABEL), *row_gap, *line, *pad])
    return MatrixBlock(width, lines)


def _spans(text: str, spans: list[tuple[int, int, Style]]) -> list[Segment]:
    """``text`` cut into segments at the (start, end, style) spans, in order; unstyled between them."""
    out = []
    at = 0
    for start, end, style in spans:
        if start > at:
            out.append(Segment(text[at:start], _NULL))
        out.append(Segment(text[start:end], style))
        at = end
    if at < len(text):
        out.append(Segment(text[at:], _NULL))
    return out


def _shading(name: str, matrix: Matrix, shown: np.ndarray, view: View) -> Callable[[float], Style] | None:
    """How to colour a cell's background by its value, or None: attention weights and probabilities
    from 0 white to 1 green, always on that fixed scale; with ``--heatmap`` every other matrix too, on
    its own scale (a constant one, such as an untrained gamma, is left plain).

    The one place that decides which matrices are shaded (``shown``: the rows on screen, which
    set the heatmap's scale unless the stage shares one).
    """
    eight_bit = view.colors == "256"
    weights = matrix.role in (ATTENTION, PROBABILITIES)  # on the fixed 0–1 scale in every view
    if view.heatmap and not weights:
        finite = shown[np.isfinite(shown)]
        if finite.size and np.all(finite == finite.flat[0]):  # a constant (gamma of ones): no extreme
            return None
        scale = view.scale if view.scale is not None else largest(shown)
        if eight_bit:
            return lambda v: _background_256(diverging_256(v, scale))
        return lambda v: _background(diverging(v, scale))
    if weights and (view.shade_weights or view.heatmap):
        if eight_bit:
            return lambda v: _background_256(sequential_256(v))
        return lambda v: _background(sequential(v))
    return None


def is_shaded(matrix: Matrix, view: View) -> bool:
    """Whether the cells of ``matrix`` are coloured by value (on a colour terminal)."""
    return view.heatmap or (view.shade_weights and matrix.role in (ATTENTION, PROBABILITIES))


def largest(values: np.ndarray) -> float:
    """The largest finite |value| (0 if none): the heatmap's scale."""
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


@functools.lru_cache(maxsize=4096)
def _background(rgb: tuple[int, int, int]) -> Style:
    return Style.parse("black on rgb({},{},{})".format(*rgb))


@functools.lru_cache(maxsize=512)
def _background_256(number: int) -> Style:
    return Style.parse(f"black on color({number})")


def _swatch(view: View, value: float, heatmap: bool) -> Style:
    if heatmap:
        return _background_256(diverging_256(value, 1.0)) if view.colors == "256" else _background(
            diverging(value, 1.0))  # fmt: skip
    return _background_256(sequential_256(value)) if view.colors == "256" else _background(sequential(value))


def legend(view: View, shaded: list[Matrix]) -> Text:
    """The line under shaded matrices that says what a colour means: swatches from one end of the
    scale to the other, the numbers at their ends."""
    swatch = "  "
    out = Text()
    out.append("shading: ", style="dim")
    weights = [m for m in shaded if m.role in (ATTENTION, PROBABILITIES)]  # always on the fixed 0–1 scale
    if view.heatmap and len(weights) < len(shaded):
        end = f"{view.scale:.{max(view.precision, 2)}f}" if view.scale is not None else "max"
        out.append(f"−{end} ")
        for t in (-1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0):
            out.append(swatch, _swatch(view, t, heatmap=True))
        out.append(f" +{end}")
        said = "one scale for the stage" if view.scale is not None else "max: each matrix's largest |value|"
        out.append(f"  blue < 0 < red; {said}", style="dim")
        if not weights:
            return out
        out.append("\nshading: ", style="dim")  # and the weights' own, fixed scale on a line of its own
    out.append("0 ")
    for p in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0):
        out.append(swatch, _swatch(view, p, heatmap=False))
    names = sorted({"attention weights" if m.role == ATTENTION else "probabilities" for m in weights})
    out.append(" 1")
    out.append(f"  {' and '.join(names)}", style="dim")
    return out


def side_by_side(blocks: list[MatrixBlock], width: int) -> Iterator[RenderableType]:
    """Pack consecutive blocks into rows that fit the console, the way a textbook lays them out."""
    return layout([(None, [block]) for block in blocks], width)


def layout(units: list[tuple[object, list[MatrixBlock]]], width: int) -> Iterator[RenderableType]:
    """Pack units (a matrix, or a matrix and its gradient) into rows that fit the width; a unit of
    another group (``key``) starts a new row, so that a row holds matrices of one meaning."""
    row: list[MatrixBlock] = []
    used, key = 0, None
    for group, unit in units:
        unit_width = sum(b.width for b in unit) + GAP * (len(unit) - 1)
        if row and (group != key or used + GAP + unit_width > width):
            yield SideBySide(row)
            row, used = [], 0
        used += unit_width + (GAP if row else 0)
        row.extend(unit)
        key = group
    if row:
        yield SideBySide(row)


def print_all(console: Console, renderables: Iterator[RenderableType]) -> None:
    """Print without cropping (widths were chosen above, and --full may be wider than the screen)
    and with no spaces at the ends of lines."""
    for renderable in renderables:
        if isinstance(renderable, (MatrixBlock, SideBySide)):  # their lines are trimmed already
            console.print(renderable, crop=False)
        else:
            print_trimmed(console, renderable)
