"""A trace on the terminal, stage by stage: each stage's header (title, explanation, formula), its
matrices grouped by meaning (a head's on a row of its own), each beside its gradient, the legend
of their shades; the map of where a stage sits in Figure 1; the prediction table. What
``walkthrough run`` and ``step`` print, and what the tour pages through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..errors import printable
from ..model.kinds import KINDS
from ..model.trace import ACTIVATION, Stage, Trace
from .blocks import GAP, MatrixBlock, is_shaded, largest, layout, legend, matrix_block
from .palette import sequential
from .widgets import (
    FORMULA,
    LABEL,
    TITLE,
    Entries,
    Fitting,
    View,
    label,
    mark,
    styled_table,
    wrap_explanation,
)

if TYPE_CHECKING:
    from ..model.backprop import Backward


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
        StageRule(printable(stage.title), printable(stage.id)),
        Text(lines(stage.explanation)),
        formula,
        Text(""),
    )


class StageRule:
    """The stage's title and id on a rule. The id is what a reader types next (``step -s``): where
    the line is too short for both, the title is shortened, never the id; where it leaves the title
    too little room, the title goes whole on a line of its own above."""

    SHORTEST = 16  # cells of a shortened title worth showing: "Decoder layer 1…"

    def __init__(self, title: str, stage_id: str) -> None:
        self.title, self.id = title, stage_id

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        # Rich's rule keeps a title to the width less 2 (a space and one ─ after it)
        room = options.max_width - 2 - cell_len("  " + self.id)
        if room >= min(cell_len(self.title), self.SHORTEST):
            title = Text(self.title, style=TITLE)
            title.truncate(room, overflow="ellipsis")
            yield Rule(Text.assemble(title, ("  " + self.id, "dim")), align="left")
            return
        yield Text(self.title, style=TITLE)  # prose: it wraps between words
        yield Rule(Text(self.id, style="dim"), align="left")


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


def predicted(trace: Trace) -> str:
    """What the prediction holds, in words: a word per blank (BERT), one word from the whole
    target at once (the article's flatten head), or a next word per decoder position (the paper)."""
    m = trace.config.model
    if m.encoder_only:
        return "the most likely word at each blank, read from both sides"
    if m.output_head == "flatten":
        return "one next word, from all the decoder's positions at once (flattened)"
    return "the most likely next word after each decoder position"


def prediction_table(trace: Trace, view: View) -> RenderableType:
    """Per decoder position: the most likely next word, its probability, the runners-up. Where the
    table cannot fit whole (60 columns), the runners-up get a table of their own below it."""
    title = Text(f"Prediction: {predicted(trace)}", style=TITLE)  # prose: it wraps between words
    whole = _prediction_columns(trace, view, top=True, rest=True)
    split = Group(
        _prediction_columns(trace, view, top=False, rest=True),
        Text(""),
        _prediction_columns(trace, view, top=True, rest=False),
    )
    return Group(title, Fitting(whole, split))


def _prediction_columns(trace: Trace, view: View, top: bool, rest: bool) -> Table:
    """The prediction's table: the position and the word predicted there (its probability, the
    expected word) when ``rest``, and the runners-up when ``top``."""
    p = view.precision
    blanks = trace.config.model.encoder_only
    table = styled_table()
    # the flatten head's one row is after every token: it wraps between them
    table.add_column(Text("blank" if blanks else "after"))
    if rest:
        table.add_column(Text("predicted"), no_wrap=True)
        table.add_column(Text("p"), justify="right", no_wrap=True)
        table.add_column(Text("expected"), no_wrap=True)
        table.add_column(Text(""), no_wrap=True)
    if top:
        table.add_column(Text(f"top {len(trace.prediction[0].top)}"))  # wraps between its entries only
    for pred in trace.prediction:
        right = None if pred.expected is None else pred.word == pred.expected
        where = (
            [f"{label(pred.after)} (pos {pred.position})"]
            if blanks
            else [label(w) for w in pred.after.split(" ")]
        )
        cells: list[RenderableType] = [Entries(where, " ", LABEL)]
        if rest:
            cells += [
                Text(label(pred.word), style="bold green" if right else "bold"),
                Text(f"{pred.probability:.{max(p, 2)}f}"),
                Text(label(pred.expected or "—")),
                mark(right),
            ]
        if top:
            cells.append(Entries([f"{label(w)} {q:.{max(p, 2)}f}" for w, q in pred.top]))
        table.add_row(*cells)
    return table


def ending(trace: Trace, view: View) -> Iterator[RenderableType]:
    """What follows the stages: the prediction table, or why a model that encodes has none."""
    if trace.prediction:
        yield prediction_table(trace, view)
    elif trace.config.model.task == "encode":
        yield Text(
            "No prediction: this model has no masked-language-model head (no output layer), so it "
            "encodes the text and cannot fill blanks; its vectors are the last stage's output."
        )


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
    if prediction:
        yield from ending(trace, view)
    if grads is not None:
        yield Text(
            f"loss = mean over the positions with a next token of −log p(next token) = {grads.loss:.6g}"
        )
