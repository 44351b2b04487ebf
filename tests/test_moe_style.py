"""A mixture of experts (configs/moe-style.yaml: the Llama-style toy with 4 experts, top 2, in every
layer) against the canonical implementation, transformers' own ``MixtralForCausalLM`` (eager),
loaded with the same weights: every attention weight, every router's logits (as transformers
returns them with ``output_router_logits=True``), the logits, the loss with its load-balancing term
and every parameter's gradient, in float64 (transformers' float32 casts removed: ``exact_moe``).
Then the kind's own promises: the stage in sparse layers only, the names it records, ties broken
as ``torch.topk`` breaks them, an expert no token chose getting a gradient of exactly 0, verify's
second computation, explain's arithmetic, and the config's refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.moe import experts_state, mixtral_with
from transformer_walkthrough.compare.verify import recompute
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.errors import ConfigError
from transformer_walkthrough.model.architecture import stage_ids
from transformer_walkthrough.model.backprop import backward, next_tokens
from transformer_walkthrough.model.topk import topk
from transformer_walkthrough.model.transformer import Weights, init_weights, run_forward
from transformer_walkthrough.views.explain import explain

from . import exact_moe
from .strategies import loss_slope

MOE_PATH = Path(__file__).resolve().parents[1] / "configs" / "moe-style.yaml"
MOE = load_config(MOE_PATH)


def _with(config: Config = MOE, **model: object) -> Config:
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **model))


def _trained_looking(config: Config) -> Weights:
    """The seed's weights with norms that are not all 1: a gamma of ones would hide a swapped norm."""
    w = init_weights(config)
    rng = np.random.default_rng(7)
    for name in w:
        if name.endswith("/gamma"):
            w[name][:] = rng.uniform(0.5, 1.5, size=w[name].shape)
    return w


def _unchosen(config: Config) -> tuple[Config, Weights]:
    """The first seed whose router sends no token to some expert of layer 0."""
    for seed in range(200):
        seeded = dataclasses.replace(config, seed=seed)
        w = _trained_looking(seeded)
        chosen = run_forward(seeded, w)["decoder.0.experts"]["chosen"]
        if len(np.unique(chosen)) < config.model.experts:
            return seeded, w
    raise AssertionError("no seed below 200 leaves an expert without a token")


def _tied(config: Config) -> Weights:
    """Weights whose router is all zeros: every expert equally probable, so every choice is a tie."""
    w = _trained_looking(config)
    for i in range(config.model.num_decoder_layers):
        w[f"decoder.{i}.experts/W_router"][:] = 0.0
    return w


WEIGHTS = {"seed": _trained_looking, "ties": _tied}


def _mixtral(monkeypatch: pytest.MonkeyPatch, config: Config, w: Weights) -> torch.nn.Module:
    exact_moe.float64(monkeypatch)
    model = mixtral_with(config, w, torch.float64)
    exact_moe.inv_freq_64(model)
    return model


