"""Soft-capping, c·tanh(s / c) (Gemma 2): of the attention scores (``attention_softcap``, after the
scaling and before the mask, as Gemma 2's eager attention) and of the final logits
(``logit_softcap``). Each value stays within ±c; near 0 it is nearly itself (tanh(t) ≈ t − t³/3),
a large one bends below c. Both the capped matrix and the one before it are recorded.

Exactness against transformers' Gemma 2 attention and Gemma 3's causal model (forward and every
gradient) is in test_attention_conventions.py; here: the arithmetic by hand, what is recorded,
the explainers' numbers, verify's second computation, the formulas, the cached generation and
the config's refusals.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import load_config
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.explain import explain

from .arithmetic import shows
from .test_llama_style import LLAMA

STAGE = "decoder.0.masked-attention"
CAPPED = dataclasses.replace(
    LLAMA, model=dataclasses.replace(LLAMA.model, attention_softcap=1.0, logit_softcap=0.5)
)


def test_the_cap_by_hand_and_its_slope() -> None:
    # 2·tanh(3/2) = 2 · 0.9051482536448664 (tables of tanh); 2·tanh(0.02/2) ≈ 0.02 − 0.02³/12
    x = np.array([[3.0, -3.0, 0.02, 0.0, 1e6]])
    y = F.softcap(x, 2.0)
    assert y[0, 0] == pytest.approx(2 * 0.9051482536448664, abs=1e-15) and y[0, 1] == -y[0, 0]
    assert y[0, 2] == pytest.approx(
        0.02 - 0.02**3 / 12, abs=3e-11
    )  # next term: 2·(2/15)·0.01⁵ and y[0, 3] == 0.0 and y[0, 4] == 2.0
    dy = F.softcap_backward(np.ones_like(x), y, 2.0)  # 1 − tanh²(x/2): 1 at 0, 0 far out
    assert dy[0, 3] == 1.0 and dy[0, 4] == 0.0
    assert dy[0, 0] == pytest.approx(1 - math.tanh(1.5) ** 2, abs=1e-15)


def test_the_scores_before_and_after_the_cap_are_recorded_in_order() -> None:
    trace = run_forward(CAPPED)
    stage = trace[STAGE]
    names = list(stage.matrices)
    assert names[names.index("S1") : names.index("S1") + 4] == ["S1", "cap_S1", "S1+M", "A1"]
    for h in range(1, 5):
        S, capped = stage[f"S{h}"], stage[f"cap_S{h}"]
        assert (
            np.max(np.abs(S - stage[f"rot_Q{h}"] @ stage[f"rot_K{(h + 1) // 2}"].T / math.sqrt(2))) <= 1e-15
        )
        assert np.max(np.abs(capped - np.tanh(S))) <= 1e-15 and np.all(np.abs(capped) < 1)
        assert np.array_equal(stage[f"S{h}+M"], capped + stage["M"])  # the mask after the cap
    logits = trace["output.logits"]
    assert list(logits.matrices)[-2:] == ["uncapped", "logits"]
    assert np.max(np.abs(logits["logits"] - 0.5 * np.tanh(logits["uncapped"] / 0.5))) <= 1e-15
    assert np.max(np.abs(logits["logits"])) < 0.5 < np.max(np.abs(logits["uncapped"]))  # the cap bites
    assert np.array_equal(
        trace["output.probabilities"]["logits"], logits["logits"]
    )  # softmax reads the capped


def test_explain_writes_the_cap_with_its_numbers() -> None:
    trace = run_forward(CAPPED)
    stage = trace[STAGE]
    s, capped = float(stage["S2"][4, 1]), float(stage["cap_S2"][4, 1])
    lines = explain(trace, STAGE, "cap_S2", "4,1", digits=8)
    text = "\n".join(lines)
    assert "1·tanh(S2 / 1)" in text
    shows(text, "tanh({}) = {}", s, math.tanh(s))
    shows(text, "× 1 = {}", capped)
    shows(text, "took {} off", abs(s - capped))
    logit = explain(trace, "output.logits", "logits", "2,3", digits=8)
    z = float(trace["output.logits"]["uncapped"][2, 3])
    shows("\n".join(logit), "uncapped[2, 3] / 0.5 = {} / 0.5 = {}", z, z / 0.5)
    masked = explain(trace, STAGE, "S2+M", "4,1", digits=8)
    shows(masked[-1], "= cap_S2[4, 1] + M[4, 1] = {}", capped)


def test_verify_recomputes_both_caps_and_catches_a_hard_clip() -> None:
    trace = run_forward(CAPPED)
    checks = recompute(trace)
    assert all(c.ok for c in checks)
    assert any("logits equal 0.5·tanh(uncapped / 0.5)" in c.what for c in checks)
    logits = trace["output.logits"].matrices["logits"].values
    logits[...] = np.clip(trace["output.logits"]["uncapped"], -0.5, 0.5)  # a hard clip is not the cap
    assert not all(c.ok for c in recompute(trace) if c.stage == "output.logits")


def test_the_formulas_and_the_explanation_say_the_cap() -> None:
    attention = str(KINDS["masked-attention"].formula(CAPPED.model))
    assert "cap_S_h = 1·tanh(S_h / 1)" in attention and "A_h = softmax(cap_S_h + M)" in attention
    logits = str(KINDS["logits"].formula(CAPPED.model))
    assert "uncapped = X·W" in logits and "logits = 0.5·tanh(uncapped / 0.5)" in logits
    trace = run_forward(CAPPED)
    assert "soft-capped at ±1" in trace[STAGE].explanation
    assert "soft-capped at ±0.5" in trace["output.logits"].explanation


def test_the_cached_generation_equals_the_full_pass() -> None:
    w = init_weights(CAPPED)
    steps = generate_cached(CAPPED, w, [0, 2, 3], 4)
    assert max(compare(CAPPED, w, steps)) <= 1e-12


def test_a_cap_changes_the_attention_and_a_huge_one_changes_nothing() -> None:
    plain = run_forward(LLAMA)[STAGE]
    assert np.max(np.abs(run_forward(CAPPED)[STAGE]["A1"] - plain["A1"])) > 1e-3
    huge = dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, attention_softcap=1e6))
    assert np.max(np.abs(run_forward(huge)[STAGE]["A1"] - plain["A1"])) <= 1e-12


@pytest.mark.parametrize("key", ["attention_softcap", "logit_softcap"])
@pytest.mark.parametrize(
    ("value", "said"), [("0", "got 0"), ("-30", "got -30"), ("big", "expected a number")]
)
def test_a_cap_that_is_not_positive_is_refused(tmp_path, key: str, value: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=f"model.{key}: .*{said}"):
        load_config(path)
    result = CliRunner().invoke(app, ["run", "-c", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_the_map_shows_the_capped_output_layer() -> None:
    from transformer_walkthrough.views.figure import figure_text

    assert "[linear+cap]" in figure_text(run_forward(CAPPED), "output.logits")
    assert "linear+cap" not in figure_text(run_forward(LLAMA), "output.logits")


def test_the_map_shows_each_capped_attention() -> None:
    """Every attention whose scores are capped reads "+cap" on the map, self and cross, sliding and
    full; without attention_softcap none does (the logits' cap alone marks only the output)."""
    from transformer_walkthrough.config import Config, ModelConfig
    from transformer_walkthrough.views.figure import figure_text

    assert "[masked+cap]" in figure_text(run_forward(CAPPED), STAGE)
    logits_only = dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, logit_softcap=0.5))
    assert "masked+cap" not in figure_text(run_forward(logits_only), STAGE)
    both = Config(model=ModelConfig(attention_softcap=2.0))  # the article's encoder and decoder
    text = figure_text(run_forward(both), "decoder.0.cross-attention")
    assert "self+cap" in text and "masked+cap" in text and "[cross+cap]" in text and "linear+cap" not in text
    pattern = dataclasses.replace(
        LLAMA,
        model=dataclasses.replace(
            LLAMA.model, attention_softcap=1.0, layer_types=("sliding", "full"), sliding_window=2
        ),
    )
    text = figure_text(run_forward(pattern), STAGE)
    assert "[sliding+cap]" in text and "full+cap" in text


