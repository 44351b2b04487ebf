"""The output layer: a logit for every word, then the probabilities; before it, for BERT's
masked-language-model head, a transform (dense layer, activation, norm)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..formula import Formula, call, formula, line, note, num, sqrt, sym, word
from ..trace import PROBABILITIES, Stage, dims
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, col, linear_step, named, one, row, step
from .feed_forward import activation_by_hand, activation_formula, activation_lines
from .hand import Check, gap, linear, mm, softcap_by_hand, softcap_lines, softmax_cell, softmax_rows
from .norms import (
    NORM_TEX,
    norm_of,
    norm_step,
    normalize,
    normalize_backward,
    normalize_by_hand,
    shown_gradients,
)

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from .base import Weights


# ---------------------------------------------------------------------------------------------
# The transform of BERT's head: output = Norm(act(X·W_dense + b_dense)), the same for every row.
# ---------------------------------------------------------------------------------------------


def transform(stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig) -> np.ndarray:
    """Norm(act(x·W_dense + b_dense)): BERT's masked-language-model head, before the output layer."""
    D = dims(m.d_model)
    stage.input("X", x, tokens, D)
    W = stage.weight("W_dense", w.take(stage, "W_dense"), D, D)
    b = stage.weight("b_dense", w.take(stage, "b_dense"), ("b_dense",), D).ravel()
    dense = stage.rec("dense", F.linear(x, W, b), tokens, D)
    hidden = stage.rec("hidden", F.ACTIVATIONS[m.activation](dense), tokens, D)
    return normalize(stage, w, hidden, tokens, m)


def transform_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """Back through the norm, the activation and the dense layer, in turn."""
    d_hidden, d_norm = normalize_backward(d_out, stage["hidden"], p, m)
    d_dense = F.activation_backward(d_hidden, stage["dense"], m.activation)
    dx, dW, db = F.linear_backward(d_dense, stage["X"], p["W_dense"])
    params = {"W_dense": dW, "b_dense": db, **d_norm}
    shown = {
        "X": dx,
        "dense": d_dense,
        "hidden": d_hidden,
        "output": d_out,
        "W_dense": dW,
        "b_dense": db[None],
    }
    shown |= shown_gradients(d_norm, m)  # gamma (and beta) as rows; Gemma's scale = 1 + gamma too
    return Grads({name: shown[name] for name in stage.matrices}, params)


def transform_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    dense = mm(stage["X"], stage["W_dense"]) + stage["b_dense"]
    hidden = activation_by_hand(dense, m.activation)
    out = normalize_by_hand(hidden, stage, m)
    worst = max(gap(stage["dense"], dense), gap(stage["hidden"], hidden), gap(stage["output"], out))
    return [
        Check(stage.id, f"dense, hidden = {m.activation}(dense) and its {norm_of(m).name} recomputed", worst)
    ]


def explain_dense(c: Cell, trace: Trace) -> list[str]:
    return linear(
        c, f"dense = X·W_dense + b_dense: row {c.i} of X ({c.row}) times column {c.j} of W_dense",
        c.stage["X"][c.i], c.stage["W_dense"][:, c.j], "b_dense",
    )  # fmt: skip