@pytest.mark.parametrize("weights", WEIGHTS)
def test_the_forward_equals_mixtral_in_float64(monkeypatch: pytest.MonkeyPatch, weights: str) -> None:
    w = WEIGHTS[weights](MOE)
    trace = run_forward(MOE, w)
    model = _mixtral(monkeypatch, MOE, w)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_attentions=True, output_router_logits=True)
    m = MOE.model
    for i in range(m.num_decoder_layers):
        for h in range(m.num_heads):
            theirs = out.attentions[i][0, h].numpy()
            assert np.max(np.abs(trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"] - theirs)) <= 1e-12
        stage = trace[f"decoder.{i}.experts"]
        assert np.max(np.abs(stage["router_logits"] - out.router_logits[i].numpy())) <= 1e-12
        probs = torch.softmax(out.router_logits[i], dim=-1)
        chosen = torch.topk(probs, m.experts_per_token, dim=-1).indices.numpy()
        assert np.array_equal(stage["chosen"], chosen)  # the same experts, in the same order
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-10


def test_a_tied_router_chooses_as_torch_topk() -> None:
    """A router of zeros makes every row uniform: which two of four equal experts is the kernel's
    order (experts 2 and 3, not 0 and 1), and the stage chooses as it does."""
    trace = run_forward(MOE, _tied(MOE))
    assert np.array_equal(
        trace["decoder.0.experts"]["chosen"], np.tile([2.0, 3.0], (len(trace.target_tokens), 1))
    )
    assert np.all(trace["decoder.0.experts"]["routing_weights"] == 0.5)


def test_topk_breaks_every_tie_as_torch_does() -> None:
    """Rows of few distinct values (ties everywhere), at the sizes of today's MoEs and around
    torch's switch from nth_element to partial_sort (k·64 ≤ E) and libstdc++'s 16-element cut."""
    rng = np.random.default_rng(0)
    for E in (2, 4, 8, 16, 17, 60, 64, 128, 129):
        for k in sorted({1, 2, 4, 8, min(E, 18), E}):
            if k > E:
                continue
            for levels in (1, 2, 3):
                x = rng.integers(0, levels, size=(8, E)).astype(np.float64) / levels
                expected = torch.topk(torch.tensor(x), k, dim=-1).indices.numpy()
                assert np.array_equal(topk(x, k), expected), (E, k, levels)


@pytest.mark.parametrize("weights", ["seed", "ties", "unchosen"])
def test_every_gradient_equals_mixtral_autograd(monkeypatch: pytest.MonkeyPatch, weights: str) -> None:
    """The loss is Mixtral's: the cross-entropy plus router_aux_loss_coef × the load-balancing loss,
    and every parameter's gradient is autograd's through it, the top-k indices held fixed."""
    config, w = _unchosen(MOE) if weights == "unchosen" else (MOE, WEIGHTS[weights](MOE))
    trace = run_forward(config, w)
    ours = backward(trace, w)
    model = _mixtral(monkeypatch, config, w)
    targets, m = next_tokens(trace), config.model
    out = model(torch.tensor([list(trace.target_ids)]), output_router_logits=True)
    # transformers' causal-LM loss casts the logits to float32: the same cross-entropy in float64
    cross_entropy = torch.nn.functional.cross_entropy(out.logits[0][:-1], torch.tensor(targets[:-1]))
    loss = cross_entropy + m.router_aux_loss_coef * out.aux_loss
    loss.backward()
    assert targets[-1] == -1
    assert ours.aux == pytest.approx(out.aux_loss.item(), abs=1e-12)
    assert ours.loss == pytest.approx(loss.item(), abs=1e-12)
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    for i in range(m.num_decoder_layers):
        grads = Weights({k: ours.weights[k] for k in ours.weights}, w.uses)
        for name, theirs in experts_state(grads, i, m).items():
            assert np.max(np.abs(theirs - g[f"model.layers.{i}.mlp.{name}"])) <= 1e-8, (i, name)
    assert np.max(np.abs(ours.weights["decoder.embedding/E"] - g["model.embed_tokens.weight"])) <= 1e-8
    assert np.max(np.abs(ours.weights["output.logits/W"] - g["lm_head.weight"].T)) <= 1e-8
    qkv = ours.weights["decoder.1.masked-attention/W_QKV"][:, : m.num_heads * m.d_k]
    assert np.max(np.abs(qkv - g["model.layers.1.self_attn.q_proj.weight"].T)) <= 1e-8
    if weights == "unchosen":
        stage = trace["decoder.0.experts"]
        idle = [e for e in range(m.experts) if e not in stage["chosen"]]
        for e in idle:  # no rows, and a gradient of exactly 0 (autograd's too, checked above)
            assert stage[f"expert{e}.X"].shape == (0, m.d_model)
            for local in ("W_gate", "W_up", "W_down"):
                assert not ours.weights[f"decoder.0.experts/expert{e}.{local}"].any()


def test_float32_equals_mixtral_as_shipped() -> None:
    config = _with(dtype="float32")
    w = _trained_looking(config)
    trace = run_forward(config, w)
    model = mixtral_with(config, w, torch.float32)
    with torch.no_grad():
        out = model(torch.tensor([list(trace.target_ids)]), output_router_logits=True)
    logits = trace["output.logits"]["logits"]
    assert np.max(np.abs(logits - out.logits[0].numpy())) <= 1e-4 * max(1.0, float(np.max(np.abs(logits))))
    router = trace["decoder.1.experts"]["router_logits"]
    assert np.max(np.abs(router - out.router_logits[1].numpy())) <= 1e-4 * max(
        1.0, float(np.max(np.abs(router)))
    )


def test_sparse_layers_have_experts_and_dense_ones_a_feed_forward() -> None:
    config = _with(num_decoder_layers=4, sparse_step=2, dense_layers=(3,))
    layers = [[s.split(".")[2] for s in stage_ids(config) if s.startswith(f"decoder.{i}.")] for i in range(4)]
    assert [layer[4] for layer in layers] == ["feed-forward", "experts", "feed-forward", "feed-forward"]
    assert layers[1] == ["norm-1", "masked-attention", "residual-1", "norm-2", "experts", "residual-2"]
    trace = run_forward(config)
    assert [s.id for s in trace] == stage_ids(config)
    assert all(c.ok for c in recompute(trace))


def test_the_stage_records_the_names_the_issue_pins() -> None:
    config = _with(shared_experts=1, shared_expert_d_ff=6)
    stage = run_forward(config)["decoder.0.experts"]
    per_expert = ["X", "W_gate", "gate", "W_up", "up", "hidden", "W_down", "output"]
    assert list(stage.matrices) == [
        "X", "W_router", "router_logits", "router_probs", "chosen", "routing_weights",
        *(f"expert{e}.{name}" for e in range(4) for name in per_expert),
        *(f"shared.{name}" for name in per_expert), "W_shared_gate", "shared_gate", "output",
    ]  # fmt: skip
    n = len(stage["X"])
    assert stage["router_logits"].shape == stage["router_probs"].shape == (n, 4)
    assert stage["chosen"].shape == stage["routing_weights"].shape == (n, 2)
    assert sum(len(stage[f"expert{e}.X"]) for e in range(4)) == 2 * n  # each token to 2 experts
    assert stage["shared.hidden"].shape == (n, 6) and stage["shared_gate"].shape == (n, 1)
    # each expert's rows are the tokens routed to it, labelled by them
    chosen = stage["chosen"].astype(int)
    for e in range(4):
        routed = [stage.matrices["X"].rows[t] for t in range(n) if e in chosen[t]]
        assert list(stage.matrices[f"expert{e}.X"].rows) == routed


def test_the_output_is_the_weighed_sum_of_the_chosen_experts() -> None:
    """By hand, for every token: Σ over its k chosen experts of weight · that expert's row."""
    stage = run_forward(MOE)["decoder.1.experts"]
    chosen = stage["chosen"].astype(int)
    for t in range(len(chosen)):
        total = np.zeros(MOE.model.d_model)
        for slot, e in enumerate(chosen[t]):
            rows = [
                r
                for r, label in enumerate(stage.matrices[f"expert{e}.X"].rows)
                if label == stage.matrices["X"].rows[t]
            ]
            total += stage["routing_weights"][t, slot] * stage[f"expert{e}.output"][rows[0]]
        assert np.allclose(stage["output"][t], total, rtol=0, atol=1e-14)
    assert np.allclose(stage["routing_weights"].sum(axis=1), 1.0)  # norm_topk


def test_without_norm_topk_the_weights_are_the_probabilities() -> None:
    stage = run_forward(_with(norm_topk=False))["decoder.0.experts"]
    chosen = stage["chosen"].astype(int)
    assert np.array_equal(stage["routing_weights"], np.take_along_axis(stage["router_probs"], chosen, axis=1))
    assert np.all(stage["routing_weights"].sum(axis=1) < 1)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"shared_experts": 1},
        {"norm_topk": False, "experts_per_token": 1},
        {"feed_forward": "standard", "ffn_bias": True},
    ],
)
def test_every_gradient_is_a_finite_difference(changes: dict) -> None:
    """The shared expert and its gate, no renormalisation, the standard form with biases: one
    entry of every parameter's gradient is the loss's central difference."""
    config = _with(**changes)
    w = _trained_looking(config)
    b = backward(run_forward(config, w), w)
    for name, array in w.items():
        index = tuple(k // 2 for k in array.shape)
        assert loss_slope(config, w, name, index) == pytest.approx(
            b.weights[name][index], rel=1e-5, abs=1e-8
        ), name


def test_verify_recomputes_the_routing_and_every_expert() -> None:
    trace = run_forward(_with(shared_experts=1))
    checks = [c for c in recompute(trace) if c.stage == "decoder.0.experts"]
    assert all(c.ok for c in checks)
    said = " | ".join(c.what for c in checks)
    for part in ("router_probs = softmax", "chosen", "routing_weights", "expert3", "shared_gate", "output"):
        assert part in said


def test_explain_writes_the_routing_and_the_sum() -> None:
    trace = run_forward(MOE)
    stage = trace["decoder.0.experts"]
    lines = explain(trace, "decoder.0.experts", "routing_weights", "1,0")
    text = "\n".join(lines)
    e = int(stage["chosen"][1, 0])
    assert f"expert {e}" in text and "renormalised" in text and "top-k cut" in text
    top = stage["router_probs"][1, stage["chosen"][1].astype(int)]
    assert f"{top[0] / top.sum():.4f}"[:5] in lines[-1]
    out = "\n".join(explain(trace, "decoder.0.experts", "output", "2,3"))
    for e in stage["chosen"][2].astype(int):
        assert f"expert {e}: weight" in out


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("experts: 4\n  experts_per_token: 5", "experts_per_token"),
        ("experts_per_token: 2", "experts_per_token"),
        ("experts: 4", "experts_per_token"),
        ("experts: 4\n  experts_per_token: 0", "experts_per_token"),
        ("experts: 4\n  experts_per_token: 2\n  shared_experts: 2", "shared_experts"),
        ("experts: 4\n  experts_per_token: 2\n  sparse_step: 0", "sparse_step"),
        ("experts: 4\n  experts_per_token: 2\n  dense_layers: [2]", "dense_layers"),  # layers 0 and 1
        ("experts: 4\n  experts_per_token: 2\n  dense_layers: [-1]", "dense_layers"),
    ],
)
def test_bad_expert_configs_are_one_line_and_exit_2(tmp_path: Path, yaml: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"encoder_words: 0\nmodel:\n  num_encoder_layers: 0\n  {yaml}\n")
    with pytest.raises(ConfigError, match=key):
        load_config(path)
    result = CliRunner().invoke(app, ["run", "-c", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:") and len(result.stderr.strip().splitlines()) == 1
    assert key in result.stderr and "Traceback" not in result.output


def test_the_load_balancing_loss_is_switch_transformers_by_hand() -> None:
    """E · Σᵢ fᵢ·Pᵢ over both layers' rows, counted here from the recorded choice and probabilities;
    a router of zeros (every probability 1/E, each token to 2 of 4) gives k·(1/E)·E·… = its even value."""
    trace = run_forward(MOE)
    stages = [trace[f"decoder.{i}.experts"] for i in range(2)]
    rows = sum(len(s["X"]) for s in stages)
    f = [sum(int(np.sum(s["chosen"] == e)) for s in stages) / rows for e in range(4)]
    P = [sum(float(np.sum(s["router_probs"][:, e])) for s in stages) / rows for e in range(4)]
    w = init_weights(MOE)
    assert backward(trace, w).aux == pytest.approx(
        4 * sum(a * b for a, b in zip(f, P, strict=True)), abs=1e-14
    )
    tied = _tied(MOE)
    assert backward(run_forward(MOE, tied), tied).aux == pytest.approx(2.0, abs=1e-14)


def test_the_experts_command_shows_every_token_and_each_load() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["experts", "-c", str(MOE_PATH), "--layer", "1"])
    assert result.exit_code == 0, result.output
    stage = run_forward(MOE)["decoder.1.experts"]
    chosen = stage["chosen"].astype(int)
    for t, label in enumerate(stage.matrices["X"].rows):
        line = next(x for x in result.output.splitlines() if x.strip().startswith(label + " "))
        assert [int(e) for e in __import__("re").findall(r"expert (\d+) ×", line)] == list(chosen[t])
    counts = [int(np.sum(chosen == e)) for e in range(4)]
    for e, n in enumerate(counts):
        assert f"expert {e}: {n} token" in result.output or (
            n == 0 and f"expert {e}: no token" in result.output
        )
    one = runner.invoke(app, ["experts", "-c", str(MOE_PATH), "--layer", "1", "--token", "2"])
    assert one.exit_code == 0 and one.output.count("→") == 1
    bad = runner.invoke(app, ["experts", "-c", str(MOE_PATH), "--layer", "5"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error:")
    llama = runner.invoke(app, ["experts", "-c", str(MOE_PATH.with_name("llama-style.yaml"))])
    assert llama.exit_code == 2 and "no experts" in llama.stderr


def test_moe_style_trains_then_generates_its_sentence(tmp_path: Path) -> None:
    runner, config, weights = CliRunner(), str(MOE_PATH), tmp_path / "moe.npz"
    trained = runner.invoke(app, ["train", "-c", config, "-o", str(weights)])
    assert trained.exit_code == 0, trained.output
    assert "has memorised it" in trained.output and "load-balancing loss" in trained.output
    assert "  layer 0:\n    expert 0: " in trained.output and "  layer 1:\n    expert 0: " in trained.output
    generated = runner.invoke(app, ["generate", "-c", config, "-w", str(weights)])
    assert generated.exit_code == 0, generated.output
    assert "<start> → the cat is sleeping comfortably <end>" in generated.output
    assert runner.invoke(app, ["verify", "-c", config, "-w", str(weights)]).exit_code == 0
