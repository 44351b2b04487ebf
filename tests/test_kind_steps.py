"""Each kind says how a worksheet computes the cells it records (``Kind.steps``), and what it says
is true: for every cell of every stage of every shipped config (and QK-norm, a gated form with
biases, RoBERTa's offset positions), the step's input cells, combined as its kind of step says,
give the cell's value — a dot product of a row and a column (plus a bias), a softmax of a row, a
norm of a row, a rotation of a pair, an activation, a sum, a copy or a lookup."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.kinds.base import Step
from transformer_walkthrough.model.trace import Stage, Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.worksheet import cell_step

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu-tanh": F.gelu_tanh, "silu": F.silu}
CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


def _with(path: str, **model: object) -> Config:
    config = load_config(CONFIGS[0].parent / path)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **model))


VARIANTS = {
    "gated-with-biases": lambda: Config(model=ModelConfig(feed_forward="gated", activation="gelu")),
    "offset-positions": lambda: _with("bert-style.yaml", positional_encoding="learned", position_offset=2),
    "qk-norm": lambda: _with("llama-style.yaml", qk_norm="head", head_dim=4),
    "qk-norm-whole": lambda: _with("llama-style.yaml", qk_norm="whole", head_dim=4, score_scale=256),
    "soft-caps": lambda: _with("llama-style.yaml", attention_softcap=0.5, logit_softcap=1.0),
    "scaled-embeddings": lambda: _with("standard.yaml", scale_embeddings=True),
}


def _groups(stage: Stage, step: Step) -> list[np.ndarray]:
    """The step's input cells as runs of one matrix each, in order: [row of X, column of W, bias]."""
    runs: list[list[float]] = []
    last = None
    for name, i, j in step.inputs:
        if name != last:
            runs.append([])
            last = name
        runs[-1].append(float(stage[name][i, j]))
    return [np.array(r) for r in runs]


def recomputed(trace: Trace, stage: Stage, name: str, i: int, j: int, step: Step) -> float | None:
    """The cell's value from its step's inputs alone; None for a table of sines (no inputs)."""
    m, g = trace.config.model, _groups(stage, step)
    base = stage.matrices[name].base or name
    if step.kind == "dot":
        value = float(g[0] @ g[1]) + (float(g[2][0]) if len(g) > 2 else 0.0)
        return value / math.sqrt(m.score_divisor or 1) if base == "S" else value
    if step.kind == "softcap":  # c·tanh(x / c) of the one cell it reads
        c = m.logit_softcap if base == "logits" else m.attention_softcap
        return c * math.tanh(float(g[0][0]) / c)
    if step.kind in ("sum", "copy"):
        return float(sum(x[0] for x in g))
    if step.kind == "lookup":
        scale = math.sqrt(m.d_model) if m.scale_embeddings and stage.kind == "embedding" else 1.0
        return float(g[0][0]) * scale
    if step.kind == "softmax":
        return float(F.softmax(g[0])[j])
    if (
        step.kind == "rotation"
    ):  # x_j·cos ∓ x_partner·sin, minus in the first half: [x_j, x_partner], cos, sin
        (x, partner), cos, sin = g[0], float(g[1][0]), float(g[2][0])
        return x * cos + (-1 if j < stage.matrices[name].shape[1] // 2 else 1) * partner * sin
    # Gemma's RMSNorm multiplies by 1 + gamma: QK-norm's step reads gamma as stored
    offset = (
        1.0
        if m.norm == "rmsnorm-plus-one" and step.inputs and step.inputs[-1][0].startswith("gamma")
        else 0.0
    )
    if step.kind == "norm" and base.startswith("norm_") and m.qk_norm == "whole":  # every head's row
        row, gamma, at = np.concatenate(g[:-1]), offset + float(g[-1][0]), step.inputs[-1][2]
        return gamma * row[at] / math.sqrt(float(np.mean(row * row)) + m.layer_norm_eps)
    if step.kind == "norm":
        row, gamma = g[0], offset + float(g[1][0])
        beta = float(g[2][0]) if len(g) > 2 else 0.0
        eps = m.layer_norm_eps
        if base.startswith("norm_") or m.norm != "layernorm":
            return gamma * row[j] / math.sqrt(float(np.mean(row * row)) + eps) + beta
        return gamma * (row[j] - row.mean()) / math.sqrt(float(row.var()) + eps) + beta
    if step.kind == "activation":
        bent = float(ACTIVATIONS[m.activation](np.array([g[0][0]]))[0])
        return bent * (float(g[1][0]) if len(g) > 1 else 1.0)  # gated: act(gate)·up
    assert step.kind == "sinusoid", step.kind
    return None


@pytest.mark.parametrize("config", [*CONFIGS, *VARIANTS], ids=lambda p: getattr(p, "stem", p))
def test_each_step_s_inputs_give_the_cell_s_value(config: Path | str) -> None:
    trace = run_forward(VARIANTS[config]() if isinstance(config, str) else load_config(config))
    kinds: set[str] = set()
    for stage in trace:
        for name, matrix in stage.matrices.items():
            rows, cols = matrix.shape
            for i, j in {(0, 0), (rows - 1, cols - 1), (rows // 2, cols // 2)}:
                step = cell_step(trace, stage, name, i, j)
                if step is None:
                    continue
                kinds.add(step.kind)
                value = recomputed(trace, stage, name, i, j, step)
                if value is not None:
                    scale = max(1.0, abs(float(matrix.values[i, j])))
                    where = (stage.id, name, i, j, step.kind)
                    assert abs(value - float(matrix.values[i, j])) <= 1e-12 * scale, where
    assert {"dot", "softmax", "sum"} <= kinds
