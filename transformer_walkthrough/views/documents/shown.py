"""What every document shows of a trace: its options, each stage's matrices as shown (grouped by
meaning, each beside its gradient, summarised as the terminal summarises them), the heading and
the prediction's cells. The writers (``markdown``, ``latex``, ``report``) set these in their markup.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...errors import printable
from ...model.cell import GUARD
from ...model.trace import ACTIVATION, Keep, Matrix, Prediction, Stage, Trace
from ..blocks import summary
from ..sections import Sections
from ..stages import group_of
from ..widgets import View, label
from .text import tex_symbol

if TYPE_CHECKING:
    from .worksheet import Worksheet

Grads = dict[str, dict[str, np.ndarray]]  # stage id -> matrix name -> dL/d(matrix)


@dataclass(frozen=True)
class Options:
    """How a document shows a trace: digits, weights or not, gradients, a worksheet, and whether
    large matrices are kept whole (``full``) or summarised as the terminal summarises them."""

    precision: int = 2
    weights: bool = True
    grads: Grads | None = None
    worksheet: Worksheet | None = None
    full: bool = False
    # The HTML report: a click on a cell shows its arithmetic (``views.clickable``); ``rerun``:
    # the options that make this trace again, for the command line a cell shows past its budget.
    clickable: bool = True
    rerun: str = ""

    def digits(self, stage_id: str, name: str) -> int:
        """A matrix's decimals: a worksheet shows those a hidden cell is computed from finer, at the
        digits its key computes with."""
        finer = self.worksheet is not None and (stage_id, name) in self.worksheet.finer
        return self.precision + GUARD if finer else self.precision

    def holes(self, stage_id: str, name: str) -> dict[tuple[int, int], int]:
        return {} if self.worksheet is None else self.worksheet.hidden.get((stage_id, name), {})

    def asks(self, stage_id: str, name: str) -> bool:
        """Whether the worksheet asks for a cell of this matrix (not just hides a copy of one)."""
        return self.worksheet is not None and any(
            (h.stage, h.name) == (stage_id, name) for h in self.worksheet.holes
        )


class Shown(NamedTuple):
    """A matrix as a document shows it: under its name (S1, or dL/dS1), with its digits and holes,
    and the rows and columns kept (``blocks.summary``: -1 for the "⋮" row, the "…" column)."""

    name: str
    matrix: Matrix
    precision: int
    holes: dict[tuple[int, int], int]
    tex: str = ""  # its symbol in LaTeX (``tex_symbol``)
    rows: tuple[int, ...] = ()
    cols: tuple[int, ...] = ()

    @property
    def gradient(self) -> bool:
        return self.name.startswith("dL/d")

    @property
    def whole(self) -> bool:
        return -1 not in self.rows and -1 not in self.cols

    def kept(self) -> tuple[list[int], list[int]]:
        """The indices of the rows and the columns shown, without the -1s."""
        return [i for i in self.rows if i >= 0], [j for j in self.cols if j >= 0]

    def left_out(self) -> str | None:
        """The sentence under a summarised matrix that says what the "⋮" and the "…" stand for."""
        if self.whole:
            return None
        m = self.matrix
        parts = []
        for index, labels, what, mark in (
            (self.rows, m.rows, "rows", "⋮"),
            (self.cols, m.cols, "columns", "…"),
        ):
            if -1 in index:
                at = index.index(-1)
                # the mark may end the row (a window that keeps the first columns only)
                first = index[at - 1] + 1 if at else 0
                last = index[at + 1] - 1 if at + 1 < len(index) else len(labels) - 1
                span = (
                    label(labels[first])
                    if first == last
                    else f"{label(labels[first])} to {label(labels[last])}"
                )
                parts.append(f"{last - first + 1} of its {len(labels)} {what} ({span}, at {mark})")
        return (
            f"{self.name} is summarised: {' and '.join(parts)} are left out; export with --full to keep them."
        )


def row_values(s: Shown, i: int) -> list[float | None]:
    """Row ``i``'s numbers in the columns shown, None where the "…" stands."""
    values = s.matrix.values[i]
    if -1 not in s.cols:
        return values.tolist() if len(s.cols) == len(values) else values[list(s.cols)].tolist()
    at = s.cols.index(-1)
    return [*values[list(s.cols[:at])].tolist(), None, *values[list(s.cols[at + 1 :])].tolist()]


