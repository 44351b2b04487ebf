"""``configs/gemma-style.yaml``: Gemma 3's conventions together on the toy — norms on both sides,
the (1 + gamma) RMSNorm (QK-norm's too), embeddings scaled by √d_model, QK-norm per head, a score
scale of its own, multi-query attention, GeGLU, a tied output layer, a sliding layer (window 3,
θ 10,000) then a full one (θ 1,000,000) — held against transformers'
own ``Gemma3ForCausalLM`` loaded with the same weights (``compare.gemma``): every stage it has a
counterpart of and every gradient in float64, the logits in float32; then trained, it says its
sentence back.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_walkthrough.checkpoints.decoder import sizes
from transformer_walkthrough.checkpoints.family import convert, map_rows, model_keys
from transformer_walkthrough.checkpoints.tensors import Taker
from transformer_walkthrough.compare.gemma import gemma_map, gemma_with
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward

from . import exact_attention, exact_gemma

GEMMA_PATH = Path(__file__).resolve().parents[1] / "configs" / "gemma-style.yaml"
GEMMA = load_config(GEMMA_PATH)


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with every gamma (the norms' and QK-norm's) drawn from [-0.5, 0.5]: as
    stored, Gemma's gammas are offsets from 1, and their initial zeros would hide a swap."""
    w = init_weights(config)
    rng = np.random.default_rng(5)
    for name in w:
        if re.search(r"/gamma(_Q|_K)?$", name):
            w[name][:] = rng.uniform(-0.5, 0.5, size=w[name].shape)
    return w


def _gemma3(config: Config, w: Weights, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    exact_gemma.float64(monkeypatch)
    exact_attention.float64(monkeypatch)
    model = gemma_with(config, w, torch.float64)
    exact_attention.inv_freq_64(model)
    assert type(model).__name__ == "Gemma3ForCausalLM"
    return model


def test_the_config_is_gemma_3s_conventions() -> None:
    m = GEMMA.model
    assert (m.norm_placement, m.norm, m.qk_norm, m.feed_forward, m.activation) == (
        "both", "rmsnorm-plus-one", "head", "gated", "gelu-tanh",
    )  # fmt: skip
    assert m.scale_embeddings and m.tie_embeddings and m.kv_heads == 1 and m.score_divisor == 8.0
    assert (m.layer_types, m.sliding_window, m.local_rope_theta, m.rope_theta) == (
        ("sliding", "full"), 3, 10_000.0, 1_000_000.0,
    )  # fmt: skip


def test_each_layer_s_stage_says_its_kind_and_its_mask_shows_the_band() -> None:
    trace = run_forward(GEMMA)
    n = len(trace.target_tokens)
    assert n == 7  # <start> the cat is sleeping comfortably <end>: longer than the window
    below = np.tril(np.ones((n, n), dtype=bool))
    within = below & ~np.tril(below, -3)  # j ≤ i and i − j < 3
    for i, (kind, sees, theta) in enumerate([("sliding", within, 10_000), ("full", below, 1_000_000)]):
        stage = trace[f"decoder.{i}.masked-attention"]
        assert f"({kind}" in stage.title and f"Layer {i} is a {kind} layer" in stage.explanation
        assert np.array_equal(stage["M"] == 0, sees) and np.all(np.isneginf(stage["M"][~sees]))
        pos = np.arange(n)
        assert np.max(np.abs(stage["cos"][:, 1] - np.cos(pos / np.sqrt(theta)))) <= 1e-15
    assert np.isneginf(trace["decoder.0.masked-attention"]["M"][6, 0])  # the band cuts the corner


def test_every_stage_equals_gemma3_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _trained_looking(GEMMA)
    trace = run_forward(GEMMA, w)
    model = _gemma3(GEMMA, w, monkeypatch)
    seen: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if type(module).__name__ in ("Gemma3RMSNorm", "Gemma3MLP", "Gemma3Attention"):
            module.register_forward_hook(
                lambda mod, args, out, key=name: seen.__setitem__(
                    key, (out[0] if isinstance(out, tuple) else out)
                )
            )
    weights = exact_attention.attention_weights(model)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_hidden_states=True)
    m = GEMMA.model

    def close(ours: np.ndarray, theirs: torch.Tensor, where: str, tol: float = 1e-12) -> None:
        assert np.max(np.abs(ours - theirs.detach().numpy().reshape(ours.shape))) <= tol, where

    close(trace["decoder.embedding"]["output"], out.hidden_states[0][0], "embedding")
    ours_of = {
        "norm-1": "input_layernorm", "masked-attention": "self_attn",
        "output-norm-1": "post_attention_layernorm", "norm-2": "pre_feedforward_layernorm",
        "feed-forward": "mlp", "output-norm-2": "post_feedforward_layernorm",
    }  # fmt: skip
    for i in range(m.num_decoder_layers):
        for ours, theirs in ours_of.items():
            close(
                trace[f"decoder.{i}.{ours}"]["output"], seen[f"model.layers.{i}.{theirs}"][0], f"{i} {ours}"
            )
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(1, m.num_heads + 1):
            close(stage[f"A{h}"], weights[i][0, h - 1], f"{i} A{h}")
        # QK-norm: each head's normed queries, (1 + gamma_Q) ⊙ Q_h / √(mean(Q_h²) + eps)
        q = stage["Q1"]
        normed = (1 + stage["gamma_Q"]) * q / np.sqrt((q * q).mean(axis=1, keepdims=True) + m.layer_norm_eps)
        assert np.max(np.abs(stage["norm_Q1"] - normed)) <= 1e-15
        if i + 1 < m.num_decoder_layers:
            close(trace[f"decoder.{i}.residual-2"]["output"], out.hidden_states[i + 1][0], f"{i} stream")
    close(trace["decoder.final-norm"]["output"], seen["model.norm"][0], "final norm")
    close(trace["output.logits"]["logits"], out.logits[0], "logits", 1e-10)


