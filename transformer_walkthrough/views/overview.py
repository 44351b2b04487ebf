"""The attention overview: every layer's and every head's attention weights at a glance.

A head is a small picture of its weights A_h — rows the queries, columns the keys — one shaded
cell a weight, and beside each row its strongest link (query token → key token, weight): bertviz's
model view and Inspectus's layer × head grid, in a terminal. Plain output (a pipe, a file,
NO_COLOR) draws a weight as a character, `` ░▒▓█`` for 0 to 1 by quarters, so that a pipe still
reads; a colour terminal shades the cell on the fixed 0–1 scale of every attention weight
(``palette.sequential``). A key the mask hides is ``·``. Longer than 24 tokens, a head shows its
first and last 12 queries and keys around a ``⋮`` row and a ``…`` column.

Which matrices are attention weights, and which cells the mask hides, is read from the roles
they were recorded with (``trace.ATTENTION``, ``trace.MASK``), never from their names.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from ..errors import StageError
from ..model.architecture import ENCODER, side_of, walk
from ..model.trace import ATTENTION, MASK, Matrix, Stage, Trace, choose
from .blocks import MatrixBlock, layout
from .documents.shades import STEPS
from .palette import sequential, sequential_256
from .widgets import ELLIPSIS, LABEL, TITLE, View, label, pack, paragraph

if TYPE_CHECKING:
    from ..config import ModelConfig

MAX_TOKENS = 24  # queries and keys a head shows; past it the first and last HALF of each
HALF = MAX_TOKENS // 2
SHADES = " ░▒▓█"  # 0, ¼, ½, ¾, 1: a weight's nearest quarter, as plain text draws it
ASCII_SHADES = " .+*#"  # the same on a stream without block characters
MASKED, ASCII_MASKED = "·", "-"
HEAD_LABEL = 12  # characters of a token beside a row or in a link


def attention_heads(stage: Stage) -> list[tuple[str, Matrix]]:
    """The stage's attention weights, head by head, as recorded (A1, A2, …): by their role."""
    return [(name, m) for name, m in stage.matrices.items() if m.role == ATTENTION]


def strongest(A: np.ndarray) -> np.ndarray:  # (n_q, n_k) -> (n_q,)
    """Each query's strongest link: the key it gives the largest weight (the first of equals)."""
    return A.argmax(axis=1)


def kept(n: int, limit: int = MAX_TOKENS) -> list[int]:
    """The indices shown of n queries (or keys): all, or the first and last limit/2 around a -1."""
    if n <= limit:
        return list(range(n))
    half = limit // 2
    return [*range(half), -1, *range(n - half, n)]


BLOCKS_FROM = 4 * MAX_TOKENS  # longer than this, a head is drawn in MAX_TOKENS × MAX_TOKENS blocks


class Blocks(NamedTuple):
    """A long head downsampled: the queries and keys cut into about equal runs, each cell the mean
    weight of its block (masked weights count as the 0 they are), and which blocks the mask hides."""

    means: np.ndarray  # (query blocks, key blocks)
    hidden: np.ndarray  # (query blocks, key blocks): every weight of the block masked
    queries: list[range]
    keys: list[range]


def blocks(A: np.ndarray, hidden: np.ndarray | None, count: int = MAX_TOKENS) -> Blocks:
    """``A`` (n_q, n_k) in at most ``count`` × ``count`` blocks of consecutive queries and keys."""
    queries = [range(r[0], r[-1] + 1) for r in np.array_split(np.arange(A.shape[0]), min(count, A.shape[0]))]
    keys = [range(r[0], r[-1] + 1) for r in np.array_split(np.arange(A.shape[1]), min(count, A.shape[1]))]
    starts = [q.start for q in queries], [k.start for k in keys]

    def summed(values: np.ndarray) -> np.ndarray:  # each block's sum
        return np.add.reduceat(np.add.reduceat(values, starts[0], axis=0), starts[1], axis=1)

    sums = summed(np.where(np.isfinite(A), A, 0.0))
    sizes = np.outer([len(q) for q in queries], [len(k) for k in keys])
    shut = np.zeros(sizes.shape, dtype=bool) if hidden is None else summed((~hidden).astype(np.int64)) == 0
    return Blocks(sums / sizes, shut, queries, keys)


