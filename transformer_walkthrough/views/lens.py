"""The logit lens shown: one table of layers × positions, one position's top k per layer, the
arithmetic of one cell (``explain``), and the report's "Lens" section.

The numbers come from ``model.lens``; this module only lays them out. A cell is the most likely
next token after that layer at that position, and its probability, shaded on the fixed 0–1 scale
of every probability (``palette.sequential``); ✓ marks the token that really comes next.
"""

from __future__ import annotations

import html
import math

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..errors import StageError
from ..model.architecture import DECODER, stage_id
from ..model.kinds.hand import linear
from ..model.kinds.norms import norm_of
from ..model.lens import Lens
from ..model.trace import ACTIVATION, INPUT, PROBABILITIES, WEIGHT, Stage, Trace, dims
from .palette import sequential, sequential_256
from .render import ELLIPSIS, LABEL, Entries, View, label, mark, styled_table, summarise

CELL_LABEL = 14  # characters of a token in a cell of the table: a 1.6 MB piece must not widen it
TABLE_GAP = 3  # what a column of ``styled_table`` costs beyond its text (its padding)


def probability_style(p: float, view: View) -> Style:
    """The background of a probability on the fixed 0–1 scale, as the matrices shade theirs."""
    if view.colors == "256":
        return Style(color="black", bgcolor=Color.from_ansi(sequential_256(p)))
    return Style(color="black", bgcolor=Color.from_rgb(*sequential(p)))


def _digits(view: View) -> int:
    return max(view.precision, 2)


def where(lens: Lens) -> str:
    """What was projected, through what: the sentence above the table."""
    norm = f"the final norm ({lens.norm}), " if lens.norm else ""
    read = " and ".join(lens.stages) if lens.layers <= 2 else f"{lens.stages[0]}, …, {lens.stages[-1]}"
    none = "" if lens.norm else " (the model has no final norm)"
    return (
        f"each position's residual stream after each decoder layer (the output of {read}) put through "
        f"{norm}the output layer ({lens.output}) and the softmax{none}"
    )


def _cell_lines(lens: Lens, top: np.ndarray, layer: int, i: int, digits: int) -> list[tuple[str, str, bool]]:
    """A cell's lines as (token, probability, whether it is the next token); the top token alone
    takes two lines, token over probability, so that a column is as narrow as its longest token."""
    return [
        (
            label(lens.vocabulary[t], CELL_LABEL),
            f"{lens.probabilities[layer, i, t]:.{digits}f}",
            lens.expected[i] == t,
        )
        for t in top[layer, i].tolist()
    ]


class AtWidth:
    """A table laid out at its own width, wider than the console (``--full``): never squeezed."""

    def __init__(self, table: Table, width: int) -> None:
        self.table, self.width = table, width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from console.render(self.table, options.update(width=max(self.width, options.max_width)))


