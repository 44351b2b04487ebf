"""Our NumPy forward pass against an independent reference: torch.nn.Transformer in float64.

``reference.torch_checks`` copies our weights into PyTorch's modules, feeds in the embeddings plus
positional encoding, and compares every attention stage's per-head weights, every layer's output and
the logits. Here that runs over every example config, odd weights (attention biases, LayerNorms away
from gamma 1, beta 0) and a hypothesis sweep of shapes. Everything must agree to 1e-10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch  # a test dependency, pinned in pyproject.toml: these tests must run, never skip
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.model import Weights, init_weights, run_forward
from transformer_walkthrough.reference import torch_checks, torch_transformer

from .strategies import configs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def assert_equal_to_torch(config: Config, weights: Weights | None = None) -> None:
    w = weights or init_weights(config)
    trace = run_forward(config, w)
    checks = torch_checks(torch, trace, w)
    worst = max(checks, key=lambda c: c.max_diff)
    assert worst.max_diff <= 1e-10, worst
    m = config.model
    attention = [c for c in checks if c.what.startswith("A of every head")]
    assert len(attention) == m.num_encoder_layers + 2 * m.num_decoder_layers
    assert (
        len([c for c in checks if c.what.endswith("layer output")])
        == m.num_encoder_layers + m.num_decoder_layers
    )
    assert [c.stage for c in checks if c.what.startswith("logits")] == ["output.logits"]


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(CONFIGS.glob("*.yaml")) if load_config(p).model.output_head == "per-position"],
    ids=lambda p: p.name,
)
def test_every_per_position_config_equals_torch(path: Path) -> None:
    assert_equal_to_torch(load_config(path))


def test_attention_biases_equal_torch() -> None:
    config = Config(model=ModelConfig(d_model=6, num_heads=3, attention_bias=True, num_decoder_layers=2))
    w = init_weights(config)
    rng = np.random.default_rng(1)
    blocks = [lw.self_attention for lw in w.encoder]
    blocks += [a for lw in w.decoder for a in (lw.masked_attention, lw.cross_attention)]
    for aw in blocks:
        aw.b_QKV, aw.b_O = rng.normal(size=18), rng.normal(size=6)  # nonzero, to be seen
    assert_equal_to_torch(config, w)


def test_trained_looking_norms_equal_torch() -> None:
    """gamma and beta away from 1 and 0: a missing or extra LayerNorm could not hide."""
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    rng = np.random.default_rng(2)
    norms = [n for lw in w.encoder for n in (lw.norm_1, lw.norm_2)]
    norms += [n for lw in w.decoder for n in (lw.norm_1, lw.norm_2, lw.norm_3)]
    for norm in norms:
        norm.gamma, norm.beta = rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    assert_equal_to_torch(config, w)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(max_layers=3, heads=("per-position",)))
def test_any_shape_equals_torch(config: Config) -> None:
    assert_equal_to_torch(config)


def test_the_final_norms_of_nn_transformer_would_be_caught() -> None:
    """With nn.Transformer's extra final LayerNorms left in, the logits differ well beyond tolerance."""
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    rng = np.random.default_rng(3)
    # The last add & norm of each stack, as training leaves it: a second LayerNorm after it is no
    # longer close to the identity (with gamma 1 and beta 0 it moves the logits by only ~1e-6).
    for norm in [w.encoder[-1].norm_2, w.decoder[-1].norm_3]:
        norm.gamma, norm.beta = rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    trace = run_forward(config, w)
    model = torch_transformer(torch, config.model, w)
    model.encoder.norm = torch.nn.LayerNorm(8, eps=config.model.layer_norm_eps, dtype=torch.float64)
    model.decoder.norm = torch.nn.LayerNorm(8, eps=config.model.layer_norm_eps, dtype=torch.float64)
    src = torch.from_numpy(trace["encoder.positional-encoding"]["output"])[None]
    tgt = torch.from_numpy(trace["decoder.positional-encoding"]["output"])[None]
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    with torch.no_grad():
        logits = model(src, tgt, tgt_mask=mask)[0].numpy() @ w.W + w.b
    assert np.max(np.abs(trace["output.logits"]["logits"] - logits)) > 1e-2
