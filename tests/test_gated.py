"""The gated feed-forward (``model.feed_forward: gated``) and the feed-forward without biases
(``model.ffn_bias: false``): by hand, against PyTorch, by finite differences, through the whole
model, verify, explain, the exports, the size estimate and the command line.

Every expected number here is computed by hand, by torch, or by central differences: none is
copied from the program's output.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from tests.arithmetic import reads
from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import against_torch, recompute
from transformer_walkthrough.config import (
    ACTIVATIONS,
    FEED_FORWARDS,
    SWITCHES,
    TORCH_LAYERS,
    Config,
    ModelConfig,
    config_from_dict,
)
from transformer_walkthrough.errors import ConfigError, WalkthroughError
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.size import check_config, trace_size
from transformer_walkthrough.model.transformer import forward, init_weights, run_forward
from transformer_walkthrough.model.weights import Weights
from transformer_walkthrough.views.documents.latex import to_latex
from transformer_walkthrough.views.documents.markdown import to_markdown
from transformer_walkthrough.views.documents.text import tex_symbol
from transformer_walkthrough.views.explain import explain, explainable

from .strategies import configs
from .test_backward import check

RNG = np.random.default_rng(2020)
TF = torch.nn.functional
TORCH_ACTIVATIONS = {
    "relu": TF.relu,
    "gelu": TF.gelu,
    "gelu-tanh": lambda x: TF.gelu(x, approximate="tanh"),
    "silu": TF.silu,
}
GATED = ["X", "W_gate", "b_gate", "gate", "W_up", "b_up", "up", "hidden", "W_down", "b_down", "output"]


def model(**kw: object) -> Config:
    """A config of the article's sizes with these model keys; decoder-only when asked."""
    if kw.pop("decoder_only", False):
        return Config(encoder_words=0, model=ModelConfig(num_encoder_layers=0, num_decoder_layers=2, **kw))
    return Config(model=ModelConfig(**kw))


# ---- The function, by hand and against torch ----


def test_gated_feed_forward_by_hand() -> None:
    x = np.array([[1.0, -1.0]])
    W_gate = np.array([[2.0, 1.0], [1.0, 3.0]])  # gate = [2 − 1, 1 − 3] = [1, −2]
    W_up = np.array([[1.0, 0.0], [-1.0, 2.0]])  # up = [1 + 1, 0 − 2] = [2, −2]
    W_down = np.array([[1.0, -1.0], [4.0, 0.5]])
    # ReGLU: hidden = [max(0, 1)·2, max(0, −2)·(−2)] = [2, 0]; output = [2·1 + 0·4, 2·(−1) + 0·0.5]
    r = F.gated_feed_forward(x, W_gate, W_up, W_down, "relu")
    assert r.gate.tolist() == [[1.0, -2.0]] and r.up.tolist() == [[2.0, -2.0]]
    assert r.hidden.tolist() == [[2.0, 0.0]] and r.output.tolist() == [[2.0, -2.0]]
    # With biases: gate = [1.5, −1.5], up = [2, −1], hidden = [1.5·2, 0] = [3, 0], output = [3 + 1, −3 + 1]
    b = F.gated_feed_forward(x, W_gate, W_up, W_down, "relu", np.array([0.5, 0.5]), np.array([0.0, 1.0]),
                             np.array([1.0, 1.0]))  # fmt: skip
    assert b.gate.tolist() == [[1.5, -1.5]] and b.up.tolist() == [[2.0, -1.0]]
    assert b.hidden.tolist() == [[3.0, 0.0]] and b.output.tolist() == [[4.0, -2.0]]
    # SwiGLU: silu(1) = 1/(1 + e⁻¹), silu(−2) = −2/(1 + e²)
    s = F.gated_feed_forward(x, W_gate, W_up, W_down, "silu")
    h0, h1 = 2 / (1 + math.exp(-1)), (-2 / (1 + math.exp(2))) * -2
    assert s.hidden[0] == pytest.approx([h0, h1], abs=1e-15)
    assert s.output[0] == pytest.approx([h0 + 4 * h1, -h0 + 0.5 * h1], abs=1e-15)
    # GeGLU: gelu(1) = Φ(1) = (1 + erf(1/√2))/2, gelu(−2) = −2·Φ(−2)
    g = F.gated_feed_forward(x, W_gate, W_up, W_down, "gelu")
    phi = lambda v: (1 + math.erf(v / math.sqrt(2))) / 2  # noqa: E731
    assert g.hidden[0] == pytest.approx([2 * phi(1), -2 * phi(-2) * -2], abs=1e-15)