def lens_table(lens: Lens, view: View, k: int = 1) -> tuple[RenderableType, list[int]]:
    """Rows the layers, columns the positions; each cell the k most likely next tokens and their
    probabilities, ✓ by the one that really comes next. Positions that do not fit the width are
    summarised around a "…" column (all with ``view.full``). Returns the table and the positions
    shown (-1 for the "…")."""
    digits = _digits(view)
    top = lens.top(k)
    n = len(lens.tokens)
    cells = [[_cell_lines(lens, top, layer, i, digits) for i in range(n)] for layer in range(lens.layers)]
    headers = [label(token, CELL_LABEL) for token in lens.tokens]
    nexts = ["—" if e is None else label(lens.vocabulary[e], CELL_LABEL) for e in lens.expected]

    def width(token: str, p: str, right: bool) -> int:
        mark_width = 2 if right else 0
        return (
            max(cell_len(token), len(p) + mark_width) if k == 1 else cell_len(token) + 1 + len(p) + mark_width
        )

    widths = [
        max(cell_len(headers[i]), cell_len(nexts[i]), *(width(*line) for row in cells for line in row[i]))
        for i in range(n)
    ]
    first = max(len(f"layer {lens.layers - 1}"), len("next token"))
    ellipsis = "..." if view.ascii else ELLIPSIS
    costs = [w + TABLE_GAP for w in widths]
    budget = view.width - first - TABLE_GAP
    shown = list(range(n)) if view.full else summarise(costs, budget, len(ellipsis) + TABLE_GAP)
    table = styled_table("Logit lens: the most likely next token after each layer, at each position")
    table.add_column(Text("after"), no_wrap=True)
    for i in shown:
        table.add_column(Text(ellipsis if i < 0 else headers[i]), no_wrap=True)
    for layer in range(lens.layers):
        row: list[Text] = [Text(f"layer {layer}", style=LABEL)]
        for i in shown:
            if i < 0:
                row.append(Text(ellipsis))
                continue
            cell = Text()
            for line, (token, p, right) in enumerate(cells[layer][i]):
                if line:
                    cell.append("\n")
                cell.append(token, style="bold green" if right else "bold" if line == 0 else "")
                cell.append("\n" if k == 1 else " ")
                q = float(lens.probabilities[layer, i, top[layer, i, line]])
                cell.append(p, style=probability_style(q, view))
                if right:
                    cell.append(" ")
                    cell.append_text(mark(True))
            row.append(cell)
        table.add_row(*row)
    table.add_section()
    table.add_row(Text("next token", style=LABEL), *(Text(ellipsis if i < 0 else nexts[i]) for i in shown))
    if view.full:
        return AtWidth(table, first + sum(costs) + 2 * TABLE_GAP), shown
    return table, shown


def left_out(lens: Lens, shown: list[int]) -> str | None:
    """The sentence under a summarised table: which positions the "…" stands for."""
    if -1 not in shown:
        return None
    at = shown.index(-1)
    first, last = shown[at - 1] + 1, shown[at + 1] - 1
    which = f"position {first} is" if first == last else f"positions {first} to {last} are"
    return f"{which} left out of {len(lens.tokens)} (…): --position N shows one whole, --full every one"


def position_table(lens: Lens, position: int, k: int, view: View) -> Table:
    """One position's k most likely next tokens after each layer; with the token that really comes
    next, its probability and its rank in every layer (where the answer forms)."""
    p = _digits(view)
    top = lens.top(k)[:, position]
    expected = lens.expected[position]
    after = label(lens.tokens[position])
    title = f"Logit lens at position {position} ({after})"
    if expected is None:
        title += ", the last: no next token is known"
    else:
        title += f": the next token is {label(lens.vocabulary[expected])}"
    table = styled_table(title)
    table.add_column(Text("after"), no_wrap=True)
    table.add_column(Text(f"top {top.shape[1]}"))  # wraps between its entries only
    if expected is not None:
        table.add_column(
            Text(f"p({label(lens.vocabulary[expected], CELL_LABEL)})"), justify="right", no_wrap=True
        )
        table.add_column(Text("rank"), justify="right", no_wrap=True)
    for n in range(lens.layers):
        entries = [
            f"{label(lens.vocabulary[t])} {lens.probabilities[n, position, t]:.{p}f}"
            + (" ✓" if t == expected else "")
            for t in top[n]
        ]
        row: list[object] = [Text(f"layer {n}", style=LABEL), Entries(entries)]
        if expected is not None:
            q = float(lens.probabilities[n, position, expected])
            row += [
                Text(f"{q:.{p}f}", style=probability_style(q, view)),
                Text(str(lens.rank(n, position, expected))),
            ]
        table.add_row(*row)
    return table


# ---------------------------------------------------------------------------------------------
# explain: one cell of the lens, by hand.
# ---------------------------------------------------------------------------------------------


