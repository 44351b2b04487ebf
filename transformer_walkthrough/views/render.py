"""Everything the terminal shows: stages as blocks of matrices with labelled rows and columns.

All styling of what the commands compute lives here (``terminal`` prints it, beside the
commands' own sentences). Text is never markup (a token like ``<start>`` or ``[1]`` must show as
itself, and parsing markup is the slow path). A matrix is laid out here, as lines of Rich
segments, in the look of a borderless Rich table; the prediction and the other small tables are
Rich tables. Matrices wider than the console are summarised numpy-style, with an ellipsis
column, unless ``full`` is set.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.rule import Rule
from rich.segment import Segment, Segments
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..errors import printable, shorten
from ..model.kinds import KINDS
from ..model.numbers import format_value, text_widths
from ..model.trace import ACTIVATION, ATTENTION, PROBABILITIES, Matrix, Stage, Trace, top_k
from .palette import diverging, diverging_256, sequential, sequential_256

if TYPE_CHECKING:
    from ..compare.checks import Check
    from ..compare.diff import StageDiff
    from ..model.backprop import Backward
    from ..model.generation import Comparison, Step
    from ..model.sampling import Draw, Sampling

LABEL = "bold cyan"
TITLE = "bold"
FORMULA = "yellow"
NEG_INF = "red"
ELLIPSIS = "…"
MAX_ROWS = 24  # taller matrices show their first and last rows around a "⋮"
GAP = 3  # spaces between matrices placed side by side
COL_GAP = 3  # spaces between the columns of a matrix
# Characters of a token on screen: a row label of 1.6 MB (a checkpoint's vocabulary can hold one)
# must not become a 1.6 MB column. Exports keep every label whole.
MAX_LABEL = 32
_ASCII_NUMBERS = {"-∞": "-inf", "∞": "inf"}  # a stream without "∞" (View.ascii)

# The matrix blocks' styles, parsed once.
_LABEL, _TITLE, _NEG_INF, _NULL = Style.parse(LABEL), Style.parse(TITLE), Style.parse(NEG_INF), Style()
_LABEL_PAD, _NULL_PAD = Segment(" ", _LABEL), Segment(" ", _NULL)


@dataclass(frozen=True)
class View:
    """How numbers are shown: never how they are computed."""

    precision: int = 2
    width: int = 100
    full: bool = False
    heatmap: bool = False  # every matrix coloured by value (on a colour terminal)
    shade_weights: bool = True  # attention weights and probabilities shaded, 0 white to 1 green
    colors: str = "truecolor"  # the terminal's: "truecolor", or "256" (palette's own 256-colour ramps)
    shared_scale: bool = False  # one heatmap scale per stage (its largest |value|), not per matrix
    scale: float | None = None  # the heatmap's scale when shared; None: each matrix's own
    ascii: bool = False  # the output cannot show "∞" or "…": the matrices write "-inf" and "..."


def label(text: str, limit: int = MAX_LABEL) -> str:
    """A token as the terminal shows it: escaped where it is not printable (ESC, newline, the lone
    surrogate of a byte that was not UTF-8) and cut to ``limit`` characters around a "…".

    The renderer's own guard: a label reaches it from a config, a checkpoint's vocabulary or a
    tokenizer, and whoever made it may not have escaped it.
    """
    if len(text) <= limit and text.isprintable():
        return text  # the common case, at the cost of two checks
    if len(text) > 2 * limit:  # only its ends can show: a 1.6 MB piece costs no more than a short one
        text = text[:limit] + text[-limit:]
    return shorten(printable(text), limit)


def styled_table(title: str | None = None) -> Table:
    """The walkthrough's table: title on the left, a rule under the header, no outer edges. The
    table is at least as wide as its title, which Rich would otherwise wrap at the columns' width
    ("Cached steps vs one full / pass")."""
    return Table(
        title=Text(title, style=TITLE) if title else None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        header_style=LABEL,
        min_width=cell_len(title) if title else None,
    )


class Entries:
    """A table cell of entries ("<end> 0.25") joined by ``sep`` that wraps between entries, never
    inside one: at 80 columns a word must not be parted from its number."""

    def __init__(self, entries: list[str], sep: str = ", ", style: str = "") -> None:
        self.entries, self.sep, self.style = entries, sep, style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((cell_len(e) + cell_len(self.sep.rstrip()) for e in self.entries), default=0)
        return Measurement(widest, cell_len(self.sep.join(self.entries)))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        for line in pack(self.entries, self.sep, options.max_width):
            yield Text(line, style=self.style, no_wrap=True, overflow="fold")


def pack(entries: list[str], sep: str, width: int) -> list[str]:
    """The entries joined by ``sep`` into lines of at most ``width`` cells, broken only between
    entries (the separator's trailing space dropped at a break); an entry wider than the line
    stands alone."""
    lines: list[str] = []
    line = ""
    for k, entry in enumerate(entries):
        tail = sep.rstrip() if k < len(entries) - 1 else ""
        if line and cell_len(line) + cell_len(sep) + cell_len(entry) + cell_len(tail) > width:
            lines.append(line + sep.rstrip())
            line = entry
        else:
            line = f"{line}{sep}{entry}" if line else entry
    return [*lines, line] if line or not lines else lines


_OPEN, _CLOSE = "([{", ")]}"
_OPERATORS = ("=", "+", "−", "-", "/", "·", "×", "→", "≈")


def wrap_explanation(line: str, width: int, hang: int = 4) -> list[str]:
    """A line of ``explain`` broken to ``width`` where a reader would break it: never inside
    brackets (``A1[1, 0]``, an aside ``(h = 1 … num_heads)``), never between a label and its
    number (``<end> −∞``) nor around an operator (``e^(−∞) = 0.0000``); a long sum, only before
    its operators; what is still too long for a line (a long aside), between its words. Continuation
    lines are indented ``hang`` spaces past the line's own indent."""
    if cell_len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    words = line.lstrip(" ").split(" ")
    # Chunks: runs of words that must stay together; a weak break (before an operator) may part them.
    chunks: list[list[str]] = []
    depth = 0  # brackets open: A1[i, j], e^(x − m), an aside (h = 1 … num_heads)
    for k, word in enumerate(words):
        glued = k > 0 and (
            depth > 0
            or (word[:1] != "" and word[:1] in "0123456789−-+∞=/·×→≈|")
            or words[k - 1] in _OPERATORS
            or words[k - 1].startswith("Σ")  # a sum's sign stays with what it sums
        )
        if glued:
            chunks[-1].append(word)
        else:
            chunks.append([word])
        for ch in word:
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSE and depth:
                depth -= 1
    room = width - len(indent) - hang
    pieces: list[str] = []  # unbreakable text, each with the space before it implied
    for chunk in chunks:
        text = " ".join(chunk)
        if cell_len(text) <= room:
            pieces.append(text)
            continue
        parts: list[list[str]] = [[]]
        for word in chunk:  # too long to keep together: break before its operators
            if parts[-1] and word in _OPERATORS[:4]:
                parts.append([])
            parts[-1].append(word)
        for part in parts:  # and a part still too long (prose in brackets), between its words
            pieces += [" ".join(part)] if cell_len(" ".join(part)) <= room else part
    lines: list[str] = []
    line_text = indent
    for piece in pieces:
        if line_text.strip() and cell_len(line_text) + 1 + cell_len(piece) > width:
            lines.append(line_text)
            line_text = indent + " " * hang + piece
        else:
            line_text = f"{line_text} {piece}" if line_text.strip() else line_text + piece
    return [*lines, line_text]


def paragraph(text: str, width: int, style: str = "") -> Text:
    """``text`` broken into lines as ``wrap_explanation`` breaks them: no number parted from its label."""
    return Text("\n".join(wrap_explanation(text, width, hang=0)), style=style, overflow="fold")


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
        gap = Segment(" " * GAP)
        height = max(len(b.lines) for b in self.blocks)
        for i in range(height):
            line: list[Segment] = []
            for k, block in enumerate(self.blocks):
                if k:
                    line.append(gap)
                line += block.lines[i] if i < len(block.lines) else [Segment(" " * block.width)]
            yield from trim(line)  # no line ends in spaces
            yield Segment.line()


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
        for line in self.lines:
            yield from trim(line)  # no line ends in spaces
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)


