"""By hand: what a kind's second computation (``verify``) and its cell explainers (``explain``) share.

The second computation does each stage's arithmetic again, differently from ``functional``:
products as explicit ``einsum`` sums, softmax and norms row by row with ``math.fsum``. The cell
explainers write one number's arithmetic out with its operands; they receive ``explain``'s
``Cell`` (where the cell is, how to print a number) and the trace.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell

# Largest difference that still counts as equal, as a fraction of the largest number the stage
# computed with (at least 1): float64 agrees to ~1e-15 of it, float32 to ~1e-6.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


class Check(NamedTuple):
    stage: str
    what: str
    max_diff: float  # the largest |a − b|; inf when either side has NaN
    tolerance: float = TOLERANCE["float64"]  # absolute: TOLERANCE × the stage's scale

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance  # False for NaN too


def gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference of two matrices; inf if either has a NaN (a NaN agrees with nothing)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):  # -inf - -inf is nan; those cells are equal
        diff = np.where(a == b, 0.0, np.abs(a - b))
    diff[np.isnan(a) | np.isnan(b)] = math.inf
    return float(np.max(np.nan_to_num(diff, nan=math.inf, posinf=math.inf), initial=0.0))


# ---------------------------------------------------------------------------------------------
# The second computation's arithmetic.
# ---------------------------------------------------------------------------------------------


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a·b as an explicit sum over k (einsum), not BLAS."""
    return np.einsum("ik,kj->ij", a, b)


def softmax_rows(s: np.ndarray) -> np.ndarray:
    """Softmax of each row, one exp at a time, summed exactly (``math.fsum``)."""
    rows = []
    for row in s.tolist():
        top = max(row)
        e = [math.exp(v - top) for v in row]  # exp(-inf) is exactly 0
        total = math.fsum(e)
        rows.append([v / total for v in e])
    return np.array(rows)


def mean_square_rows(x: np.ndarray) -> list[tuple[float, float]]:
    """Each row's mean and variance (dividing by d, as torch.nn.LayerNorm), summed exactly."""
    out = []
    for row in x.tolist():
        mean = math.fsum(row) / len(row)
        out.append(
            (mean, math.fsum((v - mean) * (v - mean) for v in row) / len(row))
        )  # ** overflows past 1e154
    return out


def rms_norm_by_hand(x: np.ndarray, eps: float) -> list[list[float]]:
    """Each row divided by its root mean square (before gamma), the squares summed exactly: the
    RMSNorm of a stage and of each head's queries and keys (QK-norm)."""
    rows = x.tolist()
    # v * v, not v ** 2: ** raises OverflowError past 1e154, where numpy's product is inf
    roots = [math.sqrt(math.fsum(v * v for v in row) / len(row) + eps) for row in rows]
    return [[v / root for v in row] for row, root in zip(rows, roots, strict=True)]


# ---------------------------------------------------------------------------------------------
# The explainers' arithmetic, written out.
# ---------------------------------------------------------------------------------------------


def dot(c: Cell, left: np.ndarray, right: np.ndarray) -> tuple[list[str], float]:
    """Every term of left·right as text, and the sum. Only the terms ``sum_of`` shows are written
    (a base-size dot product has 512; the others stay empty strings, counted but never formatted)."""
    a, b = left.tolist(), right.tolist()
    terms = [""] * len(a)
    for k in c.shown(len(a)):
        terms[k] = c.times(a[k], b[k])
    return terms, float(np.dot(left, right))


def linear(c: Cell, intro: str, row: np.ndarray, column: np.ndarray, bias: str | None) -> list[str]:
    """A cell of x·W + b: the intro, every term of the dot product and their sum, then the bias."""
    terms, total = dot(c, row, column)
    lines = [intro, f"  = {c.sum_of(terms)} = {c.r(total)}"]
    if bias is not None and bias in c.stage:
        b = float(c.stage[bias][0, c.j])
        lines.append(f"  + {bias}[{c.j}] {c.operand(b)} = {c.r(total + b)}")
    return lines