DOCUMENT_WIDTH = 100  # characters a matrix may take in the HTML and Markdown, as in a 100-column terminal


def units(stage: Stage, o: Options, width: int = DOCUMENT_WIDTH) -> list[list[list[Shown]]]:
    """The stage's matrices in rows of one meaning (per head: weights, projections, attention; as
    ``stages.group_of`` groups them in the terminal), each matrix beside its gradient when there
    are gradients, but for constants (the mask, the sinusoids), which nothing learns.

    A large matrix keeps the rows and columns the terminal would keep at ``width`` (its gradient
    the same ones, to be read beside it), unless ``o.full`` or a worksheet asks for one of its cells."""
    grouped: list[tuple[object, list[Shown]]] = []
    for name, m in stage.matrices.items():
        if m.is_weight and not o.weights:
            continue
        symbol = tex_symbol(stage, name)
        view = View(o.precision, width, full=o.full or o.asks(stage.id, name))
        rows, cols = map(tuple, summary(m, view))
        digits = 0 if m.is_whole else o.digits(stage.id, name)  # ids (an expert's): no decimals
        unit = [Shown(name, m, digits, o.holes(stage.id, name), symbol, rows, cols)]
        if o.grads is not None and not m.is_constant:
            # Gradients are small numbers: two more digits, so that they do not all read 0.00.
            gradient = m._replace(values=o.grads[stage.id][name], role=ACTIVATION)  # not weights in [0, 1]
            unit.append(
                Shown(f"dL/d{name}", gradient, o.precision + 2, {}, gradient_symbol(symbol), rows, cols)
            )
        grouped.append((group_of(stage, name), unit))
    return [[unit for _, unit in run] for _, run in itertools.groupby(grouped, key=lambda g: g[0])]


def numbers_shown(stages: list[Stage], o: Options, width: int = DOCUMENT_WIDTH) -> int:
    """How many numbers a document writes of these stages: every matrix's cells as ``units``
    keeps them (a summarised matrix only its kept rows and columns), gradients included."""
    count = 0
    for stage in stages:
        for group in units(stage, o, width):
            for unit in group:
                for shown in unit:
                    rows, cols = shown.kept()
                    count += len(rows) * len(cols)
    return count


def gradient_symbol(symbol: str) -> str:
    """∂L/∂ of a matrix's LaTeX symbol; a sum in parentheses: ∂L/∂(S₁ + M), not (∂L/∂S₁) + M."""
    return rf"\partial L/\partial ({symbol})" if "+" in symbol else rf"\partial L/\partial {symbol}"


Spans = list[tuple[str, bool]]  # prose in pieces, each True where it is a command (`walkthrough train`)


