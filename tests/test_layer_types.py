"""Sliding and full layers in a pattern (``layer_types``, Gemma 2 and 3) with a rotary base per kind
of layer (``local_rope_theta`` in the sliding ones, ``rope_theta`` in the full ones; Gemma 3:
10,000 and 1,000,000). Each layer's stage says which it is, its mask shows the band or the whole
triangle, its rotary tables turn by its own base, and the cached generation agrees with the full
pass across the window's boundary. Exactness against transformers' Gemma 3 forward (its masks and
rotary tables per layer type) is in test_attention_conventions.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import load_config
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.explain import explain

from .test_attention_conventions import CONFIGS

PATTERN = CONFIGS["layer_types, local_rope_theta"]  # sliding, full, sliding; window 2; bases 10 and 10,000


def band(n: int, window: int | None) -> np.ndarray:
    """The mask by hand: 0 where row i may see column j (j ≤ i, and within the window), else −∞."""
    return np.array([[0.0 if j <= i and (window is None or i - j < window) else -np.inf for j in range(n)]
                     for i in range(n)])  # fmt: skip


def test_each_layer_s_stage_says_its_type_and_its_mask_shows_it() -> None:
    trace = run_forward(PATTERN)
    n = len(trace.target_tokens)
    for i, (kind, window) in enumerate([("sliding", 2), ("full", None), ("sliding", 2)]):
        stage = trace[f"decoder.{i}.masked-attention"]
        assert f"({kind}" in stage.title and f"Layer {i} is a {kind} layer" in stage.explanation
        assert np.array_equal(stage["M"], band(n, window))
    assert trace["decoder.0.masked-attention"].title.endswith("(sliding: window 2, θ 10)")
    assert trace["decoder.1.masked-attention"].title.endswith("(full, θ 10000)")


def test_each_layer_turns_by_its_own_base() -> None:
    trace = run_forward(PATTERN)
    pos = np.arange(len(trace.target_tokens))[:, None]
    for i, theta in enumerate([10.0, 10000.0, 10.0]):
        angles = pos * theta ** (-np.arange(2) / 2)  # d_k = 4: pairs 0 and 1, θ_i = base^(−2i/4)
        cos = np.cos(np.hstack([angles, angles]))
        assert np.max(np.abs(trace[f"decoder.{i}.masked-attention"]["cos"] - cos)) <= 1e-15


def test_verify_and_explain_read_the_layer_s_type() -> None:
    trace = run_forward(PATTERN)
    checks = recompute(trace)
    assert all(c.ok for c in checks)
    assert any("local_rope_theta 10" in c.what and c.stage == "decoder.2.masked-attention" for c in checks)
    outside = explain(trace, "decoder.2.masked-attention", "M", "4,1")
    assert "outside the sliding window of 2" in outside[1]
    seen = explain(trace, "decoder.1.masked-attention", "M", "4,1")
    assert "may be seen" in seen[1] and "window" not in seen[1]
    table = "\n".join(explain(trace, "decoder.0.masked-attention", "cos", "3,1", digits=6))
    assert "local_rope_theta^(−2i/d_k)" in table and "3 / 10^(2/4)" in table
    # a full layer whose mask were banded is caught
    full = trace["decoder.1.masked-attention"].matrices
    full["M"] = full["M"]._replace(values=band(7, 2))  # the mask is shared and read-only: replace it
    assert not all(c.ok for c in recompute(trace) if c.stage == "decoder.1.masked-attention")


def test_the_cached_generation_equals_the_full_pass_across_the_window() -> None:
    w = init_weights(PATTERN)
    steps = generate_cached(PATTERN, w, [0, 2], 6)  # to position 6, far past a window of 2
    assert len(steps) == 6 and steps[-1].positions == (6,)
    assert max(compare(PATTERN, w, steps)) <= 1e-12


def test_the_formula_says_the_local_base() -> None:
    plain = str(KINDS["masked-attention"].formula(PATTERN.model))
    assert "local_rope_theta 10 in place of rope_theta 10000" in plain


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (
            "layer_types: [sliding, full]\n  sliding_window: 2",
            "has 2 entries for 3 decoder layers: one per layer",
        ),
        (
            "layer_types: [sliding, global, full]\n  sliding_window: 2",
            r"layer_types\[1\]: must be one of sliding, full",
        ),
        ("layer_types: [sliding, full, full]", "has sliding layers but no sliding_window"),
        ("local_rope_theta: 10000", "it needs layer_types and positional_encoding: rotary"),
    ],
)
def test_a_bad_pattern_is_refused_in_one_line(tmp_path, lines: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  num_decoder_layers: 3\n"
        f"  positional_encoding: rotary\n  {lines}\n"
    )
    with pytest.raises(ConfigError, match=said):
        load_config(path)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["export", "-c", str(path), "-o", str(out)])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not out.exists()


def test_without_a_pattern_every_layer_is_as_sliding_window_says() -> None:
    plain = dataclasses.replace(PATTERN, model=dataclasses.replace(PATTERN.model, layer_types=None,
                                                                    local_rope_theta=None))  # fmt: skip
    trace = run_forward(plain)
    for i in range(3):
        stage = trace[f"decoder.{i}.masked-attention"]
        assert np.array_equal(stage["M"], band(7, 2)) and "layer" not in stage.title.split("·")[1]


def test_the_map_draws_each_layer_as_its_type() -> None:
    from transformer_walkthrough.views.figure import figure_text

    text = figure_text(run_forward(PATTERN), "decoder.1.masked-attention")
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()[:1].isdigit()}
    assert "sliding" in rows["0"] and "[full]" in rows["1"] and "sliding" in rows["2"]
    assert "masked" not in text


GEMMA_LIKE = """\
sentence: The cat is sleeping comfortably.
encoder_words: 0
model:
  d_model: 8
  num_heads: 2
  num_kv_heads: 1
  head_dim: 4
  d_ff: 16
  num_encoder_layers: 0
  num_decoder_layers: 3
  norm_first: true
  norm: rmsnorm
  feed_forward: gated
  activation: silu
  ffn_bias: false
  positional_encoding: rotary
  output_bias: false
  qk_norm: head
  score_scale: 256
  attention_softcap: 50
  logit_softcap: 30
  sliding_window: 2
  layer_types: [sliding, sliding, full]
  local_rope_theta: 10000
  rope_theta: 1000000
"""


def test_every_attention_convention_at_once_verifies_trains_and_generates(tmp_path) -> None:
    """Gemma 3's attention conventions together on the toy, through the command line: verify's
    second computation agrees everywhere, training memorises the sentence, and the generation says
    it back with each cached step equal to the full pass."""
    path, weights = tmp_path / "gemma-like.yaml", tmp_path / "w.npz"
    path.write_text(GEMMA_LIKE)
    runner = CliRunner()
    verified = runner.invoke(app, ["verify", "-c", str(path)])
    assert verified.exit_code == 0, verified.output
    assert "62 of 62 checks agree" in verified.output and "local_rope_theta 10000" in verified.output
    trained = runner.invoke(app, ["train", "-c", str(path), "-o", str(weights)])
    assert trained.exit_code == 0 and "has memorised it" in trained.output, trained.output
    said = runner.invoke(app, ["generate", "-c", str(path), "-w", str(weights), "--compare"])
    assert said.exit_code == 0, said.output
    assert "<start> the cat is sleeping comfortably " in said.output
