"""The four conventions of today's LLMs together (configs/llama-style.yaml: pre-norm RMSNorm, rotary,
SwiGLU, 4 query heads over 2 key/value heads, no biases, untied) against the canonical
implementation, transformers' own ``LlamaForCausalLM`` (eager), loaded with the same weights.

transformers' Llama computes three things in float32 even when the model is float64: the RMSNorm
(``hidden_states.to(torch.float32)``), the rotary tables (``inv_freq`` and the angles in float32)
and the softmax (``dtype=torch.float32``). In float64 it therefore agrees with any float64
computation to about 1e-7 only. For the float64 comparison the test replaces those three functions
with their own lines minus the cast (``tests/exact_llama.py``); everything else — the projections,
``rotate_half``, ``repeat_kv``, the gated MLP, the residual wiring, the output layer — is
transformers' code as shipped. In float32 the model runs unpatched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from transformer_walkthrough.checkpoints import llama as llama_family
from transformer_walkthrough.checkpoints.family import convert, model_keys
from transformer_walkthrough.checkpoints.tensors import Taker
from transformer_walkthrough.compare.llama import llama_with
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward
from transformer_walkthrough.views.explain import explain, explainable

from . import exact_llama
from .strategies import configs, loss_slope

LLAMA_PATH = Path(__file__).resolve().parents[1] / "configs" / "llama-style.yaml"
LLAMA = load_config(LLAMA_PATH)


# The same conventions with the three that real checkpoints add: a head width of its own (6, not
# d_model / num_heads = 2), llama3 rope scaling whose three branches all occur at d_k = 6 with an
# original length of 4, and a sliding window (2) shorter than the sentence: transformers' Mistral.
WINDOWED = dataclasses.replace(LLAMA, model=dataclasses.replace(
    LLAMA.model, head_dim=6, sliding_window=2, rope_scaling="llama3", rope_factor=8.0,
    rope_original_max_positions=4,
))  # fmt: skip
CONFIGS = {"llama-style": LLAMA, "windowed": WINDOWED}


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with norms that are not all 1: a gamma of ones would hide a swapped norm."""
    w = init_weights(config)
    rng = np.random.default_rng(7)
    for name in w:
        if name.endswith("/gamma"):
            w[name][:] = rng.uniform(0.5, 1.5, size=w[name].shape)
    return w


@pytest.mark.parametrize("name", CONFIGS)
def test_the_forward_equals_llama_for_causal_lm_in_float64(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    exact_llama.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = llama_with(config, w, torch.float64)
    exact_llama.inv_freq_64(model)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_attentions=True, output_hidden_states=True)
    m = config.model
    for i in range(m.num_decoder_layers):
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(m.num_heads):
            assert np.max(np.abs(stage[f"A{h + 1}"] - out.attentions[i][0, h].numpy())) <= 1e-12, (i, h)
        if i + 1 < m.num_decoder_layers:  # the residual stream after layer i
            assert (
                np.max(
                    np.abs(trace[f"decoder.{i}.residual-2"]["output"] - out.hidden_states[i + 1][0].numpy())
                )
                <= 1e-12
            )
    assert np.max(np.abs(trace["decoder.final-norm"]["output"] - out.hidden_states[-1][0].numpy())) <= 1e-12
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-10


@pytest.mark.parametrize("name", CONFIGS)
def test_every_gradient_equals_llama_autograd(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    exact_llama.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = llama_with(config, w, torch.float64)
    exact_llama.inv_freq_64(model)
    logits = model(torch.tensor([list(trace.target_ids)])).logits[0]
    targets = next_tokens(trace)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1]))
    loss.backward()
    assert ours.loss == pytest.approx(loss.item(), abs=1e-12)
    # Their gradients mapped onto our parameters: the family's name map walked forward (transposed,
    # and q, k, v side by side), as the converter maps their weights.
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    rows = llama_family.LLAMA.rows(model_keys(config.model))
    theirs = convert(rows, Taker(g, "their gradients"), np.dtype(np.float64))
    theirs |= {
        "decoder.embedding/E": g["model.embed_tokens.weight"],
        "output.logits/W": g["lm_head.weight"].T,
    }
    assert set(theirs) == set(w)  # every parameter, each once: Llama's, no more, no fewer
    assert {part.name for row in rows for part in row.theirs} | {
        "model.embed_tokens.weight",
        "lm_head.weight",
    } == set(g)
    for name, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[name])) <= 1e-8, name