def softmax_cell(c: Cell, source: str) -> list[str]:
    """A cell of softmax(source), row-wise: the row, each exp, their sum, the quotient. A long row
    (a vocabulary of 200,000 logits) shows its first and last terms, the cell's own and the
    largest, as a dot product does: its arithmetic is the same size whatever the row's length."""
    values = np.asarray(c.stage[source][c.i], dtype=np.float64)
    labels = c.stage.matrices[source].cols
    # The stable form: e^(x − m) / Σ e^(x − m) equals e^x / Σ e^x, and with m the row's largest value
    # no exp exceeds 1, so scores of any size (a trained model's reach millions) cannot overflow.
    top_at = int(np.argmax(values))
    top = float(values[top_at])
    with np.errstate(invalid="ignore"):  # −∞ − m is −∞, whose exp is exactly 0
        exps = np.exp(values - top)
    total = math.fsum(exps.tolist())
    shown = sorted({*c.shown(len(values)), c.j, top_at})
    row = c.listing(shown, len(values), lambda k: f"{labels[k]} {c.f(float(values[k]))}")
    each = c.listing(
        shown, len(values), lambda k: f"e^{c.operand(float(values[k]) - top)} = {c.r(float(exps[k]))}"
    )
    terms = [""] * len(values)
    for k in c.shown(len(values)):
        terms[k] = c.f(float(exps[k]))
    x = f"({source})" if "+" in source else source
    return [
        f"{c.name} = softmax({source}), row by row: {c.name}[i, j] = e^{x}[i, j] / Σ_k e^{x}[i, k]",
        f"  row {c.i} of {source} ({c.row}): {row}",
        f"  subtract the row's largest value m = {c.r(top)} first: e^(x − m) / Σ e^(x − m) is the same "
        "quotient, and no exp can overflow",
        f"  each exp: {each}",
        f"  sum = {c.sum_of(terms)} = {c.r(total)}",
        f"  {c.name}[{c.i}, {c.j}] = {c.f(float(exps[c.j]))} / {c.f(total)} = {c.r(c.value)}",
    ]


def where_from(c: Cell) -> str:
    """Where the cell's input matrix came from: "the output of decoder.0.add-norm-1", or "given"."""
    source = c.stage.sources.get(c.name)
    return f"the output of {source}" if source else "given"


# ---------------------------------------------------------------------------------------------
# Rotary positions by hand: the angles with ``math``, each pair turned one cell at a time.
# ---------------------------------------------------------------------------------------------


def frequency_by_hand(m: ModelConfig, i: int, layer: int | None = None) -> tuple[float, str]:
    """θ_i of pair i in decoder layer ``layer`` with ``math``, and how it was scaled (the words of
    ``explain``): a local layer's (``local_rope_theta``) never is."""
    if m.local(layer):
        return m.theta(layer) ** (-2 * i / m.d_k), ""
    theta = m.rope_theta ** (-2 * i / m.d_k)
    if m.rope_scaling == "linear":
        return theta / m.rope_factor, f"divided by rope_factor {m.rope_factor:g} (linear scaling)"
    if m.rope_scaling == "llama3":
        wavelength, old = 2 * math.pi / theta, m.rope_original_max_positions
        low, high = old / m.rope_low_freq_factor, old / m.rope_high_freq_factor
        if wavelength > low:
            return theta / m.rope_factor, (
                f"divided by rope_factor {m.rope_factor:g}: its wavelength 2π/θ_i = {wavelength:.6g} "
                f"exceeds {low:g} positions (llama3)"
            )
        if wavelength < high:
            return (
                theta,
                f"kept: its wavelength 2π/θ_i = {wavelength:.6g} is under {high:g} positions (llama3)",
            )
        smooth = (old / wavelength - m.rope_low_freq_factor) / (
            m.rope_high_freq_factor - m.rope_low_freq_factor
        )
        return (1 - smooth) * theta / m.rope_factor + smooth * theta, (
            f"blended: wavelength {wavelength:.6g} is between {high:g} and {low:g} positions, so "
            f"(1 − s)·θ_i/{m.rope_factor:g} + s·θ_i with s = {smooth:.6g} (llama3)"
        )
    return theta, ""


