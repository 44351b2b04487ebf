"""The walkthrough as a document: Markdown, a standalone LaTeX file, a self-contained HTML report.

Each reads the same trace as the terminal and writes every stage's title, explanation, formula and
matrices (with their row and column labels), then the prediction. With ``--backward`` each matrix
has its gradient dL/d(matrix) beside it; with ``--no-weights`` the learned parameters are left
out. A worksheet hides chosen cells as numbered "?" boxes and ends with their answers: the
arithmetic ``explain`` shows for each.

Every writer yields the document in pieces, a stage (or a matrix row) at a time, so that a
large export streams to its file instead of being built whole in memory. Everything a trace
holds is text from a config — tokens such as <start> included — so every piece is escaped for
its format.
"""

from __future__ import annotations

import html
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import StageError, shorten
from ..model.formula import Formula, plain_item
from ..model.kinds import KINDS
from ..model.kinds.base import Step
from ..model.numbers import format_value, text_widths
from ..model.trace import (
    ACTIVATION,
    CONSTANT,
    INPUT,
    MASK,
    WEIGHT,
    Matrix,
    Prediction,
    Stage,
    Trace,
)
from .formulas import html_notes, latex_lines, latex_notes, tex
from .formulas import mathml as formula_mathml
from .lens import lens_latex, lens_markdown
from .palette import css, diverging, sequential
from .render import View, group_of, is_shaded, label, largest, summary
from .sections import SECTIONS_CSS, report_sections, whole_lens

if TYPE_CHECKING:
    from ..model.lens import Lens
    from .clickable import Clicks

Grads = dict[str, dict[str, np.ndarray]]  # stage id -> matrix name -> dL/d(matrix)


# ---------------------------------------------------------------------------------------------
# What a document shows: options, worksheets, and each stage's matrices grouped by meaning.
# ---------------------------------------------------------------------------------------------


class Hole(NamedTuple):
    """A cell a worksheet asks for: shown as "?number", answered at the end."""

    number: int
    stage: str
    name: str
    i: int
    j: int


@dataclass(frozen=True)
class Worksheet:
    """The cells hidden, each with its answer (the lines ``explain`` writes for it).

    ``hidden`` has every cell shown as "?n": the cells asked for and every copy of their values
    elsewhere in the document (X of the next stage is the output of this one; concat holds each
    O_h), so that no answer can be read off another matrix.
    """

    holes: tuple[Hole, ...]
    answers: tuple[tuple[str, ...], ...]
    hidden: dict[tuple[str, str], dict[tuple[int, int], int]] = field(default_factory=dict)
    by_value: dict[float, int] = field(default_factory=dict)  # for the prediction table's numbers
    separate_key: bool = False  # the answers in a file of their own (``iter_key``), not at the end


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

    def holes(self, stage_id: str, name: str) -> dict[tuple[int, int], int]:
        return {} if self.worksheet is None else self.worksheet.hidden.get((stage_id, name), {})

    def asks(self, stage_id: str, name: str) -> bool:
        """Whether the worksheet asks for a cell of this matrix (not just hides a copy of one)."""
        return self.worksheet is not None and any(
            (h.stage, h.name) == (stage_id, name) for h in self.worksheet.holes
        )


class Shown(NamedTuple):
    """A matrix as a document shows it: under its name (S1, or dL/dS1), with its digits and holes,
    and the rows and columns kept (``render.summary``: -1 for the "⋮" row, the "…" column)."""

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
                first, last = index[at - 1] + 1, index[at + 1] - 1
                span = (
                    label(labels[first])
                    if first == last
                    else f"{label(labels[first])} to {label(labels[last])}"
                )
                parts.append(f"{last - first + 1} of its {len(labels)} {what} ({span}, at {mark})")
        return (
            f"{self.name} is summarised: {' and '.join(parts)} are left out; export with --full to keep them."
        )


def _row(s: Shown, i: int) -> list[float | None]:
    """Row ``i``'s numbers in the columns shown, None where the "…" stands."""
    values = s.matrix.values[i]
    if -1 not in s.cols:
        return values.tolist() if len(s.cols) == len(values) else values[list(s.cols)].tolist()
    at = s.cols.index(-1)
    return [*values[list(s.cols[:at])].tolist(), None, *values[list(s.cols[at + 1 :])].tolist()]


DOCUMENT_WIDTH = 100  # characters a matrix may take in the HTML and Markdown, as in a 100-column terminal