def test_gated_feed_forward_keeps_float32() -> None:
    x, W_g, W_u = (RNG.normal(size=s).astype(np.float32) for s in ((3, 4), (4, 6), (4, 6)))
    W_d, b = RNG.normal(size=(6, 4)).astype(np.float32), RNG.normal(size=6).astype(np.float32)
    for activation in ACTIVATIONS:
        r = F.gated_feed_forward(x, W_g, W_u, W_d, activation, b, b, b[:4])
        assert {a.dtype for a in r} == {np.dtype(np.float32)}, activation
        g = F.gated_feed_forward_backward(np.ones_like(r.output), x, W_g, W_u, W_d, r, activation)
        assert {a.dtype for a in g} == {np.dtype(np.float32)}, activation


def _problem(bias: bool) -> dict[str, np.ndarray]:
    arrays = dict(x=RNG.normal(size=(3, 4)), W_gate=RNG.normal(size=(4, 6)), W_up=RNG.normal(size=(4, 6)),
                  W_down=RNG.normal(size=(6, 4)))  # fmt: skip
    if bias:
        arrays |= dict(b_gate=RNG.normal(size=6), b_up=RNG.normal(size=6), b_down=RNG.normal(size=4))
    return arrays


def _ours(a: dict[str, np.ndarray], activation: str) -> F.GatedFeedForward:
    return F.gated_feed_forward(a["x"], a["W_gate"], a["W_up"], a["W_down"], activation,
                                a.get("b_gate"), a.get("b_up"), a.get("b_down"))  # fmt: skip


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_gated_feed_forward_equals_torch(activation: str, bias: bool) -> None:
    a = _problem(bias)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in a.items()}
    act = TORCH_ACTIVATIONS[activation]
    zero = torch.zeros((), dtype=torch.float64)
    gate = t["x"] @ t["W_gate"] + t.get("b_gate", zero)
    up = t["x"] @ t["W_up"] + t.get("b_up", zero)
    out = (act(gate) * up) @ t["W_down"] + t.get("b_down", zero)
    r = _ours(a, activation)
    assert np.max(np.abs(r.output - out.detach().numpy())) <= 1e-12
    R = RNG.normal(size=out.shape)
    (out * torch.tensor(R)).sum().backward()
    g = F.gated_feed_forward_backward(R, a["x"], a["W_gate"], a["W_up"], a["W_down"], r, activation)
    for name in a:
        ours = g.x if name == "x" else getattr(g, name)
        assert np.max(np.abs(ours - t[name].grad.numpy())) <= 1e-10, name


def test_swiglu_is_torchs_silu_of_the_gate_times_up() -> None:
    """The formula as written in the task, F.silu(x@Wg)*(x@Wu)@Wd, in float64."""
    a = _problem(False)
    x, Wg, Wu, Wd = (torch.tensor(a[k]) for k in ("x", "W_gate", "W_up", "W_down"))
    theirs = TF.silu(x @ Wg) * (x @ Wu) @ Wd
    assert np.max(np.abs(_ours(a, "silu").output - theirs.numpy())) <= 1e-12


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_gated_feed_forward_backward_by_finite_differences(activation: str, bias: bool) -> None:
    a = _problem(bias)
    R = RNG.normal(size=(3, 4))
    r = _ours(a, activation)
    assert (r.gate < 0).any() and (r.gate > 0).any()  # both sides of the bend are exercised
    g = F.gated_feed_forward_backward(R, a["x"], a["W_gate"], a["W_up"], a["W_down"], r, activation)
    for name in a:
        check(
            g.x if name == "x" else getattr(g, name),
            lambda: float(np.sum(R * _ours(a, activation).output)),
            a[name],
        )


