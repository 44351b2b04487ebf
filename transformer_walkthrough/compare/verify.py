"""Every stage computed a second, independent way, so a learner can trust what they copy.

The model computes with ``functional`` (vectorised NumPy). Here each stage is recomputed from the
matrices it recorded, differently: products as explicit ``einsum`` sums, softmax, LayerNorm and the
positional encoding and the activations cell by cell with ``math``, one head at a time; ``SECOND``
holds that computation for each kind of stage. ``against_torch`` compares the whole model with
PyTorch's own transformer layers (``reference``), in the config's dtype, when PyTorch is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..config import ModelConfig
from ..errors import WalkthroughError
from ..model.architecture import ENCODER, stack_output
from ..model.trace import Stage, Trace
from ..model.weights import Weights
from .checks import TOLERANCE, Check, gap, scale

__all__ = ["TOLERANCE", "Check", "against_torch", "recompute"]


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
        var = math.fsum((v - mean) * (v - mean) for v in row) / len(row)  # ** would raise past 1e154
        rows.append([(v - mean) / math.sqrt(var + eps) for v in row])
    return np.array(rows) * gamma + beta


def _positional_encoding(n: int, d_model: int, halves: bool) -> np.ndarray:
    def cell(pos: int, j: int) -> float:
        if halves:  # sines in the first ⌈d/2⌉ columns, the cosines of the same angles after them
            sines = (d_model + 1) // 2
            i, f = (j, math.sin) if j < sines else (j - sines, math.cos)
            return f(pos / 10000 ** (2 * i / d_model))
        return (math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / d_model))

    return np.array([[cell(pos, j) for j in range(d_model)] for pos in range(n)])


# The feed-forward's nonlinearities, one number at a time with ``math``.
ACTIVATIONS: dict[str, Callable[[float], float]] = {
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2,
    "gelu-tanh": lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v * v * v))) / 2,
    "silu": lambda v: v / (1 + math.exp(-v)) if v > -700 else 0.0,
}


def _activation(x: np.ndarray, activation: str) -> np.ndarray:
    """The feed-forward's nonlinearity, one cell at a time."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}")
    f = ACTIVATIONS[activation]
    return np.array([[f(v) for v in row] for row in x.tolist()]).reshape(x.shape)


def _attention(stage: Stage, num_heads: int, d_k: int) -> list[Check]:
    checks = []
    x = stage["X"]
    kv = stage.get("memory", x)
    heads = []
    mask = None
    if "M" in stage:
        n = len(x)
        mask = np.array([[0.0 if j <= i else -math.inf for j in range(n)] for i in range(n)])
        checks.append(Check(stage.id, "M is 0 on and below the diagonal, −∞ above", gap(stage["M"], mask)))
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
        checks.append(Check(stage.id, f"head {h}: Q, K, V, S, A and O recomputed", max(
            gap(stage[f"Q{h}"], q), gap(stage[f"K{h}"], k), gap(stage[f"V{h}"], v),
            gap(stage[f"S{h}+M"] if "M" in stage else stage[f"S{h}"], s), gap(stage[f"A{h}"], a),
            gap(stage[f"O{h}"], o),
        )))  # fmt: skip
    concat = np.concatenate(heads, axis=1)
    out = _mm(concat, stage["W_O"]) + (stage.get("b_O", 0))
    checks.append(Check(stage.id, "concat sets the heads side by side; output = concat·W_O", max(
        gap(stage["concat"], concat), gap(stage["output"], out))))  # fmt: skip
    return checks


