"""What did training change, from scratch: `train --save-initial` (or `--steps 0`) then `diff -w -w`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.files.npzfile import VOCABULARY
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model.transformer import init_weights, run_forward


def saved(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {name: f[name] for name in f.files}


def test_save_initial_then_diff_shows_what_training_changed(runner: CliRunner, tmp_path: Path) -> None:
    before, after = tmp_path / "before.npz", tmp_path / "after.npz"
    result = runner.invoke(
        app, ["train", "--steps", "3", "--save-initial", str(before), "--output", str(after)]
    )
    assert result.exit_code == 0, result.stderr
    config = Config()
    initial = init_weights(config)
    start, end = saved(before), saved(after)
    # before.npz is the seed's weights as drawn, after.npz the trained ones; both carry the words
    for arrays in (start, end):
        assert list(arrays[VOCABULARY]) == list(config.vocabulary)
        assert set(arrays) - {VOCABULARY} == set(initial.arrays)
    for name, a in initial.arrays.items():
        np.testing.assert_array_equal(start[name], a)
    assert any(not np.array_equal(end[name], a) for name, a in initial.arrays.items())

    # The first stage that differs, found from the two files alone: the first (in the trace's
    # order) with any matrix that is not the same.
    a = run_forward(config, load_weights(config, before))
    b = run_forward(config, load_weights(config, after))
    changed = [
        s.id
        for s in a
        if any(not np.array_equal(m.values, b[s.id].matrices[n].values) for n, m in s.matrices.items())
    ]
    assert changed, "three Adam steps changed nothing"
    diff = runner.invoke(app, ["diff", "-w", str(before), "-w", str(after)])
    assert diff.exit_code == 0, diff.stderr
    assert f"The outputs first differ at {changed[0]}" in diff.stdout
    same = runner.invoke(app, ["diff", "-w", str(before), "-w", str(before)])
    assert same.exit_code == 0 and "Every output is the same in A and B." in same.stdout


def test_zero_steps_writes_the_initial_weights(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "zero.npz"
    result = runner.invoke(app, ["train", "--steps", "0", "--output", str(path)])
    assert result.exit_code == 0, result.stderr
    config = Config()
    arrays = saved(path)
    assert list(arrays.pop(VOCABULARY)) == list(config.vocabulary)
    initial = init_weights(config).arrays
    assert set(arrays) == set(initial)
    for name, a in initial.items():
        np.testing.assert_array_equal(arrays[name], a)
    # and it reads back as weights: the same forward pass as the seed's
    again = run_forward(config, load_weights(config, path))
    np.testing.assert_array_equal(
        again["output.logits"]["logits"], run_forward(config)["output.logits"]["logits"]
    )


def test_save_initial_paths_checked_before_the_work(runner: CliRunner, tmp_path: Path) -> None:
    same = tmp_path / "w.npz"
    result = runner.invoke(app, ["train", "--steps", "1", "--save-initial", str(same), "--output", str(same)])
    assert result.exit_code == 2 and "one file" in result.stderr and result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
    taken = tmp_path / "before.npz"
    taken.write_bytes(b"mine")
    result = runner.invoke(
        app, ["train", "--steps", "1", "--save-initial", str(taken), "--output", str(tmp_path / "after.npz")]
    )
    assert result.exit_code == 2 and "already exists; pass --force" in result.stderr
    assert taken.read_bytes() == b"mine" and sorted(p.name for p in tmp_path.iterdir()) == ["before.npz"]
    result = runner.invoke(app, ["train", "--steps", "1", "--save-initial", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "unknown format .json; use .npz" in result.stderr