def test_float32_equals_llama_as_shipped() -> None:
    config = dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, dtype="float32"))
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = llama_with(config, w, torch.float32)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_attentions=True)
    for h in range(config.model.num_heads):
        assert (
            np.max(np.abs(trace["decoder.0.masked-attention"][f"A{h + 1}"] - out.attentions[0][0, h].numpy()))
            <= 1e-5
        )
    logits = trace["output.logits"]["logits"]
    assert np.max(np.abs(logits - out.logits[0].numpy())) <= 1e-4 * max(1.0, float(np.max(np.abs(logits))))


def test_llama_style_verifies_explains_and_names_its_parameters() -> None:
    w = init_weights(LLAMA)
    assert sorted(n for n in w if n.startswith("decoder.0.")) == [
        "decoder.0.feed-forward/W_down", "decoder.0.feed-forward/W_gate", "decoder.0.feed-forward/W_up",
        "decoder.0.masked-attention/W_O", "decoder.0.masked-attention/W_QKV",
        "decoder.0.norm-1/gamma", "decoder.0.norm-2/gamma",
    ]  # fmt: skip
    assert w["decoder.0.masked-attention/W_QKV"].shape == (8, (4 + 2 * 2) * 2)
    assert "output.logits/W" in w and "decoder.positional-encoding/P" not in w
    trace = run_forward(LLAMA, w)
    assert all(c.ok for c in recompute(trace))
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        assert len(explain(trace, stage_id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")) >= 2


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",), conventions=True))
def test_any_switches_recompute_and_every_gradient_is_a_finite_difference(config: Config) -> None:
    """A sweep over every switch, these four included: verify's second computation agrees, and one
    entry of every parameter's gradient is the loss's central difference."""
    w = init_weights(config)
    trace = run_forward(config, w)
    assert all(c.ok for c in recompute(trace))
    b = backward(trace, w)
    for name, array in w.items():
        index = tuple(k // 2 for k in array.shape)
        assert loss_slope(config, w, name, index) == pytest.approx(
            b.weights[name][index], rel=1e-5, abs=1e-8
        ), name


def test_llama_style_trains_then_generates_its_sentence(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    runner, config, weights = CliRunner(), str(LLAMA_PATH), tmp_path / "llama.npz"
    trained = runner.invoke(app, ["train", "-c", config, "-o", str(weights)])
    assert trained.exit_code == 0, trained.output
    assert "has memorised it" in trained.output and "still wrong" not in trained.output
    generated = runner.invoke(app, ["generate", "-c", config, "-w", str(weights), "--compare"])
    assert generated.exit_code == 0, generated.output
    assert "<start> → the cat is sleeping comfortably <end>" in generated.output
    assert runner.invoke(app, ["verify", "-c", config, "-w", str(weights)]).exit_code == 0


def test_the_exports_carry_the_names_the_issue_pins(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    runner, config = CliRunner(), str(LLAMA_PATH)
    params = tmp_path / "p.npz"
    assert runner.invoke(app, ["train", "-c", config, "--steps", "1", "-o", str(params)]).exit_code == 0
    with np.load(params) as z:  # the parameters, as train writes them and --weights reads them
        shapes = {k: z[k].shape for k in z.files}
    assert shapes["decoder.0.masked-attention/W_QKV"] == (8, (4 + 2 * 2) * 2)
    assert shapes["decoder.1.masked-attention/W_O"] == (8, 8)
    assert shapes["decoder.0.feed-forward/W_gate"] == shapes["decoder.0.feed-forward/W_up"] == (8, 16)
    assert shapes["decoder.0.feed-forward/W_down"] == (16, 8)
    assert shapes["decoder.0.norm-1/gamma"] == shapes["decoder.final-norm/gamma"] == (8,)
    assert "decoder.0.norm-1/beta" not in shapes and shapes["decoder.embedding/E"] == (7, 8)
    assert shapes["output.logits/W"] == (8, 7)
    out = tmp_path / "t.json"
    assert runner.invoke(app, ["export", str(out), "-c", config]).exit_code == 0
    stages = {s["id"]: s for s in json.loads(out.read_text())["stages"]}
    attention = stages["decoder.0.masked-attention"]["matrices"]
    assert [n for n in attention if n.startswith("A")] == ["A1", "A2", "A3", "A4"]
    assert [n for n in attention if n[0] in "KV" and n[1:].isdigit()] == ["K1", "V1", "K2", "V2"]
    assert {"W_gate", "W_up", "W_down", "gate", "up", "hidden"} <= set(
        stages["decoder.0.feed-forward"]["matrices"]
    )