# ---- The whole model ----

LAYOUTS = {
    "post-norm": {},
    "pre-norm": dict(norm_first=True),
    "decoder-only": dict(
        decoder_only=True, norm_first=True, positional_encoding="learned", tie_embeddings=True
    ),
}
FORMS = {
    "gated": dict(feed_forward="gated", activation="silu"),
    "gated-no-bias": dict(feed_forward="gated", ffn_bias=False),  # ReGLU: ReLU, the default activation
    "standard-no-bias": dict(ffn_bias=False, activation="gelu-tanh"),
}
CASES = [
    pytest.param({**layout, **form}, id=f"{f}-{n}")
    for n, layout in LAYOUTS.items()
    for f, form in FORMS.items()
]


def loss_of(config: Config, w: Weights, targets: np.ndarray) -> float:
    """The mean next-token cross-entropy, from the untraced forward pass's probabilities."""
    p = forward(config, w)
    rows = np.flatnonzero(targets >= 0)
    return -math.fsum(math.log(v) for v in p[rows, targets[rows]]) / len(rows)


@pytest.mark.parametrize("kw", CASES)
def test_every_gradient_of_the_model_by_finite_differences(kw: dict) -> None:
    config = model(**kw)
    w = init_weights(config)
    trace = run_forward(config, w)
    b = backward(trace, w)
    targets = next_tokens(trace)
    assert b.loss == pytest.approx(loss_of(config, w, targets), abs=1e-12)
    assert set(b.weights) == set(w)
    for name, array in w.items():
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            old = array[index]
            array[index] = old + 1e-6
            up = loss_of(config, w, targets)
            array[index] = old - 1e-6
            down = loss_of(config, w, targets)
            array[index] = old
            numeric[index] = (up - down) / 2e-6
        np.testing.assert_allclose(b.weights[name], numeric, rtol=1e-5, atol=1e-8, err_msg=name)


@pytest.mark.parametrize("kw", CASES)
def test_verify_and_explain_every_matrix(kw: dict) -> None:
    trace = run_forward(model(**kw))
    checks = recompute(trace)
    assert {c.stage for c in checks} == set(trace.stages)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        for cell in ("0,0", f"{m.shape[0] - 1},{m.shape[1] - 1}"):
            assert len(explain(trace, stage_id, name, cell)) >= 2, (stage_id, name)
    stages = backward(trace, init_weights(trace.config)).stages
    for stage in trace:  # every matrix has a gradient of its shape, in the stage's order
        assert list(stages[stage.id]) == list(stage.matrices), stage.id
        assert all(stages[stage.id][n].shape == m.shape for n, m in stage.matrices.items()), stage.id


def test_the_matrices_and_the_parameters_are_named_and_pinned() -> None:
    config = model(feed_forward="gated", activation="silu")
    ffn = run_forward(config)["decoder.0.feed-forward"]
    assert list(ffn.matrices) == GATED
    d, f = config.model.d_model, config.model.d_ff
    shapes = {
        "W_gate": (d, f),
        "b_gate": (f,),
        "W_up": (d, f),
        "b_up": (f,),
        "W_down": (f, d),
        "b_down": (d,),
    }
    w = init_weights(config)
    for side in ("encoder", "decoder"):
        names = [n for n in w if n.startswith(f"{side}.0.feed-forward/")]
        assert names == [f"{side}.0.feed-forward/{p}" for p in shapes]
        assert [w[n].shape for n in names] == list(shapes.values())
    bare = run_forward(model(feed_forward="gated", ffn_bias=False))["decoder.0.feed-forward"]
    assert list(bare.matrices) == ["X", "W_gate", "gate", "W_up", "up", "hidden", "W_down", "output"]
    plain = init_weights(model(feed_forward="gated", ffn_bias=False, decoder_only=True))
    assert [n for n in plain if "feed-forward" in n] == [
        f"decoder.{i}.feed-forward/{p}" for i in (0, 1) for p in ("W_gate", "W_up", "W_down")
    ]
    standard = init_weights(model(ffn_bias=False))
    assert [n for n in standard if "feed-forward" in n] == [
        f"{side}.0.feed-forward/{p}" for side in ("encoder", "decoder") for p in ("W_1", "W_2")
    ]
    assert list(run_forward(model(ffn_bias=False))["encoder.0.feed-forward"].matrices) == [
        "X", "W_1", "pre", "hidden", "W_2", "output",
    ]  # fmt: skip


