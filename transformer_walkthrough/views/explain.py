"""One cell of one matrix, computed in front of you: the arithmetic with the actual numbers.

``explain(trace, "decoder.0.masked-attention", "A1", "1,0")`` gives the lines a person would write
to check that number by hand: every term of a dot product and the sum, the division by √d_k, the
mask's rule, each exp of a softmax with the sum and the quotient, the mean and variance of a
LayerNorm, the angle of a sinusoid. Numbers are shown rounded; the arithmetic is the model's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import StageError, shorten
from ..model.architecture import Ref
from ..model.trace import INPUT, MASK, Stage, Trace
from .numbers import format_value

MAX_DIGITS = 17  # float64 has 17 significant digits: more shows nothing but noise
TERMS = 8  # a dot product longer than this shows its first and last terms around "…"


class Cell:
    """A cell of a named matrix: where it is and how to print numbers."""

    def __init__(self, stage: Stage, name: str, i: int, j: int, digits: int, all_terms: bool = False) -> None:
        self.stage, self.name, self.i, self.j, self.digits = stage, name, i, j, digits
        self.all_terms = all_terms
        m = stage.matrices[name]
        self.row, self.col = m.rows[i], m.cols[j]
        self.value = float(m.values[i, j])

    def f(self, v: float) -> str:
        """A number as shown: rounded, with one minus sign, −, for negative numbers and operators
        alike, and never "−0.00"."""
        return format_value(v, self.digits, minus="−")

    def times(self, a: float, b: float) -> str:
        return f"{self._factor(a)}·{self._factor(b)}"

    def _factor(self, v: float) -> str:
        """A number as an operand: in parentheses when negative ("0.56 − (−0.08)", "3.14 + (−∞)")."""
        text = self.f(v)
        return f"({text})" if text.startswith("−") else text

    def sum_of(self, terms: Sequence[str]) -> str:
        if len(terms) > TERMS and not self.all_terms:
            terms = [*terms[: TERMS - 2], f"… ({len(terms) - TERMS + 1} more terms) …", *terms[-1:]]
        return " + ".join(terms)


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
    trace: Trace, stage_id: str, name: str, cell: str, digits: int = 4, all_terms: bool = False
) -> list[str]:
    """The arithmetic of one cell, as lines of text; a long sum shows its first and last terms
    unless ``all_terms``."""
    stage = trace[stage_id]
    if name not in stage.matrices:
        raise StageError(f"stage {stage.id} has no matrix {_q(name)}; it has {', '.join(stage.matrices)}")
    if not 0 <= digits <= MAX_DIGITS:
        raise StageError(f"--digits: must be 0 to {MAX_DIGITS}, got {digits}")
    i, j = parse_cell(cell, stage, name)
    c = Cell(stage, name, i, j, digits, all_terms)
    if stage.matrices[name].rows == (name,):  # a vector (gamma, a bias): one index, not two
        head = f"{stage.id} · {name}[{c.col}] = {name}[{j}] = {c.f(c.value)}"
    else:
        head = f"{stage.id} · {name}[{c.row}, {c.col}] = {name}[{i}, {j}] = {c.f(c.value)}"
    try:
        return [head, *_explainer(stage, name)(c, trace)]
    except OverflowError:  # a LayerNorm's variance of numbers near 1e200, say: too large for a float
        raise StageError(
            f"{stage.id} {name}[{i}, {j}]: the numbers of this cell are too large to show their arithmetic"
        ) from None


def _explainer(stage: Stage, name: str) -> Callable[[Cell, Trace], list[str]]:
    matrix = stage.matrices[name]
    if matrix.is_weight:
        return _weight
    if matrix.role == MASK:
        return _mask
    if matrix.role == INPUT:
        return _copied_logits if stage.kind == "probabilities" else _input
    if name == stage.output:
        return {
            "embedding": _embedding, "positional-encoding": _sum, "add-norm": _layer_norm,
            "layer-norm": _layer_norm, "residual": _sum, "feed-forward": _ffn_output,
            "self-attention": _attention_output, "masked-attention": _attention_output,
            "cross-attention": _attention_output, "logits": _logits, "probabilities": _softmax_cell,
        }[stage.kind]  # fmt: skip
    if name.endswith("+M"):
        return _masked_scores
    base = re.sub(r"\d+$", "", name)  # the per-head matrices: Q1 -> Q, S2 -> S
    table: dict[str, Callable[[Cell, Trace], list[str]]] = {
        "Q": _projection, "K": _projection, "V": _projection, "S": _scores, "A": _softmax_cell,
        "O": _weighted_sum, "concat": _concat, "sum": _sum, "pre": _pre_activation, "hidden": _hidden,
        "PE": _positional, "flattened": _flattened,
    }  # fmt: skip
    return table[base]


def _weight(c: Cell, trace: Trace) -> list[str]:
    from ..model.architecture import Spec, parameters

    m = trace.config.model
    ref = c.stage.params.get(_param_of(c.name), Ref(f"{c.stage.id}/{_param_of(c.name)}"))
    lines = []
    owner = ref.name.split("/")[0]
    if ref.transposed:
        lines.append(
            f"W is Eᵀ, the embedding table of {owner} transposed (tied): W[{c.row}, {c.col}] = E[{c.col}, {c.row}]."
        )
    elif owner != c.stage.id:
        lines.append(f"{c.name} is the embedding table of {owner}, shared with this stage (tied).")
    if _param_of(c.name) != c.name:
        lines.append(
            f"{c.name} is head {c.name[3:]}'s block of d_k = {m.d_k} columns of the parameter {ref.name}."
        )
    if c.name == "P":
        used = len(c.stage["PE"])
        lines.append(
            f"P is the learned position table: row {c.i} is added to the token at position {c.i}"
            + (f" (this sentence uses rows 0 to {used - 1})." if c.i >= used else ".")
        )
    if trace.weights_source is not None:
        return [
            *lines,
            f"{c.name} is a learned weight, not computed from anything: its numbers come from {trace.weights_source}.",
        ]
    spec = parameters(trace.config)[0].get(ref.name, Spec(c.stage[c.name].shape, "xavier"))
    if spec.init == "embedding":
        how = "uniform in [0, 1), as the article says"
    elif spec.init == "xavier":
        fan_in, fan_out = spec.shape
        how = (f"Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / ({fan_in} + {fan_out})) = "
               f"±{c.f(math.sqrt(6 / (fan_in + fan_out)))} (PyTorch's xavier_uniform_, as nn.Transformer uses)")  # fmt: skip
    elif spec.init == "xavier-qkv":
        d = m.d_model
        how = (f"Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / ({d} + {d})) = "
               f"±{c.f(math.sqrt(6 / (2 * d)))}, W_Q, W_K and W_V each drawn as its own {d} × {d} matrix "
               f"(PyTorch draws the three as one {3 * d} × {d} matrix, so its bound is "
               f"±√(6 / ({d} + {3 * d})) = ±{c.f(math.sqrt(6 / (4 * d)))})")  # fmt: skip
    elif spec.init == "bias":
        how = f"uniform in ±1/√fan_in = ±1/√{spec.fan_in} = ±{c.f(1 / math.sqrt(spec.fan_in))} (PyTorch's nn.Linear)"
    elif spec.init == "positions":
        how = "from a normal distribution of standard deviation 0.02 (as GPT-2 draws its position table)"
    elif spec.init == "ones":
        how = "as 1 (LayerNorm starts as a pure normalisation)"
    else:
        how = "as 0" + (" (as PyTorch's nn.MultiheadAttention)" if c.stage.kind.endswith("attention") else "")
    return [
        *lines,
        f"{c.name} is a learned weight, not computed from anything: it was drawn {how},",
        f"from a stream seeded with {trace.config.seed} and the parameter's name (dtype {m.dtype}); "
        "only training changes it.",
    ]


def _param_of(name: str) -> str:
    """The parameter a weight matrix is a view of: W_Q1 -> W_QKV, b_K2 -> b_QKV; others are their own."""
    if re.fullmatch(r"[Wb]_[QKV]\d+", name):
        return f"{name[0]}_QKV"
    return name


def _input(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    where = f"the output of {source}" if source else "given"
    if c.name == "memory":
        return [
            f"memory is the encoder's output (from {source}), the same for every decoder layer: it gives the keys and values."
        ]
    if c.name == "sublayer":
        return [f"sublayer is {where}, row {c.i}, column {c.j}."]
    if c.stage.kind == "add-norm":
        return [f"X is the sublayer's input, {where}, carried around it by the residual connection."]
    if c.stage.kind == "residual":
        return [
            f"X is the residual stream, {where}: the sublayer read it through a LayerNorm (pre-norm),",
            "and the stream itself goes around both, unnormalised, to be added back.",
        ]
    return [f"X is this stage's input: {where}, row {c.i} ({c.row}), column {c.j}."]


def _dot(c: Cell, left: np.ndarray, right: np.ndarray) -> tuple[list[str], float]:
    terms = [c.times(a, b) for a, b in zip(left.tolist(), right.tolist(), strict=True)]
    return terms, float(np.dot(left, right))


def _linear(c: Cell, intro: str, row: np.ndarray, column: np.ndarray, bias: str | None) -> list[str]:
    """A cell of x·W + b: the intro, every term of the dot product and their sum, then the bias."""
    terms, total = _dot(c, row, column)
    lines = [intro, f"  = {c.sum_of(terms)} = {c.f(total)}"]
    if bias is not None and bias in c.stage:
        b = float(c.stage[bias][0, c.j])
        lines.append(f"  + {bias}[{c.j}] {c._factor(b)} = {c.f(total + b)}")
    return lines


def _projection(c: Cell, trace: Trace) -> list[str]:
    h, kind = c.name[1:], c.name[0]
    source = "memory" if kind in "KV" and "memory" in c.stage else "X"
    return _linear(
        c, f"{c.name} = {source}·W_{kind}{h}: row {c.i} of {source} ({c.row}) times column {c.j} of W_{kind}{h}",
        c.stage[source][c.i], c.stage[f"W_{kind}{h}"][:, c.j], f"b_{kind}{h}",
    )  # fmt: skip


def _scores(c: Cell, trace: Trace) -> list[str]:
    h = c.name[1:]
    d_k = trace.config.model.d_k
    terms, total = _dot(c, c.stage[f"Q{h}"][c.i], c.stage[f"K{h}"][c.j])
    return [
        f"S{h} = Q{h}·K{h}ᵀ / √d_k: how well query {c.i} ({c.row}) matches key {c.j} ({c.col})",
        f"  Q{h}[{c.i}]·K{h}[{c.j}] = {c.sum_of(terms)} = {c.f(total)}",
        f"  divided by √d_k = √{d_k} = {c.f(math.sqrt(d_k))}: {c.f(total)} / {c.f(math.sqrt(d_k))} = {c.f(c.value)}",
        "  (dividing by √d_k keeps the scores' spread the same whatever d_k is, so softmax does not saturate)",
    ]


def _mask(c: Cell, trace: Trace) -> list[str]:
    if c.j <= c.i:
        return [f"M[{c.i}, {c.j}] = 0: column {c.j} ({c.col}) is not after row {c.i} ({c.row}), so it may be seen;",
                "adding 0 leaves the score as it is."]  # fmt: skip
    return [
        f"M[{c.i}, {c.j}] = −∞: column {c.j} ({c.col}) comes after row {c.i} ({c.row}), a word the decoder",
        "must not see yet. Added to the score it makes −∞, and softmax turns e^−∞ into a weight of exactly 0.",
    ]


def _masked_scores(c: Cell, trace: Trace) -> list[str]:
    h = c.name[1 : c.name.index("+")]
    s, mask = float(c.stage[f"S{h}"][c.i, c.j]), float(c.stage["M"][c.i, c.j])
    return [
        f"{c.name}[{c.i}, {c.j}] = S{h}[{c.i}, {c.j}] + M[{c.i}, {c.j}] = {c.f(s)} + {c._factor(mask)} = {c.f(c.value)}"
    ]


def _softmax_cell(c: Cell, trace: Trace) -> list[str]:
    if c.name == "probabilities":
        source = "logits"
    else:
        h = c.name[1:]
        source = f"S{h}+M" if f"S{h}+M" in c.stage else f"S{h}"
    row = c.stage[source][c.i].tolist()
    labels = c.stage.matrices[source].cols
    # The stable form: e^(x − m) / Σ e^(x − m) equals e^x / Σ e^x, and with m the row's largest value
    # no exp exceeds 1, so scores of any size (a trained model's reach millions) cannot overflow.
    top = max(row)
    exps = [math.exp(v - top) for v in row]  # e^−∞ is exactly 0
    total = math.fsum(exps)
    x = f"({source})" if "+" in source else source
    return [
        f"{c.name} = softmax({source}), row by row: {c.name}[i, j] = e^{x}[i, j] / Σ_k e^{x}[i, k]",
        f"  row {c.i} of {source} ({c.row}): "
        + ", ".join(f"{lab} {c.f(v)}" for lab, v in zip(labels, row, strict=True)),
        f"  subtract the row's largest value m = {c.f(top)} first: e^(x − m) / Σ e^(x − m) is the same "
        "quotient, and no exp can overflow",
        "  each exp: "
        + ", ".join(f"e^{c._factor(v - top)} = {c.f(e)}" for v, e in zip(row, exps, strict=True)),
        f"  sum = {c.sum_of([c.f(e) for e in exps])} = {c.f(total)}",
        f"  {c.name}[{c.i}, {c.j}] = {c.f(exps[c.j])} / {c.f(total)} = {c.f(c.value)}",
    ]


def _weighted_sum(c: Cell, trace: Trace) -> list[str]:
    h = c.name[1:]
    A, V = c.stage[f"A{h}"], c.stage[f"V{h}"]
    keys = c.stage.matrices[f"A{h}"].cols
    terms, _ = _dot(c, A[c.i], V[:, c.j])
    return [
        f"O{h} = A{h}·V{h}: position {c.i} ({c.row}) takes its weights A{h}[{c.i}] over the value rows",
        "  weights: " + ", ".join(f"{k} {c.f(a)}" for k, a in zip(keys, A[c.i].tolist(), strict=True)),
        f"  O{h}[{c.i}, {c.j}] = Σ_k A{h}[{c.i}, k]·V{h}[k, {c.j}] = {c.sum_of(terms)} = {c.f(c.value)}",
    ]


def _concat(c: Cell, trace: Trace) -> list[str]:
    d_k = trace.config.model.d_k
    h, k = c.j // d_k + 1, c.j % d_k
    return [
        f"concat puts the heads side by side, d_k = {d_k} columns each: column {c.j} is column {k} of head {h}",
        f"  concat[{c.i}, {c.j}] = O{h}[{c.i}, {k}] = {c.f(float(c.stage[f'O{h}'][c.i, k]))}",
    ]


def _attention_output(c: Cell, trace: Trace) -> list[str]:
    return _linear(
        c, f"output = concat·W_O: the heads mixed back into d_model dimensions; row {c.i} of concat times column {c.j} of W_O",
        c.stage["concat"][c.i], c.stage["W_O"][:, c.j], "b_O",
    )  # fmt: skip


def _sum(c: Cell, trace: Trace) -> list[str]:
    if c.stage.kind == "positional-encoding":
        x, pe = float(c.stage["X"][c.i, c.j]), float(c.stage["PE"][c.i, c.j])
        return [
            f"output = X + PE: {c.f(x)} + {c._factor(pe)} = {c.f(c.value)} (the token's vector, shifted by its position's pattern)"
        ]
    x, s = float(c.stage["X"][c.i, c.j]), float(c.stage["sublayer"][c.i, c.j])
    return [f"{c.name} = X + sublayer (the residual connection): {c.f(x)} + {c._factor(s)} = {c.f(c.value)}"]


def _layer_norm(c: Cell, trace: Trace) -> list[str]:
    eps = trace.config.model.layer_norm_eps
    x = "sum" if "sum" in c.stage else "X"
    row = c.stage[x][c.i].tolist()
    d = len(row)
    mean = math.fsum(row) / d
    var = math.fsum((v - mean) ** 2 for v in row) / d
    gamma, beta = float(c.stage["gamma"][0, c.j]), float(c.stage["beta"][0, c.j])
    normed = (row[c.j] - mean) / math.sqrt(var + eps)
    return [
        f"output = gamma ⊙ ({x} − mean) / √(var + eps) + beta, over row {c.i} ({c.row}) of {x}",
        f"  mean = ({c.sum_of([c._factor(v) for v in row])}) / {d} = {c.f(mean)}",
        f"  var = Σ (v − mean)² / {d} = {c.f(var)}   (divided by d, not d − 1, as torch.nn.LayerNorm)",
        f"  ({x}[{c.i}, {c.j}] − mean) / √(var + eps) = ({c.f(row[c.j])} − {c._factor(mean)}) / √({c.f(var)} + {eps:g}) = {c.f(normed)}",
        f"  × gamma[{c.j}] {c.f(gamma)} + beta[{c.j}] {c._factor(beta)} = {c.f(c.value)}",
    ]


def _pre_activation(c: Cell, trace: Trace) -> list[str]:
    return _linear(
        c, f"pre = X·W_1 + b_1: row {c.i} of X ({c.row}) times column {c.j} of W_1",
        c.stage["X"][c.i], c.stage["W_1"][:, c.j], "b_1",
    )  # fmt: skip


def _hidden(c: Cell, trace: Trace) -> list[str]:
    x = float(c.stage["pre"][c.i, c.j])
    activation = trace.config.model.activation
    if activation == "relu":
        off = "   (negative: this unit is off here)" if x < 0 else ""
        return [f"hidden = ReLU(pre) = max(0, pre): max(0, {c.f(x)}) = {c.f(c.value)}{off}"]
    if activation == "gelu":
        cdf = (1 + math.erf(x / math.sqrt(2))) / 2
        return [
            "hidden = GELU(pre) = pre·Φ(pre), Φ(x) = (1 + erf(x/√2))/2 the chance that a standard normal is below x",
            f"  Φ({c.f(x)}) = (1 + erf({c.f(x)}/√2))/2 = {c.f(cdf)}",
            f"  {c._factor(x)}·{c.f(cdf)} = {c.f(c.value)}",
        ]
    if activation == "gelu-tanh":
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return [
            "hidden = pre·(1 + tanh(√(2/π)·(pre + 0.044715·pre³)))/2 (GELU, the tanh form GPT-2 uses)",
            f"  √(2/π)·({c.f(x)} + 0.044715·{c._factor(x)}³) = {c.f(u)}; tanh({c.f(u)}) = {c.f(math.tanh(u))}",
            f"  {c._factor(x)}·(1 + {c.f(math.tanh(u))})/2 = {c.f(c.value)}",
        ]
    if activation == "silu":
        sig = 1 / (1 + math.exp(-x)) if x > -700 else 0.0
        return [
            "hidden = SiLU(pre) = pre·σ(pre), σ(x) = 1/(1 + e^(−x))   (Marian's swish)",
            f"  σ({c.f(x)}) = 1/(1 + e^({c.f(-x)})) = {c.f(sig)}",
            f"  {c._factor(x)}·{c.f(sig)} = {c.f(c.value)}",
        ]
    raise ValueError(f"unknown activation {activation!r}")


def _ffn_output(c: Cell, trace: Trace) -> list[str]:
    return _linear(
        c, f"output = hidden·W_2 + b_2: row {c.i} of hidden times column {c.j} of W_2",
        c.stage["hidden"][c.i], c.stage["W_2"][:, c.j], "b_2",
    )  # fmt: skip


def _embedding(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    row = trace.ids(c.stage.id)[c.i]
    e = float(c.stage["E"][row, c.j])
    line = f"output[{c.i}, {c.j}] = E[{c.row!s} (row {row} of E), {c.j}] = {c.f(e)}"
    if m.scale_embeddings:
        line += f", times √d_model = {c.f(math.sqrt(m.d_model))}: {c.f(c.value)}"
    return [f"The token {c.row!r} looks up its row of the embedding table E.", line]


def _positional(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    d_model = m.d_model
    if m.positional_encoding == "learned":
        return [
            f"PE[{c.i}, {c.j}] = P[{c.i}, {c.j}] = {c.f(c.value)}: the token at position {c.i} ({c.row}) takes row {c.i}",
            "  of the learned position table P (a weight, trained like any other; no formula makes it).",
        ]
    if m.positional_encoding == "sinusoidal-halves":
        sines = (d_model + 1) // 2
        i, fn = (c.j, "sin") if c.j < sines else (c.j - sines, "cos")
        angle = c.i / 10000 ** (2 * i / d_model)
        return [
            f"PE[pos, {'i' if fn == 'sin' else 'd_model/2 + i'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"i = {i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({2 * i}/{d_model}) = {c.i} / {c.f(10000 ** (2 * i / d_model))} = {c.f(angle)}",
            f"  {fn}({c.f(angle)}) = {c.f(c.value)}",
            "  (the first half of the columns are sines, the second half the cosines of the same angles: Marian's layout)",
        ]
    if m.positional_encoding == "sinusoidal":
        two_i = c.j - c.j % 2
        angle = c.i / 10000 ** (two_i / d_model)
        fn = "sin" if c.j % 2 == 0 else "cos"
        return [
            f"PE[pos, {'2i' if c.j % 2 == 0 else '2i+1'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"2i = {two_i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({two_i}/{d_model}) = {c.i} / {c.f(10000 ** (two_i / d_model))} = {c.f(angle)}",
            f"  {fn}({c.f(angle)}) = {c.f(c.value)}",
            "  (even columns are sines, odd ones cosines; low columns turn fast with the position, high ones slowly)",
        ]
    raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")


def _token_at(c: Cell) -> str:
    """The token at the cell's position (PE's rows are named "pos 2 · is")."""
    return c.stage.matrices["X"].rows[c.i] if "X" in c.stage else c.row


def _flattened(c: Cell, trace: Trace) -> list[str]:
    p, k = divmod(c.j, c.stage["X"].shape[1])
    return [
        f"flattened lays the rows of X end to end: column {c.j} is row {p}, column {k} of X",
        f"  = X[{p}, {k}] = {c.f(float(c.stage['X'][p, k]))}",
    ]


def _logits(c: Cell, trace: Trace) -> list[str]:
    x = c.stage["flattened"] if "flattened" in c.stage else c.stage["X"]
    return _linear(
        c, f"logits = X·W + b: how much position {c.i} ({c.row}) speaks for the word {c.col!r}",
        x[c.i], c.stage["W"][:, c.j], "b",
    )  # fmt: skip


def _copied_logits(c: Cell, trace: Trace) -> list[str]:
    return [f"logits are output.logits, brought here to be turned into probabilities: {c.f(c.value)}."]


def explainable(trace: Trace) -> list[tuple[str, str]]:
    """Every (stage id, matrix name) that ``explain`` handles: all of them."""
    return [(s.id, name) for s in trace for name in s.matrices]