def parse_lens_cell(spec: str, lens: Lens) -> tuple[int, int]:
    """ "LAYER,POSITION" (indices from 0; the position may be given by its token's label) into
    (layer, position)."""
    layer_text, comma, position_text = spec.partition(",")
    layer_text, position_text = layer_text.strip(), position_text.strip()
    if not comma or not layer_text or not position_text:
        raise StageError(f"--explain {spec!r}: give a layer and a position, as 1,2 (layer 1, position 2)")
    try:
        layer = int(layer_text)
    except ValueError:
        raise StageError(
            f"--explain: the layer {layer_text!r} is not a number (0 to {lens.layers - 1})"
        ) from None
    if not 0 <= layer < lens.layers:
        raise StageError(f"--explain: the decoder has layers 0 to {lens.layers - 1}, got {layer}")
    if position_text in lens.tokens:
        return layer, lens.tokens.index(position_text)
    try:
        position = int(position_text)
    except ValueError:
        raise StageError(
            f"--explain: {position_text!r} is not a position (0 to {len(lens.tokens) - 1}) nor a token of "
            "the decoder's input"
        ) from None
    check_position(position, lens, "--explain")
    return layer, position


def check_position(position: int, lens: Lens, option: str = "--position") -> None:
    n = len(lens.tokens)
    if not 0 <= position < n:
        raise StageError(f"{option}: the decoder has positions 0 to {n - 1}, got {position}")


def token_id(text: str, lens: Lens) -> int:
    """A token of the vocabulary by its piece, or by its id."""
    if text in lens.vocabulary:
        return lens.vocabulary.index(text)
    if text.isdigit() and int(text) < len(lens.vocabulary):
        return int(text)
    shown = text if len(text) <= 40 else text[:39] + "…"
    raise StageError(
        f"--token {shown!r} is not in the vocabulary (nor an id from 0 to {len(lens.vocabulary) - 1})"
    )


def lens_stage(trace: Trace, lens: Lens, layer: int) -> Stage:
    """The lens of ``layer`` as a stage of its own, with every matrix the cell's arithmetic reads:
    the layer's output X, the final norm's gamma (and beta) and its result, the output layer's W
    (and b), the logits and the probabilities. Not part of the trace: made for ``explain``'s cells."""
    m = trace.config.model
    rows = lens.tokens
    D = dims(m.d_model)
    stage = Stage(stage_id(DECODER, "lens", layer), "lens", f"Decoder layer {layer} · logit lens", "", "")
    stage.rec("x", lens.residual[layer], rows, D, INPUT)
    stage.sources["x"] = lens.stages[layer]
    if lens.norm is not None:
        top = trace[lens.norm]
        for name in norm_of(m).params:
            stage.rec(name, top[name], (name,), D, WEIGHT)
        stage.rec("normed", lens.normed[layer], rows, D)  # type: ignore[index]
    out = trace[lens.output]
    stage.rec("W", out["W"], D, lens.vocabulary, WEIGHT)
    if "b" in out:
        stage.rec("b", out["b"], ("b",), lens.vocabulary, WEIGHT)
    stage.rec("logits", lens.logits[layer], rows, lens.vocabulary, ACTIVATION)
    stage.rec("probabilities", lens.probabilities[layer], rows, lens.vocabulary, PROBABILITIES)
    return stage