def units(stage: Stage, o: Options, width: int = DOCUMENT_WIDTH) -> list[list[list[Shown]]]:
    """The stage's matrices in rows of one meaning (per head: weights, projections, attention; as
    ``render.group_of`` groups them in the terminal), each matrix beside its gradient when there
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
        unit = [Shown(name, m, o.precision, o.holes(stage.id, name), symbol, rows, cols)]
        if o.grads is not None and not m.is_constant:
            # Gradients are small numbers: two more digits, so that they do not all read 0.00.
            gradient = m._replace(values=o.grads[stage.id][name], role=ACTIVATION)  # not weights in [0, 1]
            unit.append(
                Shown(
                    f"dL/d{name}", gradient, o.precision + 2, {}, rf"\partial L/\partial {symbol}", rows, cols
                )
            )
        grouped.append((group_of(stage, name), unit))
    return [[unit for _, unit in run] for _, run in itertools.groupby(grouped, key=lambda g: g[0])]


# Cells a worksheet may ask for, by the kind of step that computes them: what the student does.
STEP_KINDS = {
    "dot": "a dot product: a projection (Q, K, V, a feed-forward, the logits), a score, a weighted sum",
    "softmax": "an attention weight or a probability",
    "norm": "a LayerNorm or RMSNorm output",
    "rotation": "a rotary turn of a query or key",
    "activation": "the feed-forward's activation",
    "sinusoid": "a positional sinusoid",
    "sum": "a single addition (a residual, the positions, the mask)",
    "lookup": "a row of the embedding table",
    "copy": "a cell copied from another matrix (concat, flattened)",
}
DEFAULT_KINDS = ("dot", "softmax", "norm", "rotation")  # the stage's real step: never a copy or a lookup
ROW_BOUND = {"softmax": 2, "norm": 2}  # a row bound by Σ (softmax: Σ = 1; a norm: Σ (y − β)/γ = 0)


def _names_of(stage: Stage) -> dict[tuple[str, int | None], str]:
    return {(m.base or name, m.head): name for name, m in stage.matrices.items()}


def cell_step(trace: Trace, stage: Stage, name: str, i: int, j: int) -> Step | None:
    """The step that computes ``stage.name[i, j]`` and the cells it reads; None for a weight, an
    input, a constant of no formula (the mask) or a matrix this worksheet does not know."""
    m = stage.matrices[name]
    if m.role in (WEIGHT, INPUT, MASK):
        return None
    if (of := KINDS[stage.kind].steps.get(m.base or name)) is not None:  # the kind says it
        return of(stage, trace, name, i, j)
    names = _names_of(stage)
    base = m.base or name

    def get(b: str, h: int | None = None) -> str | None:
        return names.get((b, h))

    def row(n: str | None, r: int) -> list[tuple[str, int, int]]:
        return [] if n is None else [(n, r, c) for c in range(stage.matrices[n].shape[1])]

    def col(n: str | None, c: int) -> list[tuple[str, int, int]]:
        return [] if n is None else [(n, r, c) for r in range(stage.matrices[n].shape[0])]

    def one(n: str | None, r: int, c: int) -> list[tuple[str, int, int]]:
        return [] if n is None else [(n, r, c)]

    def step(kind: str, *parts: list[tuple[str, int, int]]) -> Step:
        return Step(kind, tuple(cell for part in parts for cell in part))

    kind = stage.kind
    if kind == "embedding":
        ids = trace.source_ids if stage.id.startswith("encoder") else trace.target_ids
        if base == "output" and get("token"):  # encoder-only: token + segment + position
            return step("sum", one(get("token"), i, j), one(get("segment"), i, j), one(get("position"), i, j))
        if base in ("output", "token"):
            return step("lookup", one(get("E"), int(ids[i]), j)) if i < len(ids) else None
        if base == "segment":
            return step("lookup", one(get("T"), (trace.segment_ids or (0,) * len(ids))[i], j))
        if base == "position":
            return step("sinusoid") if m.role == CONSTANT else None  # a learned P's row is a lookup
        return None
    if kind == "positional-encoding":
        if base == "PE":
            return step("sinusoid") if m.role == CONSTANT else None  # a learned P's row is a lookup
        if base == "output":
            return step("sum", one(get("X"), i, j), one(get("PE"), i, j))
        return None
    if kind == "transform":
        if base == "dense":
            return step("dot", row(get("X"), i), col(get("W_dense"), j), one(get("b_dense"), 0, j))
        if base == "hidden":
            return step("activation", one(get("dense"), i, j))
        if base == "output":
            return step("norm", row(get("hidden"), i), one(get("gamma"), 0, j), one(get("beta"), 0, j))
        return None
    if kind in ("add-norm", "layer-norm", "embedding-norm", "residual"):
        if base == "sum" or (kind == "residual" and base == "output"):
            return step("sum", one(get("X"), i, j), one(get("sublayer"), i, j))
        if base == "output":
            return step(
                "norm", row(get("sum") or get("X"), i), one(get("gamma"), 0, j), one(get("beta"), 0, j)
            )
        return None
    if kind == "feed-forward":
        linear = {"pre": ("W_1", "b_1"), "gate": ("W_gate", "b_gate"), "up": ("W_up", "b_up")}
        if base in linear:
            w, b = linear[base]
            return step("dot", row(get("X"), i), col(get(w), j), one(get(b), 0, j))
        if base == "hidden":
            if get("gate") is not None:
                return step("activation", one(get("gate"), i, j), one(get("up"), i, j))
            return step("activation", one(get("pre"), i, j))
        if base == "output":
            w, b = ("W_down", "b_down") if get("W_down") else ("W_2", "b_2")
            return step("dot", row(get("hidden"), i), col(get(w), j), one(get(b), 0, j))
        return None
    if kind == "logits":
        if base == "flattened":
            d = stage.matrices[get("X")].shape[1]
            return step("copy", one(get("X"), *divmod(j, d)))
        if base == "logits":
            return step("dot", row(get("flattened") or get("X"), i), col(get("W"), j), one(get("b"), 0, j))
        return None
    if kind == "probabilities" and base == "probabilities":
        return step("softmax", row(get("logits"), i))
    return None


MAX_EXERCISE = 100
_CELL_SPEC = re.compile(r"\s*([^/\s]+)/([^\[\]/]+)\[([^\]]*)\]\s*")


def worksheet(
    trace: Trace,
    stages: list[Stage],
    exercise: int | None = None,
    cells: Sequence[str] = (),
    weights: bool = True,
    digits: int = 4,
    kinds: Sequence[str] | None = None,
    pick_seed: int | None = None,
    separate_key: bool = False,
) -> Worksheet | None:
    """The worksheet asked for: ``exercise`` cells of the ``kinds`` of step (``DEFAULT_KINDS``)
    chosen across the stages from ``pick_seed`` (default: the config's seed; the same seed, the
    same worksheet), or the ``cells`` named as "stage/matrix[row,col]"; None for neither. With
    ``separate_key`` the document leaves its answers to a file of their own. Raises StageError
    for a spec that names no cell of this export."""
    from .explain import explain, parse_cell

    if exercise is not None and cells:
        raise StageError("give --exercise or --cells, not both")
    if exercise is None and not cells:
        return None
    if exercise is None and (kinds is not None or pick_seed is not None):
        raise StageError("--kinds and --pick-seed choose the cells of --exercise; give --exercise N")
    if exercise is not None:
        if not 1 <= exercise <= MAX_EXERCISE:
            raise StageError(f"--exercise: hide 1 to {MAX_EXERCISE} cells, got {exercise}")
        if pick_seed is not None and not 0 <= pick_seed < 2**63:
            raise StageError(f"--pick-seed: must be 0 or more, got {pick_seed}")
        chosen = _choose(
            trace,
            stages,
            exercise,
            DEFAULT_KINDS if kinds is None else parse_kinds(kinds),
            trace.config.seed if pick_seed is None else pick_seed,
            weights,
        )
    else:
        exported = {s.id: s for s in stages}
        chosen = []
        for spec in cells:
            match = _CELL_SPEC.fullmatch(spec)
            if match is None:
                raise StageError(
                    f"--cells {spec[:60]!r}: give stage/matrix[row,col], as "
                    "'decoder.0.masked-attention/A1[1,0]' or '…/A1[sleeping,<start>]'"
                )
            stage_id, name, cell = match.groups()
            if stage_id not in exported:
                where = (
                    "is not in this export (see --stage, --layer)"
                    if stage_id in trace.stages
                    else "is no stage"
                )
                raise StageError(
                    f"--cells {spec[:60]!r}: {stage_id!r} {where}; `walkthrough stages` lists them"
                )
            stage = exported[stage_id]
            if name not in stage.matrices or (stage.matrices[name].is_weight and not weights):
                shown = [n for n, m in stage.matrices.items() if weights or not m.is_weight]
                raise StageError(
                    f"--cells {spec[:60]!r}: {stage_id} has no matrix {name!r}; it has {', '.join(shown)}"
                )
            try:
                i, j = parse_cell(cell, stage, name)
            except StageError as err:
                raise StageError(f"--cells {spec[:60]!r}: {err}") from None
            if (stage_id, name, i, j) not in chosen:
                chosen.append((stage_id, name, i, j))
    holes = tuple(Hole(k + 1, *c) for k, c in enumerate(chosen))
    answers = tuple(tuple(explain(trace, h.stage, h.name, f"{h.i},{h.j}", digits)) for h in holes)
    hidden: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    by_value: dict[float, int] = {}
    for h in holes:
        hidden.setdefault((h.stage, h.name), {})[(h.i, h.j)] = h.number
        v = float(trace[h.stage].matrices[h.name].values[h.i, h.j])
        if v == 0 or not math.isfinite(v):
            continue  # a 0 or −∞ is everywhere: hiding its copies would hide half the document
        by_value.setdefault(v, h.number)
        # its own inputs stay shown: the E a lookup reads, the O a concat copies
        step = cell_step(trace, trace[h.stage], h.name, h.i, h.j)
        own = set() if step is None else {(h.stage, *d) for d in step.inputs}
        for s in stages:
            for name, m in s.matrices.items():
                if weights or not m.is_weight:
                    for i, j in np.argwhere(m.values == v).tolist():
                        if (s.id, name, i, j) not in own:
                            hidden.setdefault((s.id, name), {}).setdefault((i, j), h.number)
    return Worksheet(holes, answers, hidden, by_value, separate_key)


def parse_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """``--kinds dot,softmax`` (repeatable, commas or not) as kinds of step; StageError naming
    them for one that is not."""
    out: list[str] = []
    for given in kinds:
        for k in (part.strip().lower() for part in given.split(",")):
            if not k:
                continue
            if k not in STEP_KINDS:
                raise StageError(
                    f"--kinds {shorten(k, 40)!r}: not a kind of step; give {', '.join(STEP_KINDS)}"
                )
            if k not in out:
                out.append(k)
    if not out:
        raise StageError(f"--kinds: give one or more of {', '.join(STEP_KINDS)}")
    return tuple(out)


Cell = tuple[str, str, int, int]  # stage id, matrix name, row, column


def _choose(
    trace: Trace, stages: list[Stage], n: int, kinds: Sequence[str], seed: int, weights: bool
) -> list[Cell]:
    """``n`` cells a student can compute from what the worksheet shows, spread over the stages,
    drawn from ``seed``.

    A cell is asked only if its step is one of ``kinds`` and every cell it is computed from is
    shown: exported, and hidden neither as an answer nor as a copy of one (a hidden cell's copies
    elsewhere are hidden too, so each choice is checked against the inputs of those before it).
    In a row bound by a sum (a softmax's Σ = 1, a norm's Σ (y − β)/γ = 0) a single hidden cell
    would follow from the others: there, two are hidden together, or none.
    """
    rng = np.random.default_rng(seed)
    shown = {
        (s.id, name): m.values for s in stages for name, m in s.matrices.items() if weights or not m.is_weight
    }
    cache: dict[Cell, tuple[Cell, ...]] = {}

    def inputs_of(c: Cell) -> tuple[Cell, ...]:
        if c not in cache:
            st = cell_step(trace, trace[c[0]], c[1], c[2], c[3])
            cache[c] = () if st is None else tuple((c[0], *d) for d in st.inputs)
        return cache[c]

    # The rows worth asking, stage by stage: a matrix whose step is one of ``kinds`` and whose
    # inputs are all shown (a step's inputs are the same matrices for every cell of its matrix).
    bound: dict[tuple[str, str], str] = {}  # matrices whose rows are bound by a sum, by their kind
    units_of: list[tuple[Stage, list[tuple[str, int, str]]]] = []
    for s in stages:
        rows = []
        for name, m in s.matrices.items():
            st = cell_step(trace, s, name, 0, 0) if m.values.size else None
            if st is None or (s.id, name) not in shown:
                continue
            if st.kind in ROW_BOUND:
                bound[s.id, name] = st.kind
            if st.kind in kinds and all((s.id, d[0]) in shown for d in st.inputs):
                open_rows = np.flatnonzero((np.isfinite(m.values) & (m.values != 0)).any(axis=1))
                rows.extend((name, int(i), st.kind) for i in open_rows)
        if rows:
            units_of.append((s, rows))
    if not units_of:
        raise StageError(f"this export has no cells of the kinds {', '.join(kinds)} to ask for (--kinds)")

    hidden: set[Cell] = set()
    needed: set[Cell] = set()  # the inputs of the cells chosen: never hidden
    chosen: list[Cell] = []

    def copies(cells: list[Cell]) -> set[Cell]:
        """The cells and every copy of their values shown elsewhere, but their own inputs (the E
        a lookup reads, the O a concat copies: those stay, to be read)."""
        out = set(cells)
        for c in cells:
            v = shown[c[:2]][c[2], c[3]]
            own = set(inputs_of(c))
            for key, values in shown.items():
                out.update(d for i, j in np.argwhere(values == v).tolist() if (d := (*key, i, j)) not in own)
        return out

    def fits(cells: list[Cell]) -> set[Cell] | None:
        """What hiding ``cells`` hides (them and their copies), or None if it breaks a rule."""
        if any(c in hidden or c in needed for c in cells):
            return None
        more = copies(cells)
        inputs = {d for c in cells for d in inputs_of(c)}
        if more & needed or inputs & (hidden | more):
            return None
        # no bound row may be left with a single hidden cell (a copy could hide one anywhere)
        after = hidden | more
        for sid, name, i, _ in more:
            kind = bound.get((sid, name))
            if kind is not None:
                values = shown[sid, name][i]
                count = sum((sid, name, i, j) in after for j in range(len(values)))
                if count and count < ROW_BOUND[kind]:
                    return None
        return more

    def candidates(s: Stage, name: str, i: int, kind: str) -> list[list[Cell]]:
        values = shown[s.id, name][i]
        cols = np.flatnonzero(np.isfinite(values) & (values != 0)).tolist()
        open_ = [j for j in cols if (s.id, name, i, j) not in hidden]
        # a bound row with two hidden already takes one more at a time
        size = 1 if len(cols) - len(open_) >= ROW_BOUND.get(kind, 1) else ROW_BOUND.get(kind, 1)
        if len(open_) < size:
            return []
        picked = rng.permutation(open_).tolist()
        return [
            [(s.id, name, i, j) for j in picked[k : k + size]] for k in range(0, len(picked) - size + 1, size)
        ]

    exhausted: set[int] = set()
    k = 0
    while len(chosen) < n and len(exhausted) < len(units_of):
        # the k-th choice starts at its share of the stages, as evenly as n allows
        start = (k * len(units_of) // n) % len(units_of)
        k += 1
        for offset in range(len(units_of)):
            index = (start + offset) % len(units_of)
            if index in exhausted:
                continue
            s, rows = units_of[index]
            order = rng.permutation(len(rows)).tolist()
            done = False
            for r in order:
                name, i, kind = rows[r]
                for cells in candidates(s, name, i, kind):
                    if len(cells) > n - len(chosen):
                        continue
                    more = fits(cells)
                    if more is None:
                        continue
                    hidden.update(more)
                    needed.update(d for c in cells for d in inputs_of(c))
                    chosen.extend(cells)
                    done = True
                    break
                if done:
                    break
            if done:
                break
            exhausted.add(index)
    if len(chosen) < n:
        raise StageError(
            f"--exercise {n}: this export has {len(chosen)} cells worth asking together (steps: "
            f"{', '.join(kinds)}; each computable from the cells shown); ask for {len(chosen)} or "
            "fewer, or add kinds with --kinds"
        )
    return chosen


def _number(v: float, precision: int) -> str:
    """A number for a document: one minus sign, −, for −0.25 as for −∞; never "−0.00"."""
    return format_value(v, precision, minus="−")


Spans = list[tuple[str, bool]]  # prose in pieces, each True where it is a command (`walkthrough train`)


def _heading(trace: Trace, o: Options) -> tuple[str, Spans]:
    """The document's title and the line of facts under it, the commands it names marked as such:
    each format sets them as code instead of showing the terminal's backticks."""
    c = trace.config
    m = c.model
    title = f"transformer-walkthrough: {c.sentence}"
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
        f"{m.num_encoder_layers} + {m.num_decoder_layers} layers, {'pre' if m.norm_first else 'post'}-norm, "
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
        extras.append(f"worksheet: {n} cell{'s' if n > 1 else ''} hidden as ?1 … ?{n}, the answers {where}")
    spans = [(facts, False), *((text, k % 2 == 1) for k, text in enumerate(pieces))]
    return title, [*spans, *((f" · {extra}", False) for extra in extras)]