def masked(stage: Stage) -> np.ndarray | None:
    """Which cells the mask hides (−∞ in M): (n_q, n_k) booleans, or None for a stage without a mask."""
    for m in stage.matrices.values():
        if m.role == MASK:
            return np.isneginf(m.values)
    return None


def who_attends(stage: Stage, mask: str = MASKED) -> str:
    """What the rows and the columns are, read from the stage: its side, and whether it has a mask
    (its cells drawn as ``mask``)."""
    if side_of(stage.id) == ENCODER:
        return "self-attention: queries and keys are the encoder's tokens (the source)"
    if masked(stage) is not None:
        return f"masked self-attention: queries and keys are the decoder's tokens; {mask} a later key, masked"
    return (
        "cross-attention: queries are the decoder's tokens, keys the encoder's output (the source's tokens)"
    )


def attention_places(m: ModelConfig, names: Sequence[str] = (), layer: int | None = None) -> list[str]:
    """The ids of the stages with attention weights, in order, narrowed to ``names`` (kinds or
    ids, as ``step`` takes them) and ``layer``: chosen from the walk of Figure 1, so that the pass
    keeps only these (``trace.Keep``) and a bad name is refused before any work."""
    every = [p for p in walk(m) if p.sublayer is not None and p.sublayer.keys is not None]
    kinds = {p.kind for p in every}
    for name in names:
        if name not in kinds and name not in {p.id for p in every}:
            choose([(p.id, p.kind, p.layer) for p in walk(m)], [name], None)  # unknown: its own message
            listed = ", ".join(sorted(kinds))
            raise StageError(f"--stage {name}: not an attention stage; the attention kinds here are {listed}")
    chosen = [p for p in every if not names or p.kind in names or p.id in names]
    if layer is not None:
        layers = sorted({p.layer for p in every if p.layer is not None})
        if layer not in layers:
            raise StageError(f"--layer: this model has layers {layers[0]} to {layers[-1]}, got {layer}")
        chosen = [p for p in chosen if p.layer == layer]
        if not chosen:
            raise StageError(f"--layer {layer}: no stage {', '.join(names)} in layer {layer}")
    return [p.id for p in chosen]


def attention_stages(
    trace: Trace, names: Sequence[str] = (), layer: int | None = None, head: int | None = None
) -> list[Stage]:
    """The stages with attention weights, in order, narrowed to ``names`` and ``layer``
    (``attention_places``); checks ``head`` (from 1) against the heads they have."""
    chosen = [trace[sid] for sid in attention_places(trace.config.model, names, layer)]
    if head is not None:
        heads = max(len(attention_heads(s)) for s in chosen)
        if not 1 <= head <= heads:
            raise StageError(f"--head: this model has heads 1 to {heads}, got {head}")
    return chosen


class Glyphs:
    """How a weight is drawn: a character (plain), or a shaded background (colour)."""

    def __init__(self, view: View, coloured: bool) -> None:
        self.coloured = coloured
        self.shades = ASCII_SHADES if view.ascii else SHADES
        self.mask = ASCII_MASKED if view.ascii else MASKED
        self.gap = "~" if view.ascii else ELLIPSIS  # the column of the keys left out
        self.rows_gap = ":" if view.ascii else "⋮"
        self.eight_bit = view.colors == "256"
        self._styles: dict[int, Style] = {}

    def cell(self, w: float, hidden: bool) -> Segment:
        """One weight as two characters (a terminal's cell is twice as tall as it is wide)."""
        if hidden:
            return Segment(" " + self.mask, _DIM)
        if not math.isfinite(w):
            return Segment("??")
        if not self.coloured:
            return Segment(self.shades[round(min(max(w, 0.0), 1.0) * 4)] * 2)
        step = round(min(max(w, 0.0), 1.0) * 20)  # the report's 21 shades: each style made once
        style = self._styles.get(step)
        if style is None:
            p = step / 20
            bg = Color.from_ansi(sequential_256(p)) if self.eight_bit else Color.from_rgb(*sequential(p))
            style = self._styles[step] = Style(bgcolor=bg)
        return Segment("  ", style)


