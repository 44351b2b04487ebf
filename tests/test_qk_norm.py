"""QK-norm (``qk_norm: head``): an RMSNorm over each head's d_k columns of the queries and the keys,
each with its own gamma, after the projection and before the rotation, as Qwen3, Gemma 3 and OLMoE.

The toy with it is held against transformers' own ``Qwen3ForCausalLM`` holding our weights (Qwen3
is Llama with exactly this norm; ``compare.llama.llama_with`` walks Qwen3's name map backward):
every normed query and key, every attention weight, the residual stream and the logits in float64,
and every parameter's gradient against autograd. Then what the
piece owns: its recorded names, its explainer's arithmetic, verify's second computation, its
formula in LaTeX and MathML, and the cached generation, which must keep the normed keys.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from transformer_walkthrough.checkpoints.family import convert, model_keys
from transformer_walkthrough.checkpoints.llama import QWEN3
from transformer_walkthrough.checkpoints.tensors import Taker
from transformer_walkthrough.compare.llama import llama_with
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.documents.formulas import mathml as formula_mathml
from transformer_walkthrough.views.explain import explain

from . import exact_llama
from .test_llama_style import LLAMA

QK = dataclasses.replace(LLAMA, model=dataclasses.replace(LLAMA.model, qk_norm="head"))
# A head of 6 columns (not d_model / num_heads = 2): the norm's mean is over six numbers.
WIDE = dataclasses.replace(QK, model=dataclasses.replace(QK.model, head_dim=6))
CONFIGS = {"qk-norm": QK, "qk-norm, head_dim 6": WIDE}
STAGE = "decoder.0.masked-attention"


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with every gamma drawn from [0.5, 1.5]: gammas of one would hide a swap
    of gamma_Q and gamma_K, or a norm applied to the wrong side."""
    w = init_weights(config)
    rng = np.random.default_rng(7)
    for name in w:
        if re.search(r"/gamma(_Q|_K)?$", name):
            w[name][:] = rng.uniform(0.5, 1.5, size=w[name].shape)
    return w


@pytest.mark.parametrize("name", CONFIGS)
def test_the_forward_equals_qwen3_in_float64(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    exact_llama.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = llama_with(config, w, torch.float64)  # a Qwen3ForCausalLM under qk_norm: head
    exact_llama.inv_freq_64(model)
    normed: dict[tuple[int, str], torch.Tensor] = {}  # (layer, "q" or "k") -> (n, heads, d_k)
    for i, layer in enumerate(model.model.layers):
        for which in "qk":
            norm = getattr(layer.self_attn, f"{which}_norm")
            norm.register_forward_hook(lambda mod, args, out, key=(i, which): normed.__setitem__(key, out[0]))
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_attentions=True, output_hidden_states=True)
    m = config.model
    for i in range(m.num_decoder_layers):
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(1, m.num_heads + 1):
            assert np.max(np.abs(stage[f"norm_Q{h}"] - normed[i, "q"][:, h - 1].numpy())) <= 1e-12, (i, h)
            assert np.max(np.abs(stage[f"A{h}"] - out.attentions[i][0, h - 1].numpy())) <= 1e-12, (i, h)
        for g in range(1, m.kv_heads + 1):
            assert np.max(np.abs(stage[f"norm_K{g}"] - normed[i, "k"][:, g - 1].numpy())) <= 1e-12, (i, g)
        stream = trace[f"decoder.{i}.residual-2"]["output"]
        assert (
            np.max(np.abs(stream - out.hidden_states[i + 1][0].numpy())) <= 1e-12
            or i + 1 == m.num_decoder_layers
        )
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-10


@pytest.mark.parametrize("name", CONFIGS)
def test_every_gradient_equals_qwen3_autograd(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    exact_llama.float64(monkeypatch)
    config = CONFIGS[name]
    w = _trained_looking(config)
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = llama_with(config, w, torch.float64)  # a Qwen3ForCausalLM under qk_norm: head
    exact_llama.inv_freq_64(model)
    logits = model(torch.tensor([list(trace.target_ids)])).logits[0]
    targets = next_tokens(trace)
    torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(targets[:-1])).backward()
    # Their gradients mapped onto our parameters by Qwen3's own record, walked forward as the
    # converter walks their weights: q_norm onto gamma_Q, k_norm onto gamma_K.
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    rows = QWEN3.rows(model_keys(config.model))
    theirs = convert(rows, Taker(g, "their gradients"), np.dtype(np.float64))
    theirs |= {
        "decoder.embedding/E": g["model.embed_tokens.weight"],
        "output.logits/W": g["lm_head.weight"].T,
    }
    assert {part.name for row in rows for part in row.theirs} >= {
        f"model.layers.{i}.self_attn.{x}_norm.weight"
        for i in range(config.model.num_decoder_layers)
        for x in "qk"
    }
    assert set(theirs) == set(w)  # every parameter once: Qwen3's, no more, no fewer
    for name, grad in ours.weights.items():
        assert np.max(np.abs(grad - theirs[name])) <= 1e-8, name
    assert np.max(np.abs(ours.weights[f"{STAGE}/gamma_Q"])) > 1e-6  # the gammas do learn


