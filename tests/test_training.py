"""Training: Adam by hand, the toy learning its sentence, generation, weights on disk, the CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, ModelConfig, TrainingConfig, load_config
from transformer_walkthrough.errors import ConfigError, WalkthroughError
from transformer_walkthrough.files.export import schema
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model.training import Adam, generate, loss_and_gradients, parameters, train
from transformer_walkthrough.model.transformer import init_weights, run_forward


def test_one_adam_step_by_hand() -> None:
    p = np.array([1.0, -3.0])
    adam = Adam([p], lr=0.1)
    adam.step([np.array([2.0, -0.5])])
    # m = 0.1·g, v = 0.001·g²; bias-corrected: m̂ = g, v̂ = g²; the step is lr·g/|g| = ±0.1
    np.testing.assert_allclose(p, [0.9, -2.9], rtol=1e-7)


def test_parameters_and_their_gradients_line_up() -> None:
    config = Config()
    w = init_weights(config)
    params = parameters(w)
    assert len(params) == 2 + 10 + 14 + 2  # embeddings, an encoder layer, a decoder layer, the output layer
    _, grads = loss_and_gradients(config, w)
    assert [g.shape for g in grads] == [p.shape for p in params]


@pytest.fixture(scope="module")
def trained() -> tuple[Config, object, list[float]]:
    config = Config()
    w = init_weights(config)
    return config, w, train(config, w)


def test_the_default_config_learns_its_sentence(trained: tuple) -> None:
    config, w, losses = trained
    assert len(losses) == config.training.steps + 1
    assert losses[0] > 1.0 and losses[-1] < 0.01
    steps, _ = generate(config, w)
    assert [config.vocabulary[s.chosen] for s in steps] == ["sleeping", "comfortably", "<end>"]
    assert [p.word for p in run_forward(config, w).prediction[:3]] == ["sleeping", "comfortably", "<end>"]


def test_generation_step_i_is_row_i_of_the_teacher_forced_pass(trained: tuple) -> None:
    config, w, _ = trained
    for weights in (w, init_weights(Config(seed=3))):
        steps, forced = generate(config, weights, max_len=6)
        rows = forced["output.probabilities"]["probabilities"]
        for i, s in enumerate(steps):
            assert np.max(np.abs(s.probabilities - rows[i])) <= 1e-12
            assert s.ids == forced.target_ids[: i + 1]


def test_a_dataset_of_more_pairs_is_learned_too() -> None:
    # Two sentences that share "the … is" need more than d_model 4: from some seeds (42 among
    # them) four dimensions stall at a loss of 0.23; eight learn both from every seed tried.
    config = Config(
        model=ModelConfig(d_model=8, d_ff=16),
        training=TrainingConfig(steps=200, dataset=(("the dog is", "barking loudly"),)),
    )
    assert config.vocabulary is not None and {"dog", "barking", "loudly"} <= set(config.vocabulary)
    assert config.pairs[1] == (("the", "dog", "is"), ("<start>", "barking", "loudly", "<end>"))
    w = init_weights(config)
    assert train(config, w)[-1] < 0.01
    dog = run_forward(config, w, source_ids=config.token_ids(("the", "dog", "is")),
                      target_ids=config.token_ids(("<start>", "barking", "loudly", "<end>")))  # fmt: skip
    assert [p.word for p in dog.prediction[:3]] == ["barking", "loudly", "<end>"]


def test_weights_round_trip_through_npz(trained: tuple, tmp_path: Path) -> None:
    config, w, _ = trained
    path = tmp_path / "w.npz"
    np.savez(path, **w)
    loaded = load_weights(config, path)
    for a, b in zip(parameters(w), parameters(loaded), strict=True):
        assert np.array_equal(a, b)
    with np.load(path) as npz:
        assert "decoder.0.cross-attention/W_QKV" in npz.files and "encoder.embedding/E" in npz.files
        assert len(npz.files) == 28  # 2 tables, 3 × 2 attention, 2 × 4 feed-forward, 5 × 2 norms, W, b


def test_weights_that_do_not_fit_the_config_name_the_parameter(trained: tuple, tmp_path: Path) -> None:
    config, w, _ = trained
    arrays = dict(w)
    cases = {
        "missing": {k: v for k, v in arrays.items() if k != "decoder.0.feed-forward/b_2"},
        "extra": arrays | {"encoder.1.self-attention/W_Q1": np.zeros((4, 2))},
        "shape": arrays | {"encoder.0.feed-forward/W_1": np.zeros((4, 9))},
    }
    messages = {
        "missing": "has no decoder.0.feed-forward/b_2, which this config's model needs",
        "extra": "has encoder.1.self-attention/W_Q1, which this config's model does not have",
        "shape": "encoder.0.feed-forward/W_1 is 4×9 in the file but 4×8 in this config's model",
    }
    for case, content in cases.items():
        path = tmp_path / f"{case}.npz"
        np.savez(path, **content)
        with pytest.raises(WalkthroughError, match=re.escape(messages[case])):
            load_weights(config, path)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(WalkthroughError, match=r"not a weights \.npz"):
        load_weights(config, tmp_path / "junk.npz")
    with pytest.raises(WalkthroughError, match="no such file"):
        load_weights(config, tmp_path / "nope.npz")
    with pytest.raises(WalkthroughError, match=r"encoder\.embedding/E is 7×4 in the file but 7×8"):
        load_weights(Config(model=ModelConfig(d_model=8, d_ff=16)), tmp_path / "shape.npz")


def test_bad_training_config_is_one_clear_line(tmp_path: Path) -> None:
    for text, message in [
        ("training:\n  steps: 0\n", "training.steps: must be 1 to 100,000, got 0"),
        ("training:\n  steps: 100001\n", "training.steps: must be 1 to 100,000, got 100001"),
        ("training:\n  learning_rate: -1\n", "training.learning_rate: must be positive, got -1"),
        ("training:\n  dataset: [[a, b, c]]\n", "training.dataset[0]: expected a list of 2, got 3"),
        ("training:\n  stepz: 3\n", "unknown key training.stepz; did you mean training.steps?"),
        ("training:\n  dataset: [[the dog, runs]]\n"
         "vocabulary: [<start>, <end>, the, cat, is, sleeping, comfortably]\n",
         "vocabulary: has no 'dog', 'runs'"),
    ]:  # fmt: skip
        path = tmp_path / "c.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(path)


def invoke(runner: CliRunner, *args: str) -> object:
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


def test_cli_train_then_generate_says_the_sentence(runner: CliRunner, tmp_path: Path) -> None:
    weights = tmp_path / "weights.npz"
    result = invoke(runner, "train", "--output", str(weights))
    assert result.exit_code == 0, result.stderr
    assert "loss, log scale, over 150 steps" in result.stdout
    assert re.search(r"^ +step 0 +150$", result.stdout, re.MULTILINE)  # the axis, its ends apart
    assert "Predictions before and after training" in result.stdout
    assert "has memorised it" in result.stdout and "still wrong" not in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.split()}
    # after, expected, before (word p, mark), after training (word p, mark)
    assert rows["<start>"][1:2] == ["sleeping"] and rows["<start>"][5:8:2] == ["sleeping", "✓"]
    generated = invoke(runner, "generate", "--weights", str(weights), "--compare")
    assert generated.exit_code == 0, generated.stderr
    assert "the cat is → sleeping comfortably <end>" in generated.stdout
    assert "Step i of generation = row i of the teacher-forced pass" in generated.stdout
    ran = invoke(runner, "run", "--weights", str(weights))
    assert re.search(r"<start>\s+sleeping\s+1\.00\s+sleeping", ran.stdout)  # predicted, p, expected
    assert invoke(runner, "verify", "--weights", str(weights)).exit_code == 0
    again = invoke(runner, "train", "--output", str(weights))
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr


def test_train_names_its_output_whole_whatever_its_path(runner: CliRunner, tmp_path: Path) -> None:
    # Longer than the terminal and with brackets: one line, not wrapped, not read as markup.
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4) / "[bold]x[/bold]"
    folder.mkdir(parents=True)
    weights = folder / "w[1].npz"
    result = runner.invoke(app, ["train", "--steps", "2", "--output", str(weights)])
    assert result.exit_code == 0, result.output
    # the command it names is quoted for a shell: the brackets are not a glob, the path one word
    said = f"wrote {weights}: walkthrough generate --weights {shlex.quote(str(weights))}"
    assert said in result.stdout.splitlines()
    assert weights.is_file()


def test_train_says_what_to_run_with_the_weights_and_the_config(runner: CliRunner, tmp_path: Path) -> None:
    # a fill-mask model fills its blanks with `run`; it has nothing to generate
    config = Path(__file__).resolve().parents[1] / "configs" / "bert-style.yaml"
    weights = tmp_path / "bert.npz"
    result = runner.invoke(app, ["train", "-c", str(config), "--steps", "2", "--output", str(weights)])
    assert result.exit_code == 0, result.output
    command = f"walkthrough run --config {shlex.quote(str(config))} --weights {shlex.quote(str(weights))}"
    assert f"wrote {weights}: {command}" in result.stdout.splitlines()
    again = runner.invoke(app, shlex.split(command)[1:])  # the command it names runs as said
    assert again.exit_code == 0, again.output
    assert "[MASK] (pos 4)" in again.stdout


def test_cli_backward_shows_and_exports_every_gradient(runner: CliRunner) -> None:
    out = invoke(runner, "step", "--stage", "masked-attention", "--backward").stdout
    for name in ("dL/dA1  (4×4)", "dL/dS1+M  (4×4)", "dL/dW_Q1  (4×2)", "dL/dconcat  (4×4)"):
        assert name in out
    assert "dL/dM " not in out  # the mask is a constant: no gradient shown (issue 11), nor exported
    mask_stage = next(s for s in json.loads(invoke(runner, "export", "-", "--backward").stdout)["stages"]
                      if s["id"] == "decoder.0.masked-attention")  # fmt: skip
    assert "M" in mask_stage["matrices"] and "M" not in mask_stage["gradients"]
    doc = json.loads(invoke(runner, "export", "-", "--backward").stdout)
    jsonschema.validate(doc, schema())
    assert doc["loss"] > 0
    for stage in doc["stages"]:
        constants = {name for name, m in stage["matrices"].items() if m["role"] in ("mask", "constant")}
        assert list(stage["gradients"]) == [name for name in stage["matrices"] if name not in constants]
        for name, g in stage["gradients"].items():
            assert g["shape"] == stage["matrices"][name]["shape"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--steps", "-1"], "--steps: must be 0 to 100,000 (the toy learns in about 150"),
        (["train", "--steps", "99999999999"], "--steps: must be 0 to 100,000"),
        (["train", "--lr", "-1"], "--lr: must be positive, got -1"),
        (["train", "--output", "w.json"], "unknown format .json; use .npz"),
        (["train", "-c", "configs/article-flatten.yaml"], "the flatten head cannot be trained"),
        (["run", "--backward", "-c", "configs/article-flatten.yaml"], "the flatten head cannot be trained"),
        (["generate", "-c", "configs/article-flatten.yaml"], "generation needs output_head: per-position"),
        (["generate", "--max-len", "0"], "--max-len: must be a positive integer, got 0"),
        (["run", "--weights", "nope.npz"], "nope.npz: no such file"),
    ],
)
def test_cli_training_errors(runner: CliRunner, args: list[str], message: str) -> None:
    root = Path(__file__).resolve().parents[1]
    result = runner.invoke(app, [str(root / a) if a.startswith("configs/") else a for a in args])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
