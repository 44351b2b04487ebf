"""Gemma's conventions on the toy: where each sublayer's norm sits (``norm_placement``: post, pre,
both, output), the RMSNorm whose weight is 1 + gamma (``norm: rmsnorm-plus-one``), embeddings scaled
by √d_model in the model's dtype, and GeGLU (``feed_forward: gated``, ``activation: gelu-tanh``).

The Gemma-style toys are held against transformers' own ``GemmaForCausalLM`` (pre-norm) and
``Gemma2ForCausalLM`` (norms on both sides) holding our weights (``compare.gemma``): every norm's
output, every attention weight, the residual stream and the logits in float64, every parameter's
gradient against autograd, and float32 as shipped. OLMo 2's placement (the output's norm only) is
held against autograd on the same arithmetic written in torch here. Then what each convention
owns: its stage ids and map, its recorded matrices, its explanation's numbers, verify's second
computation, and the older ``norm_first`` key.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.checkpoints.decoder import sizes
from transformer_walkthrough.checkpoints.family import convert, map_rows, model_keys
from transformer_walkthrough.checkpoints.gemma import GEMMA2_MAP, GEMMA_MAP
from transformer_walkthrough.checkpoints.tensors import Taker
from transformer_walkthrough.compare.gemma import gemma_with
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, ModelConfig, config_to_yaml, load_config
from transformer_walkthrough.config.yaml_io import config_from_dict
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model.architecture import stage_ids
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward
from transformer_walkthrough.views.explain import explain
from transformer_walkthrough.views.figure import figure_lines

from . import exact_gemma, exact_llama
from .strategies import configs

GEMMA_MODEL = dict(
    d_model=8, num_heads=4, num_kv_heads=2, head_dim=4, d_ff=16, num_encoder_layers=0, num_decoder_layers=2,
    norm="rmsnorm-plus-one", positional_encoding="rotary", feed_forward="gated", activation="gelu-tanh",
    ffn_bias=False, attention_bias=False, output_bias=False, tie_embeddings=True, scale_embeddings=True,
    layer_norm_eps=1e-6,
)  # fmt: skip


def _config(placement: str, **changes) -> Config:
    base = load_config()
    sentence = dict(encoder_words=0) if "encoder_words" in {f.name for f in dataclasses.fields(base)} else {}
    model = ModelConfig(**{**GEMMA_MODEL, "norm_placement": placement, **changes})
    return dataclasses.replace(base, model=model, **sentence)


GEMMA = _config("pre")  # Gemma: pre-norm
GEMMA2 = _config("both")  # Gemma 2 and 3: a norm on each side of each sublayer
OLMO2 = _config("output", norm="rmsnorm", activation="silu", tie_embeddings=False, scale_embeddings=False)
REFERENCES = {"gemma (pre)": GEMMA, "gemma 2 (both)": GEMMA2}


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with every gamma drawn from [-0.5, 0.5]: as stored, Gemma's gammas are
    offsets from 1, and zeros (the initial value) would hide a norm applied on the wrong side."""
    w = init_weights(config)
    rng = np.random.default_rng(11)
    for name in w:
        if re.search(r"/gamma$", name):
            w[name][:] = rng.uniform(-0.5, 0.5, size=w[name].shape)
    return w


