"""Our NumPy forward pass against an independent reference: PyTorch's transformer layers in float64.

``reference.torch_checks`` builds the model from ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` with our weights, runs it on the same tokens, and compares the
embeddings plus positions, every attention stage's per-head weights and output, every layer's
output, the final norms and the logits. Here that runs over every example config, odd weights
(attention biases, LayerNorms away from gamma 1, beta 0), every convention and a hypothesis sweep.
Everything must agree to 1e-10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch  # a test dependency, pinned in pyproject.toml: these tests must run, never skip
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.compare.reference import TorchTransformer, torch_checks
from transformer_walkthrough.config import ACTIVATIONS, TORCH_LAYERS, Config, ModelConfig, load_config
from transformer_walkthrough.model.architecture import stack_output
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward

from .strategies import configs, fits_torch

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def assert_equal_to_torch(config: Config, weights: Weights | None = None) -> None:
    w = weights or init_weights(config)
    trace = run_forward(config, w)
    checks = torch_checks(torch, trace, w)
    worst = max(checks, key=lambda c: c.max_diff)
    assert worst.max_diff <= 1e-10, worst
    m = config.model
    attention = [c for c in checks if c.what.startswith("A of every head")]
    assert len(attention) == m.num_encoder_layers + (1 if m.decoder_only else 2) * m.num_decoder_layers
    layers = {c.stage for c in checks if c.what == "output, by PyTorch" and "attention" not in c.stage}
    # Each layer's output, the positions of each stack, and the final norms when there are any.
    stacks = 1 if m.decoder_only else 2
    assert len(layers) == m.num_encoder_layers + m.num_decoder_layers + stacks * (1 + m.has_final_norm)
    assert [c.stage for c in checks if c.what.startswith("logits")] == ["output.logits"]


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(CONFIGS.glob("*.yaml")) if fits_torch(load_config(p))],
    ids=lambda p: p.name,
)
def test_every_per_position_config_equals_torch(path: Path) -> None:
    assert_equal_to_torch(load_config(path))


def test_attention_biases_equal_torch() -> None:
    config = Config(model=ModelConfig(d_model=6, num_heads=3, attention_bias=True, num_decoder_layers=2))
    w = init_weights(config)
    rng = np.random.default_rng(1)
    for name in w:
        if "/b_" in name and "attention" in name:
            w[name][...] = rng.normal(size=w[name].shape)  # nonzero, to be seen
    assert_equal_to_torch(config, w)


def _trained_looking_norms(w: Weights, seed: int) -> None:
    """gamma and beta away from 1 and 0: a missing or extra LayerNorm could not hide."""
    rng = np.random.default_rng(seed)
    for name in w:
        if name.endswith("/gamma"):
            w[name][...] = rng.uniform(0.5, 2.0, size=w[name].shape)
        elif name.endswith("/beta"):
            w[name][...] = rng.normal(size=w[name].shape)


def test_trained_looking_norms_equal_torch() -> None:
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    _trained_looking_norms(w, 2)
    assert_equal_to_torch(config, w)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("tie_embeddings", [False, True])
@pytest.mark.parametrize("positional_encoding", TORCH_LAYERS["positional_encoding"])
def test_every_combination_of_conventions_equals_torch(
    norm_first: bool, activation: str, tie_embeddings: bool, positional_encoding: str
) -> None:
    model = ModelConfig(
        d_model=6, num_heads=2, d_ff=10, num_encoder_layers=2, num_decoder_layers=2, norm_first=norm_first,
        activation=activation, tie_embeddings=tie_embeddings, positional_encoding=positional_encoding,
        scale_embeddings=True,
    )  # fmt: skip
    config = Config(model=model)
    w = init_weights(config)
    _trained_looking_norms(w, 7)
    assert_equal_to_torch(config, w)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_only_equals_torch(norm_first: bool) -> None:
    config = Config(
        encoder_words=0,
        model=ModelConfig(num_encoder_layers=0, num_decoder_layers=2, norm_first=norm_first,
                          positional_encoding="learned", activation="gelu-tanh", tie_embeddings=True),
    )  # fmt: skip
    w = init_weights(config)
    _trained_looking_norms(w, 3)
    assert_equal_to_torch(config, w)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(max_layers=3, heads=("per-position",)))
def test_any_shape_equals_torch(config: Config) -> None:
    assert_equal_to_torch(config)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(max_layers=2, heads=("per-position",), conventions=True, torch=True))
def test_any_conventions_equal_torch(config: Config) -> None:
    assert_equal_to_torch(config)


def test_a_final_norm_where_the_model_has_none_would_be_caught() -> None:
    """nn.Transformer adds a final LayerNorm after each stack that the paper's post-norm model does
    not have: with one left in, the logits differ well beyond tolerance."""
    config = load_config(CONFIGS / "standard.yaml")
    w = init_weights(config)
    _trained_looking_norms(w, 3)  # with gamma 1 and beta 0 a second norm moves the logits by ~1e-6
    trace = run_forward(config, w)
    model = TorchTransformer(torch, config, w)
    layers = model.layers["decoder"]
    norm = torch.nn.LayerNorm(8, eps=config.model.layer_norm_eps, dtype=torch.float64)
    last = layers[-1]
    layers[-1] = torch.nn.Sequential()  # the last layer, then a final norm it should not have
    layers[-1].forward = lambda y, memory, tgt_mask: norm(last(y, memory, tgt_mask=tgt_mask))
    with torch.no_grad():
        logits = model.forward(list(trace.source_ids), list(trace.target_ids))
    assert np.max(np.abs(trace["output.logits"]["logits"] - logits.numpy())) > 1e-2
    assert stack_output("decoder", config.model) == "decoder.1.add-norm-3"
