"""One cell of one matrix, computed in front of you: the arithmetic with the actual numbers.

``explain(trace, "decoder.0.masked-attention", "A1", "1,0")`` gives the lines a person would write
to check that number by hand: every term of a dot product and the sum, the division by √d_k, the
mask's rule, each exp of a softmax with the sum and the quotient, the mean and variance of a
LayerNorm, the angle of a sinusoid. Numbers are shown rounded; the arithmetic is the model's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..errors import StageError, shorten
from ..model.architecture import Ref
from ..model.cell import Cell
from ..model.kinds import KINDS
from ..model.kinds.hand import where_from
from ..model.trace import INPUT, Stage, Trace

MAX_DIGITS = 17  # float64 has 17 significant digits: more shows nothing but noise


def parse_cell(spec: str, stage: Stage, name: str) -> tuple[int, int]:
    """ "1,0" (indices from 0) or "sleeping,<start>" (labels), or a mix, into (row, column).

    A label may hold a comma itself (GPT-2's "," token): ",,·world" is the one split whose two
    halves name a row and a column.
    """
    m = stage.matrices[name]
    r, c = m.shape
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > 2:
        splits = [(spec[:k].strip(), spec[k + 1 :].strip()) for k, ch in enumerate(spec) if ch == ","]
        named = [(a, b) for a, b in splits if _names(a, m.rows, r) and _names(b, m.cols, c)]
        if len(named) > 1:
            readings = " or ".join(f"row {_q(a)}, column {_q(b)}" for a, b in named)
            raise StageError(f"--cell {_q(spec)} can be read as {readings}: give one of them by index")
        # None: the split with one half that names something, so that the error names the other.
        half = [(a, b) for a, b in splits if _names(a, m.rows, r) or _names(b, m.cols, c)]
        parts = list((named or half or [parts])[0])
    if len(parts) != 2:
        raise StageError(f"--cell {_q(spec)}: give a row and a column, as 1,0 or sleeping,<start>")
    return _index(parts[0], m.rows, r, "row", name), _index(parts[1], m.cols, c, "column", name)


def _q(text: str) -> str:
    """A value as a message quotes it: in quotes, cut to about 40 characters (a label can be a
    checkpoint's 1.6 MB piece, an argument anything)."""
    return repr(shorten(text, 40))


def _names(part: str, labels: tuple[str, ...], n: int) -> bool:
    """Whether ``part`` names one of n rows (or columns): an index from 0, a label, or the piece of
    labels that repeat (``,`` for ``,@2`` and ``,@7``: ``_index`` then asks which)."""
    if re.fullmatch(r"\d+", part):
        return int(part) < n
    return part in labels or (part != "" and any(label.startswith(f"{part}@") for label in labels))


def _index(part: str, labels: tuple[str, ...], n: int, what: str, name: str) -> int:
    if re.fullmatch(r"-?\d+", part):
        k = int(part)
        if not 0 <= k < n:
            listed = f" ({', '.join(shorten(label, 40) for label in labels)})" if n <= 40 else ""
            raise StageError(f"{what} {k} is out of range: {name} has {what}s 0 to {n - 1}{listed}")
        return k
    if part in labels:
        return labels.index(part)
    repeats = [label for label in labels if label.startswith(f"{part}@")]
    if repeats:  # a piece that occurs more than once is labelled by its position too
        shown = ", ".join(shorten(label, 40) for label in repeats[:40])
        raise StageError(f"{what} {_q(part)} of {name} is ambiguous: give one of {shown}")
    if n > 40:  # a vocabulary-sized matrix: its 58,101 labels are not a message
        raise StageError(f"{what} {_q(part)} is not a {what} of {name} (nor a number from 0 to {n - 1})")
    shown = ", ".join(shorten(label, 40) for label in labels)
    raise StageError(
        f"{what} {_q(part)} is not a {what} of {name}; its {what}s are {shown} (or 0 to {n - 1})"
    )


def explain(
    trace: Trace, stage_id: str, name: str, cell: str, digits: int = 4, all_terms: bool = False,
    fixed: bool = False,
) -> list[str]:  # fmt: skip
    """The arithmetic of one cell, as lines of text; a long sum shows its first and last terms
    unless ``all_terms``. Its results show ``digits`` decimals (more for a small one) and its
    operands more (``model.cell.Cell``); ``fixed``: exactly ``digits`` and ``digits + GUARD``, as a
    worksheet shows them."""
    stage = trace[stage_id]
    if name not in stage.matrices:
        raise StageError(f"stage {stage.id} has no matrix {_q(name)}; it has {', '.join(stage.matrices)}")
    if not 0 <= digits <= MAX_DIGITS:
        raise StageError(f"--precision: must be 0 to {MAX_DIGITS}, got {digits}")
    i, j = parse_cell(cell, stage, name)
    c = Cell(stage, name, i, j, digits, all_terms, fixed=fixed)
    if stage.matrices[name].rows == (name,):  # a vector (gamma, a bias): one index, not two
        head = f"{stage.id} · {name}[{c.col}] = {name}[{j}] = {c.r(c.value)}"
    else:
        head = f"{stage.id} · {name}[{c.row}, {c.col}] = {name}[{i}, {j}] = {c.r(c.value)}"
    try:
        return [head, *explainer(stage, name)(c, trace)]
    except OverflowError:  # a LayerNorm's variance of numbers near 1e200, say: too large for a float
        raise StageError(
            f"{stage.id} {name}[{i}, {j}]: the numbers of this cell are too large to show their arithmetic"
        ) from None


def explainer(stage: Stage, name: str) -> Callable[[Cell, Trace], list[str]]:
    """The kind's explainer for the matrix's base name; a weight, or an input the kind says nothing
    particular about, is explained the same way in every kind."""
    matrix = stage.matrices[name]
    own = KINDS[stage.kind].explain.get(matrix.base)
    if own is not None and not matrix.is_weight:
        return own
    if matrix.is_weight:
        return _weight
    if matrix.role == INPUT:
        return _input
    raise StageError(f"stage {stage.id}: no explanation for {_q(name)}")  # a kind that forgot one: a bug


def _weight(c: Cell, trace: Trace) -> list[str]:
    from ..model.parameters import Spec, parameters

    m = trace.config.model
    param = c.matrix.param or c.name  # W_Q1 is a view of W_QKV
    ref = c.stage.params.get(param, Ref(f"{c.stage.id}/{param}"))
    own = KINDS[c.stage.kind].explain.get(c.matrix.base)  # what the kind says of its own table (T5's R)
    lines = own(c, trace) if own is not None else []
    owner = ref.name.split("/")[0]
    if ref.transposed:
        lines.append(
            f"W is Eᵀ, the embedding table of {owner} transposed (tied): W[{c.row}, {c.col}] = E[{c.col}, {c.row}]."
        )
    elif owner != c.stage.id:
        table = "the embedding table" if c.matrix.base == "E" else "the table"
        lines.append(f"{c.name} is {table} of {owner}, shared with this stage (tied).")
    if c.matrix.param is not None:
        lines.append(
            f"{c.name} is head {c.matrix.head}'s block of d_k = {m.d_k} columns of the parameter {ref.name}."
        )
    if c.name == "P":
        # The rows a sentence reads: PE beside X + PE, or an encoder-only embedding's position row
        # of the sum, from position_offset on (RoBERTa's first position reads row 2).
        read = "position" if "position" in c.stage else "PE"
        first = m.position_offset if read == "position" else 0
        used = len(c.stage[read])
        if c.i < first:
            lines.append(f"P is the learned position table: row {c.i} is read by no position.")
        else:
            lines.append(
                f"P is the learned position table: row {c.i} is added to the token at position {c.i - first}"
                + (
                    f" (this sentence uses rows {first} to {first + used - 1})."
                    if c.i >= first + used
                    else "."
                )
            )
    if trace.weights_source is not None:
        return [
            *lines,
            f"{c.name} is a learned weight, not computed from anything: its numbers come from {trace.weights_source}.",
        ]
    spec = parameters(trace.config)[0].get(ref.name, Spec(c.stage[c.name].shape, "xavier"))
    if spec.init == "embedding":
        how = "uniform in [0, 1), as the article draws it (the paper does not say)"
    elif spec.init == "xavier":
        fan_in, fan_out = spec.shape
        how = (f"Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / ({fan_in} + {fan_out})) = "
               f"±{c.r(math.sqrt(6 / (fan_in + fan_out)))} (PyTorch's xavier_uniform_, "
               + ("nn.Transformer's rule for its matrices: it has no output layer of its own)"
                  if c.stage.kind == "logits" else "as nn.Transformer uses)"))  # fmt: skip
    elif spec.init == "xavier-qkv":
        d = m.d_model
        q, kv, _ = spec.blocks  # W_Q's width, then W_K's and W_V's (fewer under grouped-query attention)
        if q == kv:
            how = (f"Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / ({d} + {d})) = "
                   f"±{c.r(math.sqrt(6 / (2 * d)))}, W_Q, W_K and W_V each drawn as its own {d} × {d} matrix "
                   f"(PyTorch draws the three as one {3 * d} × {d} matrix, so its bound is "
                   f"±√(6 / ({d} + {3 * d})) = ±{c.r(math.sqrt(6 / (4 * d)))})")  # fmt: skip
        else:
            width, block = (q, "W_Q") if c.matrix.base.endswith("Q") else (kv, "W_K and W_V each")
            how = (f"Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / ({d} + {width})) = "
                   f"±{c.r(math.sqrt(6 / (d + width)))}, {block} drawn as its own {d} × {width} matrix "
                   f"(W_QKV is [W_Q | W_K | W_V]: {q}, {kv} and {kv} columns)")  # fmt: skip
    elif spec.init == "bias":
        how = f"uniform in ±1/√fan_in = ±1/√{spec.fan_in} = ±{c.r(1 / math.sqrt(spec.fan_in))} (PyTorch's nn.Linear)"
    elif spec.init == "positions":
        how = "from a normal distribution of standard deviation 0.02 (as GPT-2 draws its position table)"
    elif spec.init == "normal":
        how = (f"from a normal distribution of standard deviation 1/√{spec.fan_in} = "
               f"{c.f(1 / math.sqrt(spec.fan_in))} (as T5 draws its relative bias table)")  # fmt: skip
    elif spec.init == "ones":
        how = "as 1 (the norm starts as a pure normalisation)"
    else:
        how = "as 0" + (" (as PyTorch's nn.MultiheadAttention)" if c.stage.kind.endswith("attention") else "")
    return [
        *lines,
        f"{c.name} is a learned weight, not computed from anything: it was drawn {how},",
        (
            f"row {c.j if ref.transposed else c.i} of E from a stream of its own, seeded with "
            f"{trace.config.seed}, the table's name and the word {c.col if ref.transposed else c.row!r} "
            f"(a word keeps its vector whatever the vocabulary around it; dtype {m.dtype}); "
            if spec.init == "embedding"
            else f"from a stream seeded with {trace.config.seed} and the parameter's name (dtype {m.dtype}); "
        )
        + "only training changes it.",
    ]


def _input(c: Cell, trace: Trace) -> list[str]:
    return [f"X is this stage's input: {where_from(c)}, row {c.i} ({c.row}), column {c.j}."]


def explainable(trace: Trace) -> list[tuple[str, str]]:
    """Every (stage id, matrix name) that ``explain`` handles: all of them."""
    return [(s.id, name) for s in trace for name in s.matrices]
