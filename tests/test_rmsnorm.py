"""``model.norm: rmsnorm``: RMSNorm wherever a norm stands (add-norm-k, norm-k, final-norm).

The function by hand and against ``torch.nn.RMSNorm``, its gradient against torch autograd and
finite differences; the whole model's gradient by finite differences of the loss, computed here
from the probabilities alone; ``verify``, ``explain`` and the CLI under the switch. Every expected
number is computed here: by hand, by torch, or by finite differences.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch  # a test dependency (test_torch_reference.py): never skipped
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from tests.arithmetic import reads
from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import against_torch, recompute
from transformer_walkthrough.config import NORMS, SWITCHES, TORCH_LAYERS, Config, ModelConfig
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.files.export import schema, to_json, trace_to_dict
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model import functional as F
from transformer_walkthrough.model.architecture import stage_ids
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.kinds.norms import NORM_PIECES
from transformer_walkthrough.model.training import generate, train
from transformer_walkthrough.model.transformer import (
    Weights,
    forward,
    init_weights,
    run_forward,
)
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.documents.formulas import mathml as formula_mathml
from transformer_walkthrough.views.explain import explain, explainable

from .strategies import configs
from .test_backward import check

RNG = np.random.default_rng(1919)

POST = Config(model=ModelConfig(norm="rmsnorm"))
PRE = Config(model=ModelConfig(norm="rmsnorm", norm_first=True))
DECODER_ONLY = Config(
    encoder_words=0,
    model=ModelConfig(num_encoder_layers=0, num_decoder_layers=2, norm_first=True, norm="rmsnorm",
                      positional_encoding="learned", tie_embeddings=True, activation="gelu-tanh"),
)  # fmt: skip
MODELS = {"post-norm": POST, "pre-norm": PRE, "decoder-only": DECODER_ONLY}


def norm_stages(config: Config) -> list[str]:
    return [sid for sid in stage_ids(config) if "norm" in sid.rsplit(".", 1)[-1]]


def away_from_one(w: Weights, seed: int = 3) -> Weights:
    """Every gamma away from 1, so that a forgotten or doubled gamma cannot hide."""
    rng = np.random.default_rng(seed)
    for name in w:
        if name.endswith("/gamma"):
            w[name][...] = rng.uniform(0.5, 2.0, size=w[name].shape)
    return w


# ---- the function ---------------------------------------------------------------------------


def test_rms_norm_by_hand() -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    # mean(x²) = (1 + 4 + 9 + 16) / 4 = 7.5; with eps 0.5 the root is √8 = 2√2.
    root = 2 * math.sqrt(2)
    expected = [2 * 1 / root, 2 / root, 3 / root, 4 / root]  # gamma = [2, 1, 1, 1]
    assert expected == pytest.approx(
        [1 / math.sqrt(2), 1 / math.sqrt(2), 3 / (2 * math.sqrt(2)), math.sqrt(2)]
    )
    out = F.rms_norm(x, np.array([2.0, 1.0, 1.0, 1.0]), 0.5)
    np.testing.assert_allclose(out, [expected], rtol=1e-15)
    # eps 0: mean(x²) = 7.5 exactly, each number divided by √7.5.
    np.testing.assert_allclose(F.rms_norm(x, np.ones(4), 0.0), x / math.sqrt(7.5), rtol=1e-15)


def test_rms_norm_subtracts_no_mean_and_adds_no_beta() -> None:
    # A constant row: LayerNorm makes it 0 (+ beta); RMSNorm divides it by itself, leaving gamma.
    x = np.full((1, 4), 3.0)
    gamma = np.array([0.5, -1.0, 2.0, 1.0])
    np.testing.assert_allclose(F.rms_norm(x, gamma, 0.0), [gamma], rtol=1e-15)
    assert np.all(F.layer_norm(x, gamma, np.zeros(4), 1e-5) == 0)
    # Two rows, each by its own mean square: [−1, 1, −1, 1] has mean(x²) = 1, [0, 0, 0, 2] has 1 too.
    x = np.array([[-1.0, 1.0, -1.0, 1.0], [0.0, 0.0, 0.0, 2.0]])
    np.testing.assert_allclose(F.rms_norm(x, np.ones(4), 3.0), x / 2.0, rtol=1e-15)  # √(1 + 3) = 2


def torch_rms_norm(d: int, gamma: np.ndarray, eps: float) -> torch.nn.RMSNorm:
    norm = torch.nn.RMSNorm(d, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(gamma))
    return norm


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_rms_norm_equals_torch(eps: float) -> None:
    x, gamma = RNG.normal(size=(5, 7)) * 3, RNG.normal(size=7)
    theirs = torch_rms_norm(7, gamma, eps)(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(F.rms_norm(x, gamma, eps) - theirs)) <= 1e-12


def test_rms_norm_backward_equals_torch_autograd() -> None:
    x, gamma, dy = RNG.normal(size=(4, 6)), RNG.normal(size=6), RNG.normal(size=(4, 6))
    norm = torch_rms_norm(6, gamma, 1e-5)
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    (norm(tx) * torch.from_numpy(dy)).sum().backward()
    dx, dgamma = F.rms_norm_backward(dy, x, gamma, 1e-5)
    assert dx.shape == x.shape and dgamma.shape == gamma.shape
    assert np.max(np.abs(dx - tx.grad.numpy())) <= 1e-10
    assert np.max(np.abs(dgamma - norm.weight.grad.numpy())) <= 1e-10


def test_rms_norm_backward_by_finite_differences() -> None:
    x, gamma, R = RNG.normal(size=(3, 5)), RNG.normal(size=5), RNG.normal(size=(3, 5))
    dx, dgamma = F.rms_norm_backward(R, x, gamma, 1e-5)
    for analytic, wrt in ((dx, x), (dgamma, gamma)):
        check(analytic, lambda: float(np.sum(R * F.rms_norm(x, gamma, 1e-5))), wrt)


def test_rms_norm_keeps_float32() -> None:
    x, gamma = RNG.normal(size=(3, 4)).astype(np.float32), np.ones(4, np.float32)
    assert F.rms_norm(x, gamma, 1e-5).dtype == np.float32
    dx, dgamma = F.rms_norm_backward(x, x, gamma, 1e-5)
    assert dx.dtype == dgamma.dtype == np.float32
    np.testing.assert_allclose(
        F.rms_norm(x, gamma, 1e-5), F.rms_norm(x.astype(float), gamma, 1e-5), rtol=1e-6
    )


# ---- the values are defined once ------------------------------------------------------------


def test_every_norm_has_its_piece_and_its_switch() -> None:
    assert list(NORM_PIECES) == list(NORMS) == ["layernorm", "rmsnorm", "rmsnorm-plus-one"]
    assert SWITCHES["norm"] == tuple(NORMS)
    assert TORCH_LAYERS["norm"] == ("layernorm",)
    assert schema()["properties"]["config"]["properties"]["model"]["properties"]["norm"]["enum"] == list(
        NORMS
    )
    assert ModelConfig().norm == "layernorm"


def test_an_unknown_norm_raises_everywhere() -> None:
    config = Config(model=ModelConfig(norm="rmsnorm"))  # its own: the value is changed in place
    trace, w = run_forward(config), init_weights(config)
    object.__setattr__(config.model, "norm", "scalenorm")  # as if added in conventions.py alone
    m = trace.config.model
    for kind in (KINDS["add-norm"], KINDS["layer-norm"]):
        for part in (kind.explanation, kind.formula):
            with pytest.raises(ValueError, match="unknown norm 'scalenorm'"):
                part(m)
    with pytest.raises(ValueError, match="unknown norm 'scalenorm'"):
        recompute(trace)
    with pytest.raises(ValueError, match="unknown norm 'scalenorm'"):
        explain(trace, "encoder.0.add-norm-1", "output", "0,0")
    with pytest.raises(ValueError, match="unknown norm 'scalenorm'"):
        backward(trace, w)
    with pytest.raises(ValueError, match="unknown norm 'scalenorm'"):
        run_forward(trace.config)


# ---- the whole model ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_same_stages_and_kinds_gamma_and_no_beta(name: str) -> None:
    config = MODELS[name]
    layer = dataclasses.replace(config, model=dataclasses.replace(config.model, norm="layernorm"))
    trace, other = run_forward(config), run_forward(layer)
    assert [(s.id, s.kind) for s in trace] == [(s.id, s.kind) for s in other]
    w, w_layer = init_weights(config), init_weights(layer)
    assert not [n for n in w if n.endswith("/beta")]
    assert sorted(w) == sorted(n for n in w_layer if not n.endswith("/beta"))
    assert all(np.array_equal(w[n], w_layer[n]) for n in w)  # each weight its own stream
    stages = norm_stages(config)
    assert stages and {f"{sid}/gamma" for sid in stages} == {n for n in w if n.endswith("/gamma")}
    for sid in stages:
        stage = trace[sid]
        assert "beta" not in stage.matrices and set(stage.params) == {"gamma"}
        assert "RMSNorm" in stage.explanation and "beta" in stage.explanation  # "no beta"
        assert "mean(" in str(stage.formula) and "+ beta" not in str(stage.formula)
        assert "\\beta" not in "".join(latex_lines(stage.formula))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_norm_output_is_rmsnorm_of_its_input(name: str) -> None:
    config = MODELS[name]
    w = away_from_one(init_weights(config))
    trace = run_forward(config, w)
    for sid in norm_stages(config):
        stage = trace[sid]
        x = stage["sum"] if "sum" in stage else stage["X"]
        gamma = w[f"{sid}/gamma"]
        norm = torch_rms_norm(x.shape[1], gamma, config.model.layer_norm_eps)
        theirs = norm(torch.from_numpy(x)).detach().numpy()
        assert np.max(np.abs(stage["output"] - theirs)) <= 1e-12, sid


def loss_from_probabilities(config: Config, w: Weights) -> float:
    """The mean next-token cross-entropy from ``forward``'s probabilities (a fill-mask model's: of
    the hidden word at each blank): no backward involved."""
    p = forward(config, w)
    if config.model.encoder_only:
        blanks = [(i, config.index[a]) for i, a in enumerate(config.answers) if a is not None]
        return -float(np.mean([math.log(p[i, t]) for i, t in blanks]))
    target = config.token_ids(config.target_tokens)
    return -float(np.mean([math.log(p[i, t]) for i, t in enumerate(target[1:])]))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_gradient_by_finite_differences_of_the_loss(name: str) -> None:
    config = MODELS[name]
    w = away_from_one(init_weights(config))
    b = backward(run_forward(config, w), w)
    assert b.loss == pytest.approx(loss_from_probabilities(config, w), abs=1e-12)
    assert set(b.weights) == set(w)
    h = 1e-6
    for name_, array in w.items():
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            old = array[index]
            array[index] = old + h
            up = loss_from_probabilities(config, w)
            array[index] = old - h
            down = loss_from_probabilities(config, w)
            array[index] = old
            numeric[index] = (up - down) / (2 * h)
        analytic = b.weights[name_]
        assert analytic.shape == array.shape, name_
        scale = max(np.max(np.abs(numeric)), 1e-3)
        assert np.max(np.abs(analytic - numeric)) <= 1e-6 * scale, name_


@pytest.mark.parametrize("name", list(MODELS))
def test_verify_passes_every_check_and_catches_a_wrong_number(name: str) -> None:
    config = MODELS[name]
    trace = run_forward(config, away_from_one(init_weights(config)))
    checks = recompute(trace)
    assert {c.stage for c in checks} == set(trace.stages)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    said = {c.stage: c.what for c in checks if "Norm of each row" in c.what}
    assert set(said) == set(norm_stages(config))
    assert all("is RMSNorm of each row" in what for what in said.values())
    sid = norm_stages(config)[-1]
    trace[sid]["output"][1, 2] += 1e-6  # the next stage's input too: that stage fails as well
    bad = [c for c in recompute(trace) if not c.ok]
    assert bad[0].stage == sid and "RMSNorm" in bad[0].what


def test_verify_recomputes_rmsnorm_not_layernorm() -> None:
    """A stage holding LayerNorm's numbers under an RMSNorm config fails the second computation."""
    trace = run_forward(PRE)
    stage = trace["encoder.0.norm-1"]
    stage["output"][...] = F.layer_norm(stage["X"], stage["gamma"].ravel(), np.zeros(4), 1e-5)
    bad = [(c.stage, c.what) for c in recompute(trace) if not c.ok]
    assert ("encoder.0.norm-1", "output is RMSNorm of each row of X") in bad