def test_a_feed_forward_switch_changes_nothing_but_the_feed_forward() -> None:
    """Each parameter has its own stream: the weights the forms share are equal, and W_gate, W_up
    and W_down are Glorot/Xavier draws, the biases nn.Linear's, as W_1 and W_2 and theirs."""
    base, gated = init_weights(Config()), init_weights(model(feed_forward="gated"))
    shared = [n for n in base if n in gated]
    assert shared == [n for n in base if "feed-forward" not in n]
    assert all(np.array_equal(base[n], gated[n]) for n in shared)
    plain = init_weights(model(ffn_bias=False))
    assert set(plain) == {n for n in base if "/b_" not in n or "feed-forward" not in n}
    assert all(np.array_equal(base[n], plain[n]) for n in plain)
    d, f = 4, 8
    for name, bound in (("W_gate", math.sqrt(6 / (d + f))), ("W_down", math.sqrt(6 / (f + d))),
                        ("b_up", 1 / math.sqrt(d)), ("b_down", 1 / math.sqrt(f))):  # fmt: skip
        a = gated[f"decoder.0.feed-forward/{name}"]
        assert np.abs(a).max() <= bound and np.abs(a).max() > bound / 2, name


def test_a_hidden_cell_is_explained_with_its_numbers() -> None:
    trace = run_forward(model(feed_forward="gated", activation="silu"))
    ffn = trace["decoder.0.feed-forward"]
    i, j = 2, 5
    x = ffn["X"][i].tolist()
    gate = (
        math.fsum(a * b for a, b in zip(x, ffn["W_gate"][:, j].tolist(), strict=True)) + ffn["b_gate"][0, j]
    )
    up = math.fsum(a * b for a, b in zip(x, ffn["W_up"][:, j].tolist(), strict=True)) + ffn["b_up"][0, j]
    sigma = 1 / (1 + math.exp(-gate))
    act = gate * sigma
    assert ffn["hidden"][i, j] == pytest.approx(act * up, abs=1e-14)
    lines = explain(trace, ffn.id, "hidden", f"{i},{j}", digits=4)
    reads("decoder.0.feed-forward · hidden[comfortably, f5] = hidden[2, 5] = {}", lines[0], act * up)
    reads(
        "hidden = act(gate) ⊙ up, cell by cell (SwiGLU, as Llama): gate[2, 5] = {}, up[2, 5] = {}",
        lines[1],
        gate,
        up,
    )
    assert lines[2] == (
        "act(gate) = SiLU(gate) = gate·σ(gate), σ(x) = 1/(1 + e^(−x))   (SiLU, also called swish)"
    )
    reads("  σ({}) = 1/(1 + e^({})) = {}", lines[3], gate, -gate, sigma)
    reads("  {}·{} = {}", lines[4], gate, sigma, act)
    reads("  hidden = act(gate)·up = {}·{} = {}", lines[5], act, up, act * up)
    assert len(lines) == 6
    g = explain(trace, ffn.id, "gate", f"{i},{j}", digits=4)
    assert g[1] == "gate = X·W_gate + b_gate: row 2 of X (comfortably) times column 5 of W_gate"
    reads("= {}", g[-2], gate, search=True)  # after "+ b_gate[5] …", then the note on what the gate does
    u = explain(trace, ffn.id, "up", f"{i},{j}", digits=4)
    assert u[1].startswith("up = X·W_up + b_up: row 2")
    reads("= {}", u[-2], up, search=True)


