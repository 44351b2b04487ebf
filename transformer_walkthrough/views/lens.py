"""The logit lens shown: one table of layers × positions, one position's top k per layer, the
arithmetic of one cell (``explain``), and the report's "Lens" section.

The numbers come from ``model.lens``; this module only lays them out. A cell is the most likely
next token after that layer at that position (in an encoder-only model, the most likely word at
that position), and its probability, shaded on the fixed 0–1 scale of every probability
(``palette.sequential``); ✓ marks the token that really belongs there (``Lens.expected``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..errors import StageError
from ..model.architecture import DECODER, ENCODER
from ..model.kinds.hand import linear
from ..model.kinds.norms import norm_of
from ..model.lens import PROBABILITIES as PROBABILITIES_ID
from ..model.lens import Lens, rank_of, run_top
from ..model.trace import Trace
from .documents.shades import STEPS  # the report's fixed scale, in steps of 1/STEPS
from .documents.text import md_label, md_text, tex
from .palette import sequential, sequential_256
from .widgets import ELLIPSIS, LABEL, Entries, View, label, mark, styled_table

if TYPE_CHECKING:
    from ..model.cell import Cell

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
    """What was projected, through what: the sentence under the table."""
    read = " and ".join(lens.stages) if lens.layers <= 2 else f"{lens.stages[0]}, …, {lens.stages[-1]}"
    through = [f"the final norm ({lens.norm})"] if lens.norm else []
    through += [f"BERT's transform ({lens.transform})"] if lens.transform else []
    through.append(f"the output layer ({lens.output})")
    none = "" if lens.norm else " (the model has no final norm)"
    return (
        f"each position's residual stream after each {lens.side} layer (the output of {read}) put through "
        f"{', '.join(through)} and the softmax{none}"
    )


def expected_row(lens: Lens) -> str:
    """The name of the table's last row, the tokens that ✓ marks: the next one after a decoder
    position, the true word at an encoder-only model's (the hidden one at a blank)."""
    return "next token" if lens.side == DECODER else "true word"


def marks(lens: Lens) -> str:
    """What ✓ marks, as a sentence."""
    if lens.side == DECODER:
        return "✓ marks the token that really comes next."
    return (
        "✓ marks the true word: at a blank, the word hidden there (when it is known); elsewhere, the "
        "word read there, which the model sees."
    )