def test_walkthrough_explain_writes_the_cap_s_gradient_with_its_numbers(tmp_path) -> None:
    """The command line, cell and gradient: dL/dS = dL/dcap_S·(1 − (cap_S / c)²), and dL/duncapped
    likewise through the logits' cap; each line's numbers are the recorded ones."""
    from transformer_walkthrough.model.backprop import backward

    path = tmp_path / "capped.yaml"
    path.write_text(
        "sentence: The cat is sleeping comfortably.\nencoder_words: 0\nmodel:\n  num_encoder_layers: 0\n"
        "  attention_softcap: 0.25\n  logit_softcap: 0.5\n"
    )
    config = load_config(path)
    w = init_weights(config)
    trace = run_forward(config, w)
    grads = backward(trace, w).stages
    runner = CliRunner()
    cell = runner.invoke(app, ["explain", "-c", str(path), "-s", STAGE, "-m", "cap_S2", "--cell", "3,2",
                               "--digits", "8"])  # fmt: skip
    assert cell.exit_code == 0, cell.output
    assert "0.25·tanh(S2 / 0.25)" in cell.output
    shows(cell.output, "= {}", trace[STAGE]["cap_S2"][3, 2])
    out = runner.invoke(app, ["explain", "-c", str(path), "-s", STAGE, "-m", "dL/dS2", "--cell", "3,2",
                              "--digits", "8"])  # fmt: skip
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    capped, d_capped = trace[STAGE]["cap_S2"][3, 2], grads[STAGE]["cap_S2"][3, 2]
    slope = 1 - (capped / 0.25) ** 2
    assert "dL/dS2 = dL/dcap_S2·(1 − (cap_S2 / 0.25)²)" in text
    shows(text, "= {}", d_capped * slope)
    assert abs(slope) < 0.99  # the cap bites
    logit = runner.invoke(app, ["explain", "-c", str(path), "-s", "output.logits", "-m", "dL/duncapped",
                                "--cell", "2,1", "--digits", "8"])  # fmt: skip
    assert "dL/duncapped = dL/dlogits·(1 − (logits / 0.5)²)" in " ".join(logit.output.split())
    shows(logit.output, "= {}", grads["output.logits"]["uncapped"][2, 1])
