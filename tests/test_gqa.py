"""Grouped-query attention (``num_kv_heads``) and Qwen2's ``attention_bias: qkv``: the layout of
W_QKV, shared key/value heads against torch (``repeat_kv``'s rule, written here), gradients that
sum over the query heads of a group, the second computation, explanations, the cached generation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.generation import compare, generate_cached, generated_ids
from transformer_walkthrough.model.kinds.attention import attention, attention_grads
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.explain import explain, explainable

from .strategies import SLOPE_ABS, loss_slope

GQA = ModelConfig(d_model=8, num_heads=4, num_kv_heads=2, d_ff=8, num_decoder_layers=2)
DECODER_ONLY = Config(encoder_words=0, model=ModelConfig(
    d_model=8, num_heads=4, num_kv_heads=2, num_encoder_layers=0, num_decoder_layers=2, norm_first=True,
    positional_encoding="rotary"))  # fmt: skip


def torch_gqa(x, W_QKV, W_O, h, G, mask):
    """The reference: transformers' repeat_kv rule (key/value head g serves query heads g·h/G …),
    written in torch: each kv head repeated h/G times, then ordinary multi-head attention."""
    d_k = W_O.shape[0] // h
    q, k, v = x @ W_QKV[:, : h * d_k], x @ W_QKV[:, h * d_k : (h + G) * d_k], x @ W_QKV[:, (h + G) * d_k :]
    q = q.reshape(len(x), h, d_k).transpose(0, 1)
    k = k.reshape(len(x), G, d_k).transpose(0, 1).repeat_interleave(h // G, dim=0)
    v = v.reshape(len(x), G, d_k).transpose(0, 1).repeat_interleave(h // G, dim=0)
    a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k) + mask, dim=-1)
    return (a @ v).transpose(0, 1).reshape(len(x), h * d_k) @ W_O, a


@pytest.mark.parametrize("G", [1, 2, 4])
def test_shared_heads_equal_torch_and_their_gradients_sum_over_the_group(G: int) -> None:
    rng = np.random.default_rng(G)
    h, d_k, n = 4, 3, 5
    x, W_QKV, W_O = (
        rng.normal(size=(n, 8)),
        rng.normal(size=(8, (h + 2 * G) * d_k)),
        rng.normal(size=(h * d_k, 8)),
    )
    mask = F.causal_mask(n)
    m = ModelConfig(d_model=8, num_heads=h, head_dim=d_k, num_kv_heads=G)
    r = attention(m, x, {"W_QKV": W_QKV, "W_O": W_O}, mask=mask)
    assert r.K.shape == r.V.shape == (G, n, d_k) and r.Q.shape == (h, n, d_k)
    tx, tW, tO = (torch.tensor(a, requires_grad=True) for a in (x, W_QKV, W_O))
    out, a = torch_gqa(tx, tW, tO, h, G, torch.tensor(mask))
    assert np.max(np.abs(r.output - out.detach().numpy())) <= 1e-12
    assert np.max(np.abs(r.A - a.detach().numpy())) <= 1e-12
    dy = rng.normal(size=r.output.shape)
    (out * torch.tensor(dy)).sum().backward()
    gr = attention_grads(r, dy)  # x gives queries, keys and values: its gradient sums all three
    assert np.max(np.abs(gr.x - tx.grad.numpy())) <= 1e-11
    assert np.max(np.abs(gr.params["W_QKV"] - tW.grad.numpy())) <= 1e-11
    assert np.max(np.abs(gr.params["W_O"] - tO.grad.numpy())) <= 1e-11


def test_the_stage_records_each_key_value_head_once_and_says_who_reads_it() -> None:
    config = Config(model=GQA)
    trace = run_forward(config)
    stage = trace["decoder.0.masked-attention"]
    names = list(stage.matrices)
    assert [n for n in names if n[0] in "KV" and n[1:].isdigit()] == ["K1", "V1", "K2", "V2"]
    assert [n for n in names if n.startswith("A")] == ["A1", "A2", "A3", "A4"]
    assert stage["W_Q1"].shape == stage["W_K2"].shape == (8, 2)
    w = init_weights(config)
    assert w["decoder.0.masked-attention/W_QKV"].shape == (8, (4 + 2 * 2) * 2)
    assert w["decoder.0.masked-attention/W_O"].shape == (8, 8)
    # W_QKV's columns: the 4 query heads' blocks, then the 2 key heads', then the 2 value heads'.
    W = w["decoder.0.masked-attention/W_QKV"]
    assert np.array_equal(stage["W_Q3"], W[:, 4:6]) and np.array_equal(stage["W_K2"], W[:, 10:12])
    assert np.array_equal(stage["W_V1"], W[:, 12:14])
    # Query heads 3 and 4 read key head 2: their scores are Q·K2ᵀ/√d_k.
    for h in (3, 4):
        assert np.max(np.abs(stage[f"S{h}"] - stage[f"Q{h}"] @ stage["K2"].T / math.sqrt(2))) <= 1e-15
    lines = explain(trace, stage.id, "K2", "0,1")
    assert "query heads 3, 4 all read K2" in lines[-1]
    assert "(query head 4 reads key head 2)" in explain(trace, stage.id, "S4", "1,0")[1]
    assert "g = ⌈h / 2⌉" in str(stage.formula)


@pytest.mark.parametrize(
    "config", [Config(model=GQA), DECODER_ONLY], ids=["encoder-decoder", "decoder-only-rotary"]
)
def test_every_gradient_by_finite_differences_verify_and_explain(config: Config) -> None:
    w = init_weights(config)
    trace = run_forward(config, w)
    assert all(c.ok for c in recompute(trace))
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        assert len(explain(trace, stage_id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")) >= 2
    b = backward(trace, w)
    name = "decoder.0.masked-attention/W_QKV"
    grad = b.weights[name]
    for index in [(0, 0), (1, 7), (2, 9), (3, 13), (7, 15)]:  # a query, a key and a value column
        assert loss_slope(config, w, name, index) == pytest.approx(grad[index], rel=1e-6, abs=SLOPE_ABS), (
            index
        )


@pytest.mark.parametrize("kv", [1, 2])
def test_cached_generation_keeps_the_shared_heads(kv: int) -> None:
    config = Config(encoder_words=0, model=ModelConfig(
        d_model=8, num_heads=4, num_kv_heads=kv, num_encoder_layers=0, num_decoder_layers=2,
        norm_first=True, positional_encoding="rotary"))  # fmt: skip
    w = init_weights(config)
    steps = generate_cached(config, w, config.token_ids(config.target_tokens[:2]), 5)
    assert steps[-1].layers[0].K.shape[0] == kv and steps[-1].layers[0].q.shape[0] == 4
    assert max(compare(config, w, steps)) <= 1e-12
    full = run_forward(config, w, target_ids=generated_ids(steps)[:-1])
    assert [s.chosen for s in steps] == list(full["output.probabilities"]["probabilities"][1:].argmax(axis=1))


def test_qkv_biases_have_no_output_bias() -> None:
    config = Config(model=ModelConfig(attention_bias="qkv", num_heads=2, num_kv_heads=1))
    w = init_weights(config)
    assert "decoder.0.masked-attention/b_QKV" in w and "decoder.0.masked-attention/b_O" not in w
    assert w["decoder.0.masked-attention/b_QKV"].shape == ((2 + 2 * 1) * 2,)
    for name in w:  # biases start at 0: give them numbers, so that they count
        if name.endswith("/b_QKV"):
            w[name][:] = np.random.default_rng(0).normal(size=w[name].shape)
    trace = run_forward(config, w)
    stage = trace["decoder.0.masked-attention"]
    assert "b_O" not in stage and "b_K1" in stage and "b_Q2" in stage
    assert np.max(np.abs(stage["K1"] - (stage["X"] @ stage["W_K1"] + stage["b_K1"]))) <= 1e-15
    assert all(c.ok for c in recompute(trace))
    assert "+ b_O" not in str(stage.formula) and "b_Qh" in str(stage.formula)
    b = backward(trace, w)
    name = "decoder.0.masked-attention/b_QKV"
    assert loss_slope(config, w, name, (5,)) == pytest.approx(b.weights[name][5], rel=1e-6, abs=SLOPE_ABS)


def test_bad_groupings_are_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"model\.num_kv_heads: 3 does not divide model\.num_heads = 4"):
        ModelConfig(d_model=8, num_heads=4, num_kv_heads=3)
    with pytest.raises(ConfigError, match=r"model\.num_kv_heads: 0 does not divide"):
        ModelConfig(num_kv_heads=0)
    with pytest.raises(ConfigError, match="attention_bias: must be one of false, true, qkv; got 1"):
        ModelConfig(attention_bias=1)
    path = tmp_path / "gqa.yaml"
    path.write_text("model:\n  d_model: 8\n  num_heads: 4\n  num_kv_heads: 2\n")
    runner = CliRunner()
    result = runner.invoke(app, ["verify", "-c", str(path), "--against", "torch"])
    assert result.exit_code == 2 and "no model.num_kv_heads: 2" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert runner.invoke(app, ["step", "-c", str(path), "--stage", "masked-attention"]).exit_code == 0
    other = tmp_path / "mha.yaml"
    other.write_text("model:\n  d_model: 8\n  num_heads: 4\n")
    weights = tmp_path / "w.npz"
    assert runner.invoke(app, ["train", "-c", str(other), "--steps", "1", "-o", str(weights)]).exit_code == 0
    result = runner.invoke(app, ["run", "-c", str(path), "-w", str(weights)])
    assert result.exit_code == 2 and "W_QKV" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_key_value_head_shares_the_rows_of_its_first_reader_on_screen() -> None:
    import itertools

    from transformer_walkthrough.views.stages import group_of

    stage = run_forward(DECODER_ONLY)["decoder.0.masked-attention"]
    keyed = ((n, group_of(stage, n)) for n in stage.matrices)
    runs = [[n for n, _ in run] for key, run in itertools.groupby(keyed, lambda t: t[1]) if key is not None]
    assert runs[:6] == [
        ["W_Q1", "W_K1", "W_V1"], ["Q1", "K1", "V1"], ["rot_Q1", "rot_K1"], ["S1", "S1+M", "A1", "O1"],
        ["W_Q2"], ["Q2"],
    ]  # fmt: skip
    assert ["W_Q3", "W_K2", "W_V2"] in runs and ["Q3", "K2", "V2"] in runs