@pytest.mark.parametrize("name", list(MODELS))
def test_every_matrix_of_every_stage_is_explainable(name: str) -> None:
    trace = run_forward(MODELS[name])
    for stage_id, matrix in explainable(trace):
        m = trace[stage_id].matrices[matrix]
        for cell in ("0,0", f"{m.shape[0] - 1},{m.shape[1] - 1}"):
            lines = explain(trace, stage_id, matrix, cell)
            assert lines[0].startswith(f"{stage_id} · {matrix}[") and len(lines) >= 2, (stage_id, matrix)


@pytest.mark.parametrize("sid, x", [("encoder.0.add-norm-1", "sum"), ("decoder.final-norm", "X")])
def test_explain_an_rmsnorm_cell_by_hand(sid: str, x: str) -> None:
    config = MODELS["post-norm" if "add-norm" in sid else "pre-norm"]
    w = away_from_one(init_weights(config))
    trace = run_forward(config, w)
    row = [float(v) for v in trace[sid][x][1]]
    gamma = float(w[f"{sid}/gamma"][2])
    mean_square = sum(v * v for v in row) / 4
    root = math.sqrt(mean_square + 1e-5)
    out = row[2] / root * gamma
    assert trace[sid]["output"][1, 2] == pytest.approx(out, rel=1e-14)
    lines = explain(trace, sid, "output", "1,2", digits=4)
    assert lines[1].startswith(
        f"output = gamma ⊙ {x} / √(mean({x}²) + eps), over row 1 ({trace[sid].matrices[x].rows[1]})"
    )
    assert "no beta" in lines[1]
    reads(f"  mean({x}²) = ({{}}² + {{}}² + {{}}² + {{}}²) / 4 = {{}}", lines[2], *row, mean_square)
    reads(f"  √(mean({x}²) + eps) = √({{}} + 1e-05) = {{}}", lines[3], mean_square, root)
    reads(f"  {x}[1, 2] / √(mean({x}²) + eps) = {{}} / {{}} = {{}}", lines[4], row[2], root, row[2] / root)
    reads("  × gamma[2] {} = {}", lines[5], gamma, out)
    assert len(lines) == 6 and not any("beta[" in line or "var" in line for line in lines)


