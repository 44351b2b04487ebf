"""The attention conventions of Gemma 2, Gemma 3 and OLMo 2 on the toy, held to transformers' own
attention: ``score_scale`` (Gemma's query_pre_attn_scalar), ``qk_norm: whole`` (OLMo 2's QK-norm over
the whole projection), ``attention_softcap`` and ``logit_softcap`` (Gemma 2's c·tanh(s/c)), and
``layer_types`` with ``local_rope_theta`` (Gemma 3's sliding and full layers, a rotary base each).

``compare.llama.llama_with`` builds transformers' Llama holding our weights with Gemma 2's, Gemma 3's
or OLMo 2's attention classes in it (and Gemma 3's forward, which gives each layer the mask and the
rotary tables of its type, and caps the logits); ``exact_attention`` removes their float32 casts.
Every attention weight and the logits must agree in float64 ≤ 1e-12, and every parameter's gradient
with autograd's ≤ 1e-8.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from transformer_walkthrough.checkpoints.family import convert, model_keys
from transformer_walkthrough.checkpoints.llama import LLAMA as LLAMA_FAMILY
from transformer_walkthrough.checkpoints.llama import QWEN3
from transformer_walkthrough.compare.llama import llama_with
from transformer_walkthrough.config import Config
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward

from . import exact_attention
from .test_llama_style import LLAMA


def toy(**model: object) -> Config:
    """The llama-style toy (two layers, four query heads over two key/value heads) with a convention."""
    return dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, **model))


CONFIGS = {
    "score_scale 256": toy(score_scale=256),
    "score_scale none": toy(score_scale="none"),
    "qk_norm whole": toy(qk_norm="whole", head_dim=4),
    "qk_norm whole, score_scale 3": toy(qk_norm="whole", head_dim=4, score_scale=3),
}


def trained_looking(config: Config) -> Weights:
    """The seed's weights with every gamma drawn from [0.5, 1.5] (gammas of one hide a swap of
    gamma_Q and gamma_K) and the projections doubled (large scores: a soft cap bites)."""
    w = init_weights(config)
    rng = np.random.default_rng(7)
    for name in w:
        if re.search(r"/gamma(_Q|_K)?$", name):
            w[name][:] = rng.uniform(0.5, 1.5, size=w[name].shape)
        if name.endswith("/W_QKV"):
            w[name][...] *= 2
    return w


def reference(config: Config, w: Weights) -> torch.nn.Module:
    model = llama_with(config, w, torch.float64)
    exact_attention.inv_freq_64(model)
    return model


@pytest.mark.parametrize("name", CONFIGS)
def test_every_attention_weight_and_logit_equals_transformers(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    exact_attention.float64(monkeypatch)
    config = CONFIGS[name]
    w = trained_looking(config)
    trace = run_forward(config, w)
    model = reference(config, w)
    weights = exact_attention.attention_weights(model)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]))
    m = config.model
    assert len(weights) == m.num_decoder_layers
    for i, theirs in enumerate(weights):
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(1, m.num_heads + 1):
            assert np.max(np.abs(stage[f"A{h}"] - theirs[0, h - 1].numpy())) <= 1e-12, (i, h)
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-12


def their_gradients(config: Config, model: torch.nn.Module) -> dict[str, np.ndarray]:
    """autograd's gradients named as our parameters: by the Llama (or Qwen3) family's record walked
    forward, as the converter walks their weights; OLMo 2's whole-projection norms by hand."""
    m = config.model
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    rows = (QWEN3 if m.qk_norm == "head" else LLAMA_FAMILY).rows(model_keys(m))
    theirs = convert(rows, lambda name, shape: g[name], np.dtype(np.float64))
    theirs |= {
        "decoder.embedding/E": g["model.embed_tokens.weight"],
        "output.logits/W": g["lm_head.weight"].T,
    }
    if m.qk_norm == "whole":
        for i in range(m.num_decoder_layers):
            for x, ours in (("q", "gamma_Q"), ("k", "gamma_K")):
                theirs[f"decoder.{i}.masked-attention/{ours}"] = g[
                    f"model.layers.{i}.self_attn.{x}_norm.weight"
                ]
    return theirs


@pytest.mark.parametrize("name", CONFIGS)
def test_every_gradient_equals_autograd(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    exact_attention.float64(monkeypatch)
    config = CONFIGS[name]
    w = trained_looking(config)
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = reference(config, w)
    logits = model(torch.tensor([list(trace.target_ids)])).logits[0]
    targets = next_tokens(trace)
    torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1])).backward()
    theirs = their_gradients(config, model)
    assert set(theirs) == set(w)  # every parameter once
    for key, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[key])) <= 1e-8, key