def heading(trace: Trace, o: Options) -> tuple[str, Spans]:
    """The document's title and the line of facts under it, the commands it names marked as such:
    each format sets them as code instead of showing the terminal's backticks."""
    c = trace.config
    m = c.model
    # The sentence escaped as the terminal shows it (a prompt's U+202E would turn the title, the
    # tab's name and the heading right to left); its tokens below are the tokenizer's escaped labels.
    title = f"transformer-walkthrough: {printable(c.sentence)}"
    if m.encoder_only:
        inputs = f"encoder input: {' '.join(trace.source_tokens)}"
    elif m.num_encoder_layers:
        inputs = (
            f"encoder input: {' '.join(trace.source_tokens)} · decoder input: {' '.join(trace.target_tokens)}"
        )
    else:
        inputs = f"decoder input: {' '.join(trace.target_tokens)}"
    facts = (
        f"{inputs} · {'' if trace.weights_source is not None else f'seed {c.seed} · '}d_model {m.d_model}, {m.num_heads} heads (d_k {m.d_k}), d_ff {m.d_ff}, "
        f"{m.num_encoder_layers} + {m.num_decoder_layers} layers, {'norms on both sides' if m.norm_placement == 'both' else f'{m.norm_placement}-norm'}, "
        f"{m.output_head} output head · weights: "
    )
    origin = trace.weights_origin
    # Only our own sentence marks a command with backticks; a file's name is shown as it is.
    pieces = origin.split("`") if trace.weights_source is None else [origin]
    extras = []
    if not o.weights:
        extras.append("the learned weights are left out")
    if o.grads is not None:
        extras.append("each matrix has its gradient dL/d(matrix) beside it (the loss: mean cross-entropy)")
    if o.worksheet is not None:
        n = len(o.worksheet.holes)
        where = "in a file of their own" if o.worksheet.separate_key else "at the end"
        extras.append(
            f"worksheet: {n} cell{'s' if n > 1 else ''} hidden as ?1 … ?{n}, the answers {where}; "
            f"{o.worksheet.tolerance}; a cell shown as ? would give an answer away"
        )
    spans = [(facts, False), *((text, k % 2 == 1) for k, text in enumerate(pieces))]
    return title, [*spans, *((f" · {extra}", False) for extra in extras)]


def mark(p: Prediction) -> str:
    """✓ or ✗ for a prediction with a right answer, in plain text: not colour alone."""
    return "" if p.expected is None else ("✓" if p.word == p.expected else "✗")


def hole(number: int) -> str:
    """A hidden cell as a worksheet shows it: "?3", the answer to question 3 (or a copy of it), or
    "?" alone, a cell that would give an answer away (``worksheet.READ_OFF``)."""
    return f"?{number}" if number else "?"


def probability(q: float, digits: int, o: Options) -> str:
    """A prediction's probability, or its "?n" when the worksheet hides that cell."""
    if o.worksheet is not None and q in o.worksheet.by_value:
        return hole(o.worksheet.by_value[q])
    return f"{q:.{digits}f}"


class Contents(NamedTuple):
    """What a document holds, known before its first stage is written (a streamed pass computes
    them as they are written): each stage's (id, title), whether they are the whole pass (the
    document then ends on the closing sections), and whether it ends on the prediction."""

    stages: list[tuple[str, str]]
    whole: bool
    predicts: bool


def contents_of(trace: Trace, stages: Sequence[Stage]) -> Contents:
    """The contents of a document of ``stages``, all computed already (``trace``'s)."""
    return Contents([(s.id, s.title) for s in stages], len(stages) == len(trace), bool(trace.prediction))


def streamed_contents(trace: Trace, keep: Keep) -> Contents:
    """The contents of a document of the stages ``keep`` chooses of a pass still to be computed
    (``model.stream.Stages``): listed from the walk of Figure 1, as the pass will title them; the
    prediction when the output's probabilities are among them and the model predicts something
    there (a fill-mask model, at a blank)."""
    from ...model.stream import outline

    m = trace.config.model
    stages = outline(m, keep)
    predicts = any(sid == "output.probabilities" for sid, _ in stages) and (
        not m.encoder_only or trace.config.mask_id in trace.source_ids
    )
    return Contents(stages, keep.choose is None, predicts)


def closing(trace: Trace, contents: Contents, o: Options, attention: bool = False) -> Sections | None:
    """What gathers the closing sections of a document of the whole pass as its stages are
    written (``sections.Sections``); None for a selection of stages or a worksheet (whose hidden
    cells the lens would give away: its last row is the prediction)."""
    return Sections(trace, attention) if o.worksheet is None and contents.whole else None