def _mark(p: Prediction) -> str:
    """✓ or ✗ for a prediction with a right answer, in plain text: not colour alone."""
    return "" if p.expected is None else ("✓" if p.word == p.expected else "✗")


def _probability(q: float, digits: int, o: Options) -> str:
    """A prediction's probability, or its "?n" when the worksheet hides that cell."""
    if o.worksheet is not None and q in o.worksheet.by_value:
        return f"?{o.worksheet.by_value[q]}"
    return f"{q:.{digits}f}"


def _notes(stage: Stage) -> str:
    """The indented notes under a stage's plain formula (the flatten head's leak, a tied table),
    which its LaTeX and MathML do not say."""
    if isinstance(stage.formula, Formula):
        return " ".join(plain_item(n).strip() for n in stage.formula.notes)
    return " ".join(line.strip() for line in stage.formula.splitlines() if line.startswith(" "))


def _hole_label(trace: Trace, h: Hole) -> str:
    """decoder.0.masked-attention · A1[sleeping, <start>]"""
    m = trace[h.stage].matrices[h.name]
    where = m.cols[h.j] if m.rows == (h.name,) else f"{m.rows[h.i]}, {m.cols[h.j]}"
    return f"{h.stage} · {h.name}[{where}]"


# ---------------------------------------------------------------------------------------------
# Markdown: tables readable on a code-hosting site.
# ---------------------------------------------------------------------------------------------


