"""QK-norm over the whole projection (``qk_norm: whole``, OLMo 2 and OLMoE): one RMSNorm of every
head's query columns at once (num_heads·d_k of them), one of every key head's (num_kv_heads·d_k),
before the split into heads and before the rotation, each with a gamma entry per column.

Exactness against transformers' ``Olmo2Attention`` (forward and every gradient) is in
test_attention_conventions.py; here: the norm by hand across the heads, what is recorded, the
explainer's arithmetic, verify's second computation, the worksheet step, the formula and the
cached generation.
"""

from __future__ import annotations

import math

import numpy as np

from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.documents.worksheet import cell_step
from transformer_walkthrough.views.explain import explain

from .arithmetic import shows
from .test_attention_conventions import CONFIGS, trained_looking

WHOLE = CONFIGS["qk_norm whole"]  # 4 query heads over 2 key/value heads, d_k = 4
STAGE = "decoder.0.masked-attention"


def test_the_norm_spans_every_head_s_columns() -> None:
    w = trained_looking(WHOLE)
    assert w[f"{STAGE}/gamma_Q"].shape == (16,) and w[f"{STAGE}/gamma_K"].shape == (8,)
    stage, eps = run_forward(WHOLE, w)[STAGE], WHOLE.model.layer_norm_eps
    for letter, heads in (("Q", 4), ("K", 2)):
        whole = np.hstack([stage[f"{letter}{h}"] for h in range(1, heads + 1)])
        normed = (
            stage[f"gamma_{letter}"][0] * whole / np.sqrt((whole * whole).mean(axis=1, keepdims=True) + eps)
        )
        for h in range(1, heads + 1):
            assert np.max(np.abs(stage[f"norm_{letter}{h}"] - normed[:, (h - 1) * 4 : h * 4])) <= 1e-15
        # one head's own norm would differ: the mean is over all the heads' columns
        own = stage[f"{letter}1"] / np.sqrt((stage[f"{letter}1"] ** 2).mean(axis=1, keepdims=True) + eps)
        assert np.max(np.abs(stage[f"norm_{letter}1"] - stage[f"gamma_{letter}"][0, :4] * own)) > 1e-3
    assert stage.matrices["gamma_Q"].cols[4] == "h2.k0"  # gamma's columns are the heads' side by side


def test_explain_writes_the_mean_over_every_head() -> None:
    trace = run_forward(WHOLE, trained_looking(WHOLE))
    stage = trace[STAGE]
    lines = explain(trace, STAGE, "norm_K2", "3,1", digits=8)
    text = "\n".join(lines)
    row = np.hstack([stage["K1"][3], stage["K2"][3]])
    root = math.sqrt(math.fsum(v * v for v in row) / 8 + WHOLE.model.layer_norm_eps)
    assert "whole projection" in text and "concat(K1, K2)" in text and "/ 8 =" in text
    eps = WHOLE.model.layer_norm_eps
    shows(text, f"√(mean + eps) = √({{}} + {eps:g}) = {{}}", root**2 - eps, root)
    shows(lines[-1], "gamma_K[5] {} = {}", stage["gamma_K"][0, 5], stage["norm_K2"][3, 1])


def test_verify_recomputes_it_and_catches_a_head_normed_alone() -> None:
    trace = run_forward(WHOLE, trained_looking(WHOLE))
    assert all(c.ok for c in recompute(trace))
    stage = trace[STAGE]
    q = stage["Q3"]  # norm_Q3 replaced by head 3 normed on its own: verify must object
    stage.matrices["norm_Q3"].values[...] = (
        stage["gamma_Q"][0, 8:12] * q / np.sqrt((q * q).mean(1, keepdims=True) + 1e-6)
    )
    assert not all(c.ok for c in recompute(trace) if c.stage == STAGE)


def test_the_worksheet_step_reads_every_head_s_row_and_gamma_s_column() -> None:
    trace = run_forward(WHOLE, trained_looking(WHOLE))
    stage = trace[STAGE]
    step = cell_step(trace, stage, "norm_Q2", 1, 3)
    assert step.kind == "norm"
    assert [c for c in step.inputs if c[0] != "gamma_Q"] == [
        (f"Q{h}", 1, j) for h in range(1, 5) for j in range(4)
    ]
    assert step.inputs[-1] == ("gamma_Q", 0, 7)
    row = np.array([stage[n][i, j] for n, i, j in step.inputs[:-1]])
    value = stage["gamma_Q"][0, 7] * row[7] / math.sqrt(float(np.mean(row * row)) + 1e-6)
    assert abs(value - stage["norm_Q2"][1, 3]) <= 1e-15


def test_the_formula_says_the_whole_projection_and_typesets() -> None:
    f = KINDS["masked-attention"].formula(WHOLE.model)
    assert "norm_Q = gamma_Q ⊙ Q / √(mean(Q²) + eps)" in str(f) and "whole projection" in str(f)
    assert r"\hat{Q} &= \gamma^{Q} \odot Q / \sqrt{\operatorname{mean}(Q^{2}) + \epsilon}" in "\n".join(
        latex_lines(f)
    )


def test_the_cached_generation_keeps_the_normed_keys() -> None:
    w = init_weights(WHOLE)
    steps = generate_cached(WHOLE, w, [0, 2, 3], 4)
    assert max(compare(WHOLE, w, steps)) <= 1e-12