def test_the_comparison_sees_the_window_and_the_local_base(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' Gemma 3 built as the config says has a sliding layer 0 (window 3, θ 10,000)
    and a full layer 1 (θ 1,000,000), and agrees with the toy; built with the global base in the
    local layer, or with no window, its layer 0 differs from the toy far beyond the tolerance of
    ``test_every_stage_equals_gemma3_in_float64``: that test would fail on either mistake."""
    w = _trained_looking(GEMMA)
    trace = run_forward(GEMMA, w)
    ids = torch.tensor([list(trace.target_ids)])
    m = GEMMA.model

    def first_layer_gap(config: Config) -> float:
        model = _gemma3(config, w, monkeypatch)
        weights = exact_attention.attention_weights(model)
        with torch.no_grad():
            model(ids)
        ours = np.stack([trace["decoder.0.masked-attention"][f"A{h}"] for h in range(1, m.num_heads + 1)])
        return float(np.max(np.abs(ours - weights[0][0].numpy())))

    hf = _gemma3(GEMMA, w, monkeypatch).config
    assert hf.layer_types == ["sliding_attention", "full_attention"] and hf.sliding_window == 3
    assert hf.rope_parameters["sliding_attention"]["rope_theta"] == 10_000
    assert hf.rope_parameters["full_attention"]["rope_theta"] == 1_000_000
    assert first_layer_gap(GEMMA) <= 1e-12
    global_base = dataclasses.replace(m, local_rope_theta=None)
    no_window = dataclasses.replace(m, layer_types=None, sliding_window=None, local_rope_theta=None)
    for wrong in (global_base, no_window):
        assert first_layer_gap(dataclasses.replace(GEMMA, model=wrong)) > 1e-4


def test_every_gradient_equals_gemma3_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _trained_looking(GEMMA)
    trace = run_forward(GEMMA, w)
    ours = backward(trace, w)
    model = _gemma3(GEMMA, w, monkeypatch)
    logits = model(torch.tensor([list(trace.target_ids)])).logits[0]
    targets = next_tokens(trace)
    torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1])).backward()
    g = {n: p.grad.numpy() for n, p in model.named_parameters()}
    keys = model_keys(GEMMA.model)
    theirs = convert(
        map_rows(gemma_map(GEMMA.model), keys, sizes(keys)), Taker(g, "their gradients"), np.dtype(np.float64)
    )
    theirs["decoder.embedding/E"] = g["model.embed_tokens.weight"]  # tied: the table and the output layer
    assert set(theirs) == set(w)
    for n, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[n])) <= 1e-8, n
    assert np.max(np.abs(ours.weights["decoder.1.masked-attention/gamma_K"])) > 1e-6


def test_float32_equals_gemma3_as_shipped() -> None:
    config = dataclasses.replace(GEMMA, model=dataclasses.replace(GEMMA.model, dtype="float32"))
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = gemma_with(config, w, torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([list(trace.target_ids)])).logits[0].numpy()
    ours = trace["output.logits"]["logits"]
    assert ours.dtype == np.float32
    assert np.max(np.abs(ours - logits)) <= 1e-4 * np.max(np.abs(logits))


def test_gemma_style_trains_then_generates_its_sentence(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    runner, config, weights = CliRunner(), str(GEMMA_PATH), tmp_path / "gemma.npz"
    trained = runner.invoke(app, ["train", "-c", config, "-o", str(weights)])
    assert trained.exit_code == 0, trained.output
    assert "has memorised it" in trained.output and "still wrong" not in trained.output
    generated = runner.invoke(app, ["generate", "-c", config, "-w", str(weights), "--compare"])
    assert generated.exit_code == 0, generated.output
    assert "<start> → the cat is sleeping comfortably <end>" in generated.output
    assert runner.invoke(app, ["verify", "-c", config, "-w", str(weights)]).exit_code == 0