def explain_lens(
    trace: Trace, lens: Lens, layer: int, position: int, token: int | None = None, digits: int = 4,
    all_terms: bool = False,
) -> list[str]:  # fmt: skip
    """The arithmetic of one lens cell: which stage's output, which norm, which column of W, and the
    softmax; ``token`` defaults to the cell's most likely one."""
    from .explain import MAX_DIGITS, Cell

    if not 0 <= digits <= MAX_DIGITS:
        raise StageError(f"--digits: must be 0 to {MAX_DIGITS}, got {digits}")
    m = trace.config.model
    t = int(lens.top(1)[layer, position, 0]) if token is None else token
    stage = lens_stage(trace, lens, layer)
    c = Cell(stage, "probabilities", position, t, digits, all_terms)
    word, after = c.col, c.row
    expected = lens.expected[position]
    lines = [
        f"logit lens · layer {layer}, position {position} ({after}) · p({word}) = {c.f(c.value)}, "
        f"rank {lens.rank(layer, position, t)} of {len(lens.vocabulary)}",
        f"What the model would predict after {after} if it stopped after decoder layer {layer}: the residual "
        "stream there, put through what sits on top of the stack, as if the layers above were not there.",
        f"1. x = the output of {lens.stages[layer]}, row {position} ({after}): the residual stream after "
        f"layer {layer} ({m.d_model} numbers)",
    ]
    x = stage["x"][position]
    lines.append("  x = " + c.sum_of([c.f(v) for v in x.tolist()]).replace(" + ", ", "))
    y = x
    W = stage["W"]
    if lens.norm is not None:
        norm = norm_of(m)
        y = stage["normed"][position]
        terms = y * W[:, t]
        j = int(np.argmax(np.abs(terms))) if np.isfinite(terms).all() else 0
        params = " and ".join(norm.params)
        lines.append(
            f"2. y = {norm.name}(x), with the {params} of {lens.norm} (the model's own final norm); y[{j}], "
            "the largest term of the logit below, by hand:"
        )
        norm_cell = Cell(stage, "normed", position, j, digits, all_terms)
        lines += ["  " + line for line in norm.explain(norm_cell, "x", m.layer_norm_eps)]
        lines.append("  y = " + c.sum_of([c.f(v) for v in y.tolist()]).replace(" + ", ", "))
    else:
        lines.append(
            "2. no final norm: this model's last layer feeds the output layer directly, so x itself is "
            "projected"
        )
    ref = trace[lens.output].params.get("W")
    tied = (
        f" (W = Eᵀ, tied: column {word} of W is row {word} of E, {ref.name})"
        if ref is not None and ref.transposed
        else ""
    )
    logit = Cell(stage, "logits", position, t, digits, all_terms)
    b = " + b" if "b" in stage else ""
    which = "y" if lens.norm else "x"
    intro = f"3. logit = {which}·W[:, {word}]{b}: column {t} ({word}) of {lens.output}'s W{tied}"
    lines += linear(logit, intro, y, W[:, t], "b")
    row = stage["logits"][position]
    top = float(np.max(row))
    exps = np.exp(row.astype(np.float64) - top)
    total = math.fsum(exps.tolist())
    lines += [
        f"4. p = softmax of the {len(row)} logits of this position: "
        f"p[{word}] = e^(logit − m) / Σ_k e^(logit_k − m), m = the largest logit, {c.f(top)}",
        f"  e^({c.f(float(row[t]))} − {c._factor(top)}) = {c.f(float(exps[t]))}; "
        f"Σ_k = {c.sum_of([c.f(v) for v in exps.tolist()])} = {c.f(total)}",
        f"  p[{word}] = {c.f(float(exps[t]))} / {c.f(total)} = {c.f(c.value)}",
    ]
    if layer == lens.layers - 1:
        lines.append(
            "The last layer's lens is the model's own prediction: output.probabilities"
            f"[{after}, {word}] = {c.f(float(trace['output.probabilities']['probabilities'][position, t]))}."
        )
    if expected is not None:
        q = float(lens.probabilities[layer, position, expected])
        rank = lens.rank(layer, position, expected)
        lines.append(f"Next in the input: {lens.vocabulary[expected]}, p = {c.f(q)} here, rank {rank}.")
    return lines


# ---------------------------------------------------------------------------------------------
# The report's "Lens" section.
# ---------------------------------------------------------------------------------------------

HTML_POSITIONS = 64  # columns of the report's lens table; past it the first and last 32 (--full: all)
HTML_TOP = 5  # tokens in each cell's tooltip