def test_the_stage_records_the_normed_queries_and_keys_between_projection_and_rotation() -> None:
    trace = run_forward(QK, _trained_looking(QK))
    names = list(trace[STAGE].matrices)
    # 4 query heads over 2 key/value heads: K and V once per key/value head, at its first reader
    assert names[:16] == [
        "X", "M", "gamma_Q", "gamma_K", "cos", "sin", "W_Q1", "W_K1", "W_V1", "Q1", "K1", "V1",
        "norm_Q1", "norm_K1", "rot_Q1", "rot_K1",
    ]  # fmt: skip
    assert names[-4:] == ["O4", "concat", "W_O", "output"] and "norm_K2" in names and "norm_K3" not in names
    stage, eps = trace[STAGE], QK.model.layer_norm_eps
    for h in range(1, 5):  # the norm by hand, row by row: gamma ⊙ q / √(mean(q²) + eps)
        q = stage[f"Q{h}"]
        expected = stage["gamma_Q"][0] * q / np.sqrt((q * q).mean(axis=1, keepdims=True) + eps)
        assert np.max(np.abs(stage[f"norm_Q{h}"] - expected)) <= 1e-15
    # the rotation turns the normed queries, not the projections
    cos, sin = stage["cos"], stage["sin"]
    x = stage["norm_Q2"]
    turned = x * cos + np.concatenate([-x[:, 1:], x[:, :1]], axis=1) * sin
    assert np.max(np.abs(stage["rot_Q2"] - turned)) <= 1e-15
    # and the scores multiply the rotated normed queries and keys
    assert np.max(np.abs(stage["S3"] - stage["rot_Q3"] @ stage["rot_K2"].T / math.sqrt(2))) <= 1e-15


def test_without_qk_norm_nothing_is_recorded_and_no_gamma_exists() -> None:
    trace = run_forward(LLAMA)
    assert not any(n.startswith(("norm_", "gamma_")) for n in trace[STAGE].matrices)
    assert not any("gamma_" in name for name in init_weights(LLAMA))


def test_explain_writes_out_a_normed_cell_whose_numbers_give_its_value() -> None:
    w = _trained_looking(WIDE)
    trace = run_forward(WIDE, w)
    stage = trace[STAGE]
    lines = explain(trace, STAGE, "norm_K2", "3,4", digits=8)
    text = "\n".join(lines)
    k = stage["K2"][3]
    root = math.sqrt(math.fsum(v * v for v in k) / 6 + WIDE.model.layer_norm_eps)
    printed = [float(n) for n in re.findall(r"-?\d+\.\d+", text.replace("−", "-"))]
    assert "QK-norm" in text
    for value in (root, stage["gamma_K"][0, 4]):  # each shown to 8 decimals or more
        assert any(abs(n - value) <= 1e-8 for n in printed), value
    assert lines[-1].startswith("  × gamma_K[4] ")
    assert abs(printed[-1] - stage["norm_K2"][3, 4]) <= 1e-8


def test_verify_recomputes_the_normed_queries_and_keys_by_hand() -> None:
    trace = run_forward(WIDE, _trained_looking(WIDE))
    checks = recompute(trace)
    assert all(c.ok for c in checks)
    head = [c for c in checks if c.stage == STAGE and c.what.startswith("head 1:")]
    assert len(head) == 1 and "norm_Q, norm_K" in head[0].what
    # a wrong gamma is caught
    trace[STAGE].matrices["norm_Q1"].values[0, 0] += 1e-6
    assert not all(c.ok for c in recompute(trace) if c.stage == STAGE)


def test_the_cached_generation_keeps_the_normed_keys() -> None:
    w = _trained_looking(QK)
    steps = generate_cached(QK, w, [0, 2, 3], 4)
    diff = compare(QK, w, steps)
    assert max(diff) <= 1e-12, diff
    # the cache holds rot_K (normed, then rotated): not the rotated projections
    cached = steps[-1].layers[0].K
    full = run_forward(QK, w, target_ids=[i for s in steps for i in s.ids])[STAGE]
    n = cached.shape[1]
    assert np.max(np.abs(cached[0] - full["rot_K1"][:n])) <= 1e-12
    assert np.max(np.abs(cached[0] - full["K1"][:n])) > 1e-3