_DIM = Style(dim=True)
_LABEL_STYLE, _TITLE_STYLE = Style.parse(LABEL), Style.parse(TITLE)


def head_block(
    name: str, matrix: Matrix, hidden: np.ndarray | None, glyphs: Glyphs, digits: int
) -> MatrixBlock:
    """One head: its name, the key indices over the grid, each query's row of weights and its
    strongest link (→ key, weight). Past ``BLOCKS_FROM`` tokens, blocks of queries and keys
    (``blocks``): each row a run of queries, its link the key they give the most weight on average."""
    A = matrix.values
    n_q, n_k = A.shape
    if max(n_q, n_k) > BLOCKS_FROM:
        cut = blocks(A, hidden)
        grid, shut = cut.means, cut.hidden
        rows, cols = list(range(len(cut.queries))), list(range(len(cut.keys)))
        queries = {i: f"{q.start}–{q.stop - 1}" for i, q in enumerate(cut.queries)}
        links = {}
        for i, q in enumerate(cut.queries):
            mean = np.where(np.isfinite(A[q.start : q.stop]), A[q.start : q.stop], 0.0).mean(axis=0)
            j = int(np.argmax(mean))
            links[i] = f"→ {label(matrix.cols[j], HEAD_LABEL)} ({j}) {mean[j]:.{digits}f}"
        size = f"  ({n_q}×{n_k} in {len(rows)}×{len(cols)} blocks)"
    else:
        rows, cols = kept(n_q), kept(n_k)
        grid, shut = A, hidden
        best = strongest(A)
        queries = {i: label(matrix.rows[i], HEAD_LABEL) for i in rows if i >= 0}
        links = {
            i: f"→ {label(matrix.cols[best[i]], HEAD_LABEL)} {A[i, best[i]]:.{digits}f}"
            for i in rows
            if i >= 0
        }
        size = f"  ({n_q}×{n_k})" if -1 in rows or -1 in cols else ""
    q_width = max([cell_len(t) for t in queries.values()] + [1])
    grid_width = 2 * len(cols)
    width = q_width + 2 + grid_width + 2 + max(cell_len(t) for t in links.values())
    title = f"head {matrix.head} · {name}{size}"
    width = max(width, cell_len(title))
    # Each row shaded on its own scale, 0 to its largest weight (``legend`` says so): a near-uniform
    # row of 14 keys (every weight about 0.07) still shows which key it favours.
    visible = grid if shut is None else np.where(shut, 0.0, grid)
    peak = np.max(np.where(np.isfinite(visible), visible, 0.0), axis=1)

    def pad(line: list[Segment], used: int) -> list[Segment]:
        return [*line, Segment(" " * (width - used))] if used < width else line

    lines = [pad([Segment(title, _TITLE_STYLE)], cell_len(title))]
    for header in key_numbers(cols, glyphs.gap):
        lines.append(pad([Segment(" " * (q_width + 2)), Segment(header, _DIM)], q_width + 2 + grid_width))
    for i in rows:
        if i < 0:
            lines.append(pad([Segment(glyphs.rows_gap.ljust(q_width), _LABEL_STYLE)], q_width))
            continue
        text = queries[i]
        line = [Segment(text + " " * (q_width - cell_len(text) + 2), _LABEL_STYLE)]
        values = (grid[i] / peak[i]).tolist() if peak[i] > 0 else grid[i].tolist()
        mask_row = None if shut is None else shut[i].tolist()
        cells = [
            Segment(glyphs.gap + " ") if j < 0 else glyphs.cell(values[j], bool(mask_row and mask_row[j]))
            for j in cols
        ]
        if not glyphs.coloured:  # one run of text: a pipe's line is one segment
            line.append(Segment("".join(c.text for c in cells)))
        else:
            line += cells
        line.append(Segment("  " + links[i]))
        lines.append(pad(line, q_width + 2 + grid_width + 2 + cell_len(links[i])))
    return MatrixBlock(width, lines)