def _md_label(label: str, table: bool = True) -> str:
    """A token or dimension in backticks, so that <start> shows as itself, not as an HTML tag (a
    "|" escaped in a table's cell, where GFM reads it before the code span; elsewhere it is not)."""
    label = label.replace("`", "'")
    return "`" + (label.replace("|", "\\|") if table else label) + "`"


# What Markdown reads as markup in prose: emphasis, code, links and images ([ and ]), strikethrough,
# and the backslash itself; each is backslash-escaped (CommonMark), as < > & are made entities.
_MD_ACTIVE = re.compile(r"([\\`*_\[\]~])")


def _md_text(text: str) -> str:
    """Prose for Markdown — a title, the input's tokens, which a checkpoint's vocabulary spells:
    < > & as entities, so that <start> is not read as an HTML tag, and every other character
    Markdown acts on escaped, so that a token ``![x](https://…)`` is not an image fetched."""
    return _MD_ACTIVE.sub(r"\\\1", html.escape(text, quote=False)).replace("\n", " ")


def _md_fence(lines: Sequence[str]) -> str:
    """A code fence longer than any run of backticks in ``lines``, which would otherwise close it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    return "`" * max(3, longest + 1)


def _md_anchor(stage: Stage) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^\w\- ]", "", f"{stage.id} {stage.title}".lower()).replace(" ", "-")


def _md_matrix(s: Shown) -> Iterator[str]:
    m = s.matrix
    yield f"\n**{s.name}** ({m.shape[0]}×{m.shape[1]})\n\n"
    yield (
        "| "
        + " | ".join([f"**{s.name}**", *("…" if j < 0 else _md_label(m.cols[j]) for j in s.cols)])
        + " |\n"
    )
    yield "|" + "---|" + "---:|" * len(s.cols) + "\n"
    for i in s.rows:
        if i < 0:
            yield "| " + " | ".join(["⋮"] * (len(s.cols) + 1)) + " |\n"
            continue
        cells = [
            "…" if v is None else f"**?{s.holes[i, j]}**" if (i, j) in s.holes else _number(v, s.precision)
            for j, v in zip(s.cols, _row(s, i), strict=True)
        ]
        yield "| " + " | ".join([_md_label(m.rows[i]), *cells]) + " |\n"
    if note := s.left_out():
        yield f"\n{_md_text(note)}\n"


def iter_markdown(trace: Trace, stages: list[Stage], o: Options) -> Iterator[str]:
    title, facts = _heading(trace, o)
    line = "".join(_md_label(text, table=False) if code else _md_text(text) for text, code in facts)
    yield f"# {_md_text(title)}\n\n{line}\n\n## Stages\n\n"
    yield "".join(f"- [{s.id} — {s.title}](#{_md_anchor(s)})\n" for s in stages)
    for stage in stages:
        yield f"\n## {stage.id} {stage.title}\n\n{stage.explanation}\n\n```text\n{stage.formula!s}\n```\n"
        for row in units(stage, o):
            for unit in row:
                for shown in unit:
                    yield from _md_matrix(shown)
    if trace.prediction:
        d = max(o.precision, 2)
        yield "\n## Prediction\n\n| after | predicted | p | expected | | top 3 |\n|---|---|---:|---|---|---|\n"
        for p in trace.prediction:
            top = ", ".join(f"{_md_label(w)} {_probability(q, d, o)}" for w, q in p.top)
            expected = _md_label(p.expected) if p.expected else "—"
            yield (
                f"| {_md_label(p.after)} | **{_md_label(p.word)}** | {_probability(p.probability, d, o)} "
                f"| {expected} | {_mark(p)} | {top} |\n"
            )
    if lens := _document_lens(trace, stages, o):
        yield lens_markdown(lens, o.precision, o.full)
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield from _md_key(trace, o.worksheet)


def _document_lens(trace: Trace, stages: list[Stage], o: Options) -> Lens | None:
    """The logit lens that a whole document ends on; None for a selection of stages or a worksheet
    (whose hidden cells the lens would give away: its last row is the prediction), as the report."""
    return whole_lens(trace) if o.worksheet is None and len(stages) == len(trace) else None


def _md_key(trace: Trace, sheet: Worksheet) -> Iterator[str]:
    yield "\n## Answer key\n"
    for h, lines in zip(sheet.holes, sheet.answers, strict=True):
        fence = _md_fence(lines)
        yield (
            f"\n**?{h.number}** {_md_label(_hole_label(trace, h), table=False)}\n\n{fence}text\n"
            + "\n".join(lines)
            + f"\n{fence}\n"
        )


def to_markdown(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_markdown(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# LaTeX: a standalone article that reads like a textbook page. Each matrix is set with its row
# and column labels on it (plain TeX's \bordermatrix, with brackets); small ones side by side;
# anything wider than the line or taller than the page is shrunk to fit (\fit measures it).
# ---------------------------------------------------------------------------------------------


_TEX_PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[T1]{fontenc}
\usepackage{lmodern}
\usepackage{amsmath, amssymb, graphicx, tabularx}
\usepackage[a4paper, margin=2cm]{geometry}
\allowdisplaybreaks
\setlength{\parindent}{0pt}
\setlength{\parskip}{.5\baselineskip}
\makeatletter
% \bordermatrix (plain TeX: a matrix with its row and column labels), with brackets, numbers right.
\def\labelled#1{\begingroup \m@th
  \@tempdima 8.75\p@
  \setbox\z@\vbox{%
    \def\cr{\crcr\noalign{\kern2\p@\global\let\cr\endline}}%
    \ialign{$##$\hfil\kern2\p@\kern\@tempdima&\thinspace\hfil$##$
      &&\quad\hfil$##$\crcr
      \omit\strut\hfil\crcr\noalign{\kern-\baselineskip}%
      #1\crcr\omit\strut\cr}}%
  \setbox\tw@\vbox{\unvcopy\z@\global\setbox\@ne\lastbox}%
  \setbox\tw@\hbox{\unhbox\@ne\unskip\global\setbox\@ne\lastbox}%
  \setbox\tw@\hbox{$\kern\wd\@ne\kern-\@tempdima\left[\kern-\wd\@ne
    \global\setbox\@ne\vbox{\box\@ne\kern2\p@}%
    \vcenter{\kern-\ht\@ne\unvbox\z@\kern-\baselineskip}\,\right]$}%
  \null\;\vbox{\kern\ht\@ne\box\tw@}\endgroup}
\makeatother
\newsavebox\fitbox
% A row of matrices, centred; shrunk to the line's width and to the page's height if it must be.
\newcommand\fit[1]{\sbox\fitbox{#1}%
  \ifdim\wd\fitbox>\linewidth \sbox\fitbox{\resizebox{\linewidth}{!}{\usebox\fitbox}}\fi
  \ifdim\dimexpr\ht\fitbox+\dp\fitbox\relax>.8\textheight
    \sbox\fitbox{\resizebox*{!}{.8\textheight}{\usebox\fitbox}}\fi
  \par\noindent\makebox[\linewidth][c]{\usebox\fitbox}\par}
\newcommand\lab[1]{\text{\scriptsize\sffamily #1}}
"""


def tex_formula(stage: Stage, trace: Trace) -> list[str]:
    """The stage's formula as align* lines: its terms written as LaTeX, or as its kind writes them."""
    if isinstance(stage.formula, Formula):
        return latex_lines(stage.formula)
    return KINDS[stage.kind].latex(trace.config.model)


def tex_symbol(stage: Stage, name: str) -> str:
    """A matrix's symbol in LaTeX, as its kind typesets it (head 1's W_Q: W^{Q}_{1}; S1+M:
    S_{1}+M; gamma: \\gamma); otherwise a one-letter name as itself, a longer one upright
    (\\mathrm{concat}), and a head's number as a subscript."""
    m = stage.matrices[name]
    base = m.base or name
    given = KINDS[stage.kind].tex.get(base)
    if given is not None:
        return given.format(h=m.head)
    stem, _, rest = base.partition("_")
    symbol = stem if len(stem) == 1 else rf"\mathrm{{{stem}}}"
    if rest:
        symbol += rf"_{{\mathrm{{{rest}}}}}"
    return symbol if m.head is None else f"{symbol}_{{{m.head}}}"