def explain_transformed_hidden(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    return activation_lines(c, float(c.stage["dense"][c.i, c.j]), "dense", "hidden = ", c.value, m.activation)


def explain_transformed(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    return norm_of(m).explain(c, "hidden", m.layer_norm_eps)


def _transform_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    d = m.d_model
    norm = {name: Spec((d,), {"gamma": "ones", "beta": "zeros"}[name]) for name in norm_of(m).params}
    return {"W_dense": Spec((d, d), "xavier"), "b_dense": Spec((d,), "bias", d), **norm}


TRANSFORM = Kind(
    "transform",
    "masked-language-model transform",
    lambda m: (
        "Before the output layer, each position's vector goes through one more dense layer, its "
        f"activation and {norm_of(m).a} (BERT's masked-language-model head): the encoder's last "
        "layer serves every task, this layer turns it towards predicting words."
    ),
    lambda m: formula(
        line(
            "dense",
            "=",
            "X",
            "·",
            sym("W_dense", tex=r"W_{\mathrm{dense}}"),
            "+",
            sym("b_dense", tex=r"b_{\mathrm{dense}}"),
        ),
        line("hidden", "=", *activation_formula(m.activation, "dense")),
        *norm_of(m).formula("hidden"),
    ),
    transform_backward,
    transform_second,
    {"dense": explain_dense, "hidden": explain_transformed_hidden, "output": explain_transformed},
    params=_transform_params,
    steps={
        "dense": linear_step("X", "W_dense", "b_dense"),
        "hidden": lambda stage, trace, name, i, j: step("activation", one(named(stage, "dense"), i, j)),
        "output": norm_step("hidden"),
    },
    tex={
        **NORM_TEX,
        "W_dense": r"W_{{\mathrm{{dense}}}}",
        "b_dense": r"b_{{\mathrm{{dense}}}}",
    },  # str.format
)


# ---------------------------------------------------------------------------------------------
# The output layer and the softmax.
# ---------------------------------------------------------------------------------------------


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
    if m.scale_tied_output:  # T5: the tied table's scores shrunk back by √d_model
        x = stage.rec("scaled", x * (m.d_model**-0.5), tokens, D)
    W = stage.weight("W", w.take(stage, "W"), W_rows, vocabulary)
    b = stage.weight("b", w.take(stage, "b"), ("b",), vocabulary).ravel() if m.output_bias else None
    if m.logit_softcap is None:
        return stage.out("logits", F.linear(x, W, b), rows, vocabulary)
    uncapped = stage.rec("uncapped", F.linear(x, W, b), rows, vocabulary)  # before Gemma 2's cap
    return stage.out("logits", F.softcap(uncapped, m.logit_softcap), rows, vocabulary)


def logits_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    x = stage.get("scaled", stage.get("flattened", stage["X"]))
    d_logits = d_out
    if "uncapped" in stage:  # through the soft cap first
        d_out = F.softcap_backward(d_out, stage["logits"], m.logit_softcap)
    dx, dW, db = F.linear_backward(d_out, x, p["W"])
    grads = {"logits": d_logits, "uncapped": d_out, "W": dW, "b": db[None]}
    if "scaled" in stage:  # scaled = X·d_model^-0.5
        grads["scaled"], dx = dx, dx * (m.d_model**-0.5)
    grads["X"] = dx.reshape(stage["X"].shape)
    if "flattened" in stage:
        grads["flattened"] = dx
    return Grads(
        {name: grads[name] for name in stage.matrices}, {"W": dW, "b": db} if "b" in p else {"W": dW}
    )


def logits_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    x = stage["flattened"] if "flattened" in stage else stage["X"]
    checks = []
    if "scaled" in stage:
        x = x / math.sqrt(m.d_model)
        checks.append(
            Check(stage.id, f"scaled equals X / √d_model = X / √{m.d_model}", gap(stage["scaled"], x))
        )
    scores = mm(x, stage["W"]) + stage.get("b", 0)
    x_name = "scaled" if "scaled" in stage else "X"
    what = f"logits equal {x_name}·W + b" if "b" in stage else f"logits equal {x_name}·W"
    if "uncapped" in stage:
        c = m.logit_softcap
        checks += [
            Check(stage.id, what.replace("logits", "uncapped"), gap(stage["uncapped"], scores)),
            Check(stage.id, f"logits equal {c:g}·tanh(uncapped / {c:g})",
                  gap(stage["logits"], softcap_by_hand(scores, c))),
        ]  # fmt: skip
    else:
        checks.append(Check(stage.id, what, gap(stage["logits"], scores)))
    if m.tie_embeddings:
        E = next(s for s in trace if s.kind == "embedding")["E"]
        checks.append(Check(stage.id, "W equals Eᵀ (tied to the embedding)", gap(stage["W"], E.T)))
    return checks


def _logits_formula(m: ModelConfig) -> Formula:
    b = ["+", "b"] if m.output_bias else []
    out = "logits" if m.logit_softcap is None else "uncapped"  # the product, before the soft cap
    tied = [note("(", sym("W"), " = ", sym("E", sup="T"), ": the embedding table, transposed — tied)")]
    tied = tied if m.tie_embeddings else []
    cap = []
    if m.logit_softcap is not None:
        c = num(f"{m.logit_softcap:g}")
        cap = [
            line("logits", "=", c, "·", call("tanh", ["uncapped", "/", c])),
            note("(soft cap, Gemma 2: every logit kept within ±", c, "; a small one nearly unchanged)"),
        ]
    if m.output_head == "flatten":
        return formula(
            line("flattened", "=", "X", word(" as one row")),
            line(out, "=", "flattened", "·", "W", *b),
            *cap,
            *tied,
            # one logical line: the terminal wraps it at its width, under its own indent
            note("(the article's leak: one row of all positions, so the prediction sees the future "
                 "tokens, the very words it should predict; the paper's head reads each position alone)"),
        )  # fmt: skip
    if m.scale_tied_output:
        return formula(
            line("scaled", "=", "X", "/", sqrt(sym("d_model"))),
            line(out, "=", "scaled", "·", "W", *b),
            *cap,
            *tied,
            note("(T5: the scores of a tied table shrunk by √d_model, its rows' typical length)"),
        )
    return formula(line(out, "=", "X", "·", "W", *b), *cap, *tied)


def explain_flattened(c: Cell, trace: Trace) -> list[str]:
    p, k = divmod(c.j, c.stage["X"].shape[1])
    return [
        f"flattened lays the rows of X end to end: column {c.j} is row {p}, column {k} of X",
        f"  = X[{p}, {k}] = {c.r(float(c.stage['X'][p, k]))}",
    ]


def explain_scaled(c: Cell, trace: Trace) -> list[str]:
    d = trace.config.model.d_model
    x = float(c.stage["X"][c.i, c.j])
    return [
        f"scaled = X / √d_model (T5, before the tied output layer): X[{c.i}, {c.j}] / √{d} = "
        f"{c.f(x)} / {c.f(math.sqrt(d))} = {c.r(c.value)}"
    ]


def explain_logit(c: Cell, trace: Trace) -> list[str]:
    if c.name == "logits" and "uncapped" in c.stage:
        uncapped = float(c.stage["uncapped"][c.i, c.j])
        return softcap_lines(c, "uncapped", uncapped, trace.config.model.logit_softcap, "logit")
    name = next(n for n in ("scaled", "flattened", "X") if n in c.stage)
    x_name = "scaled" if name == "scaled" else "X"
    return linear(
        c, f"{c.name} = {x_name}·W + b: how much position {c.i} ({c.row}) speaks for the word {c.col!r}",
        c.stage[name][c.i], c.stage["W"][:, c.j], "b",
    )  # fmt: skip


def flattened_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    """Column j of the one row is row j // d_model, column j % d_model of X."""
    return step("copy", one("X", *divmod(j, stage.matrices["X"].shape[1])))


def logits_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    if name == "logits" and "uncapped" in stage:
        return step("softcap", one("uncapped", i, j))
    x = named(stage, "scaled") or named(stage, "flattened") or "X"
    return step("dot", row(stage, x, i), col(stage, "W", j), one(named(stage, "b"), 0, j))


def _logits_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    specs = {"W": Spec((sizes.head_in, sizes.vocab), "xavier")}
    return specs | {"b": Spec((sizes.vocab,), "bias", sizes.head_in)} if m.output_bias else specs


LOGITS = Kind(
    "logits",
    "output linear layer",
    lambda m: (
        (
            "One linear layer turns all the decoder positions' vectors, laid end to end as one row, into "
            "one score (logit) for every word of the vocabulary."
            if m.output_head == "flatten"
            else "One linear layer turns each position's vector into a score (logit) for every word of "
            "the vocabulary: at a blank ([MASK]), for the word hidden there."
            if m.encoder_only
            else "One linear layer turns each decoder position's vector into a score (logit) for every "
            "word of the vocabulary."
        )
        + (
            ""
            if m.logit_softcap is None
            else f" Then each logit is soft-capped at ±{m.logit_softcap:g} (Gemma 2): "
            f"{m.logit_softcap:g}·tanh(uncapped / {m.logit_softcap:g}) keeps a small one and bends a large one "
            "below the cap, so no word's probability can be pushed to certainty by one huge logit."
        )
    ),
    _logits_formula,
    logits_backward,
    logits_second,
    {
        "flattened": explain_flattened,
        "scaled": explain_scaled,
        "uncapped": explain_logit,
        "logits": explain_logit,
    },
    params=_logits_params,
    steps={"flattened": flattened_step, "uncapped": logits_step, "logits": logits_step},
    article=lambda m: (
        "(The article flattens the decoder's rows into one and predicts one word from all of them; "
        "the paper predicts at each position, as here: `output_head: flatten` takes the article's step.)"
        if m.output_head == "per-position" and not m.encoder_only
        else ""
    ),
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
    return [f"logits are output.logits, brought here to be turned into probabilities: {c.r(c.value)}."]


PROBABILITIES_KIND = Kind(
    "probabilities",
    "softmax over the vocabulary",
    lambda m: (
        "Softmax turns each row of logits into probabilities that sum to 1; at a blank, the most "
        "likely word is the prediction for the word hidden there."
        if m.encoder_only
        else "Softmax turns each row of logits into probabilities that sum to 1; the most likely "
        "word is the prediction for the next token."
    ),
    lambda m: formula(line("probabilities", "=", call("softmax", "logits"), "    ", word("(row-wise)"))),
    None,  # the loss starts from the logits: cross-entropy differentiates softmax and log together
    probabilities_second,
    {"logits": explain_copied, "probabilities": lambda c, trace: softmax_cell(c, "logits")},
    steps={"probabilities": lambda stage, trace, name, i, j: step("softmax", row(stage, "logits", i))},
    article=lambda m: (
        ""
        if m.encoder_only
        else '(The article\'s "sleeping, 0.42" cannot be reproduced: it does not give the weights '
        "it came from. `walkthrough train` teaches this toy its sentence.)"
    ),
)