def test_a_reglu_cell_and_an_output_cell_without_biases() -> None:
    trace = run_forward(model(feed_forward="gated", ffn_bias=False))  # relu: ReGLU
    ffn = trace["encoder.0.feed-forward"]
    assert "(ReGLU)" in str(ffn.formula) and "ReGLU" in ffn.explanation
    gate, up = ffn["X"] @ ffn["W_gate"], ffn["X"] @ ffn["W_up"]
    i, j = np.argwhere(gate < 0)[0]  # a unit the gate turns off
    lines = explain(trace, ffn.id, "hidden", f"{i},{j}", digits=4)
    off = "   (negative: this unit is off here)"
    reads(f"act(gate) = ReLU(gate) = max(0, gate): max(0, {{}}) = 0.0000{off}", lines[2], gate[i, j])
    reads("  hidden = act(gate)·up = 0.0000·{} = 0.0000", lines[3], up[i, j])
    hidden = np.maximum(gate, 0) * up
    out = explain(trace, ffn.id, "output", "0,1", digits=4)
    assert out[1] == "output = hidden·W_down: row 0 of hidden times column 1 of W_down"
    assert len(out) == 3  # no bias line
    reads("= {}", out[-1], float(hidden[0] @ ffn["W_down"][:, 1]), search=True)


def test_verify_catches_a_wrong_up() -> None:
    trace = run_forward(model(feed_forward="gated", activation="gelu"))
    trace["decoder.0.feed-forward"]["up"][1, 2] += 1e-6
    bad = [c for c in recompute(trace) if not c.ok]
    assert [(c.stage, c.what) for c in bad] == [
        ("decoder.0.feed-forward", "gate, up, hidden = gelu(gate) ⊙ up and output recomputed")
    ]
    assert bad[0].max_diff == pytest.approx(1e-6, rel=1e-6)


def test_the_formulas_and_the_documents_are_the_configs() -> None:
    m = model(feed_forward="gated", activation="gelu-tanh").model
    assert str(KINDS["feed-forward"].formula(m)).splitlines() == [
        "gate = X·W_gate + b_gate",
        "up = X·W_up + b_up",
        "hidden = act(gate) ⊙ up    (GeGLU, tanh form)",
        "act(gate) = gate·(1 + tanh(√(2/π)·(gate + 0.044715·gate³)))/2    (GELU, tanh form)",
        "output = hidden·W_down + b_down",
    ]
    plain = dataclasses.replace(m, ffn_bias=False, feed_forward="standard", activation="relu")
    assert (
        str(KINDS["feed-forward"].formula(plain))
        == "pre = X·W_1\nhidden = max(0, pre)    (ReLU)\noutput = hidden·W_2"
    )
    trace = run_forward(model(feed_forward="gated", activation="silu"))
    ffn = trace["decoder.0.feed-forward"]
    assert [tex_symbol(ffn, n) for n in ("W_gate", "W_up", "W_down", "b_gate", "gate", "up", "hidden")] == [
        r"W_{\mathrm{gate}}", r"W_{\mathrm{up}}", r"W_{\mathrm{down}}", r"b_{\mathrm{gate}}",
        r"\mathrm{gate}", r"\mathrm{up}", r"\mathrm{hidden}",
    ]  # fmt: skip
    tex = to_latex(trace, [ffn], 2)
    assert r"\mathrm{hidden} &= \operatorname{act}(\mathrm{gate}) \odot \mathrm{up}" in tex
    assert r"\mathrm{gate} &= X\,W_{\mathrm{gate}} + b_{\mathrm{gate}}" in tex
    assert r"\mathrm{gate} / (1 + e^{-\mathrm{gate}})" in tex and "W_1" not in tex
    assert "hidden = act(gate) ⊙ up    (SwiGLU, as Llama)" in to_markdown(trace, [ffn], 2)


def test_the_gated_latex_compiles(tmp_path: Path) -> None:
    from .test_documents import compile_latex, overfull

    trace = run_forward(model(feed_forward="gated", activation="gelu-tanh", ffn_bias=False))
    log, _ = compile_latex(to_latex(trace, [trace["decoder.0.feed-forward"]], 2), tmp_path)
    assert overfull(log) == []


def test_float32_gated_model_stays_float32() -> None:
    t32 = run_forward(model(feed_forward="gated", activation="silu", dtype="float32"))
    t64 = run_forward(model(feed_forward="gated", activation="silu"))
    assert {m.values.dtype for s in t32 for m in s.matrices.values()} == {np.dtype(np.float32)}
    assert all(c.ok for c in recompute(t32))
    p32, p64 = t32["output.probabilities"]["probabilities"], t64["output.probabilities"]["probabilities"]
    np.testing.assert_allclose(p32, p64, atol=1e-5)