def summary(matrix: Matrix, view: View) -> tuple[list[int], list[int]]:
    """The rows and the columns of ``matrix`` that ``view`` shows, in order, a -1 where the "⋮"
    row or the "…" column stands for the ones left out: numpy-style, the first and last few
    that fit ``view.width`` (and ``MAX_ROWS``), or all of them with ``view.full``. The terminal
    and the documents keep the same ones."""
    r, c = matrix.values.shape
    if view.full:
        return list(range(r)), list(range(c))
    row_index = summarise([1] * r, MAX_ROWS, 1)
    shown = matrix.values[[i for i in row_index if i >= 0]]
    # Labels are measured in terminal cells (▁猫 takes 3), and only those on screen: a long piece
    # among 58,101 hidden by the summary does not widen the column.
    label_width = max(cell_width(label(matrix.rows[i])) for i in row_index if i >= 0)
    ellipsis = "..." if view.ascii else ELLIPSIS
    # Only the columns that could fit are measured: a column is at least 1 + COL_GAP wide, so
    # no more than this many from either end (a 58,101-word vocabulary is measured at its ends).
    reach = max(1, view.width // (1 + COL_GAP) + 1)
    candidates = list(range(c)) if c <= 2 * reach else [*range(reach), *range(c - reach, c)]
    col_cells = [cell_width(label(matrix.cols[j])) for j in candidates]
    estimate = np.maximum(text_widths(shown[:, candidates], view.precision), col_cells)
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
    row_index, columns = summary(matrix, view)
    shown = matrix.values[[i for i in row_index if i >= 0]]
    row_labels = {i: label(matrix.rows[i]) for i in row_index if i >= 0}
    row_cells = {i: cell_width(text) for i, text in row_labels.items()}
    label_width = max(row_cells.values())
    ellipsis = "..." if view.ascii else ELLIPSIS
    col_labels = {j: label(matrix.cols[j]) for j in columns if j >= 0}
    col_cells = {j: cell_width(text) for j, text in col_labels.items()}
    kept = [j for j in columns if j >= 0]
    cells = [[format_value(v, view.precision) for v in row] for row in shown[:, kept].tolist()]
    neg_inf = "-∞"
    if view.ascii:  # measured as they will be written, so that the columns stay aligned
        cells = [[_ASCII_NUMBERS.get(t, t) for t in row] for row in cells]
        neg_inf = "-inf"
    width_of = {j: max(col_cells[j], *(len(row[k]) for row in cells)) for k, j in enumerate(kept)}
    width_of[-1] = len(ellipsis)
    widths = [width_of[j] for j in columns]
    # Where each column's text ends on the line: the spans that colour a cell.
    ends = list(itertools.accumulate(w + COL_GAP for w in widths))
    ends = [e - COL_GAP for e in ends]
    gap = " " * COL_GAP
    shade = _shading(name, matrix, shown, view)

    def numbers(texts: list[str], values: list[float] | None = None) -> list[Segment]:
        """A line of right-aligned cells; -∞ in red and, with ``values``, every cell shaded."""
        line = gap.join(t.rjust(w) for t, w in zip(texts, widths, strict=True))
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
    body = iter(cells)
    for i in row_index:
        if i < 0:
            row_label, line = "⋮".ljust(label_width), numbers(["⋮"] * len(columns))
        else:
            row = next(body)
            row_texts = iter(row)
            texts = [ellipsis if j < 0 else next(row_texts) for j in columns]
            row_label = row_labels[i] + " " * (label_width - row_cells[i])
            line = numbers(texts, matrix.values[i, kept].tolist() if shade else None)
        lines.append([Segment(row_label, _LABEL), *row_gap, *line, *pad])
    return MatrixBlock(width, lines)


def cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes: its length, unless a character is wide (▁猫: 3).

    ASCII first, at the cost of ``len``.
    """
    return len(text) if text.isascii() else cell_len(text)


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


def group_of(stage: Stage, name: str) -> str | None:
    """The matrices that belong on one row: a head's, as the stage's kind groups them (attention:
    the weights W_Qh, W_Kh, W_Vh and their biases, the projections Qh Kh Vh, the rotated ones, the
    attention Sh, Sh+M, Ah, Oh); None for the rest. A run of one group is one row: a key/value head
    recorded with the first query head that reads it shares that head's rows."""
    m = stage.matrices[name]
    return None if m.head is None else KINDS[stage.kind].groups.get(m.base)


def stage_header(stage: Stage) -> RenderableType:
    """The stage id and title as a rule, then the explanation and the formula."""
    formula = Formula([printable(line) for line in str(stage.formula).splitlines()])
    return Group(
        Rule(
            Text.assemble((printable(stage.title), TITLE), ("  " + printable(stage.id), "dim")), align="left"
        ),
        Text(lines(stage.explanation)),
        formula,
        Text(""),
    )


class Formula:
    """A stage's formula, two spaces in, each line broken at the console's width as ``explain``'s
    lines are (``wrap_explanation``): never inside an aside, continuations under a hanging indent."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        for line in self.lines:
            for part in wrap_explanation("  " + line, options.max_width):
                yield Text(part, style=FORMULA, no_wrap=True, overflow="fold")


def lines(text: str) -> str:
    """``text`` with its line breaks kept and every other character that is not printable escaped."""
    return text if text.isprintable() else "\n".join(printable(line) for line in text.split("\n"))


def render_stage(
    console: Console, stage: Stage, view: View, grads: dict[str, np.ndarray] | None = None
) -> Iterator[RenderableType]:
    """The header, then every matrix, grouped by meaning (per head: weights, projections,
    attention); with ``grads``, each beside its gradient dL/d(name), but for constants (the mask,
    the sinusoids), which nothing learns."""
    yield stage_header(stage)
    if view.shared_scale and view.heatmap:  # one scale for the whole stage (and one for its gradients)
        view = dataclasses.replace(view, scale=max(largest(m.values) for m in stage.matrices.values()))
    # Gradients are small numbers: two more digits, so that they do not all read 0.00.
    grad_view = dataclasses.replace(view, precision=view.precision + 2)
    if grads is not None and view.scale is not None:
        grad_view = dataclasses.replace(grad_view, scale=max(largest(g) for g in grads.values()))
    units: list[tuple[object, list[MatrixBlock]]] = []
    for name, m in stage.matrices.items():
        group, block = group_of(stage, name), matrix_block(name, m, view)
        if grads is None or m.is_constant:
            units.append((group, [block]))
            continue
        gradient = matrix_block(f"dL/d{name}", m._replace(values=grads[name], role=ACTIVATION), grad_view)
        if block.width + GAP + gradient.width <= view.width:
            units.append((group, [block, gradient]))
        else:  # too wide to sit together: one under the other
            units += [(group, [block]), (group, [gradient])]
    yield from layout(units, view.width)
    shaded = [m for m in stage.matrices.values() if is_shaded(m, view)]
    if shaded and console.color_system is not None and not console.no_color:
        yield legend(view, shaded)
    yield Text("")


# The current box filled with the palette's deepest green (as in the SVG), in brackets for plain text.
FIGURE_STYLES = {
    "current": "bold black on rgb({},{},{})".format(*sequential(1.0)),
    "done": "dim",
    "todo": "",
    "label": LABEL,
    "text": "",
}


def figure(trace: Trace, current: str, width: int) -> Text:
    """Where am I: Figure 1 as a small map (``figure.figure_lines``), the current stage highlighted
    and in brackets, the stages before it dimmed, and where its inputs come from."""
    from .figure import figure_lines

    out = Text(no_wrap=True, overflow="ellipsis")
    for k, line in enumerate(figure_lines(trace, current, width)):
        if k:
            out.append("\n")
        for span in line:
            out.append(span.text, FIGURE_STYLES[span.state])
    return out


def weights_line(trace: Trace) -> Text:
    """The header line: "weights: random (seed 42), untrained — …" or "weights: trained: weights.npz"."""
    return Text(f"weights: {trace.weights_origin}", style="dim")


def mark(right: bool | None) -> Text:
    """✓ or ✗ in plain text (colour only repeats it), nothing where there is no right answer."""
    if right is None:
        return Text("")
    return Text("✓", style="green") if right else Text("✗", style="bold red")


def prediction_table(trace: Trace, view: View) -> Table:
    """Per decoder position: the most likely next word, its probability, the runners-up."""
    p = view.precision
    blanks = trace.config.model.encoder_only
    table = styled_table(
        "Prediction: the most likely word at each blank, read from both sides"
        if blanks
        else "Prediction: the most likely next word after each decoder position"
    )
    # the flatten head's one row is after every token: it wraps between them
    table.add_column(Text("blank" if blanks else "after"))
    table.add_column(Text("predicted"), no_wrap=True)
    table.add_column(Text("p"), justify="right", no_wrap=True)
    table.add_column(Text("expected"), no_wrap=True)
    table.add_column(Text(""), no_wrap=True)
    table.add_column(Text(f"top {len(trace.prediction[0].top)}"))  # wraps between its entries only
    for pred in trace.prediction:
        right = None if pred.expected is None else pred.word == pred.expected
        where = (
            [f"{label(pred.after)} (pos {pred.position})"]
            if blanks
            else [label(w) for w in pred.after.split(" ")]
        )
        table.add_row(
            Entries(where, " ", LABEL),
            Text(label(pred.word), style="bold green" if right else "bold"),
            Text(f"{pred.probability:.{max(p, 2)}f}"),
            Text(label(pred.expected or "—")),
            mark(right),
            Entries([f"{label(w)} {q:.{max(p, 2)}f}" for w, q in pred.top]),
        )
    return table


def render_trace(
    console: Console,
    trace: Trace,
    stages: list[Stage],
    view: View,
    prediction: bool = True,
    grads: Backward | None = None,
    show_map: bool = False,
) -> Iterator[RenderableType]:
    """Where the weights come from, the given stages in order (each under the map of where it sits,
    with ``show_map``) and, when asked, the prediction table (and the loss, with ``grads``)."""
    yield weights_line(trace)
    for stage in stages:
        if show_map:
            yield figure(trace, stage.id, view.width)
        yield from render_stage(console, stage, view, None if grads is None else grads.stages[stage.id])
    if prediction and trace.prediction:
        yield prediction_table(trace, view)
    elif prediction and trace.config.model.task == "encode":
        yield Text(
            "No prediction: this model has no masked-language-model head (no output layer), so it "
            "encodes the text and cannot fill blanks; its vectors are the last stage's output."
        )
    if grads is not None:
        yield Text(
            f"loss = mean over the positions with a next token of −log p(next token) = {grads.loss:.6g}"
        )


def stage_count(trace: Trace) -> str:
    """ "16 stages + the prediction": the same count in the tour, `stages` and the documents."""
    n = len(trace)
    return f"{n} stages + the prediction" if "output.probabilities" in trace.stages else f"{n} stages"


def stage_list(trace: Trace) -> Group:
    """Every stage id with its kind and the shapes of the matrices it holds, then how many."""
    table = styled_table()
    table.pad_edge = False
    table.add_column(Text("stage"), no_wrap=True, style=LABEL)
    table.add_column(Text("kind"), no_wrap=True)
    table.add_column(Text("matrices (rows×cols)"))
    for stage in trace:
        shapes = [f"{label(name)} {m.shape[0]}×{m.shape[1]}" for name, m in stage.matrices.items()]
        table.add_row(Text(printable(stage.id)), Text(printable(stage.kind)), Entries(shapes))
    return Group(table, Text(stage_count(trace)))


def verify_table(checks: list[Check]) -> Table:
    """Per stage, its id, then each check as a sentence with the largest difference and ✓ or ✗."""
    table = styled_table()
    table.pad_edge = False
    table.add_column(Text("stage · what was checked"))
    table.add_column(Text("max |diff|"), justify="right", no_wrap=True)
    table.add_column(Text(""), no_wrap=True)
    stage = None
    for check in checks:
        if check.stage != stage:
            stage = check.stage
            table.add_row(Text(printable(stage), style=LABEL), Text(""), Text(""))
        table.add_row(Text("  " + printable(check.what)), Text(f"{check.max_diff:.1e}"), mark(check.ok))
    return table


def loss_curve(losses: list[float], width: int = 60, height: int = 8) -> Text:
    """The loss per step as a dot plot on a log scale: training's whole story in a few lines."""
    n = len(losses)
    cols = max(1, min(width, max(n, 16)))  # a few steps spread out, so that the axis can name them
    if n <= cols:  # a dot for every step
        xs = [round(i * (cols - 1) / max(n - 1, 1)) for i in range(n)]
        picked = losses
    else:  # one column every n/cols steps, the first and the last included
        xs = list(range(cols))
        picked = [losses[round(i * (n - 1) / (cols - 1))] for i in range(cols)]
    # Log scale, as losses fall by orders of magnitude.
    finite = [math.log10(max(loss, 1e-12)) for loss in picked if math.isfinite(loss)] or [0.0]
    top, bottom = max(finite), min(finite)
    logs = [math.log10(max(loss, 1e-12)) if math.isfinite(loss) else top for loss in picked]  # inf, nan: top
    span = (top - bottom) or 1.0
    grid = [[" "] * cols for _ in range(height)]
    for x, y in zip(xs, logs, strict=True):
        grid[round((top - y) / span * (height - 1))][x] = "•"
    labels = [f"{10**top:.3g}", *[""] * (height - 2), f"{10**bottom:.3g}"]
    pad = max(len(label) for label in labels)
    out = Text(f"loss, log scale, over {n - 1} steps\n", style=TITLE)
    for label, row in zip(labels, grid, strict=True):
        out.append(f"{label:>{pad}} │", style=LABEL)
        out.append("".join(row) + "\n", style=FORMULA)
    last = str(n - 1)  # under the last column
    room = cols - len("step 0") - len(last)
    axis = f"step 0{' ' * room}{last}" if room > 0 else f"steps 0–{last}"
    out.append(" " * pad + " └" + "─" * cols + "\n" + " " * (pad + 2) + axis)
    return out


def training_table(before: Trace, after: Trace, view: View) -> Table:
    """Each decoder position's prediction before and after training, beside the true next word."""
    p = max(view.precision, 2)
    table = styled_table("Predictions before and after training")
    blanks = after.config.model.encoder_only
    for header in ("blank" if blanks else "after", "expected", "before", "", "after training", ""):
        table.add_column(Text(header), no_wrap=True)
    for old, new in zip(before.prediction, after.prediction, strict=True):
        right = None if new.expected is None else new.word == new.expected
        table.add_row(
            Text(f"{label(old.after)} (pos {old.position})" if blanks else label(old.after), style=LABEL),
            Text(label(old.expected or "—")),
            Text(f"{label(old.word)} {old.probability:.{p}f}"),
            mark(None if old.expected is None else old.word == old.expected),
            Text(f"{label(new.word)} {new.probability:.{p}f}", style="bold green" if right else "bold"),
            mark(right),
        )
    return table


def generation_table(steps: list[Step], vocabulary: tuple[str, ...], view: View) -> Table:
    """Each step of decoding: what the decoder saw, its last row's best words, the choice
    (``vocabulary`` labels the ids); greedy, or drawn (``sampling_table`` shows how)."""
    p = max(view.precision, 2)
    how = "Sampling" if steps[0].drawn is not None else "Greedy decoding"
    table = styled_table(f"{how}: the decoder's own output fed back, one token at a time")
    table.add_column(Text("step"), justify="right", no_wrap=True)
    table.add_column(Text("decoder input"))
    table.add_column(Text(f"top {len(steps[0].top)} of the last row"))
    table.add_column(Text("chosen" if steps[0].drawn is None else "drawn"), no_wrap=True)
    for i, s in enumerate(steps):
        table.add_row(
            Text(str(i)),
            Entries([label(vocabulary[i]) for i in s.ids], " ", LABEL),
            Entries([f"{label(vocabulary[i])} {q:.{p}f}" for i, q in s.top]),
            Text(label(vocabulary[s.chosen]), style="bold"),
        )
    return table


SHOWN_CANDIDATES = 4  # kept candidates listed per step (and the drawn one, wherever it is)


def sampling_table(steps: list[Step], vocabulary: tuple[str, ...], sampling: Sampling, view: View) -> Table:
    """How each token was drawn (``sampling.sample``), step by step: how many tokens were kept,
    and the kept candidates, most likely first, with their logit, the logit divided by T, the
    renormalised probability q and its running sum Σ q; the drawn one marked with the uniform
    number u, which fell between the Σ q above it and its own. With top-p, also p = softmax(logit/T)
    over what top-k kept and its running sum, which top-p reads: the kept ones run until Σ p
    reaches p, and the next one (shown, "cut") is the first it removed. Past ``SHOWN_CANDIDATES``
    a row says how many more were kept and the probability they share.

    Ten columns of numbers do not fit 80 at the usual three spaces apart: this table has two."""
    precision = max(view.precision, 2)
    table = styled_table(f"How each token was drawn: {settings(sampling)}; {len(vocabulary)} tokens")
    table.padding, table.pad_edge = (0, 1, 0, 0), False
    p_columns = ["p", "Σ p"] if sampling.top_p is not None else []
    for header in ["step", "kept", "candidate", "logit", "logit/T", *p_columns, "q", "Σ q"]:
        table.add_column(Text(header), justify="left" if header == "candidate" else "right", no_wrap=True)
    table.add_column(Text("draw u"), no_wrap=True)
    for s in steps:
        if s.drawn is None:  # greedy: nothing was drawn
            continue
        rows = draw_rows(s, s.drawn, vocabulary, precision, sampling.temperature)
        for n, row in enumerate(rows):
            style = "bold" if row[-1].startswith("◀") else "dim" if row[-1] == "cut" else ""
            table.add_row(
                *(
                    Text(c, style=style if k in (2, len(row) - 1) or style == "dim" else "")
                    for k, c in enumerate(row)
                ),
                end_section=n == len(rows) - 1,
            )
    return table


def draw_rows(s: Step, d: Draw, vocabulary: tuple[str, ...], precision: int, T: float) -> list[list[str]]:
    """One step's rows of ``sampling_table``: the first kept candidates, the drawn one, how many
    more were kept, and under top-p the first token it cut."""
    logits = s.logits if s.logits is not None else d.scaled * T
    digits = precision + 1
    around = draw_digits(d, digits)  # u and the two sums around it: enough digits to tell them apart
    p_sum = None if d.p is None else np.cumsum(d.p[d.kept])

    def row(j: int, p_total: float | None, *rest: str) -> list[str]:
        p_cells = [] if d.p is None else [f"{d.p[j]:.{digits}f}", f"{p_total:.{digits}f}"]
        return ["", "", label(vocabulary[j], 12), format_value(float(logits[j]), precision),
                format_value(float(d.scaled[j]), precision), *p_cells, *rest]  # fmt: skip

    shown = list(range(min(SHOWN_CANDIDATES, d.kept.size)))
    if d.index >= len(shown):
        shown.append(d.index)
    rows: list[list[str]] = []
    blank = [""] * (2 if d.p is not None else 0)
    for n, i in enumerate(shown):
        if n and i != shown[n - 1] + 1:
            rows.append(["", "", "⋮", "", "", *blank, "", "", ""])
        mark = f"◀ {d.u:.{around}f}" if i == d.index else ""
        p_total = None if p_sum is None else float(p_sum[i])
        total = f"{d.cumulative[i]:.{around if i in (d.index - 1, d.index) else digits}f}"
        rows.append(row(int(d.kept[i]), p_total, f"{d.q[i]:.{digits}f}", total, mark))
    more = d.kept.size - 1 - shown[-1]
    if more:
        q_rest = f"{d.q[shown[-1] + 1 :].sum():.{digits}f}"
        rows.append(["", "", f"… {more} more", "", "", *blank, q_rest, f"{1:.{digits}f}", ""])
    cut = first_cut(d)
    if cut is not None and p_sum is not None and d.p is not None:
        rows.append(row(cut, float(p_sum[-1] + d.p[cut]), "", "", "cut"))
    rows[0][:2] = [str(s.index), str(d.kept.size)]
    return rows


def first_cut(d: Draw) -> int | None:
    """The most likely token that top-p removed (ties: the lowest id), None when it removed none."""
    if d.p is None:
        return None
    removed = d.p.copy()
    removed[d.kept] = -1.0
    j = int(np.argmax(removed))
    return j if removed[j] > 0 else None


def draw_digits(d: Draw, digits: int) -> int:
    """The digits after the point at which u reads apart from the running sums around it, so that
    "Σ q before ≤ u < Σ q" can be checked on the screen (rounding keeps the order; equal strings hide it)."""
    before = d.cumulative[d.index - 1] if d.index else 0.0
    while digits < 17 and f"{d.u:.{digits}f}" in (
        f"{before:.{digits}f}",
        f"{d.cumulative[d.index]:.{digits}f}",
    ):
        digits += 1
    return digits


def sampling_note(sampling: Sampling) -> str:
    """The sentence under ``sampling_table``: what each column is, in the warpers' order."""
    T = f"{sampling.temperature:g}"
    steps = [f"the logits are divided by T = {T}"]
    if sampling.top_k is not None:
        steps.append(f"top-k keeps the {sampling.top_k} largest (and any tied with the last)")
    if sampling.top_p is not None:
        over = " over what top-k kept" if sampling.top_k is not None else ""
        steps.append(
            f"top-p keeps the most likely until their Σ p reaches {sampling.top_p:g} "
            f"(p = softmax(logits / {T}){over}); the first it removed is shown, cut"
        )
    return (
        f"Each token {how_drawn(sampling)}: {'; '.join(steps)}; q is the softmax over the kept. "
        "A uniform u from the seed fell between the Σ q above the drawn token and its own: the same "
        "seed draws the same u's, so writes the same text."
    )


def settings(sampling: Sampling) -> str:
    """The sampling options, short: "T = 0.7, top-k 5, top-p 0.9, seed 3"."""
    parts = [f"T = {sampling.temperature:g}"]
    if sampling.top_k is not None:
        parts.append(f"top-k {sampling.top_k}")
    if sampling.top_p is not None:
        parts.append(f"top-p {sampling.top_p:g}")
    return ", ".join([*parts, f"seed {sampling.seed}"])


def how_drawn(sampling: Sampling) -> str:
    """The draw in words: "drawn at temperature 0.7 from the top 5, then the top p = 0.9 (seed 3)";
    greedy at temperature 0."""
    if sampling.greedy:
        return "greedy (--temperature 0)"
    said = "drawn" if sampling.temperature == 1 else f"drawn at temperature {sampling.temperature:g}"
    if sampling.top_k is not None:
        said += f" from the top {sampling.top_k}"
    if sampling.top_p is not None:
        said += (", then" if sampling.top_k is not None else " from") + f" the top p = {sampling.top_p:g}"
    if sampling.top_k is None and sampling.top_p is None:
        said += " from every token"
    return f"{said} (seed {sampling.seed})"


def comparison_table(steps: list[Step], teacher_forced: Trace) -> tuple[Table, float]:
    """Each generation step's distribution against row i of one teacher-forced pass; the worst gap."""
    rows = teacher_forced["output.probabilities"]["probabilities"]
    table = styled_table("Step i of generation = row i of the teacher-forced pass")
    table.add_column(Text("step"), no_wrap=True)
    # The input grows by a token a step: its end is what is new, and the numbers must stay in view.
    table.add_column(Text("decoder input (its end)"), no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column(Text("row"), no_wrap=True)
    table.add_column(Text("max |diff|"), no_wrap=True, min_width=10)
    gaps = [0.0]
    for i, s in enumerate(steps):
        gap = float(np.max(np.abs(s.probabilities - rows[i])))
        gaps.append(gap)
        shown = " ".join(label(teacher_forced.vocabulary[i]) for i in s.ids[-40:])
        table.add_row(
            Text(str(i)),
            Text(shown if len(shown) <= 40 else "…" + shown[-39:]),
            Text(label(teacher_forced.target_tokens[i])),
            Text(f"{gap:.1e}"),
        )
    return table, float(np.max(gaps))  # NaN if any gap is: max(0.0, nan) would say 0.0


def trim(line: list[Segment]) -> list[Segment]:
    """A line of segments without the spaces at its end (unless they are coloured: a shaded cell)."""
    line = list(line)
    while line:
        last = line[-1]
        if last.control or (last.style is not None and last.style.bgcolor is not None):
            break
        text = last.text.rstrip(" ")
        if text:
            line[-1] = Segment(text, last.style)
            break
        line.pop()
    return line


def print_all(console: Console, renderables: Iterator[RenderableType]) -> None:
    """Print without cropping (widths were chosen above, and --full may be wider than the screen)
    and with no spaces at the ends of lines."""
    for renderable in renderables:
        if isinstance(renderable, (MatrixBlock, SideBySide)):  # their lines are trimmed already
            console.print(renderable, crop=False)
        else:
            print_trimmed(console, renderable)


def print_trimmed(console: Console, renderable: RenderableType) -> None:
    """One renderable, laid out at the console's width, each line without its trailing spaces."""
    lines = Segment.split_lines(console.render(renderable, console.options))
    console.print(Segments([s for line in lines for s in (*trim(line), Segment.line())]), end="", crop=False)


class TrimmedConsole(Console):
    """A console whose tables and text end their lines where their text ends, never in padding:
    what the commands print through."""

    def print(self, *objects: object, **kwargs: object) -> None:  # type: ignore[override]
        if len(objects) == 1 and not kwargs and isinstance(objects[0], (str, Text, Table, Group)):
            renderable = objects[0]
            print_trimmed(self, self.render_str(renderable) if isinstance(renderable, str) else renderable)
        else:
            super().print(*objects, **kwargs)  # type: ignore[arg-type]


def diff_table(diffs: list[StageDiff], first: str | None) -> Table:
    """Stage by stage: in A only, in B only, or the matrix that differs most and by how much."""
    table = styled_table()
    table.pad_edge = False
    table.add_column(Text("stage"), no_wrap=True, style=LABEL)
    table.add_column(Text("max |A−B|"), justify="right", no_wrap=True)
    table.add_column(Text("where"))
    for d in diffs:
        if d.where != "both":
            table.add_row(Text(printable(d.id)), Text("—"), Text(f"only in {d.where}", style="yellow"))
            continue
        worst = d.largest
        if worst is None:
            size, where = Text("0", style="dim"), Text("the same", style="dim")
        elif worst.shapes[0] != worst.shapes[1]:
            shapes = " vs ".join("×".join(map(str, s)) for s in worst.shapes)
            size, where = Text("—"), Text(f"{label(worst.name)}: shapes differ, {shapes}")
        else:
            size = Text(f"{worst.largest:.2e}")
            differ = sum(m.largest > 0 for m in d.matrices)
            where = Text(f"{label(worst.name)}; {differ} of {len(d.matrices)} matrices differ")
        if d.only:
            where.append(f"; only in one: {', '.join(label(name) for name in d.only)}")
        if d.id == first:
            where.append("  ◀ first", style="bold red")
        table.add_row(Text(printable(d.id)), size, where)
    return table


def diff_stage(a: Stage, b: Stage, view: View) -> Iterator[RenderableType]:
    """Every matrix the two stages share: A, B and A − B side by side (A alone where B lacks it)."""
    yield stage_header(a)
    if str(b.formula) != str(a.formula):
        yield Text("B computes it otherwise:", style="bold")
        yield Text("\n".join(f"  {line}" for line in str(b.formula).splitlines()), style=FORMULA)
    for name, m in a.matrices.items():
        blocks = [matrix_block(f"{name} (A)", m, view)]
        if name in b.matrices:
            other = b.matrices[name]
            blocks.append(matrix_block(f"{name} (B)", other, view))
            if other.shape == m.shape:
                with np.errstate(invalid="ignore"):  # −∞ − (−∞): the same mask, no difference
                    delta = np.where(m.values == other.values, 0.0, m.values - other.values)
                blocks.append(matrix_block(f"{name} A − B", Matrix(delta, m.rows, m.cols), view))
        yield from side_by_side(blocks, view.width)
    for name in b.matrices:
        if name not in a.matrices:
            yield from side_by_side([matrix_block(f"{name} (B only)", b.matrices[name], view)], view.width)


def cached_generation_table(
    steps: list[Step],
    vocabulary: tuple[str, ...],
    rows: tuple[str, ...],
    layer: int,
    head: int,
    view: View,
    sampled: bool,
) -> Table:
    """Each step of generation with the key/value cache: the tokens fed and their positions, the
    cache's size, where the newest token's query looked (layer ``layer``, head ``head`` counted from
    1 as in A1: its three largest weights), the top k next tokens (the model's own distribution)
    and the choice, ``sampled`` or not (``sampling_table`` shows the draws).

    ``vocabulary`` labels ids; ``rows`` labels the keys' positions (``token_labels`` of the whole
    sequence, so that a repeated token is told apart by its position, ``·the@4``).
    """
    p = max(view.precision, 2)
    table = styled_table("Generation with a key/value cache: K and V grow by one row a step")
    table.add_column(Text("step"), justify="right", no_wrap=True)
    table.add_column(Text("fed @ position"))
    table.add_column(Text("K, V"), no_wrap=True)
    table.add_column(Text(f"A{head} of layer {layer}: largest"))
    table.add_column(Text(f"top {len(steps[0].top)} next"))
    table.add_column(Text("drawn" if sampled else "chosen"), no_wrap=True)
    for s in steps:
        cached = s.layers[layer]
        # the key/value head that query head ``head`` reads (itself, unless heads share them)
        K, row = cached.K[(head - 1) * len(cached.K) // len(cached.q)], cached.weights[head - 1, -1]
        fed = [label(vocabulary[i]) for i in s.ids]
        shown = fed if len(fed) <= 6 else [*fed[:2], "…", *fed[-2:]]
        where = str(s.positions[0]) if len(fed) == 1 else f"{s.positions[0]}–{s.positions[-1]}"
        largest = top_k(row, 3)
        table.add_row(
            Text(str(s.index)),
            Entries([*shown[:-1], f"{shown[-1]} @{where}"], " ", LABEL),  # the last one keeps its place
            Text(f"{K.shape[0]}×{K.shape[1]}"),
            Entries([f"{label(rows[j])} {row[j]:.{p}f}" for j in largest]),
            Entries([f"{label(vocabulary[i])} {q:.{p}f}" for i, q in s.top]),
            Text(label(vocabulary[s.chosen]), style="bold"),
        )
    return table


def cache_comparison_table(comparison: Comparison) -> Table:
    """The largest difference between the cached steps and one full pass, per quantity."""
    table = styled_table("Cached steps vs one full pass")
    for header in ("quantity", "max |diff|"):
        table.add_column(Text(header), no_wrap=True)
    for name, value in comparison._asdict().items():
        table.add_row(Text(name), Text(f"{value:.1e}"))
    return table