def _tex_matrix(s: Shown) -> Iterator[str]:
    """The matrix under its name and shape, its labels on it; a row at a time."""
    m = s.matrix
    shape = rf"\underset{{{m.shape[0]}\times{m.shape[1]}}}{{{s.tex}}}"
    yield f"{shape} = \\labelled{{& " + " & ".join(
        "" if j < 0 else rf"\lab{{{tex(m.cols[j])}}}" for j in s.cols
    )
    for i in s.rows:
        if i < 0:
            yield r" \cr \vdots & " + " & ".join(r"\ddots" if j < 0 else r"\vdots" for j in s.cols)
            continue
        cells = [
            r"\cdots" if v is None
            else rf"\boxed{{?_{{{s.holes[i, j]}}}}}" if (i, j) in s.holes
            else _tex_number(v, s.precision)
            for j, v in zip(s.cols, _row(s, i), strict=True)
        ]  # fmt: skip
        yield rf" \cr \lab{{{tex(m.rows[i])}}} & " + " & ".join(cells)
    yield "}"


_LINE = 76  # characters of numbers and labels that fit a line, roughly: \fit shrinks what does not


def _tex_number(v: float, precision: int) -> str:
    """A number in math mode: 8.34e+199 as 8.34 × 10¹⁹⁹, −∞ as -\\infty, nan upright."""
    text = _number(v, precision).replace("−", "-")
    if "e" in text:
        mantissa, exponent = text.split("e")
        return rf"{mantissa}\times10^{{{int(exponent)}}}"
    return text.replace("∞", r"\infty").replace("nan", r"\mathrm{nan}")


def _tex_width(s: Shown) -> int:
    m = s.matrix
    rows, cols = s.kept()
    widest = max((len(m.rows[i]) for i in rows), default=0) * 0.7  # labels are set small
    shown = m.values[np.ix_(rows, cols)] if not s.whole else m.values
    numbers = sum(max(int(w) + 2, s.precision + 4) for w in text_widths(shown, s.precision))
    return int(widest + numbers + 8 + 3 * (len(cols) < len(s.cols)))


def _tex_lines(group: list[list[Shown]]) -> Iterator[list[list[Shown]]]:
    """The units of a group in lines that fit the page, roughly (``\\fit`` shrinks what does not)."""
    line: list[list[Shown]] = []
    used = 0
    for unit in group:
        width = sum(_tex_width(s) for s in unit)
        if line and used + width > _LINE:
            yield line
            line, used = [], 0
        line.append(unit)
        used += width
    if line:
        yield line


def iter_latex(trace: Trace, stages: list[Stage], o: Options) -> Iterator[str]:
    title, facts = _heading(trace, o)
    yield _TEX_PREAMBLE
    line = "".join(rf"\texttt{{{tex(text)}}}" if code else tex(text) for text, code in facts)
    yield f"\\title{{{tex(title)}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n{line}\\par\n"
    for stage in stages:
        yield (
            f"\n\\section*{{{tex(stage.title)}}}\n\\label{{{stage.id}}}\n"
            f"{{\\small\\ttfamily {tex(stage.id)}}}\\par\n{tex(stage.explanation)}\n"
            "\\begin{align*}\n" + " \\\\\n".join(tex_formula(stage, trace)) + "\n\\end{align*}\n"
        )
        if notes := (
            latex_notes(stage.formula) if isinstance(stage.formula, Formula) else tex(_notes(stage))
        ):
            yield f"{{\\small {notes}}}\\par\n"
        for group in units(stage, o, _LINE):
            for line in _tex_lines(group):
                yield "\\fit{$\\displaystyle "
                for k, unit in enumerate(line):
                    for n, shown in enumerate(unit):
                        yield r" \qquad " if k and not n else r" \quad " if n else ""
                        yield from _tex_matrix(shown)
                yield "$}\n"
                for unit in line:
                    if note := unit[0].left_out():
                        # "-{}-": two hyphens, as typed, not TeX's en dash
                        yield f"{{\\small {tex(note).replace('--', '-{}-')}}}\\par\n"
    if trace.prediction:
        yield (
            "\n\\section*{Prediction}\n"
            "\\begin{tabularx}{\\linewidth}{>{\\raggedright\\arraybackslash}X l r l l >{\\raggedright\\arraybackslash}X}\n"
            "after & predicted & p & expected & & top 3 \\\\ \\hline\n"
        )
        for p in trace.prediction:
            top = ", ".join(f"{tex(w)} {tex(_probability(q, 2, o))}" for w, q in p.top)
            yield (
                f"{tex(p.after)} & \\textbf{{{tex(p.word)}}} & {tex(_probability(p.probability, 2, o))} & "
                f"{tex(p.expected or '—')} & {tex(_mark(p))} & {top} \\\\\n"
            )
        yield "\\end{tabularx}\n"
    if lens := _document_lens(trace, stages, o):
        yield lens_latex(lens, o.precision, o.full)
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield "\n\\clearpage\n"
        yield from _tex_key(trace, o.worksheet)
    yield "\\end{document}\n"


def _tex_key(trace: Trace, sheet: Worksheet) -> Iterator[str]:
    """The answer key, its arithmetic typeset: numbers and operators in math (−0.32 with a minus
    sign, not a hyphen; 1e-05 as 1\\times10^{-5}; e^(x) as a power)."""
    yield "\\section*{Answer key}\n\\begin{description}\\raggedright\n"
    for h, lines in zip(sheet.holes, sheet.answers, strict=True):
        yield f"\\item[?{h.number}] {tex(_hole_label(trace, h))}\\\\\n"
        yield "{\\small " + "\\\\\n".join(tex_arithmetic(line) for line in lines) + "}\n"
    yield "\\end{description}\n"


# In explain's lines: a power of e, e^x or e^(x); a number, with its sign and exponent; an infinity.
_ARITHMETIC = re.compile(r"e\^\(([^()]*)\)|e\^(−?\d+(?:\.\d+)?)|(−?)(\d+(?:\.\d+)?(?:e[+\-−]?\d+)?|∞)|(−)")


def _tex_amount(sign: str, number: str) -> str:
    """A number of explain's as math: −1.2e-05 as -1.2\\times10^{-5}, −∞ as -\\infty."""
    if number == "∞":
        body = r"\infty"
    elif "e" in number:
        mantissa, exponent = re.split("e", number.replace("−", "-"))
        body = rf"{mantissa}\times10^{{{int(exponent)}}}"
    else:
        body = number
    return ("-" if sign else "") + body


def _tex_inner(text: str) -> str:
    """The math of an exponent's parentheses: numbers, operators, names as text."""
    out, last = [], 0
    for match in _ARITHMETIC.finditer(text):
        out.append(
            rf"\text{{{tex(text[last : match.start()])}}}"
            if text[last : match.start()].strip()
            else text[last : match.start()]
        )
        _, _, sign, number, _ = match.groups()
        out.append(_tex_amount(sign, number) if number else "-")
        last = match.end()
    rest = text[last:]
    out.append(rf"\text{{{tex(rest)}}}" if rest.strip() else rest)
    return "".join(out)