def test_the_size_estimate_counts_a_gated_trace() -> None:
    for config in (model(feed_forward="gated"), model(feed_forward="gated", d_model=16, num_heads=4, d_ff=32,
                                                      num_decoder_layers=3)):  # fmt: skip
        trace = run_forward(config)
        m = config.model
        tokens = (len(config.source_tokens), len(config.target_tokens), len(config.vocabulary or ()))
        size = trace_size(m, *tokens)
        numbers = sum(x.values.size for s in trace for x in s.matrices.values())
        assert size == (numbers, sum(len(s.matrices) for s in trace))
        plain = trace_size(dataclasses.replace(m, feed_forward="standard"), *tokens)
        # a third weight and its bias, and one more d_ff-wide matrix (gate, up, hidden for pre, hidden)
        layers = m.num_encoder_layers + m.num_decoder_layers
        rows = m.num_encoder_layers * tokens[0] + m.num_decoder_layers * tokens[1]
        assert size.numbers - plain.numbers == layers * (m.d_model * m.d_ff + m.d_ff) + rows * m.d_ff
        assert size.tables - plain.tables == 3 * layers


def test_a_gated_model_too_large_is_refused_before_any_work() -> None:
    """The size check counts the gated form: a model that fits as standard is refused as gated, when its
    weights are about to be drawn (``model.size.check_config``), before any is."""

    def numbers(d_ff: int, form: str) -> int:  # on the article's sentence: 3 + 4 tokens, 7 words
        m = ModelConfig(d_model=512, num_heads=8, d_ff=d_ff, num_encoder_layers=6, num_decoder_layers=6,
                        feed_forward=form)  # fmt: skip
        return trace_size(m, 3, 4, 7).numbers

    d_ff = 2048 * 40  # the 12 feed-forwards dominate the cost
    while numbers(d_ff, "standard") * 8 > 2**31:
        d_ff -= 2048
    assert numbers(d_ff, "gated") * 8 > 2**31
    sizes = dict(d_model=512, num_heads=8, d_ff=d_ff, num_encoder_layers=6, num_decoder_layers=6)
    check_config(config_from_dict({"model": sizes}))  # fits
    gated = config_from_dict({"model": {**sizes, "feed_forward": "gated"}})
    with pytest.raises(
        ConfigError, match=r"this model would need about .* GiB of matrices; the limit is 2 GiB"
    ):
        init_weights(gated)


def test_train_then_generate_a_llama_like_model() -> None:
    from transformer_walkthrough.model.training import generate, train

    llama = dict(norm_first=True, feed_forward="gated", activation="silu", ffn_bias=False)
    config = model(decoder_only=True, positional_encoding="learned", max_positions=16, **llama)
    w = init_weights(config)
    assert train(config, w)[-1] < 0.01
    steps, _ = generate(config, w)
    assert tuple(config.vocabulary[s.chosen] for s in steps) == config.target_tokens[1:]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",), conventions=True))
def test_any_conventions_verify_and_backpropagate(config: Config) -> None:
    """Any combination, both feed-forwards among them: verify agrees, and the feed-forward's
    gradients equal central differences of the loss at a few entries."""
    w = init_weights(config)
    trace = run_forward(config, w)
    assert all(c.ok for c in recompute(trace))
    b = backward(trace, w)
    targets = next_tokens(trace)
    for name in [n for n in w if "feed-forward" in n][:4]:
        array = w[name]
        for index in list(np.ndindex(array.shape))[:3]:
            old = array[index]
            array[index] = old + 1e-6
            up = loss_of(config, w, targets)
            array[index] = old - 1e-6
            down = loss_of(config, w, targets)
            array[index] = old
            assert (up - down) / 2e-6 == pytest.approx(b.weights[name][index], rel=1e-5, abs=1e-8), (
                name,
                index,
            )


# ---- The values, defined once; an unknown one raises everywhere ----


