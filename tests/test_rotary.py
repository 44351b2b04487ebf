"""Rotary positions (``positional_encoding: rotary``): the tables and the turn by hand, against
transformers' own ``rotate_half``/``apply_rotary_pos_emb`` and torch autograd, and the whole model's
gradients, second computation, explanations and cached generation under it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.architecture import stage_ids
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.generation import compare, generate_cached, generated_ids
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.explain import explain, explainable

from .strategies import SLOPE_ABS, loss_slope

DECODER_ONLY = Config(
    encoder_words=0,
    model=ModelConfig(
        num_encoder_layers=0, num_decoder_layers=2, norm_first=True, positional_encoding="rotary"
    ),
)
ENCODER_DECODER = Config(model=ModelConfig(positional_encoding="rotary", d_model=8, num_heads=2))


def test_the_tables_and_the_turn_by_hand() -> None:
    # d_k = 4, theta = 10000: θ_0 = 1, θ_1 = 10000^(−2/4) = 0.01; position 1 turns pair 0 by 1 rad.
    r = F.rotary(2, 4, F.RopeScaling(10000.0), start=0)
    assert np.array_equal(r.cos[0], np.ones(4)) and np.array_equal(r.sin[0], np.zeros(4))
    angles = [1.0, 0.01, 1.0, 0.01]  # columns i and i + d_k/2 share the angle
    assert np.allclose(r.cos[1], [math.cos(a) for a in angles], rtol=0, atol=1e-15)
    assert np.allclose(r.sin[1], [math.sin(a) for a in angles], rtol=0, atol=1e-15)
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    turned = F.apply_rotary(x, F.Rotation(r.cos[1:], r.sin[1:]))[0]
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
    by_hand = [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2]
    assert np.allclose(turned, by_hand, rtol=0, atol=1e-15)
    assert np.linalg.norm(turned) == pytest.approx(np.linalg.norm(x), rel=1e-15)  # a rotation keeps lengths
    later = F.rotary(1, 4, F.RopeScaling(10000.0), start=1)  # a cached step's table starts at its position
    assert np.array_equal(later.cos, r.cos[1:]) and np.array_equal(later.sin, r.sin[1:])


def test_equals_transformers_apply_rotary_pos_emb_and_its_gradient_equals_autograd() -> None:
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(3, 5, 8)), rng.normal(size=(3, 5, 8))  # (heads, positions, d_k)
    r = F.rotary(5, 8, F.RopeScaling(500.0))
    tq, tk = (torch.tensor(a[None], requires_grad=True) for a in (q, k))
    hq, hk = apply_rotary_pos_emb(tq, tk, torch.tensor(r.cos[None]), torch.tensor(r.sin[None]))
    assert np.max(np.abs(F.apply_rotary(q, r) - hq[0].detach().numpy())) <= 1e-15
    assert np.max(np.abs(F.apply_rotary(k, r) - hk[0].detach().numpy())) <= 1e-15
    dy = rng.normal(size=q.shape)
    (hq * torch.tensor(dy[None])).sum().backward()
    assert np.max(np.abs(F.apply_rotary_backward(dy, r) - tq.grad[0].numpy())) <= 1e-14


def test_scores_depend_only_on_the_distance_between_positions() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))

    def scores(start: int) -> np.ndarray:
        r = F.rotary(4, 6, F.RopeScaling(10000.0), start=start)
        return F.apply_rotary(q, r) @ F.apply_rotary(k, r).T

    assert np.max(np.abs(scores(0) - scores(7))) <= 1e-12


@pytest.mark.parametrize("config", [DECODER_ONLY, ENCODER_DECODER], ids=["decoder-only", "encoder-decoder"])
def test_no_positional_stage_and_every_gradient_by_finite_differences(config: Config) -> None:
    assert not any("positional-encoding" in sid for sid in stage_ids(config))
    w = init_weights(config)
    assert not any(name.endswith("/P") for name in w)
    b = backward(run_forward(config, w), w)
    side = "decoder" if config.model.decoder_only else "encoder"
    for name in [f"{side}.0.{'masked-attention' if side == 'decoder' else 'self-attention'}/W_QKV",
                 f"{side}.embedding/E"]:  # fmt: skip
        grad = b.weights[name]
        for index in [(0, 0), (1, 2), (3, 3)]:
            assert loss_slope(config, w, name, index) == pytest.approx(
                grad[index], rel=1e-6, abs=SLOPE_ABS
            ), (
                name,
                index,
            )


@pytest.mark.parametrize("config", [DECODER_ONLY, ENCODER_DECODER], ids=["decoder-only", "encoder-decoder"])
def test_verify_recomputes_every_rotation_and_explain_explains_every_matrix(config: Config) -> None:
    trace = run_forward(config)
    checks = recompute(trace)
    assert all(c.ok for c in checks)
    assert any("cos and sin recomputed" in c.what for c in checks)
    assert any("rot_Q, rot_K, S" in c.what for c in checks)
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        assert len(explain(trace, stage_id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")) >= 2
    cross = "decoder.0.cross-attention"
    if cross in trace.stages:  # the encoder's keys carry their positions already
        assert "cos" not in trace[cross] and "rot_Q1" not in trace[cross]


def test_explain_a_rotated_cell_shows_the_pair_and_the_angle() -> None:
    trace = run_forward(DECODER_ONLY)
    stage = trace["decoder.0.masked-attention"]
    Q, cos, sin = stage["Q1"], stage["cos"], stage["sin"]
    lines = explain(trace, stage.id, "rot_Q1", "2,0", digits=6)
    # row 2 (position 2), column 0 pairs with column d_k/2 = 1: Q[2,0]·cos − Q[2,1]·sin
    assert abs(Q[2, 0] * cos[2, 0] - Q[2, 1] * sin[2, 0] - stage["rot_Q1"][2, 0]) <= 1e-15
    text = " ".join(lines).replace("−", "-")
    printed = [float(n) for n in re.findall(r"-?\d+\.\d+", text)]
    for value in (math.cos(2.0), math.sin(2.0)):
        assert any(abs(n - value) <= 1e-6 for n in printed), value  # at 6 decimals or more
    assert "Q1[2, 0]·cos - Q1[2, 1]·sin" in text
    assert "GPT-J pairs 2i with 2i+1" in lines[1]
    angle = explain(trace, stage.id, "cos", "3,1", digits=6)
    assert "3 / 10000^(0/2) = 3 / 1.000000 = 3.000000" in angle[2]  # d_k = 2: column 1 is pair 0, θ_0 = 1
    assert any(
        abs(float(n) - math.cos(3.0)) <= 1e-6 for n in re.findall(r"-?\d+\.\d+", angle[3].replace("−", "-"))
    )


@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_generation_rotates_the_new_token_at_its_position(norm_first: bool) -> None:
    config = Config(encoder_words=0, model=ModelConfig(
        num_encoder_layers=0, num_decoder_layers=2, d_model=8, num_heads=2, norm_first=norm_first,
        positional_encoding="rotary"))  # fmt: skip
    w = init_weights(config)
    steps = generate_cached(config, w, config.token_ids(config.target_tokens[:2]), 5)
    assert max(compare(config, w, steps)) <= 1e-12
    full = run_forward(config, w, target_ids=generated_ids(steps)[:-1])
    assert [s.chosen for s in steps] == list(full["output.probabilities"]["probabilities"][1:].argmax(axis=1))


def test_bad_rotary_configs_and_torch_refusal(tmp_path) -> None:
    with pytest.raises(ConfigError, match="each head's d_k must be even; it is 1"):
        ModelConfig(d_model=4, num_heads=4, positional_encoding="rotary")
    with pytest.raises(ConfigError, match="rope_theta: must be more than 1"):
        ModelConfig(positional_encoding="rotary", rope_theta=0.5)
    path = tmp_path / "rot.yaml"
    path.write_text("model:\n  positional_encoding: rotary\n")
    runner = CliRunner()
    result = runner.invoke(app, ["verify", "-c", str(path), "--against", "torch"])
    assert result.exit_code == 2 and "no model.positional_encoding: rotary" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert runner.invoke(app, ["run", "-c", str(path)]).exit_code == 0
    assert runner.invoke(app, ["verify", "-c", str(path)]).exit_code == 0


@pytest.mark.parametrize(
    "rope",
    [
        F.RopeScaling(500000.0, "linear", 4.0),
        F.RopeScaling(500000.0, "llama3", 8.0, 1.0, 4.0, 64),  # d_k 32: slow, blended and fast pairs
        F.RopeScaling(10000.0, "llama3", 32.0, 2.0, 8.0, 128),
    ],
)
def test_scaled_frequencies_equal_transformers(rope: F.RopeScaling, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import LlamaConfig, modeling_rope_utils

    from transformer_walkthrough.compare.llama import rope_parameters

    m = ModelConfig(d_model=64, num_heads=2, positional_encoding="rotary", rope_theta=rope.theta,
                    rope_scaling=rope.kind, rope_factor=rope.factor,
                    rope_low_freq_factor=rope.low_freq_factor,
                    rope_high_freq_factor=rope.high_freq_factor,
                    rope_original_max_positions=rope.original_max_positions)  # fmt: skip
    config = LlamaConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope_parameters(m))
    monkeypatch.setattr(torch, "float", torch.float64)  # transformers' own formula, in float64
    theirs, scaling = modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope.kind](config)
    monkeypatch.undo()
    ours = F.rotary_frequencies(32, rope)
    assert scaling == 1.0 and np.max(np.abs(ours - theirs.numpy()) / theirs.numpy()) <= 1e-15
    plain = F.rotary_frequencies(32, F.RopeScaling(rope.theta))
    if rope.kind == "llama3":  # the fast pairs kept, the slow ones divided by the factor
        assert ours[0] == plain[0] and ours[-1] == pytest.approx(plain[-1] / rope.factor, rel=1e-15)
        assert any(plain[i] / rope.factor < ours[i] < plain[i] for i in range(16))  # a blended pair
    # and the hand computation explain shows
    from transformer_walkthrough.model.kinds.hand import frequency_by_hand

    assert max(abs(frequency_by_hand(m, i)[0] - ours[i]) / ours[i] for i in range(16)) <= 1e-14


def test_the_sliding_window_mask_by_hand() -> None:
    inf = -np.inf
    assert F.causal_mask(4, window=2).tolist() == [
        [0, inf, inf, inf], [0, 0, inf, inf], [inf, 0, 0, inf], [inf, inf, 0, 0],
    ]  # fmt: skip
    # a cached step at position 5 sees 4 and 5 only
    assert F.causal_mask(1, past=5, window=2).tolist() == [[inf, inf, inf, inf, 0, 0]]
    assert np.array_equal(
        F.causal_mask(3, window=3), F.causal_mask(3)
    )  # a window as long as the text: causal


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"head_dim": 0}, "model.head_dim: must be a positive integer or omitted, got 0"),
        ({"sliding_window": 0}, "model.sliding_window: must be a positive integer or omitted, got 0"),
        ({"rope_factor": 0.0}, "model.rope_factor: must be positive, got 0"),
        ({"rope_scaling": "llama3", "rope_low_freq_factor": 4.0},
         "llama3 needs 0 < rope_low_freq_factor < rope_high_freq_factor; got 4 and 4"),
        ({"rope_scaling": "yarn"}, "model.rope_scaling"),
        ({"d_model": 6, "num_heads": 4}, "not divisible by model.num_heads = 4"),
        ({"positional_encoding": "sinusoidal", "rope_scaling": "linear"},
         "model.rope_scaling: linear stretches rotary's frequencies: it needs positional_encoding: rotary"),
    ],
)  # fmt: skip
def test_bad_new_keys_name_themselves(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ModelConfig(**{"positional_encoding": "rotary", **changes})
    if "d_model" in changes:  # a head width of its own lifts the rule
        assert ModelConfig(positional_encoding="rotary", head_dim=2, **changes).d_k == 2
