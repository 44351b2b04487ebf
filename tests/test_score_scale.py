"""The score scale (``score_scale``): what the scores Q·Kᵀ are divided by before the softmax.

``d_k`` divides by √d_k (the paper, and the default), ``none`` not at all (T5, whose initialisation
keeps the scores' spread instead), a positive number n by √n (Gemma's ``query_pre_attn_scalar``, 256
in Gemma 3 270M whatever its head width). Each is held here to the scores multiplied out by hand, to
its explainer's arithmetic, to verify's second computation and to its formula; the exactness
against transformers' Gemma 2 attention and autograd is in test_attention_conventions.py.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import ModelConfig, load_config
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.explain import explain

from .arithmetic import shows
from .test_llama_style import LLAMA

STAGE = "decoder.0.masked-attention"


def scaled(value: object):
    return dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, score_scale=value))


@pytest.mark.parametrize(("value", "divisor"), [("d_k", 2.0), ("none", 1.0), (256, 256.0), (0.5, 0.5)])
def test_the_scores_are_the_products_divided_by_the_root_of_the_scale(value: object, divisor: float) -> None:
    stage = run_forward(scaled(value))[STAGE]
    for h in range(1, 5):  # four query heads over two key/value heads: head h reads K(⌈h/2⌉)
        products = stage[f"rot_Q{h}"] @ stage[f"rot_K{(h + 1) // 2}"].T
        assert np.max(np.abs(stage[f"S{h}"] - products / math.sqrt(divisor))) <= 1e-15


def test_the_default_is_the_papers_and_the_scale_changes_the_weights() -> None:
    assert ModelConfig().score_scale == "d_k"
    base, none = run_forward(scaled("d_k"))[STAGE], run_forward(scaled("none"))[STAGE]
    assert np.max(np.abs(base["S1"] * math.sqrt(2) - none["S1"])) <= 1e-15
    assert np.max(np.abs(base["A1"] - none["A1"])) > 1e-3  # sharper without the division


def test_explain_writes_the_division_with_its_numbers() -> None:
    trace = run_forward(scaled(256))
    stage = trace[STAGE]
    text = "\n".join(explain(trace, STAGE, "S3", "2,1", digits=8))
    product = float(stage["rot_Q3"][2] @ stage["rot_K2"][1])
    assert "√256" in text
    shows(text, "{} / {} = {}", product, 16.0, stage["S3"][2, 1])
    none = run_forward(scaled("none"))
    lines = explain(none, STAGE, "S1", "1,0", digits=8)
    value = f"{none[STAGE]['S1'][1, 0]:.8f}".replace("-", "−")
    assert "not divided" in lines[-1] and lines[-1].endswith(value)


@pytest.mark.parametrize("value", ["none", 256])
def test_verify_recomputes_the_scaled_scores_and_catches_a_wrong_one(value: object) -> None:
    trace = run_forward(scaled(value))
    assert all(c.ok for c in recompute(trace))
    trace[STAGE].matrices["S2"].values[1, 0] *= 1.0001
    assert not all(c.ok for c in recompute(trace) if c.stage == STAGE)


def test_the_formula_says_the_scale() -> None:
    formula = lambda v: KINDS["masked-attention"].formula(scaled(v).model)  # noqa: E731
    assert "S_h = rot_Q_h·rot_K_gᵀ / √d_k" in str(formula("d_k"))
    assert "S_h = rot_Q_h·rot_K_gᵀ / √256" in str(formula(256))
    plain = str(formula("none"))
    assert "S_h = rot_Q_h·rot_K_gᵀ " in plain and "√" not in plain.split("S_h =")[1].split("\n")[0]
    assert r"\sqrt{256}" in "\n".join(latex_lines(formula(256)))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("score_scale: dk", "one of d_k, none or a number; got 'dk'"),
        ("score_scale: 0", "must be d_k, none or a positive number, got 0"),
        ("score_scale: -4", "must be d_k, none or a positive number, got -4"),
        ("score_scale: true", "one of d_k, none or a number; got True"),
    ],
)
def test_a_bad_scale_is_refused_naming_the_key(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  {text}\n")
    said = rf"bad\.yaml: model\.score_scale: (must be )?{re.escape(message)}$"
    with pytest.raises(ConfigError, match=said):
        load_config(path)


def test_a_number_in_the_file_is_read_as_one(tmp_path) -> None:
    path = tmp_path / "gemma.yaml"
    path.write_text("encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  score_scale: 256\n")
    assert load_config(path).model.score_scale == 256.0
    path.write_text("encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  score_scale: none\n")
    assert load_config(path).model.score_divisor is None