LENS_CSS = """
.lens-wrap { overflow-x: auto; }
table.lens { border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; }
table.lens th { color: var(--accent); font-weight: 600; padding: 2px 6px; text-align: left;
  white-space: nowrap; }
table.lens td { padding: 3px 6px; border: 1px solid #fff; white-space: nowrap; }
table.lens td b { font-weight: 600; }
table.lens td.right b { color: #0b5a25; }
table.lens tr.next td { background: none; color: var(--muted); border-top: 1px solid var(--line); }
@media print { .lens-wrap { overflow: visible; } table.lens { font-size: 8pt; break-inside: avoid; } }
"""


def lens_section(trace: Trace, lens: Lens, precision: int = 2, full: bool = False) -> str:
    """The "Lens" section of the HTML report: the table of layers × positions, each cell shaded by
    its probability on the report's fixed 0–1 scale (the classes ``g0`` … ``g20`` of ``documents``)."""
    from .documents import _STEPS  # the report's fixed scale, in steps of 1/_STEPS

    e = html.escape
    p = max(precision, 2)
    n = len(lens.tokens)
    half = HTML_POSITIONS // 2
    shown = list(range(n)) if full or n <= HTML_POSITIONS else [*range(half), -1, *range(n - half, n)]
    top = lens.top(HTML_TOP)
    heads = "".join("<th>…</th>" if i < 0 else f"<th>{e(lens.tokens[i])}</th>" for i in shown)
    rows = []
    for layer in range(lens.layers):
        cells = []
        for i in shown:
            if i < 0:
                cells.append("<td>…</td>")
                continue
            best = int(top[layer, i, 0])
            q = float(lens.probabilities[layer, i, best])
            right = lens.expected[i] == best
            tip = ", ".join(
                f"{lens.vocabulary[t]} {lens.probabilities[layer, i, t]:.{p}f}" for t in top[layer, i]
            )
            tip = f"top {top.shape[2]}: {tip} · walkthrough lens --explain {layer},{i}"
            shade = round(min(max(q, 0.0), 1.0) * _STEPS) if math.isfinite(q) else 0
            cls = f"g{shade}" + (" right" if right else "")
            word = f"<b>{e(lens.vocabulary[best])}</b> {q:.{p}f}{' ✓' if right else ''}"
            cells.append(f'<td class="{cls}" title="{e(tip)}">{word}</td>')
        rows.append(f"<tr><th>layer {layer}</th>{''.join(cells)}</tr>")
    nexts = "".join(
        "<td>…</td>"
        if i < 0
        else f"<td>{e('—' if lens.expected[i] is None else lens.vocabulary[lens.expected[i]])}</td>"
        for i in shown
    )
    rows.append(f'<tr class="next"><th>next token</th>{nexts}</tr>')
    note = ""
    if -1 in shown:
        note = (
            f'<p class="left-out">Positions {half} to {n - half - 1} of {n} are left out; export with --full '
            "to keep them.</p>"
        )
    swatches = "".join(f'<span class="g{k}"></span>' for k in range(0, _STEPS + 1, 4))
    return (
        '<section id="lens"><h2>Logit lens<code>walkthrough lens</code></h2>'
        f"<p>What the model would predict if it stopped after each decoder layer: {e(where(lens))}. "
        f"Each cell is the most likely next token and its probability (hover for the top {HTML_TOP}); "
        "✓ marks the token that really comes next. The last layer's row is the model's own prediction.</p>"
        f'<div class="lens-wrap"><table class="lens"><thead><tr><th>after</th>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{note}"
        f'<p class="legend">Shading — probabilities: 0 {swatches} 1, the fixed scale of every '
        "probability.</p>"
        "</section>"
    )


def reading(trace: Trace) -> str:
    """How to read the table for this model: what the lens reads, and its last row."""
    said = "The last layer's row is the model's own prediction; ✓ marks the token that really comes next."
    if trace.config.model.decoder_only:
        return said
    return (
        "In the encoder–decoder the lens reads the decoder's layers: the encoder's output is never turned "
        f"into words (each cross-attention reads it). {said}"
    )