def key_numbers(cols: list[int], gap: str) -> list[str]:
    """The keys' indices over the grid, two characters a column, written downwards when they have
    more than one digit (a column 12 reads 1 over 2): every label unique, none wider than its column."""
    digits = max(len(str(j)) for j in cols if j >= 0)
    lines = []
    for k in range(digits):
        cells = []
        for j in cols:
            text = str(j).rjust(digits)
            cells.append((gap if k == digits - 1 else " ") + " " if j < 0 else f" {text[k]}")
        lines.append("".join(cells))
    return lines


def legend(glyphs: Glyphs, view: View) -> Text:
    """What a cell's character or colour means."""
    out = Text()
    out.append("shading, each row on its own scale: ", style="dim")
    if glyphs.coloured:
        out.append("0 ")
        for p in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0):
            out.append("  ", glyphs.cell(p, False).style)
        out.append(" the row's largest weight (named at the row's end)")
    else:
        marks = ", ".join(
            f"{'blank' if s == ' ' else s} {q}"
            for s, q in zip(glyphs.shades, ("0", "1/4", "1/2", "3/4", "1"), strict=True)
        )
        out.append(f"{marks} of the row's largest weight (the nearest quarter; it is named at the row's end)")
    out.append(f"; {glyphs.mask} masked", style="dim")
    return out


def overview(
    trace: Trace, stages: list[Stage], head: int | None, view: View, coloured: bool
) -> Iterator[RenderableType]:
    """Every chosen stage's heads (or only ``head``), each a ``head_block``, packed side by side."""
    glyphs = Glyphs(view, coloured)
    digits = max(view.precision, 2)
    yield legend(glyphs, view)
    for stage in stages:
        yield Text("")
        yield Text.assemble((stage.title, TITLE), ("  " + stage.id, "dim"))
        heads = attention_heads(stage)
        if head is not None:
            heads = [(name, m) for name, m in heads if m.head == head]
        first = heads[0][1]
        yield paragraph(f"{who_attends(stage, glyphs.mask)}.", view.width, style="dim")
        n_q, n_k = first.shape
        if max(n_q, n_k) > BLOCKS_FROM:
            cut = blocks(first.values, None)
            keys = [f"{j} {k.start}–{k.stop - 1}" for j, k in enumerate(cut.keys)]
            yield Text(
                "\n".join(pack([f"keys (columns): {keys[0]}", *keys[1:]], ", ", view.width)), style="dim"
            )
            yield paragraph(
                f"{n_q} queries × {n_k} keys, downsampled to {len(cut.queries)} × {len(cut.keys)} "
                f"blocks of about {n_q // len(cut.queries)} × {n_k // len(cut.keys)}: each cell is the "
                "mean weight of its block, each row a run of queries, and → the key those queries give "
                "the most weight on average (its position, that mean); "
                f"walkthrough step -s {stage.id} shows every weight.",
                view.width,
                style="dim",
            )
            yield from layout(
                [(None, [head_block(name, m, masked(stage), glyphs, digits)]) for name, m in heads],
                view.width,
            )
            continue
        keys = [f"{j} {label(first.cols[j], HEAD_LABEL)}" for j in kept(first.shape[1]) if j >= 0]
        yield Text("\n".join(pack([f"keys (columns): {keys[0]}", *keys[1:]], ", ", view.width)), style="dim")
        if n_q > MAX_TOKENS or n_k > MAX_TOKENS:
            yield paragraph(
                f"{n_q} queries × {n_k} keys: the first and last {HALF} of each are shown (⋮, …); "
                f"walkthrough step -s {stage.id} shows every weight.",
                view.width,
                style="dim",
            )
        hidden = masked(stage)
        yield from layout(
            [(None, [head_block(name, m, hidden, glyphs, digits)]) for name, m in heads], view.width
        )