def test_the_formula_says_the_norm_and_typesets() -> None:
    f = KINDS["masked-attention"].formula(WIDE.model)
    plain = str(f)
    assert "norm_Q_h = gamma_Q ⊙ Q_h / √(mean(Q_h²) + eps)" in plain
    assert "rot_Q_h = norm_Q_h ⊙ cos + rotate_half(norm_Q_h) ⊙ sin" in plain
    tex = "\n".join(latex_lines(f))
    assert r"\hat{Q}_{h} &= \gamma^{Q} \odot Q_{h} / \sqrt{\operatorname{mean}(Q_{h}^{2}) + \epsilon}" in tex
    assert r"\tilde{Q}_{h} &= \hat{Q}_{h} \odot \cos" in tex
    assert '<mover accent="true"><mi>Q</mi><mo>^</mo></mover>' in formula_mathml(f)


def test_a_config_file_switches_it_on_and_refuses_other_values(tmp_path) -> None:
    from transformer_walkthrough.errors import WalkthroughError

    path = tmp_path / "qk.yaml"
    path.write_text(
        "encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  num_decoder_layers: 1\n  qk_norm: head\n"
    )
    assert load_config(path).model.qk_norm == "head"
    path.write_text(
        "encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  num_decoder_layers: 1\n  qk_norm: heads\n"
    )
    with pytest.raises(WalkthroughError, match="qk_norm"):
        load_config(path)


@pytest.mark.parametrize("qk_norm", ["head", "whole"])
def test_under_gemma_s_rmsnorm_the_formula_says_one_plus_gamma(qk_norm: str, tmp_path) -> None:
    """With ``norm: rmsnorm-plus-one`` QK-norm multiplies by 1 + gamma (gamma stored as the offset
    from 1): the formula says so in the terminal, the report's MathML and the LaTeX article, and
    that formula, computed by hand from the stage's stored gammas, is the stage's normed rows."""
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    from .test_gemma_style import GEMMA_PATH

    text = GEMMA_PATH.read_text(encoding="utf-8").replace("qk_norm: head", f"qk_norm: {qk_norm}")
    path = tmp_path / "gemma-qk.yaml"
    path.write_text(text, encoding="utf-8")
    config = load_config(path)
    assert config.model.qk_norm == qk_norm and config.model.norm == "rmsnorm-plus-one"
    w = init_weights(config)
    rng = np.random.default_rng(3)
    for name in w:  # stored gammas away from 0, where 1 + gamma and gamma differ
        if re.search(r"/gamma_[QK]$", name):
            w[name][:] = rng.uniform(-0.5, 0.5, size=w[name].shape)
    stage, eps = run_forward(config, w)[STAGE], config.model.layer_norm_eps
    q = np.hstack([stage[f"Q{h}"] for h in range(1, 5)]) if qk_norm == "whole" else stage["Q2"]
    by_formula = (1 + stage["gamma_Q"][0]) * q / np.sqrt((q * q).mean(axis=1, keepdims=True) + eps)
    normed = by_formula[:, 4:8] if qk_norm == "whole" else by_formula  # head 2's columns
    assert np.max(np.abs(stage["norm_Q2"] - normed)) <= 1e-15

    runner, c = CliRunner(), str(path)
    terminal = runner.invoke(app, ["step", "-c", c, "-s", STAGE], env={"COLUMNS": "160"})
    assert terminal.exit_code == 0, terminal.output
    h = "_h" if qk_norm == "head" else ""
    assert f"norm_Q{h} = (1 + gamma_Q) ⊙ Q{h} / √(mean(Q{h}²) + eps)" in terminal.output
    assert f"norm_K{'_g' if h else ''} = (1 + gamma_K) ⊙ K" in terminal.output
    assert "= gamma_Q ⊙" not in terminal.output and "= gamma_K ⊙" not in terminal.output
    assert "gamma_Q and gamma_K are stored as the offsets from 1 of the scales applied" in terminal.output

    report, article = tmp_path / "report.html", tmp_path / "article.tex"
    for out in (report, article):
        written = runner.invoke(app, ["export", str(out), "-c", c, "-s", "masked-attention"])
        assert written.exit_code == 0, written.output
    page = report.read_text(encoding="utf-8")
    for letter in "QK":
        gamma = f"<msup><mi>γ</mi><mi>{letter}</mi></msup>"
        assert f"<mo>=</mo><mo>(</mo><mn>1</mn><mo>+</mo>{gamma}<mo>)</mo><mo>⊙</mo>" in page
        assert f"<mo>=</mo>{gamma}<mo>⊙</mo>" not in page
    tex = article.read_text(encoding="utf-8")
    assert r"(1 + \gamma^{Q}) \odot Q" in tex and r"(1 + \gamma^{K}) \odot K" in tex
    assert r"= \gamma^{Q} \odot" not in tex and r"= \gamma^{K} \odot" not in tex
    assert "stored as the offsets from 1 of the scales applied" in tex
    lines = explain(run_forward(config, w), STAGE, "norm_Q2", "3,1")
    assert "then scaled by 1 + gamma_Q" in " ".join(lines[:2])