def tex_arithmetic(line: str) -> str:
    """A line of ``explain`` as LaTeX: prose as text, each number, minus sign and power as math."""
    out, last = [], 0
    for match in _ARITHMETIC.finditer(line):
        before = line[last : match.start()]
        number_like = match.group(4)
        # a digit inside a word (d0, k1, h2.k0, W_Q1, add-norm-1) is part of the word, not a number
        if number_like and not match.group(3) and (before[-1:].isalnum() or before[-1:] in "_.-@"):
            out.append(tex(before + match.group(0)))
            last = match.end()
            continue
        out.append(tex(before))
        paren, power, sign, number, _ = match.groups()
        if paren is not None:
            out.append(f"$e^{{{_tex_inner(paren)}}}$")
        elif power is not None:
            out.append(f"$e^{{{_tex_amount(power[:1] == '−', power.lstrip('−'))}}}$")
        elif number is not None:
            out.append(f"${_tex_amount(sign, number_like)}$")
        else:
            out.append("$-$")
        last = match.end()
    out.append(tex(line[last:]))
    return "".join(out)


def to_latex(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_latex(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# MathML: the kinds' LaTeX formulas typeset by the browser itself, no script.
# ---------------------------------------------------------------------------------------------

_MATH_SYMBOLS = {
    "gamma": ("mi", "γ"), "beta": ("mi", "β"), "mu": ("mi", "μ"), "sigma": ("mi", "σ"), "epsilon": ("mi", "ϵ"),
    "pi": ("mi", "π"), "top": ("mi", "⊤"), "odot": ("mo", "⊙"), "cdot": ("mo", "·"), "cdots": ("mo", "⋯"),
    "ldots": ("mo", "…"), "infty": ("mi", "∞"), "to": ("mo", "→"), "times": ("mo", "×"), "le": ("mo", "≤"),
    "sin": ("mi", "sin"), "cos": ("mi", "cos"), "tanh": ("mi", "tanh"), "max": ("mi", "max"),
    "exp": ("mi", "exp"), "log": ("mi", "log"), "Sigma": ("mi", "Σ"),
}  # fmt: skip
_MATH_SPACES = {",": 0.17, ";": 0.28, " ": 0.25, "quad": 1.0, "qquad": 2.0}
_MATH_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\d+(?:\.\d+)?|\s+|.")


class _MathML:
    """A recursive-descent reader of the LaTeX the kinds write (``Kind.latex``), to MathML Core.

    It knows the few commands those formulas use; any other raises ValueError, and the report
    shows the plain-text formula instead."""

    def __init__(self, source: str) -> None:
        self.tokens = _MATH_TOKEN.findall(source)
        self.pos = 0

    def peek(self) -> str | None:
        """The next token, spaces skipped (they mean nothing in math mode)."""
        while self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("unexpected end of formula")
        self.pos += 1
        return token

    def row(self, until: str | None = None) -> str:
        """Atoms up to ``until`` (a closing brace) or the end, each with its sub- and superscripts."""
        out = []
        while (token := self.peek()) is not None and token != until and token != "&":
            base = self.atom()
            sub = sup = None
            while self.peek() in ("_", "^"):
                if self.take() == "_":
                    sub = self.atom()
                else:
                    sup = self.atom()
            if sub and sup:
                base = f"<msubsup>{base}{sub}{sup}</msubsup>"
            elif sub:
                base = f"<msub>{base}{sub}</msub>"
            elif sup:
                base = f"<msup>{base}{sup}</msup>"
            out.append(base)
        return "".join(out)

    def group(self) -> str:
        if self.peek() != "{":
            return self.atom()
        self.take()
        inner = self.row("}")
        self.take()
        return f"<mrow>{inner}</mrow>"

    def text(self) -> str:
        """The raw text of a {…} argument, as written (for \\text and \\mathrm)."""
        if self.peek() != "{":
            raise ValueError("expected {")
        self.pos += 1
        depth, parts = 0, []
        while True:
            token = self.tokens[self.pos] if self.pos < len(self.tokens) else None
            if token is None:
                raise ValueError("unclosed {")
            self.pos += 1
            if token == "}" and depth == 0:
                return "".join(parts)
            depth += {"{": 1, "}": -1}.get(token, 0)
            parts.append(token)

    def atom(self) -> str:
        e = html.escape
        token = self.take()
        if token == "{":
            self.pos -= 1
            return self.group()
        if token.startswith("\\") and len(token) > 1:
            command = token[1:]
            if command in _MATH_SPACES:
                return f'<mspace width="{_MATH_SPACES[command]}em"></mspace>'
            if command in _MATH_SYMBOLS:
                tag, symbol = _MATH_SYMBOLS[command]
                return f"<{tag}>{symbol}</{tag}>"
            if command in ("mathrm", "operatorname"):
                return (
                    f'<mi mathvariant="normal">{e(self.text())}</mi>'
                    if command == "mathrm"
                    else f"<mi>{e(self.text())}</mi>"
                )
            if command == "text":
                return f"<mtext>{e(self.text()).replace(' ', '&#160;')}</mtext>"
            if command in ("frac", "tfrac"):
                return f"<mfrac>{self.group()}{self.group()}</mfrac>"
            if command == "sqrt":
                return f"<msqrt>{self.group()}</msqrt>"
            if command in ("left", "right"):
                return f"<mo>{e(self.take())}</mo>"
            if command in ("{", "}"):
                return f"<mo>{command}</mo>"
            raise ValueError(f"unknown command {token}")
        if token.isdigit() or re.fullmatch(r"\d+\.\d+", token):
            return f"<mn>{token}</mn>"
        if token.isalpha():
            return f"<mi>{e(token)}</mi>"
        if token == "-":
            return "<mo>−</mo>"
        if token in "()[]":  # only \left( and \right) grow with what they enclose
            return f'<mo stretchy="false">{token}</mo>'
        if token in "=+/,<>|!":
            return f"<mo>{e(token)}</mo>"
        raise ValueError(f"unexpected {token!r}")

    def line(self) -> str:
        """One align* line, "lhs &= rhs", as a row of two cells (aligned at the "=")."""
        left = self.row()
        if self.peek() == "&":
            self.take()
            return f"<mtr><mtd>{left}</mtd><mtd>{self.row()}</mtd></mtr>"
        return f"<mtr><mtd></mtd><mtd>{left}</mtd></mtr>"


def mathml(lines: list[str]) -> str:
    """The lines of an align* as one block of MathML (ValueError for LaTeX it does not know)."""
    rows = "".join(_MathML(line).line() for line in lines)
    return f'<math display="block"><mtable>{rows}</mtable></math>'


# ---------------------------------------------------------------------------------------------
# HTML: one self-contained file, no network, one inline script that only adds (views.clickable:
# a click on a cell shows its arithmetic); matrices as heatmaps; prints well.
# ---------------------------------------------------------------------------------------------

# How a matrix is shaded. Attention weights and probabilities on the terminal's fixed scale,
# white at 0 to green at 1 (``palette.sequential``), so that 0.30 never looks like 1.00; any other
# matrix as a heatmap on its own scale, its largest |value| the deepest red or blue; a matrix of
# one value throughout (gamma = 1 before training) not at all: it has nothing to tell apart.
FIXED, OWN = "fixed", "own"
_LEVELS = 8  # heatmap shades each side of 0: a class per shade keeps a large report small
_STEPS = 20  # shades of the fixed scale, 0.05 apart
_SHADES = "\n".join(
    [
        *(
            f".{sign}{k} {{ background: {css(diverging(t * k / _LEVELS, 1.0))}; }}"
            for sign, t in (("p", 1), ("n", -1))
            for k in range(1, _LEVELS + 1)
        ),
        *(f".g{k} {{ background: {css(sequential(k / _STEPS))}; }}" for k in range(_STEPS + 1)),
    ]
)
# Each cell opens with the one before it closing: a row is then one join, the fast way for the
# millions of cells of a base-size report. Indexed by the shade: −8 … 8 (+ _LEVELS), or 0 … 20.
_OPENINGS = {
    OWN: ["</td><td>" if k == 0 else f'</td><td class="{"p" if k > 0 else "n"}{abs(k)}">' for k in range(-_LEVELS, _LEVELS + 1)],
    FIXED: [f'</td><td class="g{k}">' for k in range(_STEPS + 1)],
    None: ["</td><td>"],
}  # fmt: skip


def shading(m: Matrix, values: np.ndarray) -> str | None:
    """How the report shades ``m`` (``values``: the cells it shows): FIXED for the weights that are
    probabilities (as the terminal shades them, by their role), OWN for any other matrix whose
    finite numbers differ, None for one whose numbers are all the same (or none is finite)."""
    if is_shaded(m, View()):
        return FIXED
    finite = values[np.isfinite(values)]
    return OWN if finite.size and finite.min() != finite.max() else None


def _shades(kind: str | None, values: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Each cell's index into ``_OPENINGS[kind]``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == FIXED:
            return np.where(finite, np.rint(np.clip(values, 0, 1) * _STEPS), 0).astype(int)
        if kind == OWN:
            scaled = np.clip(values / largest(values), -1, 1)
            return np.where(finite, np.rint(scaled * _LEVELS), 0).astype(int) + _LEVELS
    return np.zeros(values.shape, dtype=int)


def _legend(kinds: set[str | None]) -> str:
    """The line under a stage's matrices that says what their colours mean, and on which scale."""
    said = []
    if FIXED in kinds:
        swatches = "".join(f'<span class="g{k}"></span>' for k in range(0, _STEPS + 1, 4))
        said.append(
            f"attention weights and probabilities: 0 {swatches} 1, one fixed scale for every such matrix "
            "(as in the terminal)"
        )
    if OWN in kinds:
        swatches = "".join(f'<span class="n{k}"></span>' for k in range(_LEVELS, 0, -2))
        swatches += "<span></span>" + "".join(f'<span class="p{k}"></span>' for k in range(2, _LEVELS + 1, 2))
        said.append(
            f"other matrices: − {swatches} +, each on its own scale, the deepest colour at its largest |value|"
        )
    if None in kinds:
        said.append("a matrix of one value throughout is not shaded")
    return f'<p class="legend">Shading — {"; ".join(said)}.</p>' if said else ""


_CSS = f"""
:root {{ --fg: #1d2330; --muted: #5b6475; --line: #d8dce4; --accent: #2f5fb3; }}
* {{ box-sizing: border-box; }}
body {{ margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: #fbfbfd; }}
header {{ padding: 1.2rem 2rem; background: #fff; border-bottom: 1px solid var(--line); }}
header h1 {{ margin: 0 0 .3rem; font-size: 1.4rem; }}
header p {{ margin: 0; color: var(--muted); }}
.layout {{ display: flex; align-items: flex-start; }}
nav {{ position: sticky; top: 0; width: 19rem; max-height: 100vh; overflow: auto; padding: 1rem;
      border-right: 1px solid var(--line); background: #fff; flex: none; }}
nav ol {{ margin: 0; padding-left: 1.4rem; font-size: .85rem; }}
nav a {{ color: var(--accent); text-decoration: none; }}
main {{ padding: 1rem 2rem 4rem; min-width: 0; }}
section {{ margin-bottom: 2.5rem; }}
h2 {{ font-size: 1.15rem; margin: 1.5rem 0 .3rem; }}
h2 code {{ color: var(--muted); font-weight: normal; font-size: .9rem; margin-left: .5rem; }}
.formula {{ background: #fff7e0; border-left: 3px solid #e0b400; padding: .5rem .8rem; overflow-x: auto; }}
.formula math {{ font-size: 1.15em; }}
.formula mtd {{ padding: .15em 0; }}
.formula mtd:first-child {{ text-align: right; }}
.formula mtd:last-child {{ text-align: left; }}
.formula p {{ margin: .3rem 0 0; color: var(--muted); font-size: .9rem; }}
pre.formula {{ margin: 0; }}
.matrices {{ display: flex; flex-wrap: wrap; gap: 1.2rem 1.8rem; align-items: flex-start; margin-bottom: 1.2rem; }}
.unit {{ display: flex; flex-wrap: wrap; gap: .8rem; align-items: flex-start; }}
figure {{ margin: 0; }}
figcaption {{ font-weight: 600; margin-bottom: .2rem; }}
figcaption span {{ color: var(--muted); font-weight: normal; }}
figure.gradient figcaption {{ color: var(--muted); }}
table.m {{ border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; }}
table.m th {{ color: var(--accent); font-weight: 600; padding: 2px 6px; text-align: right; }}
table.m th.row {{ text-align: left; }}
table.m td {{ padding: 2px 6px; text-align: right; border: 1px solid #fff; }}
table.m td.ninf {{ background: #3a3f4b; color: #fff; }}
table.m td.gap {{ text-align: center; color: var(--muted); }}
p.left-out {{ margin: .2rem 0 0; max-width: 40rem; color: var(--muted); font-size: .8rem; }}
p.legend {{ color: var(--muted); font-size: .85rem; }}
p.legend span {{ display: inline-block; width: 1.1em; height: .9em; vertical-align: middle;
                 border: 1px solid var(--line); border-width: 1px 0; }}
table.m td.hole {{ background: #fff; border: 1.5px solid var(--fg); font-weight: 700; text-align: center; }}
{_SHADES}
table.pred {{ border-collapse: collapse; }}
table.pred th, table.pred td {{ padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; }}
tr.right td.word {{ color: #0b7a32; font-weight: 700; }}
.best {{ background: #e8f5ec; }}
.answers li {{ margin-bottom: 1rem; }}
.where {{ margin: .2rem 0 .6rem; max-width: 100%; overflow-x: auto; }}
.where svg {{ max-width: 100%; height: auto; }}
.answers pre {{ white-space: pre-wrap; margin: .2rem 0; font-size: .85rem; }}
@media print {{
  @page {{ margin: 1.5cm; }}
  body {{ background: #fff; font-size: 11pt; }}
  * {{ -webkit-print-color-adjust: exact; print-color-adjust: exact; }}
  nav {{ display: none; }}
  .layout {{ display: block; }}
  header, main {{ padding: 0; border: 0; }}
  main {{ padding-bottom: 0; }}
  .formula {{ overflow: visible; white-space: pre-wrap; }}
  h2 {{ break-after: avoid; }}
  /* A heading with what follows it: the prediction is one block (a row a position, it fits a
     page), and a stage's heading keeps its map and first lines (break-after alone is a hint
     that Chromium drops before an image or a table). */
  #prediction, .intro {{ break-inside: avoid; }}
  .formula, figure, .unit, table.pred, .where {{ break-inside: avoid; }}
  table.m {{ font-size: 8pt; }}
  .answers {{ break-before: page; }}
}}
"""


def _html_formula(stage: Stage, trace: Trace) -> str:
    """The kind's formula typeset in MathML, with the plain formula's notes below it; the plain
    formula itself if its LaTeX is beyond the small reader above."""
    e = html.escape
    if isinstance(stage.formula, Formula):
        notes = html_notes(stage.formula)
        return (
            f'<div class="formula" title="{e(str(stage.formula))}">{formula_mathml(stage.formula)}'
            + (f"<p>{notes}</p>" if notes else "")
            + "</div>"
        )
    tex = tex_formula(stage, trace)  # outside the try: a kind without LaTeX is a bug to see, not hide
    try:
        math_block = mathml(tex)
    except ValueError:  # a command the small reader does not know
        return f'<pre class="formula">{e(stage.formula)}</pre>'
    notes = _notes(stage)
    note = f"<p>{e(notes)}</p>" if notes else ""
    return f'<div class="formula" title="{e(stage.formula)}">{math_block}{note}</div>'


def _html_matrix(s: Shown, kinds: set[str | None], attributes: str = "") -> Iterator[str]:
    """A matrix as a table, a row at a time, each cell shaded as ``shading`` says (added to
    ``kinds``, for the stage's legend); a "⋮" row and a "…" column where it is summarised.
    ``attributes`` go on its figure (the report's script finds the matrix's arithmetic by them)."""
    e = html.escape
    m, p = s.matrix, s.precision
    rows, cols = s.kept()
    values = m.values if s.whole else m.values[np.ix_(rows, cols)]
    finite = np.isfinite(values)
    kind = shading(m, values)
    kinds.add(kind)
    shade = _shades(kind, values, finite)
    opening = _OPENINGS[kind]
    number = f"{{:.{p}f}}".format
    zero = "0" if p == 0 else "0." + "0" * p
    gap = s.cols.index(-1) if -1 in s.cols else None
    hole_rows = {i for i, _ in s.holes}
    heads = "".join("<th>…</th>" if j < 0 else f"<th>{e(m.cols[j])}</th>" for j in s.cols)
    gradient = ' class="gradient"' if s.gradient else ""
    yield (
        f"<figure{gradient}{attributes}><figcaption>{e(s.name)} "
        f"<span>({m.shape[0]}×{m.shape[1]})</span></figcaption>"
        f'<table class="m"><thead><tr><th></th>{heads}</tr></thead><tbody>'
    )
    k = 0  # the row of ``values`` that row i of the matrix is
    for i in s.rows:
        if i < 0:
            yield '<tr><th class="row">⋮</th>' + '<td class="gap">⋮</td>' * len(s.cols) + "</tr>"
            continue
        row, shades = values[k].tolist(), shade[k].tolist()
        if finite[k].all() and i not in hole_rows:
            parts = list(map(str.__add__, map(opening.__getitem__, shades), map(number, row)))
        else:
            parts = [_html_cell(s, i, j, v, opening[c]) for j, v, c in zip(cols, row, shades, strict=True)]
        if gap is not None:
            parts.insert(gap, '</td><td class="gap">…')
        cells = ("".join(parts)[5:] + "</td>").replace(f">-{zero}<", f">{zero}<").replace("-", "−")
        yield f'<tr><th class="row">{e(m.rows[i])}</th>{cells}</tr>'
        k += 1
    note = s.left_out()
    yield "</tbody></table>" + (f'<p class="left-out">{e(note)}</p>' if note else "") + "</figure>"


def _html_cell(s: Shown, i: int, j: int, v: float, opening: str) -> str:
    """A cell that is not a plain number, opened as the fast path opens it (the one before closing)."""
    if (i, j) in s.holes:
        return f'</td><td class="hole">?{s.holes[i, j]}'
    if math.isinf(v):
        return f'</td><td class="ninf" title="masked">{_number(v, s.precision)}'
    return f"{opening}{_number(v, s.precision)}"


def iter_html(trace: Trace, stages: list[Stage], o: Options) -> Iterator[str]:
    from .clickable import CSS as CLICK_CSS
    from .clickable import Clicks

    e = html.escape
    # A worksheet is never clickable: the arithmetic of a cell would give its answers away.
    clicks = Clicks(trace, o) if o.clickable and o.worksheet is None else None
    title, facts = _heading(trace, o)
    line = "".join(f"<code>{e(text)}</code>" if code else e(text) for text, code in facts)
    nav = "".join(f'<li><a href="#{e(s.id)}">{e(s.title)}</a></li>' for s in stages)
    if trace.prediction:
        nav += '<li><a href="#prediction">Prediction</a></li>'
    # The whole report (not a selection, not a worksheet) ends on the lens and the attention overview.
    extras = (
        report_sections(trace, o.precision, o.full, o.rerun)
        if o.worksheet is None and len(stages) == len(trace)
        else []
    )
    nav += "".join(f'<li><a href="#{anchor}">{e(title)}</a></li>' for anchor, title, _ in extras)
    css = _CSS + (SECTIONS_CSS if extras else "")
    if o.worksheet is not None:
        nav += '<li><a href="#answers">Answer key</a></li>'
    yield (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
        f"<style>{css}{CLICK_CSS if clicks else ''}</style></head><body><header><h1>{e(title)}</h1><p>{line}</p></header>"
        f'<div class="layout"><nav><strong>Stages</strong><ol>{nav}</ol></nav><main>'
    )
    for stage in stages:
        yield from html_stage(trace, stage, o, clicks)
    if trace.prediction:
        yield html_prediction(trace, o)
    for _, _, section in extras:
        yield section
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield _html_key(trace, o.worksheet)
    if clicks is not None:
        yield from clicks.script()  # last: the tables it reads are all above it
    yield "</main></div></body></html>\n"


def html_stage(trace: Trace | None, stage: Stage, o: Options, clicks: Clicks | None = None) -> Iterator[str]:
    """A stage's section of the report: its heading, where it sits in Figure 1, its explanation,
    formula and matrices, and the legend of their shades. Without its ``trace`` (a stage shown
    alone) there is no map, and the formula is the plain one."""
    from .figure import figure_svg

    e = html.escape
    where = "" if trace is None else f'<div class="where">{figure_svg(trace, stage.id)}</div>'
    formula = (
        f'<pre class="formula">{e(str(stage.formula))}</pre>'
        if trace is None
        else _html_formula(stage, trace)
    )
    yield (
        f'<section id="{e(stage.id)}"><div class="intro"><h2>{e(stage.title)}<code>{e(stage.id)}</code></h2>'
        f"{where}<p>{e(stage.explanation)}</p>{formula}</div>"  # where: the stage's place in Figure 1
    )
    kinds: set[str | None] = set()
    for group in units(stage, o):
        yield '<div class="matrices">'
        for unit in group:
            yield '<div class="unit">'
            for shown in unit:
                yield from _html_matrix(shown, kinds, "" if clicks is None else clicks.add(stage, shown))
            yield "</div>"
        yield "</div>"
    yield f"{_legend(kinds)}</section>"


def html_prediction(trace: Trace, o: Options) -> str:
    """The prediction's section: the most likely next word after each position, ✓ where right."""
    e = html.escape
    rows = []
    for p in trace.prediction:
        right = " right" if p.expected is not None and p.word == p.expected else ""
        top = ", ".join(f"{e(w)} {_probability(q, 2, o)}" for w, q in p.top)
        rows.append(
            f'<tr class="best{right}"><td>{e(p.after)}</td><td class="word">{e(p.word)}</td>'
            f"<td>{_probability(p.probability, 3, o)}</td><td>{e(p.expected or '—')}</td><td>{_mark(p)}</td>"
            f"<td>{top}</td></tr>"
        )
    return (
        '<section id="prediction"><h2>Prediction</h2><p>The most likely next word after each decoder position.</p>'
        '<table class="pred"><thead><tr><th>after</th><th>predicted</th><th>p</th><th>expected</th><th></th>'
        f"<th>top 3</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _html_key(trace: Trace, sheet: Worksheet) -> str:
    e = html.escape
    items = "".join(
        f'<li value="{h.number}"><strong>?{h.number}</strong> <code>{e(_hole_label(trace, h))}</code>'
        f"<pre>{e(chr(10).join(lines))}</pre></li>"
        for h, lines in zip(sheet.holes, sheet.answers, strict=True)
    )
    return f'<section id="answers" class="answers"><h2>Answer key</h2><ol>{items}</ol></section>'


def iter_key(trace: Trace, suffix: str, sheet: Worksheet) -> Iterator[str]:
    """A worksheet's answer key as a document of its own, in the format ``suffix`` names."""
    e = html.escape
    title = f"Answer key · {_heading(trace, Options())[0]}"
    if suffix == ".md":
        yield f"# {_md_text(title)}\n"
        yield from _md_key(trace, sheet)
    elif suffix == ".tex":
        yield _TEX_PREAMBLE
        yield f"\\title{{{tex(title)}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n"
        yield from _tex_key(trace, sheet)
        yield "\\end{document}\n"
    else:
        yield (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{_CSS}</style></head><body><header><h1>{e(title)}</h1></header><main>"
            f"{_html_key(trace, sheet)}</main></body></html>\n"
        )


def to_html(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_html(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]


WRITERS = {".md": iter_markdown, ".tex": iter_latex, ".html": iter_html}