# ---------------------------------------------------------------------------------------------
# The report's "Attention" section: every layer × every head, one click enlarges a head.
# ---------------------------------------------------------------------------------------------

OVERVIEW_CSS = """
.att-wrap { overflow-x: auto; }
table.att-grid { border-collapse: collapse; }
table.att-grid > thead th, table.att-grid > tbody > tr > th { color: var(--accent);
  font: 600 12px/1.3 ui-monospace, monospace; padding: 2px 8px; text-align: left; white-space: nowrap; }
table.att-grid > tbody > tr > th small { display: block; color: var(--muted); font-weight: normal; }
table.att-grid > tbody > tr > td { padding: 4px; vertical-align: top; }
figure.att { margin: 0; }
figure.att > a { display: inline-block; border: 1px solid var(--line); line-height: 0; color: inherit;
  text-decoration: none; }
figure.att > a:focus, figure.att > a:hover { outline: 2px solid var(--accent); }
table.hm { border-collapse: collapse; }
table.hm td { width: var(--cell, 5px); height: var(--cell, 5px); padding: 0; font-size: 0; }
table.hm td.mk { background: #e4e7ee; }
table.hm td.gap { background: #fff; }
table.hm th, figure.att figcaption, figure.att .close { display: none; }
figure.att:target { position: fixed; top: 4vh; left: 4vw; right: 4vw; bottom: 4vh; z-index: 10;
  overflow: auto; background: #fff; border: 1px solid var(--line); box-shadow: 0 8px 40px rgba(0, 0, 0, .25);
  padding: 1rem 1.4rem; }
figure.att:target > a { border: 0; line-height: 1.3; }
figure.att:target table.hm td { width: auto; height: auto; padding: 2px 5px;
  font: 11px/1.3 ui-monospace, monospace; text-align: right; border: 1px solid #fff; }
figure.att:target table.hm th { display: table-cell; color: var(--accent);
  font: 600 11px/1.3 ui-monospace, monospace; padding: 2px 5px; text-align: left; white-space: nowrap; }
figure.att:target table.hm thead th { text-align: right; }
figure.att:target figcaption { display: block; margin: 0 0 .6rem; font-weight: 600; }
figure.att:target .close { display: inline-block; float: right; font-weight: normal; }
figure.att:target ol.links { display: block; }
ol.links { display: none; columns: 2; font: 12px/1.5 ui-monospace, monospace; margin: .8rem 0 0; }
img.att-img { width: 96px; height: 96px; }
figure.att:target img.att-img { width: var(--w); height: var(--h); max-width: none;
  image-rendering: pixelated; }
figure.att .said { display: none; }
figure.att:target .said { display: block; color: var(--muted); font-weight: normal; }
@media print { figure.att:target { position: static; box-shadow: none; }
  table.att-grid { break-inside: avoid; } }
"""


THUMBNAIL = 96  # px: the side of a head's picture in the grid, before it is enlarged


def _anchor(stage: Stage, head: int) -> str:
    return f"att-{stage.id}-{head}"