def _embedding(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    rows = stage["E"][list(trace.ids(stage.id))] * (math.sqrt(m.d_model) if m.scale_embeddings else 1)
    return [
        Check(
            stage.id,
            "output equals the tokens' rows of E" + (" times √d_model" if m.scale_embeddings else ""),
            gap(stage["output"], rows),
        )
    ]


def _positions(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    n = len(stage["X"])
    if m.positional_encoding == "learned":
        pe, what = stage["P"][:n], "PE equals the first rows of P; output equals X + PE"
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        pe = _positional_encoding(n, m.d_model, m.positional_encoding == "sinusoidal-halves")
        what = "PE recomputed by sin and cos; output equals X + PE"
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return [Check(stage.id, what, max(gap(stage["PE"], pe), gap(stage["output"], stage["X"] + pe)))]


def _add_norm(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    total = stage["X"] + stage["sublayer"]
    out = _layer_norm(total, stage["gamma"], stage["beta"], m.layer_norm_eps)
    worst = max(gap(stage["sum"], total), gap(stage["output"], out))
    return [Check(stage.id, "sum equals X + sublayer; output is LayerNorm of each row", worst)]


def _norm(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    out = _layer_norm(stage["X"], stage["gamma"], stage["beta"], m.layer_norm_eps)
    return [Check(stage.id, "output is LayerNorm of each row of X", gap(stage["output"], out))]


def _residual(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x, sub = stage["X"].tolist(), stage["sublayer"].tolist()
    total = np.array([[a + b for a, b in zip(r, s, strict=True)] for r, s in zip(x, sub, strict=True)])
    return [Check(stage.id, "output equals X + sublayer", gap(stage["output"], total))]


def _feed_forward(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    pre = _mm(stage["X"], stage["W_1"]) + stage["b_1"]
    hidden = _activation(pre, m.activation)
    out = _mm(hidden, stage["W_2"]) + stage["b_2"]
    worst = max(gap(stage["pre"], pre), gap(stage["hidden"], hidden), gap(stage["output"], out))
    return [Check(stage.id, f"pre, hidden = {m.activation}(pre) and output recomputed", worst)]


def _logits(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x = stage["flattened"] if "flattened" in stage else stage["X"]
    logits = _mm(x, stage["W"]) + stage.get("b", 0)
    checks = [
        Check(
            stage.id,
            "logits equal X·W + b" if "b" in stage else "logits equal X·W",
            gap(stage["logits"], logits),
        )
    ]
    if m.tie_embeddings:
        E = next(s for s in trace if s.kind == "embedding")["E"]
        checks.append(Check(stage.id, "W equals Eᵀ (tied to the embedding)", gap(stage["W"], E.T)))
    return checks


def _probabilities(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    return [
        Check(
            stage.id,
            "probabilities equal the softmax of each row of logits",
            gap(stage["probabilities"], _softmax(stage["logits"])),
        )
    ]


# The second computation of each kind of stage, from the matrices the stage recorded.
SECOND: dict[str, Callable[[Stage, Trace, ModelConfig], list[Check]]] = {
    "embedding": _embedding, "positional-encoding": _positions, "add-norm": _add_norm,
    "layer-norm": _norm, "residual": _residual, "feed-forward": _feed_forward, "logits": _logits,
    "probabilities": _probabilities,
    **dict.fromkeys(("self-attention", "masked-attention", "cross-attention"),
                    lambda stage, trace, m: _attention(stage, m.num_heads, m.d_k)),
}  # fmt: skip


def recompute(trace: Trace) -> list[Check]:
    """Recompute every stage from its own recorded inputs; check each stage reads what it should."""
    m = trace.config.model
    checks: list[Check] = []
    for stage in trace:
        try:
            checks += SECOND[stage.kind](stage, trace, m)
        except OverflowError:  # numbers too large for a Python float: no second computation to compare
            checks.append(
                Check(stage.id, "the second computation overflowed: numbers beyond ±1.8e308", math.inf)
            )
    checks.extend(_graph(trace))
    return with_tolerance(checks, trace)


def with_tolerance(checks: list[Check], trace: Trace) -> list[Check]:
    """The checks judged at the tolerance of the trace's dtype, relative to each stage's scale."""
    tolerance = TOLERANCE[trace.config.model.dtype]
    scales = {sid: scale(trace[sid]) for sid in {c.stage for c in checks}}
    return [c._replace(tolerance=tolerance * scales[c.stage]) for c in checks]


def _graph(trace: Trace) -> list[Check]:
    """Each input equals the output of the stage it says it came from, and cross-attention reads
    the encoder's output: the wiring of Figure 1, as the trace recorded it."""
    checks = []
    m = trace.config.model
    for stage in trace:
        for name, source in stage.sources.items():
            given = trace[source]
            verb = "equal" if name.endswith("s") else "equals"  # logits equal the logits of …
            checks.append(Check(stage.id, f"{name} {verb} the {given.output} of {source}",
                                gap(stage[name], given[given.output])))  # fmt: skip
        if "memory" in stage:
            ok = stage.sources.get("memory") == stack_output(ENCODER, m)
            checks.append(Check(stage.id, "memory is the encoder's output", 0.0 if ok else math.inf))
    return checks


def against_torch(trace: Trace, weights: Weights) -> list[Check]:
    """The whole model rebuilt from PyTorch's transformer layers (``reference``), compared stage by stage."""
    try:
        import torch
    except ImportError:
        raise WalkthroughError(
            "--against torch needs PyTorch: pip install torch (CPU build), then run this again"
        ) from None
    if trace.config.model.output_head != "per-position":
        raise WalkthroughError(
            "--against torch: PyTorch's transformer has no flatten head; use output_head: per-position"
        )
    from .reference import torch_checks

    return with_tolerance(torch_checks(torch, trace, weights), trace)
