"""The whole model's gradient: against torch autograd on the same weights, and finite differences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.compare.reference import TorchTransformer
from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward

from .strategies import SLOPE_ABS, configs, fits_torch, loss_slope

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PER_POSITION = [p.name for p in sorted(CONFIGS.glob("*.yaml")) if fits_torch(load_config(p))]


def torch_gradients(config: Config, w: Weights) -> tuple[float, dict[str, np.ndarray]]:
    """The same loss in PyTorch, differentiated by autograd; gradients in our layout, by our names."""
    trace = run_forward(config, w)
    model = TorchTransformer(torch, config, w)
    source, target = list(trace.source_ids), list(trace.target_ids)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        logits = model.forward(source, target)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(next_tokens(trace)[:-1]))
    loss.backward()
    return float(loss.detach()), model.gradients()


def assert_gradients_equal_torch(config: Config, w: Weights | None = None) -> None:
    w = w or init_weights(config)
    b = backward(run_forward(config, w), w)
    torch_loss, theirs = torch_gradients(config, w)
    assert b.loss == pytest.approx(torch_loss, abs=1e-12)
    assert set(b.weights) == set(theirs) == set(w)  # every parameter, each once
    for name, g in b.weights.items():
        assert g.shape == w[name].shape, name
        assert np.max(np.abs(g - theirs[name])) <= 1e-8, name


@pytest.mark.parametrize("name", PER_POSITION)
def test_every_gradient_equals_torch_autograd(name: str) -> None:
    assert_gradients_equal_torch(load_config(CONFIGS / name))


def test_gradients_with_attention_biases_equal_torch() -> None:
    config = Config(model=ModelConfig(attention_bias=True, num_decoder_layers=2))
    w = init_weights(config)
    rng = np.random.default_rng(5)
    for name in w:
        if "/b_" in name and "attention" in name:
            w[name][...] = rng.normal(size=w[name].shape)  # nonzero, to be seen
    assert_gradients_equal_torch(config, w)


@pytest.mark.parametrize(
    "model",
    [
        dict(norm_first=True),
        dict(norm_first=True, final_norm=False),
        dict(final_norm=True),
        dict(activation="gelu"),
        dict(activation="gelu-tanh"),
        dict(activation="silu"),
        dict(positional_encoding="learned"),
        dict(positional_encoding="sinusoidal-halves"),
        dict(tie_embeddings=True, scale_embeddings=True),
        dict(tie_embeddings=True, norm_first=True, num_decoder_layers=2, activation="gelu-tanh"),
    ],
    ids=repr,
)
def test_each_convention_gradient_equals_torch(model: dict) -> None:
    assert_gradients_equal_torch(Config(model=ModelConfig(**model)))


def test_decoder_only_gradients_equal_torch() -> None:
    config = Config(
        encoder_words=0,
        model=ModelConfig(num_encoder_layers=0, num_decoder_layers=2, norm_first=True, tie_embeddings=True,
                          positional_encoding="learned", activation="gelu-tanh"),
    )  # fmt: skip
    assert_gradients_equal_torch(config)


def test_a_tied_table_is_one_parameter_whose_gradient_sums_its_three_uses() -> None:
    config = Config(model=ModelConfig(tie_embeddings=True))
    w = init_weights(config)
    assert [n for n in w if n.endswith("/E") or n.endswith("/W")] == ["encoder.embedding/E"]
    b = backward(run_forward(config, w), w)
    stages = b.stages
    uses = (
        stages["encoder.embedding"]["E"] + stages["decoder.embedding"]["E"] + stages["output.logits"]["W"].T
    )
    assert np.max(np.abs(b.weights["encoder.embedding/E"] - uses)) < 1e-15
    assert (
        np.abs(stages["output.logits"]["W"]).max() > 0 and np.abs(stages["encoder.embedding"]["E"]).max() > 0
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",)))
def test_any_shape_gradients_equal_torch(config: Config) -> None:
    assert_gradients_equal_torch(config)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",), conventions=True, torch=True))
def test_any_conventions_gradients_equal_torch(config: Config) -> None:
    assert_gradients_equal_torch(config)


def test_a_repeated_token_gathers_both_gradients() -> None:
    config = Config(sentence="the cat saw the dog", encoder_words=4)  # "the" twice in the source
    assert_gradients_equal_torch(config)


@pytest.mark.parametrize(
    "model, names",
    [
        ({}, ["decoder.0.cross-attention/W_QKV", "encoder.embedding/E"]),
        (dict(norm_first=True, activation="gelu", positional_encoding="learned", tie_embeddings=True),
         ["decoder.0.norm-2/gamma", "encoder.final-norm/beta", "decoder.positional-encoding/P",
          "encoder.embedding/E", "encoder.0.feed-forward/W_1"]),
        (dict(activation="silu", attention_bias=True),
         ["decoder.0.feed-forward/b_1", "encoder.0.self-attention/b_QKV"]),
    ],
)  # fmt: skip
def test_loss_gradient_by_finite_differences_through_the_whole_model(model: dict, names: list[str]) -> None:
    config = Config(model=ModelConfig(**model))
    w = init_weights(config)
    b = backward(run_forward(config, w), w)
    for name in names:
        array, grad = w[name], b.weights[name]
        for index in [(0, 0), (1, 2), (3, 1)] if array.ndim == 2 else [(0,), (2,), (3,)]:
            assert loss_slope(config, w, name, index) == pytest.approx(
                grad[index], rel=1e-6, abs=SLOPE_ABS
            ), (
                name,
                index,
            )


def test_every_matrix_of_every_stage_has_a_gradient_of_its_shape() -> None:
    for model in (
        ModelConfig(attention_bias=True),
        ModelConfig(norm_first=True, positional_encoding="learned"),
    ):
        trace = run_forward(Config(model=model))
        stages = backward(trace, init_weights(trace.config)).stages
        for stage in trace:
            assert list(stages[stage.id]) == list(stage.matrices), stage.id
            for name, m in stage.matrices.items():
                assert stages[stage.id][name].shape == m.shape, (stage.id, name)
    trace = run_forward(Config())
    stages = backward(trace, init_weights(trace.config)).stages
    masked = stages["decoder.0.masked-attention"]
    assert (masked["A1"][np.triu_indices(4, k=1)] != 0).any()  # dL/dA above the diagonal exists...
    assert (masked["S1"][np.triu_indices(4, k=1)] == 0).all()  # ...but no gradient passes the mask
    assert (stages["output.logits"]["logits"][-1] == 0).all()  # the <end> row predicts nothing


def test_training_the_flatten_head_is_refused() -> None:
    config = Config(model=ModelConfig(output_head="flatten"))
    with pytest.raises(WalkthroughError, match="flatten head cannot be trained"):
        backward(run_forward(config), init_weights(config))