def _norm_outputs(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every RMSNorm's output in a forward pass of ``model``, by the module's name."""
    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.register_forward_hook(lambda mod, args, o, key=name: out.__setitem__(key, o[0].detach()))
    return out


# ---------------------------------------------------------------------------------------------
# The walk: stage ids, the map, final norms, the older key.
# ---------------------------------------------------------------------------------------------


def test_each_placement_has_its_stages_in_order() -> None:
    def layer0(placement: str) -> list[str]:
        return [
            s.removeprefix("decoder.0.") for s in stage_ids(_config(placement)) if s.startswith("decoder.0.")
        ]

    assert layer0("post") == ["masked-attention", "add-norm-1", "feed-forward", "add-norm-2"]
    assert layer0("pre") == [
        "norm-1",
        "masked-attention",
        "residual-1",
        "norm-2",
        "feed-forward",
        "residual-2",
    ]
    assert layer0("both") == [
        "norm-1", "masked-attention", "output-norm-1", "residual-1",
        "norm-2", "feed-forward", "output-norm-2", "residual-2",
    ]  # fmt: skip
    assert layer0("output") == [
        "masked-attention", "output-norm-1", "residual-1", "feed-forward", "output-norm-2", "residual-2",
    ]  # fmt: skip
    # a final norm atop the stack unless post-norm (the stream is never normed otherwise)
    assert [("decoder.final-norm" in stage_ids(_config(p))) for p in ("post", "pre", "both", "output")] == [
        False, True, True, True,
    ]  # fmt: skip


def test_the_stages_read_what_the_placement_says() -> None:
    trace = run_forward(GEMMA2)
    assert trace["decoder.0.output-norm-1"].sources == {"X": "decoder.0.masked-attention"}
    assert trace["decoder.0.residual-1"].sources == {
        "X": "decoder.embedding",
        "sublayer": "decoder.0.output-norm-1",
    }
    assert trace["decoder.0.norm-2"].sources == {"X": "decoder.0.residual-1"}
    olmo = run_forward(OLMO2)
    assert olmo["decoder.0.masked-attention"].sources["X"] == "decoder.embedding"
    assert olmo["decoder.0.output-norm-1"].sources == {"X": "decoder.0.masked-attention"}


def test_the_map_draws_a_norm_box_on_each_side() -> None:
    def row(config: Config, layer: int) -> str:
        lines = figure_lines(run_forward(config), "decoder.0.output-norm-1")
        text = ["".join(s.text for s in line) for line in lines]
        return next(t for t in text if t.strip().startswith(f"{layer} "))

    assert row(GEMMA2, 0).split() == ["0", "norm", "masked", "[norm]", "+", "norm", "ffn", "norm", "+"]
    assert row(OLMO2, 0).split() == ["0", "masked", "[norm]", "+", "ffn", "norm", "+"]


def test_norm_first_still_reads_as_pre_or_post_and_one_field_is_kept() -> None:
    assert config_from_dict({"model": {"norm_first": True}}).model.norm_placement == "pre"
    assert config_from_dict({"model": {"norm_first": False}}).model.norm_placement == "post"
    assert config_from_dict({}).model.norm_placement == "post"
    assert ModelConfig(norm_first=True) == ModelConfig(norm_placement="pre")
    dumped = config_to_yaml(config_from_dict({"model": {"norm_first": True}}))
    assert "norm_first" not in dumped and re.search(r"^  norm_placement: pre ", dumped, re.M)
    with pytest.raises(
        ConfigError, match=r"^model.norm_first: true says pre-norm, but norm_placement is both"
    ):
        config_from_dict({"model": {"norm_first": True, "norm_placement": "both"}})
    with pytest.raises(
        ConfigError, match=r"^model.norm_placement: must be one of post, pre, both, output; got 'sandwich'"
    ):
        config_from_dict({"model": {"norm_placement": "sandwich"}})


# ---------------------------------------------------------------------------------------------
# Against transformers' Gemma and Gemma 2, in float64 and float32, forward and backward.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFERENCES)
def test_every_norm_and_attention_weight_equals_gemma_in_float64(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    exact_gemma.float64(monkeypatch)
    config = REFERENCES[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = gemma_with(config, w, torch.float64)
    exact_llama.inv_freq_64(model)
    normed = _norm_outputs(model)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_attentions=True, output_hidden_states=True)
    m = config.model
    # the scaled embedding: hidden_states[0] is E[ids] · √d_model
    assert np.max(np.abs(trace["decoder.embedding"]["output"] - out.hidden_states[0][0].numpy())) <= 1e-14
    theirs = {"norm-1": "input_layernorm", "norm-2": "post_attention_layernorm"}
    if m.norm_placement == "both":
        theirs = {
            "norm-1": "input_layernorm", "output-norm-1": "post_attention_layernorm",
            "norm-2": "pre_feedforward_layernorm", "output-norm-2": "post_feedforward_layernorm",
        }  # fmt: skip
    for i in range(m.num_decoder_layers):
        for ours, module in theirs.items():
            got = trace[f"decoder.{i}.{ours}"]["output"]
            assert np.max(np.abs(got - normed[f"model.layers.{i}.{module}"].numpy())) <= 1e-12, (i, ours)
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(1, m.num_heads + 1):
            assert np.max(np.abs(stage[f"A{h}"] - out.attentions[i][0, h - 1].numpy())) <= 1e-12, (i, h)
        if i + 1 < m.num_decoder_layers:
            stream = trace[f"decoder.{i}.residual-2"]["output"]
            assert np.max(np.abs(stream - out.hidden_states[i + 1][0].numpy())) <= 1e-12, i
    assert np.max(np.abs(trace["decoder.final-norm"]["output"] - normed["model.norm"].numpy())) <= 1e-12
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-10


@pytest.mark.parametrize("name", REFERENCES)
def test_every_gradient_equals_gemma_autograd(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    exact_gemma.float64(monkeypatch)
    config = REFERENCES[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = gemma_with(config, w, torch.float64)
    exact_llama.inv_freq_64(model)
    logits = model(torch.tensor([list(trace.target_ids)])).logits[0]
    targets = next_tokens(trace)
    torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1])).backward()
    # their gradients onto our parameters by the same map, walked forward as a converter walks it
    g = {n: p.grad.numpy() for n, p in model.named_parameters()}
    keys = model_keys(config.model)
    rows = map_rows(GEMMA2_MAP if config.model.norm_placement == "both" else GEMMA_MAP, keys, sizes(keys))
    theirs = convert(rows, Taker(g, "their gradients"), np.dtype(np.float64))
    theirs["decoder.embedding/E"] = g["model.embed_tokens.weight"]  # tied: the table and the output layer
    assert set(theirs) == set(w)
    for n, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[n])) <= 1e-8, n
    assert np.max(np.abs(ours.weights["decoder.0.norm-1/gamma"])) > 1e-6  # the gammas do learn


@pytest.mark.parametrize("name", REFERENCES)
def test_float32_equals_gemma_as_shipped(name: str) -> None:
    config = REFERENCES[name]
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, dtype="float32"))
    w = _trained_looking(config)
    trace = run_forward(config, w)
    assert trace["output.logits"]["logits"].dtype == np.float32
    model = gemma_with(config, w, torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([list(trace.target_ids)])).logits[0].numpy()
    ours = trace["output.logits"]["logits"]
    assert np.max(np.abs(ours - logits)) <= 1e-4 * np.max(np.abs(logits))


def _olmo_torch(config: Config, w: Weights, ids: list[int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OLMo 2's layer written in torch on leaf tensors of our weights: x + RMSNorm(Sublayer(x)),
    rotary attention over 2 key/value heads, SwiGLU, a final RMSNorm; the loss of the next tokens."""
    m = config.model
    p = {n: torch.tensor(a, requires_grad=True) for n, a in w.items()}
    n, d_k, h, g = len(ids), m.d_k, m.num_heads, m.kv_heads

    def rms(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        return gamma * x / torch.sqrt((x * x).mean(-1, keepdim=True) + m.layer_norm_eps)

    pos = torch.arange(n, dtype=torch.float64)[:, None]
    inv = 1.0 / m.rope_theta ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    angle = torch.cat([pos * inv, pos * inv], dim=-1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = torch.cat([-x[..., d_k // 2 :], x[..., : d_k // 2]], dim=-1)
        return x * angle.cos() + half * angle.sin()

    x = p["decoder.embedding/E"][ids]
    causal = torch.triu(torch.full((n, n), -torch.inf, dtype=torch.float64), 1)
    for i in range(m.num_decoder_layers):
        a = f"decoder.{i}.masked-attention/"
        qkv = x @ p[a + "W_QKV"]
        q = qkv[:, : h * d_k].reshape(n, h, d_k).transpose(0, 1)
        k = qkv[:, h * d_k : (h + g) * d_k].reshape(n, g, d_k).transpose(0, 1)
        v = qkv[:, (h + g) * d_k :].reshape(n, g, d_k).transpose(0, 1)
        k, v = k.repeat_interleave(h // g, 0), v.repeat_interleave(h // g, 0)
        weights = torch.softmax(rotate(q) @ rotate(k).transpose(1, 2) / math.sqrt(d_k) + causal, -1)
        attended = (weights @ v).transpose(0, 1).reshape(n, h * d_k) @ p[a + "W_O"]
        x = x + rms(attended, p[f"decoder.{i}.output-norm-1/gamma"])
        f = f"decoder.{i}.feed-forward/"
        hidden = torch.nn.functional.silu(x @ p[f + "W_gate"]) * (x @ p[f + "W_up"])
        x = x + rms(hidden @ p[f + "W_down"], p[f"decoder.{i}.output-norm-2/gamma"])
    logits = rms(x, p["decoder.final-norm/gamma"]) @ p["output.logits/W"]
    return logits, p


def test_olmo2_placement_every_gradient_equals_autograd() -> None:
    w = _trained_looking(OLMO2)
    for name in w:  # RMSNorm's gammas are the weights themselves here: keep them near 1
        if name.endswith("/gamma"):
            w[name][:] += 1.0
    trace = run_forward(OLMO2, w)
    logits, p = _olmo_torch(OLMO2, w, list(trace.target_ids))
    assert np.max(np.abs(trace["output.logits"]["logits"] - logits.detach().numpy())) <= 1e-12
    targets = next_tokens(trace)
    torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1])).backward()
    ours = backward(trace, w)
    for name, grad in ours.weights.items():
        assert np.max(np.abs(grad - p[name].grad.numpy())) <= 1e-8, name


# ---------------------------------------------------------------------------------------------
# What each convention records, explains and verifies.
# ---------------------------------------------------------------------------------------------


def test_the_plus_one_norm_records_gamma_as_stored_and_as_applied() -> None:
    w = _trained_looking(GEMMA2)
    trace = run_forward(GEMMA2, w)
    stage = trace["decoder.0.output-norm-1"]
    assert list(stage.matrices) == ["X", "gamma", "scale", "output"]
    assert np.array_equal(stage["gamma"][0], w["decoder.0.output-norm-1/gamma"])
    assert np.array_equal(stage["scale"], 1 + stage["gamma"])
    x = stage["X"]  # the attention's output, normed by hand: (1 + gamma) ⊙ x / √(mean(x²) + eps)
    expected = (1 + stage["gamma"]) * x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6)
    assert np.max(np.abs(stage["output"] - expected)) <= 1e-15
    # a new model's gammas are zeros: the weight as applied is 1
    assert np.array_equal(init_weights(GEMMA2)["decoder.0.norm-1/gamma"], np.zeros(8))


def test_the_explanation_shows_one_plus_gamma_with_its_numbers() -> None:
    w = _trained_looking(GEMMA2)
    trace = run_forward(GEMMA2, w)
    stage = trace["decoder.1.output-norm-2"]
    x, gamma = stage["X"][2], float(stage["gamma"][0, 3])
    root = math.sqrt(float(np.mean(x * x)) + 1e-6)
    text = "\n".join(explain(trace, "decoder.1.output-norm-2", "output", "2,3", digits=6))
    assert "(1 + gamma) ⊙ X / √(mean(X²) + eps)" in text
    assert f"= {root:.6f}" in text
    assert f"{1 + gamma:.6f}" in text and f"{stage['output'][2, 3]:.6f}" in text
    scale = "\n".join(explain(trace, "decoder.1.output-norm-2", "scale", "0,3", digits=6))
    assert "gamma as stored plus 1" in scale and f"= {1 + gamma:.6f}" in scale


@pytest.mark.parametrize("placement", ["both", "output"])
def test_verify_recomputes_every_stage_and_catches_a_norm_on_the_wrong_side(placement: str) -> None:
    config = _config(placement)
    trace = run_forward(config, _trained_looking(config))
    assert max(check.max_diff for check in recompute(trace)) <= 1e-12
    stage = trace["decoder.0.output-norm-1"]
    stage.matrices["output"].values[0, 0] += 1e-3
    caught = [check for check in recompute(trace) if check.max_diff > check.tolerance]
    assert {check.stage for check in caught} >= {"decoder.0.output-norm-1"}


def test_embeddings_are_scaled_in_the_models_dtype_as_gemma_does() -> None:
    """Gemma multiplies by a tensor of the hidden dtype: √d_model rounded to float32 in a float32
    model. E[ids] · math.sqrt(d) on a float32 table does the same (NumPy casts the Python float to
    the array's dtype), so every row equals E[ids] · float32(√d) exactly."""
    config = dataclasses.replace(
        GEMMA2,
        model=dataclasses.replace(
            GEMMA2.model, dtype="float32", d_model=12, head_dim=4, num_heads=3, num_kv_heads=1
        ),
    )
    trace = run_forward(config)
    stage = trace["decoder.embedding"]
    ids = list(trace.target_ids)
    E = stage["E"]
    assert stage["output"].dtype == np.float32
    assert np.array_equal(stage["output"], E[ids] * np.float32(math.sqrt(12)))
    torch_scaled = torch.tensor(E[ids]) * torch.tensor(12**0.5).to(torch.float32)
    assert np.array_equal(stage["output"], torch_scaled.numpy())


def test_explain_shows_the_multiplier_the_dtype_holds() -> None:
    """In float32 the embedding is multiplied by √d_model rounded to float32 (Gemma's ``normalizer``):
    explain prints that multiplier, says it is rounded, and its product is the cell; in float64
    √d_model is the multiplier and nothing more is said."""
    f32 = dataclasses.replace(GEMMA2, model=dataclasses.replace(GEMMA2.model, dtype="float32"))
    trace = run_forward(f32)
    lines = explain(trace, "decoder.embedding", "output", "2,3", digits=6)
    rounded = float(torch.tensor(8**0.5).to(torch.float32))
    assert rounded != math.sqrt(8)
    e, value = (
        float(trace["decoder.embedding"]["E"][trace.target_ids[2], 3]),
        trace["decoder.embedding"]["output"][2, 3],
    )
    assert value == np.float32(e) * np.float32(rounded)
    assert f"rounded to float32, {rounded:.10g}" in lines[-1] and f"√8 = {math.sqrt(8):.10g}" in lines[-1]
    text = " ".join(lines)
    assert f"√d_model = {rounded:.8f}: {value:.6f}" in text
    in64 = explain(run_forward(GEMMA2), "decoder.embedding", "output", "2,3", digits=6)
    assert not any("rounded" in line for line in in64) and f"√d_model = {math.sqrt(8):.8f}" in " ".join(in64)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",), conventions=True))
def test_any_conventions_scale_the_embeddings_in_float32_as_torch_does(config: Config) -> None:
    """Whatever else the config switches, a float32 model's scaled token rows are bit-equal to
    torch's E[ids] · √d_model held as a float32 tensor (Gemma's embedding)."""
    model = dataclasses.replace(config.model, scale_embeddings=True, dtype="float32")
    trace = run_forward(dataclasses.replace(config, model=model))
    for stage in trace:
        if stage.kind != "embedding":
            continue
        rows = stage["token"] if "token" in stage else stage["output"]
        ids = list(trace.ids(stage.id))
        theirs = torch.tensor(stage["E"][ids]) * torch.tensor(math.sqrt(model.d_model)).to(torch.float32)
        assert rows.dtype == np.float32 and np.array_equal(rows, theirs.numpy()), stage.id


def test_geglu_is_gated_gelu_tanh() -> None:
    """gelu_pytorch_tanh of transformers is our gelu-tanh: the gated feed-forward's hidden layer."""
    from transformers.activations import ACT2FN

    trace = run_forward(GEMMA, _trained_looking(GEMMA))
    stage = trace["decoder.0.feed-forward"]
    gate = torch.tensor(stage["gate"])
    assert (
        np.max(np.abs(stage["hidden"] - (ACT2FN["gelu_pytorch_tanh"](gate).numpy() * stage["up"]))) <= 1e-15
    )