def test_the_switches_and_the_torch_layers_name_the_values() -> None:
    assert list(FEED_FORWARDS) == ["standard", "gated"]
    assert SWITCHES["feed_forward"] == ("standard", "gated") and SWITCHES["ffn_bias"] == (True, False)
    assert TORCH_LAYERS["feed_forward"] == ("standard",) and TORCH_LAYERS["ffn_bias"] == (True,)
    assert ModelConfig().feed_forward == "standard" and ModelConfig().ffn_bias is True


def test_an_unknown_feed_forward_raises_everywhere() -> None:
    trace = run_forward(model(feed_forward="gated"))
    object.__setattr__(trace.config.model, "feed_forward", "glu")  # as if added to conventions.py alone
    m = trace.config.model
    kind = KINDS["feed-forward"]
    for describe in (kind.formula, kind.explanation, lambda m: kind.params(m, None)):
        with pytest.raises(ValueError, match="unknown feed_forward 'glu'"):
            describe(m)
    with pytest.raises(ValueError, match="unknown feed_forward 'glu'"):
        recompute(trace)
    for name in ("hidden", "output"):
        with pytest.raises(ValueError, match="unknown feed_forward 'glu'"):
            explain(trace, "encoder.0.feed-forward", name, "0,0")
    with pytest.raises(ValueError, match="unknown feed_forward 'glu'"):
        backward(trace, init_weights(model(feed_forward="gated")))
    with pytest.raises(ValueError, match="unknown feed_forward 'glu'"):
        run_forward(trace.config)


def test_torch_refuses_what_its_layers_do_not_have() -> None:
    for kw, shown in (
        (dict(feed_forward="gated"), "model.feed_forward: gated"),
        (dict(ffn_bias=False), "model.ffn_bias"),
    ):
        config = model(**kw)
        with pytest.raises(WalkthroughError, match=f"transformer layers have no {shown}"):
            against_torch(run_forward(config), init_weights(config))


# ---- The command line ----


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


GATED_YAML = "model:\n  feed_forward: gated\n  activation: silu\n"


def test_every_command_runs_a_gated_config(runner: CliRunner, tmp_path: Path) -> None:
    c = _write(tmp_path, GATED_YAML)
    x, w = str(tmp_path / "x"), str(tmp_path / "w.npz")
    for args in (["run", "-c", c], ["run", "-c", c, "--backward"],
                 ["step", "-c", c, "--stage", "feed-forward"], ["verify", "-c", c], ["stages", "-c", c],
                 ["explain", "-c", c, "--stage", "decoder.0.feed-forward", "-m", "hidden", "--cell", "1,3"],
                 ["export", f"{x}.npz", "-c", c], ["export", f"{x}.json", "-c", c, "--backward"],
                 ["export", f"{x}.md", "-c", c], ["export", f"{x}.tex", "-c", c],
                 ["train", "-c", c, "--steps", "3", "-o", w], ["generate", "-c", c, "-w", w],
                 ["diff", str(_write(tmp_path, "", "a.yaml")), c]):  # fmt: skip
        result = runner.invoke(app, args, env={"COLUMNS": "100"})
        assert result.exit_code == 0, (args, result.stderr[-2000:])
    step = runner.invoke(app, ["step", "-c", c, "--stage", "feed-forward"], env={"COLUMNS": "100"}).stdout
    assert "decoder.0.feed-forward" in step and "encoder.0.feed-forward" in step
    assert "hidden = act(gate) ⊙ up    (SwiGLU, as Llama)" in step
    for name in GATED:
        assert f"\n{name}  (" in step or f"   {name}  (" in step, name


