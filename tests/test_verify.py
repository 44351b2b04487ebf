"""`walkthrough verify`: the second computation agrees, and it catches a wrong number."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.compare.verify import against_torch, recompute
from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.model.transformer import init_weights, run_forward

from .strategies import fits_torch

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_verifies(path: Path) -> None:
    checks = recompute(run_forward(load_config(path)))
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert max(c.max_diff for c in checks) < 1e-12


def test_every_stage_is_checked() -> None:
    trace = run_forward(Config(model=ModelConfig(attention_bias=True)))
    checks = recompute(trace)
    assert {c.stage for c in checks} == set(trace.stages)
    assert sum(c.what.startswith("head ") for c in checks) == 3 * 2  # three attention stages, two heads


def test_a_wrong_number_is_caught() -> None:
    trace = run_forward(Config())
    trace["decoder.0.cross-attention"]["A2"][1, 2] += 1e-6  # one cell, a little
    bad = [c for c in recompute(trace) if not c.ok]
    assert [(c.stage, c.what) for c in bad] == [
        ("decoder.0.cross-attention", "head 2: Q, K, V, S, A and O recomputed")
    ]
    assert bad[0].max_diff == pytest.approx(1e-6, rel=1e-3)


def test_torch_agrees_on_every_config_it_can_build() -> None:
    for path in CONFIGS:
        config = load_config(path)
        if not fits_torch(config):  # the flatten head, the Llama-style conventions
            continue
        weights = init_weights(config)
        checks = against_torch(run_forward(config, weights), weights)
        m = config.model
        assert (
            sum("A of every head" in c.what for c in checks)
            == m.num_encoder_layers + (1 if m.decoder_only else 2) * m.num_decoder_layers
        )
        assert all(c.ok for c in checks)


def test_flatten_head_cannot_be_compared_with_torch() -> None:
    config = Config(model=ModelConfig(output_head="flatten"))
    with pytest.raises(WalkthroughError, match=r"transformer layers have no model.output_head: flatten"):
        against_torch(run_forward(config), init_weights(config))


def test_cli_verify(runner: CliRunner) -> None:
    result = runner.invoke(
        app,
        ["verify", "--against", "torch", "--config", str(CONFIGS[0].with_name("standard.yaml"))],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.stderr
    assert "decoder.0.masked-attention" in result.stdout and "✗" not in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.endswith("checks agree to 1e-10 of their stage's largest value (float64).")


def test_cli_verify_without_torch_is_a_clean_error(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    result = runner.invoke(app, ["verify", "--against", "torch"])
    assert result.exit_code == 2
    assert (
        result.stderr
        == "error: --against torch needs PyTorch: pip install torch (CPU build), then run this again\n"
    )


def test_cli_verify_exits_1_on_a_difference(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformer_walkthrough.model.transformer as model

    real = model.run_forward

    def corrupted(*args: object, **kwargs: object) -> object:
        trace = real(*args, **kwargs)
        trace["encoder.0.feed-forward"]["hidden"][0, 0] = np.float64(123.0)
        return trace

    monkeypatch.setattr(model, "run_forward", corrupted)
    result = runner.invoke(app, ["verify"])
    assert result.exit_code == 1
    assert "✗" in result.stdout