def test_the_residual_stream_names_the_norm() -> None:
    trace = run_forward(PRE)
    lines = explain(trace, "encoder.0.residual-1", "X", "0,0")
    assert "through an RMSNorm (pre-norm)" in lines[1]


def test_the_latex_is_typeset() -> None:
    for kind in (KINDS["add-norm"], KINDS["layer-norm"]):
        lines = latex_lines(kind.formula(PRE.model))
        assert r"\operatorname{mean}" in lines[-1] and r"\beta" not in lines[-1] and r"\mu" not in lines[-1]
        page = formula_mathml(kind.formula(PRE.model))
        assert "<msqrt>" in page and "γ" in page and "β" not in page


def test_export_of_an_rmsnorm_trace_is_schema_valid() -> None:
    import json

    import jsonschema

    doc = json.loads(to_json(trace_to_dict(run_forward(PRE))))
    jsonschema.validate(doc, schema())
    assert doc["config"]["model"]["norm"] == "rmsnorm"


def test_train_then_generate_says_the_sentence() -> None:
    w = init_weights(PRE)
    assert train(PRE, w)[-1] < 0.01
    steps, _ = generate(PRE, w)
    assert tuple(PRE.vocabulary[s.chosen] for s in steps) == PRE.target_tokens[1:]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(heads=("per-position",), conventions=True))
