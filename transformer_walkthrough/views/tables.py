"""The other commands' tables and plots: ``stages`` (every stage and its shapes), ``verify`` (each
check), ``train`` (the loss curve, the predictions before and after), ``generate`` (greedy or
drawn steps and how each token was drawn; the key/value cache, against one full pass) and
``diff`` (two traces, stage by stage). Each table is the walkthrough's (``widgets.styled_table``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..errors import printable
from ..model.generation import read_so_far
from ..model.numbers import format_value
from ..model.trace import Matrix, Stage, Trace, top_k
from .blocks import matrix_block, side_by_side
from .stages import stage_header
from .widgets import FORMULA, LABEL, TITLE, Entries, View, label, mark, styled_table

if TYPE_CHECKING:
    from ..compare.checks import Check
    from ..compare.diff import StageDiff
    from ..model.generation import Comparison, Step
    from ..model.sampling import Draw, Sampling


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
        table.add_row(Text(printable(stage.id)), Text(printable(trace.kind_said(stage))), Entries(shapes))
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


LOSS_MARK, AUX_MARK = "•", "×"  # the loss curve's marks: the cross-entropy's, the load-balancing loss's


def loss_curve(losses: list[float], width: int = 60, height: int = 8, aux: list[float] | None = None) -> Text:
    """The loss per step as a dot plot on a log scale: training's whole story in a few lines. With
    ``aux`` (a mixture of experts' load-balancing loss at the same steps), ``losses`` is the
    cross-entropy, and both are drawn on the one axis, each with its mark, named beneath."""
    n = len(losses)
    cols = max(1, min(width, max(n, 16)))  # a few steps spread out, so that the axis can name them
    if n <= cols:  # a dot for every step
        xs = [round(i * (cols - 1) / max(n - 1, 1)) for i in range(n)]
        steps = list(range(n))
    else:  # one column every n/cols steps, the first and the last included
        xs = list(range(cols))
        steps = [round(i * (n - 1) / (cols - 1)) for i in range(cols)]
    curves = [(LOSS_MARK, losses)] if aux is None else [(AUX_MARK, aux), (LOSS_MARK, losses)]
    picked = [[curve[i] for i in steps] for _, curve in curves]
    # Log scale, as losses fall by orders of magnitude.
    finite = [math.log10(max(v, 1e-12)) for values in picked for v in values if math.isfinite(v)] or [0.0]
    top, bottom = max(finite), min(finite)
    span = (top - bottom) or 1.0
    grid = [[" "] * cols for _ in range(height)]
    for (symbol, _), values in zip(curves, picked, strict=True):  # the cross-entropy drawn last, on top
        for x, v in zip(xs, values, strict=True):
            y = math.log10(max(v, 1e-12)) if math.isfinite(v) else top  # inf, nan: top
            grid[round((top - y) / span * (height - 1))][x] = symbol
    labels = [f"{10**top:.3g}", *[""] * (height - 2), f"{10**bottom:.3g}"]
    pad = max(len(text) for text in labels)
    what = "loss" if aux is None else "cross-entropy and load-balancing loss"
    out = Text(f"{what}, log scale, over {n - 1} steps\n", style=TITLE)
    for text, row in zip(labels, grid, strict=True):
        out.append(f"{text:>{pad}} │", style=LABEL)
        out.append("".join(row) + "\n", style=FORMULA)
    last = str(n - 1)  # under the last column
    room = cols - len("step 0") - len(last)
    axis = f"step 0{' ' * room}{last}" if room > 0 else f"steps 0–{last}"
    out.append(" " * pad + " └" + "─" * cols + "\n" + " " * (pad + 2) + axis)
    if aux is not None:
        out.append(
            f"\n{' ' * (pad + 2)}{LOSS_MARK} cross-entropy   {AUX_MARK} load-balancing loss E·Σ fᵢ·Pᵢ",
            style=LABEL,
        )
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
            Entries([label(vocabulary[j]) for j in read_so_far(steps, i)], " ", LABEL),
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
        shown = " ".join(label(teacher_forced.vocabulary[j]) for j in read_so_far(steps, i)[-40:])
        table.add_row(
            Text(str(i)),
            Text(shown if len(shown) <= 40 else "…" + shown[-39:]),
            Text(label(teacher_forced.target_tokens[i])),
            Text(f"{gap:.1e}"),
        )
    return table, float(np.max(gaps))  # NaN if any gap is: max(0.0, nan) would say 0.0


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


def cache_comparison_table(comparison: Comparison, routed: bool = False) -> Table:
    """The largest difference between the cached steps and one full pass, per quantity (the
    routing's when ``routed``: a mixture of experts)."""
    table = styled_table("Cached steps vs one full pass")
    for header in ("quantity", "max |diff|"):
        table.add_column(Text(header), no_wrap=True)
    for name, value in comparison._asdict().items():
        if name != "routing" or routed:
            table.add_row(Text(name), Text(f"{value:.1e}"))
    return table