def _cell_lines(lens: Lens, top: np.ndarray, layer: int, i: int, digits: int) -> list[tuple[str, str, bool]]:
    """A cell's lines as (token, probability, whether it is the expected token); the top token alone
    takes two lines, token over probability, so that a column is as narrow as its longest token."""
    return [
        (
            label(lens.vocabulary[t], CELL_LABEL),
            f"{lens.probability(layer, i, t):.{digits}f}",
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


def lens_table(
    lens: Lens, view: View, k: int = 1, asked: Sequence[int] = ()
) -> tuple[RenderableType, list[int]]:
    """Rows the layers, columns the positions; each cell the k most likely tokens there (the next
    token's, or an encoder-only model's word at that position) and their probabilities, ✓ by the
    one that really belongs there (``Lens.expected``). Positions that do not fit the width are
    summarised by "…" columns (all with ``view.full``), never the ``asked`` ones nor the blanks
    (``must_show``). Returns the table and the positions shown (-1 for a "…")."""
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
    first = max(len(f"layer {lens.layers - 1}"), len(expected_row(lens)))
    ellipsis = "..." if view.ascii else ELLIPSIS
    costs = [w + TABLE_GAP for w in widths]
    budget = view.width - first - TABLE_GAP
    must = must_show(lens, asked)
    shown = (
        list(range(n)) if view.full else fitting(costs, budget, len(ellipsis) + TABLE_GAP, must, lens.side)
    )
    what = (
        "next token after each layer, at each position"
        if lens.side == DECODER
        else "word at each position, after each layer"
    )
    table = styled_table(f"Logit lens: the most likely {what}")
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
                q = float(lens.probability(layer, i, int(top[layer, i, line])))
                cell.append(p, style=probability_style(q, view))
                if right:
                    cell.append(" ")
                    cell.append_text(mark(True))
            row.append(cell)
        table.add_row(*row)
    table.add_section()
    table.add_row(
        Text(expected_row(lens), style=LABEL), *(Text(ellipsis if i < 0 else nexts[i]) for i in shown)
    )
    if view.full:
        return AtWidth(table, first + sum(costs) + 2 * TABLE_GAP), shown
    return table, shown


def positions_left_out(lens: Lens, shown: list[int]) -> str | None:
    """Which positions the "…" columns of a summarised table stand for: "positions 0 to 2 and 5 are
    left out of 7 (…)"; None when every position is shown."""
    if -1 not in shown:
        return None
    missing = sorted(set(range(len(lens.tokens))) - set(shown))
    runs: list[list[int]] = []
    for i in missing:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    spans = [str(run[0]) if len(run) == 1 else f"{run[0]} to {run[-1]}" for run in runs]
    listed = spans[0] if len(spans) == 1 else f"{', '.join(spans[:-1])} and {spans[-1]}"
    which = f"position {listed} is" if len(missing) == 1 else f"positions {listed} are"
    return f"{which} left out of {len(lens.tokens)} (…)"


def must_show(lens: Lens, asked: Sequence[int] = ()) -> list[int]:
    """The positions a summarised table never leaves out: the ones asked for (``lens --at``), then
    an encoder-only model's blanks (the [MASK] whose word the lens is read for)."""
    blanks = [i for i in range(len(lens.tokens)) if lens.hides(i)]
    return list(dict.fromkeys([*asked, *blanks]))


def with_gaps(kept: set[int], n: int) -> list[int]:
    """The kept positions in order, a -1 (a "…" column) wherever some are left out between them."""
    shown: list[int] = []
    for i in range(n):
        if i in kept:
            shown.append(i)
        elif not shown or shown[-1] != -1:
            shown.append(-1)
    return shown


def fitting(costs: list[int], budget: int, ellipsis: int, must: Sequence[int], side: str) -> list[int]:
    """The positions whose columns fit ``budget`` (each "…" costing ``ellipsis``): the ``must``
    ones first, then a decoder's from the last back (what the whole prompt leads to), an encoder's
    from both ends in turn; with -1 for each "…" (``with_gaps``)."""
    n = len(costs)
    if sum(costs) <= budget:
        return list(range(n))
    ends = [k // 2 if k % 2 == 0 else n - 1 - k // 2 for k in range(n)]
    order = [*must, *(range(n - 1, -1, -1) if side == DECODER else ends)]
    kept: set[int] = set()
    for j in order:
        if j in kept:
            continue
        more = kept | {j}
        shown = with_gaps(more, n)
        cost = sum(costs[i] for i in more) + ellipsis * shown.count(-1)
        if cost <= budget or j in must or not kept:
            kept = more
    return with_gaps(kept, n)


def left_out(lens: Lens, shown: list[int]) -> str | None:
    """The sentence under the terminal's summarised table: what is left out, and how to see it."""
    which = positions_left_out(lens, shown)
    if which is None:
        return None
    return f"{which}: --at N keeps one, --position N shows one whole, --full every one"


def document_left_out(lens: Lens, shown: list[int]) -> str | None:
    """The sentence under a document's summarised table (the report's, the Markdown's, the LaTeX's)."""
    which = positions_left_out(lens, shown)
    return None if which is None else f"{which[0].upper()}{which[1:]}; export with --full to keep them."


def position_table(lens: Lens, position: int, k: int, view: View) -> Table:
    """One position's k most likely next tokens after each layer (an encoder-only model's: words at
    that position); with the token that really belongs there, its probability and its rank in every
    layer (where the answer forms)."""
    p = _digits(view)
    top = lens.top(k)[:, position]
    expected = lens.expected[position]
    after = label(lens.tokens[position])
    title = f"Logit lens at position {position} ({after})"
    if lens.side == ENCODER:
        hidden = lens.hides(position)
        title += (
            ", a blank: the word hidden there is not known" if expected is None
            else f": the word {'hidden ' if hidden else ''}there is {label(lens.vocabulary[expected])}"
        )  # fmt: skip
    elif expected is None:
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
            f"{label(lens.vocabulary[t])} {lens.probability(n, position, t):.{p}f}"
            + (" ✓" if t == expected else "")
            for t in top[n]
        ]
        row: list[object] = [Text(f"layer {n}", style=LABEL), Entries(entries)]
        if expected is not None:
            q = float(lens.probability(n, position, expected))
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
        raise StageError(f"--explain: the {lens.side} has layers 0 to {lens.layers - 1}, got {layer}")
    if position_text in lens.tokens:
        return layer, lens.tokens.index(position_text)
    try:
        position = int(position_text)
    except ValueError:
        text = position_text
        repeated = [token for i, token in enumerate(lens.tokens) if token in (f"{text}@{i}", f"{text} ({i})")]
        if repeated:  # a piece that repeats is labelled by its position too (``trace.token_labels``)
            raise StageError(
                f"--explain: {position_text!r} is at {len(repeated)} positions: give one of "
                f"{', '.join(repeated)}, or its position"
            ) from None
        raise StageError(
            f"--explain: {position_text!r} is not a position (0 to {len(lens.tokens) - 1}) nor a token of "
            f"the {lens.side}'s input"
        ) from None
    check_position(position, lens, "--explain")
    return layer, position


def check_position(position: int, lens: Lens, option: str = "--position") -> None:
    n = len(lens.tokens)
    if not 0 <= position < n:
        raise StageError(f"{option}: the {lens.side} has positions 0 to {n - 1}, got {position}")


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


def _on_top(top: Trace, lens: Lens, position: int, j: int, c: Cell) -> list[str]:
    """Column j of what the output layer reads, by hand, through each stage on top of the stack in
    turn, with the kinds' own explainers on the lens's rerun of them (``model.lens.run_top``); a
    stage that feeds another has its whole row written out, every number the next one reads."""
    from ..model.cell import Cell
    from .explain import explainer

    steps = []
    if lens.norm is not None:
        norm = top[lens.norm]
        params = " and ".join(norm.params)
        name = norm_of(top.config.model).name
        what = f"{name}(X), X = x, with the {params} of {lens.norm} (the model's own final norm)"
        steps.append((what, norm, ("output",)))
    if lens.transform is not None:
        X = "the final norm's output" if steps else "x"
        what = f"BERT's transform ({lens.transform}) of X = {X}: dense layer, activation, norm"
        steps.append((what, top[lens.transform], ("dense", "hidden", "output")))
    lines = []
    for k, (what, stage, names) in enumerate(steps):
        lines.append(f"  {what}:")
        for name in names:
            cell = Cell(stage, name, position, j, c.digits, c.all_terms)
            lines += [f"    {line}" for line in explainer(stage, name)(cell, top)]
        if k + 1 < len(steps):  # the next stage reads all of this row, not column j alone
            row = stage[stage.output][position].tolist()
            lines.append(f"    {stage.output} = " + c.sum_of([c.f(v) for v in row]).replace(" + ", ", "))
    return lines


def explain_lens(
    trace: Trace, lens: Lens, layer: int, position: int, token: int | None = None, digits: int = 4,
    all_terms: bool = False,
) -> list[str]:  # fmt: skip
    """The arithmetic of one lens cell: which stage's output, what sits on top of the stack (the
    final norm, BERT's transform), which column of W, and the softmax; ``token`` defaults to the
    cell's most likely one. The top is run again on the layer's rows (``model.lens.run_top``) and
    each of its stages explained by its own kind."""
    from ..model.cell import Cell
    from .explain import MAX_DIGITS

    if not 0 <= digits <= MAX_DIGITS:
        raise StageError(f"--precision: must be 0 to {MAX_DIGITS}, got {digits}")
    m = trace.config.model
    t = int(lens.top(1)[layer, position, 0]) if token is None else token
    top = run_top(trace, lens.residual[layer], lens.tokens)
    c = Cell(top[PROBABILITIES_ID], "probabilities", position, t, digits, all_terms)
    word, after = c.col, c.row
    expected = lens.expected[position]
    predicts = f"at position {position} ({after})" if lens.side == ENCODER else f"after {after}"
    lines = [
        f"logit lens · layer {layer}, position {position} ({after}) · p({word}) = {c.r(c.value)}, "
        f"rank {rank_of(top[PROBABILITIES_ID]['probabilities'][position], t)} of {len(lens.vocabulary)}",
        f"What the model would predict {predicts} if it stopped after {lens.side} layer {layer}: the "
        "residual stream there, put through what sits on top of the stack, as if the layers above were "
        "not there.",
        f"1. x = the output of {lens.stages[layer]}, row {position} ({after}): the residual stream after "
        f"layer {layer} ({m.d_model} numbers)",
    ]
    x = lens.residual[layer][position]
    lines.append("  x = " + c.sum_of([c.f(v) for v in x.tolist()]).replace(" + ", ", "))
    out = top[lens.output]
    y, W = out["X"][position], out["W"]
    if lens.norm is None and lens.transform is None:  # nothing on top of the stack
        lines.append(
            "2. nothing on top: this model's last layer feeds the output layer directly (no final norm), "
            "so x itself is projected"
        )
    else:
        terms = y * W[:, t]
        j = int(np.argmax(np.abs(terms))) if np.isfinite(terms).all() else 0
        lines.append(
            f"2. y = what sits on top of the stack, applied to x; y[{j}], the largest term of the logit "
            "below, by hand:"
        )
        lines += _on_top(top, lens, position, j, c)
        lines.append("  y = " + c.sum_of([c.f(v) for v in y.tolist()]).replace(" + ", ", "))
    ref = out.params.get("W")
    tied = (
        f" (W = Eᵀ, tied: column {word} of W is row {word} of E, {ref.name})"
        if ref is not None and ref.transposed
        else ""
    )
    logit = Cell(out, "logits", position, t, digits, all_terms)
    b = " + b" if "b" in out else ""
    which = "x" if lens.norm is None and lens.transform is None else "y"
    intro = f"3. logit = {which}·W[:, {word}]{b}: column {t} ({word}) of {lens.output}'s W{tied}"
    lines += linear(logit, intro, y, W[:, t], "b")
    row = out["logits"][position]
    peak = float(np.max(row))
    exps = np.exp(row.astype(np.float64) - peak)
    total = math.fsum(exps.tolist())
    shown = set(c.shown(len(exps)))  # a vocabulary of 200,000: only the terms written are formatted
    terms = [c.f(float(exps[k])) if k in shown else "" for k in range(len(exps))]
    lines += [
        f"4. p = softmax of the {len(row)} logits of this position: "
        f"p[{word}] = e^(logit − m) / Σ_k e^(logit_k − m), m = the largest logit, {c.f(peak)}",
        f"  e^({c.f(float(row[t]))} − {c.operand(peak)}) = {c.r(float(exps[t]))}; "
        f"Σ_k = {c.sum_of(terms)} = {c.r(total)}",
        f"  p[{word}] = {c.f(float(exps[t]))} / {c.f(total)} = {c.r(c.value)}",
    ]
    if layer == lens.layers - 1:
        own = float(trace[PROBABILITIES_ID]["probabilities"][position, t])
        lines.append(
            f"The last layer's lens is the model's own prediction: output.probabilities[{after}, {word}] = "
            f"{c.f(own)}."
        )
    if expected is not None:
        q = float(lens.probability(layer, position, expected))
        rank = lens.rank(layer, position, expected)
        what = _expected_sentence(lens, position)
        lines.append(f"{what}: {lens.vocabulary[expected]}, p = {c.r(q)} here, rank {rank}.")
    return lines


def _expected_sentence(lens: Lens, position: int) -> str:
    """What the ✓ token is at ``position``, as the start of a sentence."""
    if lens.side == DECODER:
        return "Next in the input"
    return "The word hidden here" if lens.hides(position) else "The word here"


# ---------------------------------------------------------------------------------------------
# The report's "Lens" section.
# ---------------------------------------------------------------------------------------------

HTML_POSITIONS = 64  # columns of the report's lens table; past it the first and last 32 (--full: all)
HTML_TOP = 5  # tokens in each cell's tooltip
RERUN_IN_CELL = 200  # characters of options a cell's command repeats (a long prompt's are said once)

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


def lens_section(trace: Trace, lens: Lens, precision: int = 2, full: bool = False, rerun: str = "") -> str:
    """The "Lens" section of the HTML report: the table of layers × positions, each cell shaded by
    its probability on the report's fixed 0–1 scale (the classes ``g0`` … ``g20`` of ``documents.shades``);
    each cell's tooltip its top 5 and the command that explains it, with ``rerun``'s options (the
    config, weights, checkpoint and prompt that make this trace again)."""
    e = html.escape
    p = max(precision, 2)
    n = len(lens.tokens)
    shown = kept_positions(n, HTML_POSITIONS, full, must_show(lens))
    top = lens.top(HTML_TOP)
    # The options that make the trace again, in each cell's command while they are short; a long
    # prompt's (thousands of characters) once under the table instead of in every cell.
    again = f" {rerun}" if rerun and len(rerun) <= RERUN_IN_CELL else ""
    options = (
        f'<p class="legend">Each cell\'s command takes these options too: <code>{e(rerun)}</code></p>'
        if rerun and not again
        else ""
    )
    heads = "".join("<th>…</th>" if i < 0 else f"<th>{e(lens.tokens[i])}</th>" for i in shown)
    rows = []
    for layer in range(lens.layers):
        cells = []
        for i in shown:
            if i < 0:
                cells.append("<td>…</td>")
                continue
            best = int(top[layer, i, 0])
            q = float(lens.probability(layer, i, best))
            right = lens.expected[i] == best
            tip = ", ".join(
                f"{lens.vocabulary[t]} {lens.probability(layer, i, t):.{p}f}" for t in top[layer, i]
            )
            tip = f"top {top.shape[2]}: {tip} · walkthrough lens --explain {layer},{i}{again}"
            shade = round(min(max(q, 0.0), 1.0) * STEPS) if math.isfinite(q) else 0
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
    rows.append(f'<tr class="next"><th>{expected_row(lens)}</th>{nexts}</tr>')
    note = document_left_out(lens, shown)
    note = "" if note is None else f'<p class="left-out">{e(note)}</p>'
    swatches = "".join(f'<span class="g{k}"></span>' for k in range(0, STEPS + 1, 4))
    return (
        '<section id="lens"><h2>Logit lens<code>walkthrough lens</code></h2>'
        f"<p>What the model would predict if it stopped after each {lens.side} layer: {e(where(lens))}. "
        f"Each cell is the most likely {'next token' if lens.side == DECODER else 'word there'} and its "
        f"probability (hover for the top {HTML_TOP}); {marks(lens)} The last layer's row is the model's "
        "own prediction.</p>"
        f'<div class="lens-wrap"><table class="lens"><thead><tr><th>after</th>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{note}{options}"
        f'<p class="legend">Shading — probabilities: 0 {swatches} 1, the fixed scale of every '
        "probability.</p>"
        "</section>"
    )


# ---------------------------------------------------------------------------------------------
# The Markdown and LaTeX documents' "Logit lens" section: the same table, as text.
# ---------------------------------------------------------------------------------------------

DOCUMENT_LABEL = 24  # characters of a token in a document's cell or header


DOCUMENT_POSITIONS = 16  # columns of a document's lens table; past it the first and last 8 (--full: all)


def kept_positions(n: int, most: int, full: bool, must: Sequence[int] = ()) -> list[int]:
    """The positions a document's table shows: all (``full``, or n ≤ ``most``), else the first and
    the last most/2 and the ``must`` ones (the blanks), a -1 (a "…") for each gap. A Markdown viewer
    scrolls a wide table and LaTeX's \\fit shrinks it to the line, so a document keeps a fixed
    number rather than what fits a width."""
    half = most // 2
    if full or n <= most:
        return list(range(n))
    return with_gaps({*range(half), *range(n - half, n), *must}, n)


def _about(lens: Lens) -> str:
    """The paragraph over a document's table: what was projected, and how to read a cell."""
    cell = "next token" if lens.side == DECODER else "word there"
    return (
        f"What the model would predict if it stopped after each {lens.side} layer: {where(lens)}. Each "
        f"cell is the most likely {cell} and its probability; {marks(lens)} The last layer's row is the "
        "model's own prediction (walkthrough lens shows the top k of one position, and explains a cell)."
    )


def document_cells(
    lens: Lens, shown: list[int], digits: int, word: Callable[[int | None], str],
    strong: Callable[[str], str], ellipsis: str, tick: str,
) -> tuple[list[list[str]], list[str]]:  # fmt: skip
    """A document's table in its own markup: each layer's cells (the top token, ``strong``, and its
    probability, ``tick`` where it is the expected one) and the row of expected tokens, in the
    columns ``shown`` (``ellipsis`` for the -1)."""
    top = lens.top(1)[..., 0]

    def cell(layer: int, i: int) -> str:
        t = int(top[layer, i])
        right = tick if lens.expected[i] == t else ""
        return f"{strong(word(t))} {lens.probability(layer, i, t):.{digits}f}{right}"

    layers = [[ellipsis if i < 0 else cell(layer, i) for i in shown] for layer in range(lens.layers)]
    return layers, [ellipsis if i < 0 else word(lens.expected[i]) for i in shown]


def lens_markdown(lens: Lens, precision: int = 2, full: bool = False) -> str:
    """The Markdown document's "Logit lens" section: layers × positions, the top token (a code span,
    as every token of the document) and its probability in each cell, ✓ by the expected one; past
    ``DOCUMENT_POSITIONS`` positions, the first and the last (all with ``full``)."""
    shown = kept_positions(len(lens.tokens), DOCUMENT_POSITIONS, full, must_show(lens))

    def word(t: int | None) -> str:
        return "—" if t is None else md_label(label(lens.vocabulary[t], DOCUMENT_LABEL))

    heads = ["…" if i < 0 else md_label(label(lens.tokens[i], DOCUMENT_LABEL)) for i in shown]
    lines = [
        "\n## Logit lens\n",
        f"{md_text(_about(lens))}\n",
        "| after | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(shown),
    ]
    layers, expected = document_cells(lens, shown, max(precision, 2), word, lambda w: f"**{w}**", "…", " ✓")
    lines += [f"| layer {layer} | " + " | ".join(cells) + " |" for layer, cells in enumerate(layers)]
    lines.append(f"| {expected_row(lens)} | " + " | ".join(expected) + " |")
    if note := document_left_out(lens, shown):
        lines.append(f"\n{md_text(note)}")
    return "\n".join(lines) + "\n"


def lens_latex(lens: Lens, precision: int = 2, full: bool = False) -> str:
    """The LaTeX document's "Logit lens" section: the same table as a tabular, every token in
    typewriter as typed, shrunk to the line when it must be (the document's ``\\fit``)."""
    shown = kept_positions(len(lens.tokens), DOCUMENT_POSITIONS, full, must_show(lens))

    def typed(piece: str) -> str:  # a token as typed: typewriter, "--" two hyphens, not a dash
        return rf"\texttt{{{tex(label(piece, DOCUMENT_LABEL)).replace('--', '-{}-')}}}"

    def word(t: int | None) -> str:
        return "---" if t is None else typed(lens.vocabulary[t])

    heads = [r"\ldots" if i < 0 else typed(lens.tokens[i]) for i in shown]

    def bold(w: str) -> str:
        return rf"\textbf{{{w}}}"

    layers, expected = document_cells(lens, shown, max(precision, 2), word, bold, r"\ldots", r" $\checkmark$")
    rows = [rf"layer {layer} & " + " & ".join(cells) + r" \\" for layer, cells in enumerate(layers)]
    last = " & ".join(expected)
    out = [
        "\n\\section*{Logit lens}\n",
        tex(_about(lens)) + "\\par\n",
        "\\fit{\\begin{tabular}{l" + "l" * len(shown) + "}\n",
        "after & " + " & ".join(heads) + r" \\ \hline" + "\n",
        "\n".join(rows) + "\n",
        rf"\hline {tex(expected_row(lens))} & {last} \\" + "\n",
        "\\end{tabular}}\n",
    ]
    if note := document_left_out(lens, shown):
        typed = tex(note).replace("--", "-{}-")  # "--full" as typed, not TeX's en dash
        out.append(f"{{\\small {typed}}}\\par\n")
    return "".join(out)


def reading(trace: Trace, lens: Lens) -> str:
    """How to read the table for this model: what the lens reads, what ✓ marks, and its last row."""
    said = f"The last layer's row is the model's own prediction; {marks(lens)}"
    m = trace.config.model
    if m.decoder_only:
        return said
    if m.encoder_only:
        return f"In an encoder-only model a row is the word at its position, not the next one. {said}"
    return (
        "In the encoder–decoder the lens reads the decoder's layers: the encoder's output is never turned "
        f"into words (each cross-attention reads it). {said}"
    )
