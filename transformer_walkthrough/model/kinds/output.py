"""The output layer: a logit for every word, then the probabilities."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..trace import PROBABILITIES, Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, said
from .hand import Check, gap, linear, mm, softmax_cell, softmax_rows

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights


def logits(stage: Stage, w: Weights, y: np.ndarray, tokens: tuple[str, ...], vocabulary: tuple[str, ...],
           m: ModelConfig) -> np.ndarray:  # fmt: skip
    """One linear layer to a score for every word: per position (the paper) or flattened (the article)."""
    D = dims(m.d_model)
    stage.input("X", y, tokens, D)
    if m.output_head == "flatten":
        flat_labels = tuple(f"p{p}.d{j}" for p in range(len(tokens)) for j in range(m.d_model))
        x, rows = stage.rec("flattened", y.reshape(1, -1), ("flattened",), flat_labels), ("flattened",)
        W_rows = flat_labels
    else:
        x, rows, W_rows = y, tokens, D
    W = stage.weight("W", w.take(stage, "W"), W_rows, vocabulary)
    b = stage.weight("b", w.take(stage, "b"), ("b",), vocabulary).ravel() if m.output_bias else None
    return stage.out("logits", F.linear(x, W, b), rows, vocabulary)


def logits_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    x = stage.get("flattened", stage["X"])
    dx, dW, db = F.linear_backward(d_out, x, p["W"])
    grads = {"X": dx.reshape(stage["X"].shape), "W": dW, "b": db[None], "logits": d_out}
    if "flattened" in stage:
        grads["flattened"] = dx
    return Grads(
        {name: grads[name] for name in stage.matrices}, {"W": dW, "b": db} if "b" in p else {"W": dW}
    )


def logits_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x = stage["flattened"] if "flattened" in stage else stage["X"]
    scores = mm(x, stage["W"]) + stage.get("b", 0)
    what = "logits equal X·W + b" if "b" in stage else "logits equal X·W"
    checks = [Check(stage.id, what, gap(stage["logits"], scores))]
    if m.tie_embeddings:
        E = next(s for s in trace if s.kind == "embedding")["E"]
        checks.append(Check(stage.id, "W equals Eᵀ (tied to the embedding)", gap(stage["W"], E.T)))
    return checks


def _logits_formula(m: ModelConfig) -> str:
    tied = "\n    (W = Eᵀ: the embedding table, transposed — tied)" if m.tie_embeddings else ""
    b = " + b" if m.output_bias else ""
    if m.output_head == "flatten":
        return (
            f"flattened = X as one row\nlogits = flattened·W{b}" + tied + "\n"
            # one logical line: the terminal wraps it at its width, under its own indent
            "    (the article's leak: one row of all positions, so the prediction sees the future "
            "tokens, the very words it should predict; the paper's head reads each position alone)"
        )
    return f"logits = X·W{b}" + tied


def _logits_latex(m: ModelConfig) -> list[str]:
    b = " + b" if m.output_bias else ""
    tied = [r"W &= E^{\top} \quad \text{(tied to the embedding table)}"] if m.tie_embeddings else []
    if m.output_head == "flatten":
        return [r"\mathrm{flattened} &= \text{the rows of } X \text{ end to end}",
                rf"\mathrm{{logits}} &= \mathrm{{flattened}}\, W{b}", *tied]  # fmt: skip
    return [rf"\mathrm{{logits}} &= X W{b}", *tied]


def explain_flattened(c: Cell, trace: Trace) -> list[str]:
    p, k = divmod(c.j, c.stage["X"].shape[1])
    return [
        f"flattened lays the rows of X end to end: column {c.j} is row {p}, column {k} of X",
        f"  = X[{p}, {k}] = {c.f(float(c.stage['X'][p, k]))}",
    ]


def explain_logit(c: Cell, trace: Trace) -> list[str]:
    x = c.stage["flattened"] if "flattened" in c.stage else c.stage["X"]
    return linear(
        c, f"logits = X·W + b: how much position {c.i} ({c.row}) speaks for the word {c.col!r}",
        x[c.i], c.stage["W"][:, c.j], "b",
    )  # fmt: skip


def _logits_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    specs = {"W": Spec((sizes.head_in, sizes.vocab), "xavier")}
    return specs | {"b": Spec((sizes.vocab,), "bias", sizes.head_in)} if m.output_bias else specs


LOGITS = Kind(
    "logits",
    "output linear layer",
    lambda m: (
        "One linear layer turns all the decoder positions' vectors, laid end to end as one row, into "
        "one score (logit) for every word of the vocabulary."
        if m.output_head == "flatten"
        else "One linear layer turns each decoder position's vector into a score (logit) for every "
        "word of the vocabulary."
    ),
    _logits_formula,
    _logits_latex,
    logits_backward,
    logits_second,
    {"flattened": explain_flattened, "logits": explain_logit},
    params=_logits_params,
)


def probabilities(
    stage: Stage, scores: np.ndarray, rows: tuple[str, ...], vocabulary: tuple[str, ...]
) -> np.ndarray:
    stage.input("logits", scores, rows, vocabulary)
    return stage.out("probabilities", F.softmax(scores), rows, vocabulary, PROBABILITIES)


def probabilities_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    worst = gap(stage["probabilities"], softmax_rows(stage["logits"]))
    return [Check(stage.id, "probabilities equal the softmax of each row of logits", worst)]


def explain_copied(c: Cell, trace: Trace) -> list[str]:
    return [f"logits are output.logits, brought here to be turned into probabilities: {c.f(c.value)}."]


PROBABILITIES_KIND = Kind(
    "probabilities",
    "softmax over the vocabulary",
    said(
        "Softmax turns each row of logits into probabilities that sum to 1; the most likely "
        "word is the prediction for the next token."
    ),
    lambda m: "probabilities = softmax(logits)    (row-wise)",
    lambda m: [r"\mathrm{probabilities} &= \operatorname{softmax}(\mathrm{logits}) \quad \text{(row-wise)}"],
    None,  # the loss starts from the logits: cross-entropy differentiates softmax and log together
    probabilities_second,
    {"logits": explain_copied, "probabilities": lambda c, trace: softmax_cell(c, "logits")},
)
