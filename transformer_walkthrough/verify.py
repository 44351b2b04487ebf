"""Every stage computed a second, independent way, so a learner can trust what they copy.

The model computes with ``functional`` (vectorised NumPy). Here each stage is recomputed from the
matrices it recorded, differently: products as explicit ``einsum`` sums, softmax, LayerNorm and the
positional encoding cell by cell with ``math``, one head at a time. ``against_torch`` compares the
whole model with ``torch.nn.Transformer`` (float64), when PyTorch is installed.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from .errors import WalkthroughError
from .model import Weights
from .trace import Stage, Trace

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


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference of two matrices; inf if either has a NaN (a NaN agrees with nothing)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):  # -inf - -inf is nan; those cells are equal
        gap = np.where(a == b, 0.0, np.abs(a - b))
    gap[np.isnan(a) | np.isnan(b)] = math.inf
    return float(np.max(np.nan_to_num(gap, nan=math.inf, posinf=math.inf), initial=0.0))


def scale(stage: Stage) -> float:
    """The largest finite |value| among the stage's matrices, at least 1: what rounding is relative to.

    Rounding error grows with the numbers a result is computed from, not with the result: softmax
    of scores near 3.6e6 is exact only to about 3.6e6 × 2⁻⁵² in float64, though its values are ≤ 1.
    """
    finite = (m.values[np.isfinite(m.values)] for m in stage.matrices.values())
    return max(1.0, *(float(np.max(np.abs(v), initial=0.0)) for v in finite))


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ik,kj->ij", a, b)


def _softmax(s: np.ndarray) -> np.ndarray:
    rows = []
    for row in s.tolist():
        top = max(row)
        e = [math.exp(v - top) for v in row]  # exp(-inf) is exactly 0
        total = math.fsum(e)
        rows.append([v / total for v in e])
    return np.array(rows)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    rows = []
    for row in x.tolist():
        mean = math.fsum(row) / len(row)
        var = math.fsum((v - mean) ** 2 for v in row) / len(row)
        rows.append([(v - mean) / math.sqrt(var + eps) for v in row])
    return np.array(rows) * gamma + beta


def _positional_encoding(n: int, d_model: int) -> np.ndarray:
    return np.array(
        [
            [
                (math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / d_model))
                for j in range(d_model)
            ]
            for pos in range(n)
        ]
    )


def _attention(stage: Stage, num_heads: int, d_k: int) -> list[Check]:
    checks = []
    x = stage["X"]
    kv = stage.get("memory", x)
    heads = []
    mask = None
    if "M" in stage:
        n = len(x)
        mask = np.array([[0.0 if j <= i else -math.inf for j in range(n)] for i in range(n)])
        checks.append(Check(stage.id, "M: 0 on and below diagonal, -∞ above", _diff(stage["M"], mask)))
    for h in range(1, num_heads + 1):
        q = _mm(x, stage[f"W_Q{h}"]) + (stage.get(f"b_Q{h}", 0))
        k = _mm(kv, stage[f"W_K{h}"]) + (stage.get(f"b_K{h}", 0))
        v = _mm(kv, stage[f"W_V{h}"]) + (stage.get(f"b_V{h}", 0))
        s = np.einsum("id,jd->ij", q, k) / math.sqrt(d_k)
        if mask is not None:
            s = s + mask
        a = _softmax(s)
        o = _mm(a, v)
        heads.append(o)
        checks.append(Check(stage.id, f"head {h}: Q, K, V, S, A, O", max(
            _diff(stage[f"Q{h}"], q), _diff(stage[f"K{h}"], k), _diff(stage[f"V{h}"], v),
            _diff(stage[f"S{h}+M"] if "M" in stage else stage[f"S{h}"], s), _diff(stage[f"A{h}"], a),
            _diff(stage[f"O{h}"], o),
        )))  # fmt: skip
    concat = np.concatenate(heads, axis=1)
    out = _mm(concat, stage["W_O"]) + (stage.get("b_O", 0))
    checks.append(Check(stage.id, "concat = heads side by side; ·W_O", max(
        _diff(stage["concat"], concat), _diff(stage["output"], out))))  # fmt: skip
    return checks


def recompute(trace: Trace) -> list[Check]:
    """Recompute every stage from its own recorded inputs; check each stage reads what it should."""
    m = trace.config.model
    checks: list[Check] = []
    vocabulary = list(trace.vocabulary)
    for stage in trace:
        kind = stage.kind
        if kind == "embedding":
            tokens = trace.source_tokens if stage.id.startswith("encoder") else trace.target_tokens
            rows = stage["E"][[vocabulary.index(t) for t in tokens]] * (
                math.sqrt(m.d_model) if m.scale_embeddings else 1
            )
            checks.append(Check(stage.id, "output = the tokens' rows of E", _diff(stage["output"], rows)))
        elif kind == "positional-encoding":
            pe = _positional_encoding(len(stage["X"]), m.d_model)
            checks.append(Check(stage.id, "PE by sin/cos, output = X + PE", max(
                _diff(stage["PE"], pe), _diff(stage["output"], stage["X"] + pe))))  # fmt: skip
        elif kind.endswith("attention"):
            checks.extend(_attention(stage, m.num_heads, m.d_k))
        elif kind == "add-norm":
            total = stage["X"] + stage["sublayer"]
            out = _layer_norm(total, stage["gamma"], stage["beta"], m.layer_norm_eps)
            checks.append(Check(stage.id, "sum = X + sublayer; LayerNorm rows", max(
                _diff(stage["sum"], total), _diff(stage["output"], out))))  # fmt: skip
        elif kind == "feed-forward":
            hidden = np.maximum(_mm(stage["X"], stage["W_1"]) + stage["b_1"], 0.0)
            out = _mm(hidden, stage["W_2"]) + stage["b_2"]
            checks.append(Check(stage.id, "hidden = ReLU(X·W_1 + b_1); output", max(
                _diff(stage["hidden"], hidden), _diff(stage["output"], out))))  # fmt: skip
        elif kind == "logits":
            x = stage["flattened"] if "flattened" in stage else stage["X"]
            checks.append(
                Check(stage.id, "logits = X·W + b", _diff(stage["logits"], _mm(x, stage["W"]) + stage["b"]))
            )
        elif kind == "probabilities":
            checks.append(
                Check(stage.id, "softmax per row", _diff(stage["probabilities"], _softmax(stage["logits"])))
            )
    checks.extend(_chain(trace))
    return with_tolerance(checks, trace)


def with_tolerance(checks: list[Check], trace: Trace) -> list[Check]:
    """The checks judged at the tolerance of the trace's dtype, relative to each stage's scale."""
    tolerance = TOLERANCE[trace.config.model.dtype]
    scales = {sid: scale(trace[sid]) for sid in {c.stage for c in checks}}
    return [c._replace(tolerance=tolerance * scales[c.stage]) for c in checks]


def _chain(trace: Trace) -> list[Check]:
    """Each stage reads what it should: the wiring of Figure 1."""
    checks = []
    stages = list(trace)
    memory = [s for s in stages if s.id.startswith("encoder.")][-1]["output"]
    for before, stage in itertools.pairwise(stages):
        if stage.kind == "add-norm":  # the residual input is the sublayer's input
            checks.append(Check(stage.id, f"X, sublayer = {before.id} X, output", max(
                _diff(stage["X"], before["X"]), _diff(stage["sublayer"], before["output"]))))  # fmt: skip
        elif stage.kind == "probabilities":
            checks.append(
                Check(stage.id, f"logits = {before.id} logits", _diff(stage["logits"], before["logits"]))
            )
        elif "X" in stage:
            checks.append(Check(stage.id, f"X = {before.id} output", _diff(stage["X"], before["output"])))
        if "memory" in stage:
            checks.append(Check(stage.id, "memory = the encoder's output", _diff(stage["memory"], memory)))
    return checks


def against_torch(trace: Trace, weights: Weights) -> list[Check]:
    """The whole model rebuilt in ``torch.nn.Transformer`` (float64, dropout 0, no final norms)."""
    try:
        import torch
    except ImportError:
        raise WalkthroughError(
            "--against torch needs PyTorch: pip install torch (CPU build), then run this again"
        ) from None
    if trace.config.model.output_head != "per-position":
        raise WalkthroughError(
            "--against torch: nn.Transformer has no flatten head; use output_head: per-position"
        )
    from .reference import torch_checks

    return with_tolerance(torch_checks(torch, trace, weights), trace)
