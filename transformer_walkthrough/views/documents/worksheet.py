"""A worksheet: cells of an export hidden as numbered "?" boxes, each answered at the end with the
arithmetic ``explain`` shows for it.

The cells are named (``--cells``) or chosen from a seed (``--exercise``) among those a student
can compute from what the worksheet shows (``cell_step``: the kind of step that computes a cell
and the cells it reads); every copy of a hidden value elsewhere in the document is hidden too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ...errors import StageError, shorten
from ...model.architecture import stage_ids
from ...model.cell import GUARD
from ...model.kinds import KINDS
from ...model.kinds.base import Step
from ...model.numbers import format_value
from ...model.trace import INPUT, MASK, WEIGHT, Stage, Trace


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
    # The matrices a hidden cell is computed from, shown with ``GUARD`` more decimals: the digits
    # the key computes with, so that an answer worked from the sheet is the key's to its last digit.
    finer: frozenset[tuple[str, str]] = frozenset()
    precision: int = 2  # the answers' decimals: an answer is right within one unit of the last

    @property
    def tolerance(self) -> str:
        """How an answer is marked, in words: "each answer is right within ±0.01 of its key (the
        numbers it is computed from are shown to 4 decimals)"."""
        unit = format_value(10.0**-self.precision, self.precision)
        return (
            f"each answer is right within ±{unit} of its key (the numbers it is computed from are "
            f"shown to {self.precision + GUARD} decimals)"
        )


# Cells a worksheet may ask for, by the kind of step that computes them: what the student does.
STEP_KINDS = {
    "dot": "a dot product: a projection (Q, K, V, a feed-forward, the logits), a score, a weighted sum",
    "softmax": "an attention weight or a probability",
    "norm": "a LayerNorm or RMSNorm output",
    "rotation": "a rotary turn of a query or key",
    "activation": "the feed-forward's activation",
    "sinusoid": "a positional sinusoid",
    "softcap": "a soft cap c·tanh(x / c) of a score or a logit",
    "sum": "a single addition (a residual, the positions, the mask)",
    "lookup": "a row of the embedding table",
    "copy": "a cell copied from another matrix (concat, flattened)",
}
DEFAULT_KINDS = ("dot", "softmax", "norm", "rotation")  # the stage's real step: never a copy or a lookup
ROW_BOUND = {"softmax": 2, "norm": 2}  # a row bound by Σ (softmax: Σ = 1; a norm: Σ (y − β)/γ = 0)
# Steps whose result gives its input away when shown: an activation of one cell (a visible ReLU's
# 0.00 says the hidden cell is negative), a sum with a known term (S + M, X + sublayer), a copy,
# and a softmax (a visible row of probabilities and one logit give every other logit).
READ_OFF = ("activation", "sum", "copy", "softmax")


def cell_step(trace: Trace, stage: Stage, name: str, i: int, j: int) -> Step | None:
    """The step that computes ``stage.name[i, j]`` and the cells it reads, as the stage's kind says
    it (``Kind.steps``); None for a weight, an input, a constant of no formula (the mask) or a
    matrix no step makes (a learned position's row)."""
    m = stage.matrices[name]
    if m.role in (WEIGHT, INPUT, MASK):
        return None
    of = KINDS[stage.kind].steps.get(m.base or name)
    return None if of is None else of(stage, trace, name, i, j)


def read_off(trace: Trace, stage: Stage, name: str, i: int, j: int) -> list[Cell]:
    """The cells of ``stage`` whose shown value gives ``stage.name[i, j]`` away: those a ``READ_OFF``
    step computes from it (a softmax: its whole row). Each such step keeps the row: an activation,
    a sum and a copy are cell by cell, a softmax row by row."""
    out: list[Cell] = []
    for other, m in stage.matrices.items():
        if other == name or m.role in (WEIGHT, INPUT, MASK) or i >= m.shape[0] or not m.values.size:
            continue
        first = cell_step(trace, stage, other, i, 0)
        if first is None or first.kind not in READ_OFF:
            continue
        if first.kind == "softmax":  # every cell of the row reads the same row
            if (name, i, j) in first.inputs:
                out.extend((stage.id, other, i, c) for c in range(m.shape[1]))
            continue
        for c in range(m.shape[1]):
            st = first if c == 0 else cell_step(trace, stage, other, i, c)
            if st is not None and (name, i, j) in st.inputs:
                out.append((stage.id, other, i, c))
    return out


def given_away(
    trace: Trace, shown: dict[tuple[str, str], np.ndarray], cell: Cell, own: set[Cell]
) -> tuple[set[Cell], set[Cell]]:
    """What hiding ``cell`` must hide too, so that no shown number gives it away: every copy of its
    value (but its own inputs ``own``: the E a lookup reads, the O a concat copies), and every cell
    read off it (``read_off``), their copies and what is read off those. Returns (the cell and its
    copies, the cells read off them); a 0 or an infinity has no copies worth hiding (they are
    everywhere)."""

    def copies(c: Cell) -> set[Cell]:
        v = shown[c[:2]][c[2], c[3]]
        if v == 0 or not math.isfinite(v):
            return set()
        return {(*key, i, j) for key, values in shown.items() for i, j in np.argwhere(values == v).tolist()}

    same = ({cell} | copies(cell)) - own
    read: set[Cell] = set()
    frontier = list(same)
    while frontier:
        c = frontier.pop()
        for r in read_off(trace, trace[c[0]], c[1], c[2], c[3]):
            if r[:2] in shown and r not in same and r not in read and r not in own:
                more = ({r} | copies(r)) - same - read - own
                read |= more
                frontier.extend(more)
    return same, read