def test_any_conventions_with_rmsnorm_verify_and_have_their_gradient(config: Config) -> None:
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, norm="rmsnorm"))
    w = away_from_one(init_weights(config))
    trace = run_forward(config, w)
    assert all(c.ok for c in recompute(trace))
    b = backward(trace, w)
    assert b.loss == pytest.approx(loss_from_probabilities(config, w), abs=1e-12)
    for sid in norm_stages(config):
        gamma, g = w[f"{sid}/gamma"], b.weights[f"{sid}/gamma"]
        old = gamma[0]
        gamma[0] = old + 1e-6
        up = loss_from_probabilities(config, w)
        gamma[0] = old - 1e-6
        down = loss_from_probabilities(config, w)
        gamma[0] = old
        assert (up - down) / 2e-6 == pytest.approx(g[0], rel=1e-5, abs=1e-9), sid


# ---- the command line -----------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_run_and_step(runner: CliRunner, tmp_path: Path) -> None:
    post = write(tmp_path, "model:\n  norm: rmsnorm\n")
    result = runner.invoke(app, ["run", "-c", str(post)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "encoder.0.add-norm-1" in result.stdout and "mean(sum²)" in result.stdout
    result = runner.invoke(app, ["step", "-c", str(post), "--stage", "add-norm"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    pre = tmp_path / "pre.yaml"
    pre.write_text("model:\n  norm: rmsnorm\n  norm_first: true\n", encoding="utf-8")
    result = runner.invoke(app, ["step", "-c", str(pre), "--stage", "layer-norm"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "decoder.final-norm" in result.stdout and "mean(X²)" in result.stdout
    assert "beta" in result.stdout  # "no beta", said; no matrix named beta
    result = runner.invoke(app, ["verify", "-c", str(pre)])
    assert result.exit_code == 0, result.output
    assert "is RMSNorm of each row of X" in result.stdout and "✗" not in result.stdout


def test_cli_verify_against_torch_refuses_in_one_line(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["verify", "--against", "torch", "-c", str(write(tmp_path, "model: {norm: rmsnorm}\n"))]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --against torch: PyTorch's transformer layers have no model.norm: rmsnorm "
        "(only layernorm); verify recomputes it a second way without them\n"
    )
    with pytest.raises(WalkthroughError, match=r"no model\.norm: rmsnorm"):
        against_torch(run_forward(POST), init_weights(POST))


def test_cli_refuses_a_misspelt_norm(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  norm: rms\n")
    result = runner.invoke(app, ["run", "-c", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: model.norm: must be one of layernorm, rmsnorm, rmsnorm-plus-one; got 'rms'\n"
    )


def test_weights_of_the_other_norm_name_the_switch(runner: CliRunner, tmp_path: Path) -> None:
    np.savez(tmp_path / "layer.npz", **init_weights(Config()))
    with pytest.raises(WalkthroughError) as err:
        load_weights(POST, tmp_path / "layer.npz")
    assert str(err.value).endswith("; it fits this config with model.norm: layernorm")
    np.savez(tmp_path / "rms.npz", **init_weights(POST))
    with pytest.raises(WalkthroughError) as err:
        load_weights(Config(), tmp_path / "rms.npz")
    assert str(err.value).endswith("; it fits this config with model.norm: rmsnorm")
    assert np.array_equal(load_weights(POST, tmp_path / "rms.npz")["encoder.0.add-norm-1/gamma"], np.ones(4))
    config = write(tmp_path, "model:\n  norm: rmsnorm\n")
    result = runner.invoke(app, ["run", "-c", str(config), "-w", str(tmp_path / "layer.npz")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.endswith("; it fits this config with model.norm: layernorm\n")


def test_walkthrough_config_names_both_norms(runner: CliRunner) -> None:
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stdout.splitlines() if line.strip().startswith("norm:")]
    assert line.split("#")[0].split() == ["norm:", "layernorm"]
    assert "layernorm" in line.split("#")[1] and "rmsnorm" in line.split("#")[1]