def _heatmap(stage: Stage, name: str, m: Matrix, hidden: np.ndarray | None) -> str:
    """One head's weights as a table of shaded cells (the report's ``g0`` … ``g20``), each row on
    its own scale (``row_shades``), its labels and numbers there for the enlarged view only; its
    strongest links below."""
    e = html.escape
    A = m.values
    rows, cols = kept(A.shape[0]), kept(A.shape[1])
    best = strongest(A)
    shades = row_shades(A, np.zeros(A.shape, bool) if hidden is None else hidden, STEPS)
    heads = "".join("<th>…</th>" if j < 0 else f"<th>{e(m.cols[j])}</th>" for j in cols)
    body = []
    for i in rows:
        if i < 0:
            body.append("<tr><th>⋮</th>" + '<td class="gap"></td>' * len(cols) + "</tr>")
            continue
        cells = []
        for j in cols:
            if j < 0:
                cells.append('<td class="gap">…</td>')
            elif hidden is not None and hidden[i, j]:
                cells.append('<td class="mk">·</td>')
            else:
                cells.append(f'<td class="g{shades[i, j]}">{float(A[i, j]):.2f}</td>')
        body.append(f"<tr><th>{e(m.rows[i])}</th>{''.join(cells)}</tr>")
    links = "".join(
        f"<li>{e(m.rows[i])} → {e(m.cols[best[i]])} {A[i, best[i]]:.2f}</li>" for i in range(A.shape[0])
    )
    anchor = _anchor(stage, m.head or 0)
    cell = max(4, min(16, THUMBNAIL // max(len(rows), len(cols))))  # px: a thumbnail of about 96 px
    return (
        f'<figure class="att" id="{e(anchor)}"><figcaption>{e(stage.title)} · head {m.head} ({e(name)}) '
        f'<code>{e(stage.id)}</code><a class="close" href="#attention">close ✕</a></figcaption>'
        f'<a href="#{e(anchor)}" title="{e(stage.id)} · head {m.head} ({e(name)}): click to enlarge">'
        f'<table class="hm" style="--cell: {cell}px"><thead><tr><th></th>{heads}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table></a><ol class="links">{links}</ol></figure>'
    )


# A head longer than BLOCKS_FROM tokens is drawn as a picture (``png``), every head of a report
# alike: at full resolution, a pixel a weight, when every head's n × n pixels fit the report's
# budget; past it downsampled, each pixel the mean of a block of f × f weights, f as small as the
# budget allows, and the enlarged head gives the command that writes its every weight.
IMAGE_PIXELS = 3_500_000  # that show a weight, of all the heads' pictures: about 4 MB of the report
LEVELS = 254  # a picture's shades: index k is k/254 of its row's largest weight; 255 a masked block
MASKED_GREY = (0xE4, 0xE7, 0xEE)  # the colour of a masked block (the tables' ``td.mk``)
ENLARGED = 768  # px: about the side of an enlarged picture, each weight an integer number of pixels


def block_side(n: int, heads: int, causal: int = 0) -> int:
    """The f of the f × f weights each pixel of a head of ``n`` tokens stands for, when a report
    draws ``heads`` heads, ``causal`` of them under a causal mask, within ``IMAGE_PIXELS`` pixels
    that show a weight (a masked block, the same grey throughout, compresses to almost nothing):
    1, full resolution, when every head's n × n fits; else the smallest f whose pictures fit."""

    def shown(side: int) -> int:  # pixels that show a weight: a causal head's triangle, side(side+1)/2
        return heads * side * side - causal * side * (side - 1) // 2

    f = 1
    while f < n and shown(-(-n // f)) > IMAGE_PIXELS:
        f += 1
    return f


def block_means(A: np.ndarray, hidden: np.ndarray | None, f: int) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (n_q, n_k) in blocks of f × f consecutive weights (the last row and column of blocks
    fewer when f does not divide n): each block's mean, the masked weights counted as the 0 they
    are; and whether the mask hides the whole block. With f = 1, ``A`` itself and ``hidden``."""
    rows, cols = np.arange(0, A.shape[0], f), np.arange(0, A.shape[1], f)

    def summed(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.add.reduceat(values, rows, axis=0), cols, axis=1)

    sizes = np.outer(np.diff([*rows, A.shape[0]]), np.diff([*cols, A.shape[1]]))
    means = summed(np.where(np.isfinite(A), A, 0.0)) / sizes
    shut = np.zeros(means.shape, dtype=bool) if hidden is None else summed((~hidden).astype(np.int64)) == 0
    return means, shut


def row_shades(values: np.ndarray, shut: np.ndarray, levels: int) -> np.ndarray:  # (h, w) -> (h, w) ints
    """Each row shaded on its own scale: ``levels`` × value / the row's largest visible value,
    rounded (0 where the row has none above 0, or the value is not finite): a near-uniform row of
    2,048 weights of about 0.0005 still shows which keys it favours."""
    seen = np.where(np.isfinite(values) & ~shut, values, 0.0).clip(min=0.0)
    peak = seen.max(axis=1, keepdims=True)
    return np.rint(levels * np.divide(seen, peak, out=np.zeros_like(seen), where=peak > 0)).astype(np.int64)


def head_picture(A: np.ndarray, hidden: np.ndarray | None, f: int) -> bytes:
    """A head's weights as a PNG of 8-bit palette indices: each pixel a weight (f = 1) or the mean
    of a block of f × f (``block_means``), shaded on its row's own scale in ``LEVELS`` + 1 greens
    (``row_shades``), a block the mask hides grey (index 255)."""
    from .png import png

    means, shut = block_means(A, hidden, f)
    palette = [sequential(k / LEVELS) for k in range(LEVELS + 1)] + [MASKED_GREY]
    return png(np.where(shut, LEVELS + 1, row_shades(means, shut, LEVELS)).astype(np.uint8), palette)


def every_weight(stage: Stage, m: Matrix) -> str:
    """The command that writes every weight of one head (with the options that make the trace
    again, said once above the grid): ``export --stage --head`` keeps that head's matrices alone."""
    return f"walkthrough export head.npz -s {stage.id} --head {m.head}"


def _picture(stage: Stage, name: str, m: Matrix, hidden: np.ndarray | None, f: int) -> str:
    """One long head as a picture (``head_picture``) in the grid, enlarged by a click (CSS
    ``:target``): at full resolution when it is (a pixel a weight, or a square of pixels when the
    head is short), else the downsampled picture, saying by how much and the command that writes
    every weight; with each block of queries' strongest key."""
    import base64

    e = html.escape
    A = m.values
    n_q, n_k = A.shape
    data = base64.b64encode(head_picture(A, hidden, f)).decode("ascii")
    h, w = -(-n_q // f), -(-n_k // f)
    zoom = max(1, ENLARGED // max(h, w))  # screen pixels a side of each pixel when enlarged
    if f == 1:
        said = f"{n_q:,} × {n_k:,} at full resolution: a pixel a weight" + (
            f", drawn {zoom} × {zoom} screen pixels" if zoom > 1 else ""
        )
    else:
        said = (
            f"downsampled {f} × {f}: {n_q:,} × {n_k:,} shown as {h:,} × {w:,}, each pixel the mean of "
            f"{f} × {f} weights" + (" (the last row and column fewer)" if n_q % f or n_k % f else "")
        )
    every = ""
    if f > 1:
        every = f"; every weight: <code>{e(every_weight(stage, m))}</code> with the options above the grid "
        every += f"writes this head's matrices, its weights as <code>{e(stage.id)}/{e(name)}</code>"
    cut = blocks(A, hidden)
    links = []
    for q in cut.queries:
        mean = np.where(np.isfinite(A[q.start : q.stop]), A[q.start : q.stop], 0.0).mean(axis=0)
        j = int(np.argmax(mean))
        links.append(f"<li>{q.start}–{q.stop - 1} → {e(m.cols[j])} ({j}) {mean[j]:.2f}</li>")
    anchor = _anchor(stage, m.head or 0)
    return (
        f'<figure class="att" id="{e(anchor)}"><figcaption>{e(stage.title)} · head {m.head} ({e(name)}) '
        f'<code>{e(stage.id)}</code> <span class="said">{said}, each row on its own scale{every}</span>'
        f'<a class="close" href="#attention">close ✕</a></figcaption>'
        f'<a href="#{e(anchor)}" title="{e(stage.id)} · head {m.head} ({e(name)}): {said}; click to enlarge">'
        f'<img class="att-img" width="{w}" height="{h}" style="--w: {w * zoom}px; --h: {h * zoom}px" '
        f'decoding="async" alt="{e(name)}: {said}" src="data:image/png;base64,{data}"></a>'
        f'<ol class="links">{"".join(links)}</ol></figure>'
    )


def attention_row(stage: Stage, f: int = 1) -> tuple[int, str]:
    """An attention stage's row of the overview: its id and what attends to what, then a heatmap
    per head (a picture of blocks of f × f weights past ``BLOCKS_FROM`` tokens); with the number
    of heads (the grid's columns are the most any stage has)."""
    e = html.escape
    hidden = masked(stage)
    heads = attention_heads(stage)
    drawn = [
        _picture(stage, name, m, hidden, f)
        if max(m.shape) > BLOCKS_FROM
        else _heatmap(stage, name, m, hidden)
        for name, m in heads
    ]
    cells = "".join(f"<td>{head}</td>" for head in drawn)
    what = who_attends(stage).split(":")[0]
    return len(heads), f"<tr><th>{e(stage.id)}<small>{e(what)}</small></th>{cells}</tr>"


def attention_section(rows: Sequence[tuple[int, str]], f: int = 1, rerun: str = "") -> str:
    """The "Attention" section of the HTML report from its rows (``attention_row``, one per
    attention stage): a column per head, each a small heatmap that one click (a link to its own
    id: CSS ``:target``) enlarges, with its labels, its numbers and every row's strongest link; no
    script. ``f``: the side of the blocks a long head's picture is drawn in (1: full resolution);
    ``rerun``: the options that make the trace again, for the command that writes every weight."""
    if not rows:
        return ""
    e = html.escape
    most = max(count for count, _ in rows)
    heads = "".join(f"<th>head {h}</th>" for h in range(1, most + 1))
    pictures = (
        f"longer than {BLOCKS_FROM}, each head is a picture, each row of it on its own scale too (in "
        f"{LEVELS + 1} shades), and each block of queries' strongest key: "
        + (
            "at full resolution (a pixel a weight), every head's picture within the report's budget of "
            f"{IMAGE_PIXELS:,} pixels that show a weight"
            if f == 1
            else f"past the report's budget of {IMAGE_PIXELS:,} pixels that show a weight, downsampled "
            f"{f} × {f} (each pixel "
            "the mean of a block of weights, the masked ones counted as the 0 they are); enlarged, a head "
            "gives the command that writes its every weight to an .npz file"
            + (f", with these options: <code>{e(rerun)}</code>" if rerun else "")
        )
    )
    return (
        '<section id="attention"><h2>Attention, every layer and head<code>walkthrough attention</code></h2>'
        "<p>Each head's attention weights A: rows the queries, columns the keys, each row shaded on its own "
        "scale, from 0 (white) to the row's largest weight (deep green), so that a flat row of small "
        "weights still shows which keys it favours, as <code>walkthrough attention</code> does; a key the "
        "mask hides is grey. Click (or focus and press Enter on) a head to enlarge it, with its tokens, its "
        f"weights and each query's strongest link; longer than {MAX_TOKENS} tokens, the first and last "
        f"{HALF} queries and keys are shown, and {pictures}.</p>"
        f'<div class="att-wrap"><table class="att-grid"><thead><tr><th></th>{heads}</tr></thead>'
        f"<tbody>{''.join(row for _, row in rows)}</tbody></table></div></section>"
    )