MAX_EXERCISE = 100
_CELL_SPEC = re.compile(r"\s*([^/\s]+)/([^\[\]/]+)\[([^\]]*)\]\s*")


def worksheet(
    trace: Trace,
    stages: list[Stage],
    exercise: int | None = None,
    cells: Sequence[str] = (),
    weights: bool = True,
    digits: int | None = None,
    kinds: Sequence[str] | None = None,
    pick_seed: int | None = None,
    separate_key: bool = False,
) -> Worksheet | None:
    """The worksheet asked for: ``exercise`` cells of the ``kinds`` of step (``DEFAULT_KINDS``)
    chosen across the stages from ``pick_seed`` (default: the config's seed; the same seed, the
    same worksheet), or the ``cells`` named as "stage/matrix[row,col]"; None for neither. With
    ``separate_key`` the document leaves its answers to a file of their own. Raises StageError
    for a spec that names no cell of this export."""
    from ..explain import explain, parse_cell

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
                    if stage_id in stage_ids(trace.config)  # the walk's: a pass may stop before it
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
    digits = trace.config.display.precision if digits is None else digits  # the document's
    # The key computes with the numbers the sheet shows: its operands at the decimals of the
    # matrices they are read from (``finer``), its answers at the sheet's.
    answers = tuple(
        (*explain(trace, h.stage, h.name, f"{h.i},{h.j}", digits, fixed=True), _marked(trace, h, digits))
        for h in holes
    )
    shown = {
        (s.id, name): m.values for s in stages for name, m in s.matrices.items() if weights or not m.is_weight
    }
    hidden: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    by_value: dict[float, int] = {}
    finer: set[tuple[str, str]] = set()
    for h in holes:
        hidden.setdefault((h.stage, h.name), {})[(h.i, h.j)] = h.number
        step = cell_step(trace, trace[h.stage], h.name, h.i, h.j)
        own = set() if step is None else {(h.stage, *d) for d in step.inputs}
        finer.update(d[:2] for d in own)
        same, read = given_away(trace, shown, (h.stage, h.name, h.i, h.j), own)
        # a copy is the answer itself, "?n"; a cell read off it is hidden as "?" (``READ_OFF``)
        for cells, number in ((same, h.number), (read, 0)):
            for sid, name, i, j in sorted(cells):
                hidden.setdefault((sid, name), {}).setdefault((i, j), number)
                v = float(shown[sid, name][i, j])
                if v != 0 and math.isfinite(v):  # the prediction table's probabilities
                    by_value.setdefault(v, number)
    return Worksheet(holes, answers, hidden, by_value, separate_key, frozenset(finer), digits)


def _marked(trace: Trace, h: Hole, digits: int) -> str:
    """The key's last line: the answer, and the range it is marked right in."""
    v = float(trace[h.stage].matrices[h.name].values[h.i, h.j])
    unit = 10.0**-digits
    low, high = (format_value(v + d, digits, minus="−") for d in (-unit, unit))
    return f"  marked right from {low} to {high} (±{format_value(unit, digits)})"


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
    """``n`` cells a student can compute from what the worksheet shows, of each of ``kinds`` in
    turn, spread over the stages, drawn from ``seed``.

    A cell is asked only if its step is one of ``kinds`` and every cell it is computed from is
    shown: exported, and hidden neither as an answer nor as a copy of one nor as a cell that would
    give one away (those are hidden too, so each choice is checked against the inputs of those
    before it).
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

    away: dict[Cell, set[Cell]] = {}

    def copies(cells: list[Cell]) -> set[Cell]:
        """The cells, every copy of their values shown elsewhere but their own inputs (the E a
        lookup reads, the O a concat copies: those stay, to be read), and every cell that would
        give one away (``given_away``)."""
        out = set(cells)
        for c in cells:
            if c not in away:
                same, read = given_away(trace, shown, c, set(inputs_of(c)))
                away[c] = same | read
            out |= away[c]
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

    # The k-th choice asks for the k-th kind in turn (a dot product, a softmax, a norm, a
    # rotation, …), in a stage from its share of them on, as evenly as n allows; a kind with no
    # cell left to ask gives its turn to the next.
    present = [kind for kind in kinds if any(r[2] == kind for _, rows in units_of for r in rows)]
    exhausted: set[tuple[int, str]] = set()  # (stage, kind): nothing more to ask there
    dead: set[str] = set()  # kinds with nothing more to ask anywhere
    k = 0
    while len(chosen) < n and len(dead) < len(present):
        kind = present[k % len(present)]
        start = (k * len(units_of) // n) % len(units_of)
        k += 1
        if kind in dead:
            continue
        done = False
        for offset in range(len(units_of)):
            index = (start + offset) % len(units_of)
            if (index, kind) in exhausted:
                continue
            s, rows = units_of[index]
            mine = [r for r in rows if r[2] == kind]
            for r in rng.permutation(len(mine)).tolist():
                name, i, _ = mine[r]
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
            exhausted.add((index, kind))
        if not done:
            dead.add(kind)
    if len(chosen) < n:
        raise StageError(
            f"--exercise {n}: this export has {len(chosen)} cells worth asking together (steps: "
            f"{', '.join(kinds)}; each computable from the cells shown); ask for {len(chosen)} or "
            "fewer, or add kinds with --kinds"
        )
    return chosen


def hole_label(trace: Trace, h: Hole) -> str:
    """decoder.0.masked-attention · A1[sleeping, <start>]"""
    m = trace[h.stage].matrices[h.name]
    where = m.cols[h.j] if m.rows == (h.name,) else f"{m.rows[h.i]}, {m.cols[h.j]}"
    return f"{h.stage} · {h.name}[{where}]"