def test_the_exports_name_the_gated_parameters(runner: CliRunner, tmp_path: Path) -> None:
    c = _write(tmp_path, GATED_YAML)
    ffn = [f"decoder.0.feed-forward/{p}" for p in ("W_gate", "b_gate", "W_up", "b_up", "W_down", "b_down")]
    assert runner.invoke(app, ["export", str(tmp_path / "x.npz"), "-c", c]).exit_code == 0
    with np.load(tmp_path / "x.npz") as npz:
        assert set(ffn) <= set(npz.files) and "decoder.0.feed-forward/W_1" not in npz.files
        assert npz["decoder.0.feed-forward/W_gate"].shape == (4, 8)
        assert npz["decoder.0.feed-forward/W_down"].shape == (8, 4)
    assert runner.invoke(app, ["export", str(tmp_path / "x.json"), "-c", c]).exit_code == 0
    doc = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))
    assert doc["config"]["model"]["feed_forward"] == "gated" and doc["config"]["model"]["ffn_bias"] is True
    stage = next(s for s in doc["stages"] if s["id"] == "decoder.0.feed-forward")
    assert list(stage["matrices"]) == GATED
    assert (
        runner.invoke(app, ["train", "-c", c, "--steps", "2", "-o", str(tmp_path / "w.npz")]).exit_code == 0
    )
    with np.load(tmp_path / "w.npz") as npz:
        assert [n for n in npz.files if n.startswith("decoder.0.feed-forward/")] == ffn
    bare = _write(tmp_path, "model: {feed_forward: gated, ffn_bias: false}\n", "bare.yaml")
    assert (
        runner.invoke(app, ["train", "-c", bare, "--steps", "2", "-o", str(tmp_path / "bare.npz")]).exit_code
        == 0
    )
    with np.load(tmp_path / "bare.npz") as npz:
        assert [n for n in npz.files if "feed-forward" in n] == [
            f"{side}.0.feed-forward/{p}"
            for side in ("encoder", "decoder")
            for p in ("W_gate", "W_up", "W_down")
        ]


def _one_line_error(runner: CliRunner, args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.stdout[-500:], result.stderr[-500:])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_against_torch_refuses_in_one_line(runner: CliRunner, tmp_path: Path) -> None:
    line = _one_line_error(runner, ["verify", "-c", _write(tmp_path, GATED_YAML), "--against", "torch"])
    assert line == (
        "error: --against torch: PyTorch's transformer layers have no model.feed_forward: gated "
        "(only standard); verify recomputes it a second way without them"
    )
    line = _one_line_error(
        runner, ["verify", "-c", _write(tmp_path, "model: {ffn_bias: false}\n"), "--against", "torch"]
    )
    assert "PyTorch's transformer layers have no model.ffn_bias" in line


def test_an_unknown_feed_forward_is_refused_naming_the_values(runner: CliRunner, tmp_path: Path) -> None:
    c = _write(tmp_path, "model:\n  feed_forward: glu\n")
    line = _one_line_error(runner, ["run", "-c", c])
    assert line == f"error: {c}: model.feed_forward: must be one of standard, gated; got 'glu'"


def test_weights_of_the_other_form_name_the_switch(runner: CliRunner, tmp_path: Path) -> None:
    np.savez(tmp_path / "standard.npz", **init_weights(Config()))
    gated = model(feed_forward="gated")
    with pytest.raises(WalkthroughError) as err:
        load_weights(gated, tmp_path / "standard.npz")
    assert str(err.value).endswith("; it fits this config with model.feed_forward: standard")
    line = _one_line_error(
        runner, ["run", "-c", _write(tmp_path, GATED_YAML), "-w", str(tmp_path / "standard.npz")]
    )
    assert line.endswith("; it fits this config with model.feed_forward: standard")
    np.savez(tmp_path / "gated.npz", **init_weights(gated))
    with pytest.raises(WalkthroughError, match=r"it fits this config with model\.feed_forward: gated$"):
        load_weights(Config(), tmp_path / "gated.npz")
    with pytest.raises(WalkthroughError, match=r"it fits this config with model\.ffn_bias: true$"):
        load_weights(model(feed_forward="gated", ffn_bias=False), tmp_path / "gated.npz")
    np.savez(tmp_path / "bare.npz", **init_weights(model(ffn_bias=False)))
    with pytest.raises(WalkthroughError, match=r"it fits this config with model\.ffn_bias: false$"):
        load_weights(Config(), tmp_path / "bare.npz")
    loaded = load_weights(gated, tmp_path / "gated.npz")
    assert np.array_equal(
        loaded["encoder.0.feed-forward/W_up"], init_weights(gated)["encoder.0.feed-forward/W_up"]
    )