def rotary_by_hand(n: int, m: ModelConfig, layer: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of pos·θ_i (``frequency_by_hand``), column i and i + d_k/2 alike, with ``math``."""
    half = m.d_k // 2
    thetas = [frequency_by_hand(m, i, layer)[0] for i in range(half)]
    angles = [[pos * thetas[j % half] for j in range(m.d_k)] for pos in range(n)]
    return (np.array([[math.cos(a) for a in row] for row in angles]),
            np.array([[math.sin(a) for a in row] for row in angles]))  # fmt: skip


def rotate_by_hand(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Each pair (i, i + d_k/2) of each row turned, one cell at a time:
    x'_i = x_i·cos − x_{i+d/2}·sin, x'_{i+d/2} = x_{i+d/2}·cos + x_i·sin."""
    n, d = x.shape
    half = d // 2
    out = np.empty((n, d))
    for p in range(n):
        for j in range(d):
            partner, sign = (j + half, -1.0) if j < half else (j - half, 1.0)
            out[p, j] = x[p, j] * cos[p, j] + sign * x[p, partner] * sin[p, j]
    return out


def softcap_by_hand(x: np.ndarray, cap: float) -> np.ndarray:
    """c·tanh(x / c) of every entry, one at a time with ``math.tanh``."""
    return np.array([[cap * math.tanh(v / cap) for v in row] for row in np.atleast_2d(x).tolist()])


def softcap_lines(c: Cell, source: str, x: float, cap: float, what: str) -> list[str]:
    """A soft-capped cell written out: c·tanh(x / c) with its numbers, and what the cap did."""
    t = x / cap
    squeezed = x - c.value
    return [
        f"{c.name} = {cap:g}·tanh({source} / {cap:g}): the {what} {source}[{c.i}, {c.j}] soft-capped at ±{cap:g}",
        f"  {source}[{c.i}, {c.j}] / {cap:g} = {c.f(x)} / {cap:g} = {c.r(t)}",
        f"  tanh({c.f(t)}) = {c.r(math.tanh(t))}",
        f"  × {cap:g} = {c.r(c.value)}",
        f"  (the cap took {c.r(abs(squeezed))} off: {100 * abs(squeezed) / abs(x) if x else 0:.2g}% of the {what}; "
        "tanh(t) ≈ t − t³/3 near 0, so small values pass almost unchanged and large ones bend below the cap)",
    ]


# ---------------------------------------------------------------------------------------------
# Relative positions by hand (T5): one (query, key) pair's bucket, its arithmetic in words.
# ---------------------------------------------------------------------------------------------


class Bucket(NamedTuple):
    """One pair's bucket of the relative bias table, and how it was reached."""

    bucket: int
    distance: int  # key − query
    counted: int  # the distance the bucket counts: |distance|, or how far back (causal)
    offset: int  # 0, or the upper half's first bucket (bidirectional, a key after the query)
    per_side: int  # the buckets of one direction: relative_buckets, halved when bidirectional
    exact: int  # distances below this have a bucket each
    log_value: float  # the log range's ln(counted/exact)/ln(max/exact)·(per_side − exact), float32


def bucket_by_hand(query: int, key: int, bidirectional: bool, m: ModelConfig) -> Bucket:
    """The bucket of the pair (query, key) one step at a time with Python's ints and float32
    scalars: T5's rule (``functional.relative_buckets``), written again for one cell."""
    distance = key - query
    per_side, offset = m.relative_buckets, 0
    if bidirectional:
        per_side //= 2
        offset = per_side if distance > 0 else 0
        counted = abs(distance)
    else:
        counted = -distance if distance < 0 else 0
    exact = per_side // 2
    log_value = math.nan
    if counted < exact:
        bucket = offset + counted
    else:
        f32 = np.float32
        log_value = float(
            np.log(f32(counted) / f32(exact))
            / f32(math.log(m.relative_max_distance / exact))
            * f32(per_side - exact)
        )
        bucket = offset + min(exact + int(log_value), per_side - 1)
    return Bucket(bucket, distance, counted, offset, per_side, exact, log_value)
