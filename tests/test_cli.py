"""Every command through typer's CliRunner, and every bad input: one line, exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, config_to_yaml, load_config
from transformer_walkthrough.files.export import schema
from transformer_walkthrough.model.trace import Trace

ANSI = re.compile(r"\x1b\[")
ROOT = Path(__file__).resolve().parents[1]


def ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr or result.stdout
    assert not ANSI.search(result.stdout)  # not a terminal: no colour codes
    return result.stdout


def test_run_shows_every_stage_in_order_and_the_prediction(runner: CliRunner, trace: Trace) -> None:
    out = ok(runner, "run")
    positions = [out.index(f"  {s.id} ") for s in trace]
    assert positions == sorted(positions)
    for stage in trace:
        assert stage.title in out and str(stage.formula).splitlines()[0] in out
    assert "Prediction: the most likely next word" in out
    assert "-∞" in out and "W_Q1  (4×2)" in out and "S1+M  (4×4)" in out
    first = trace.prediction[0]
    assert re.search(rf"<start>\s+{first.word}\s+{first.probability:.2f}\s+sleeping", out)


def test_seed_and_precision_options(runner: CliRunner, trace: Trace) -> None:
    e = trace["encoder.embedding"]["E"]
    assert f"{e[0, 0]:.2f}" in ok(runner, "step", "--stage", "encoder.embedding")
    assert f"{e[0, 0]:.5f}" in ok(runner, "step", "--stage", "encoder.embedding", "--precision", "5")
    assert f"{e[0, 0]:.5f}" not in ok(
        runner, "step", "--stage", "encoder.embedding", "--precision", "5", "--seed", "1"
    )


def test_step_one_kind(runner: CliRunner) -> None:
    out = ok(runner, "step", "--stage", "masked-attention")
    assert "decoder.0.masked-attention" in out and "encoder.0.self-attention" not in out
    for name in ("Q1", "K1", "V1", "S1", "M", "S1+M", "A1", "O1", "O2", "concat", "W_O"):
        assert f"{name}  (" in out
    assert "Prediction" not in out


def test_step_by_id_and_layer(runner: CliRunner, tmp_path: Path) -> None:
    out = ok(runner, "step", "--stage", "decoder.0.cross-attention")
    assert "memory  (3×4)" in out and "S1  (4×3)" in out
    config = tmp_path / "two.yaml"
    config.write_text("model:\n  num_encoder_layers: 2\n")
    out = ok(runner, "step", "--stage", "self-attention", "--layer", "1", "--config", str(config))
    assert "encoder.1.self-attention" in out and "encoder.0.self-attention" not in out
    assert "Prediction" in ok(runner, "step", "-s", "probabilities")


def test_stages_lists_ids_kinds_and_shapes(runner: CliRunner, trace: Trace) -> None:
    out = ok(runner, "stages")
    lines = [
        line.split()[:2] for line in out.splitlines() if line.split() and line.split()[0] in trace.stages
    ]
    assert lines == [[s.id, s.kind] for s in trace]
    assert "S1+M 4×4" in out


def test_export_to_stdout_is_schema_valid(runner: CliRunner) -> None:
    doc = json.loads(ok(runner, "export", "-"))
    jsonschema.validate(doc, schema())
    assert len(doc["stages"]) == 16
    only = json.loads(ok(runner, "export", "-", "--stage", "add-norm", "--layer", "0"))
    assert [s["id"] for s in only["stages"]] == [
        "encoder.0.add-norm-1", "encoder.0.add-norm-2", "decoder.0.add-norm-1", "decoder.0.add-norm-2",
        "decoder.0.add-norm-3",
    ]  # fmt: skip


def test_export_files_refuse_to_overwrite_without_force(
    runner: CliRunner, tmp_path: Path, trace: Trace
) -> None:
    path = tmp_path / "trace.json"
    ok(runner, "export", str(path))
    first = path.read_bytes()
    result = runner.invoke(app, ["export", str(path), "--seed", "5"])
    assert result.exit_code == 2 and "already exists; pass --force" in result.stderr
    assert path.read_bytes() == first
    ok(runner, "export", str(path), "--seed", "5", "--force")
    assert path.read_bytes() != first
    npz = tmp_path / "trace.npz"
    ok(runner, "export", str(npz))
    with np.load(npz) as data:
        assert np.array_equal(
            data["output.probabilities/probabilities"], trace["output.probabilities"]["probabilities"]
        )


def test_config_prints_yaml_that_reads_back(runner: CliRunner, tmp_path: Path) -> None:
    out = ok(runner, "config", "--seed", "7", "--precision", "3")
    path = tmp_path / "saved.yaml"
    path.write_text(out)
    config = load_config(path)
    assert config.seed == 7 and config.display.precision == 3
    assert config_to_yaml(config) == out
    (tmp_path / "default.yaml").write_text(ok(runner, "config"), encoding="utf-8")
    assert load_config(tmp_path / "default.yaml") == Config()


def test_version_and_help(runner: CliRunner) -> None:
    assert ok(runner, "--version").startswith("transformer-walkthrough ")
    assert "Commands:" in ok(runner)
    assert "--stage" in ok(runner, "step", "--help")


BAD = [
    (["run", "--config", "{tmp}/missing.yaml"], "missing.yaml: no such file"),
    (
        ["run", "--config", "{tmp}/bad.yaml"],
        "line 3, column 1: malformed YAML: could not find expected ':' "
        "(while scanning a simple key at line 2)",
    ),
    (["run", "--config", "{tmp}/tag.yaml"], "the tag !!python/object/apply:os.system is not allowed"),
    (["run", "--config", "{tmp}/typo.yaml"], "unknown key model.d_modle; did you mean model.d_model?"),
    (["run", "--config", "{tmp}/heads.yaml"], "model.d_model: 4 is not divisible by model.num_heads = 3"),
    (["run", "--config", "{tmp}/zero.yaml"], "model.d_ff: must be a positive integer, got 0"),
    (["run", "--config", "{tmp}/type.yaml"], "model.num_heads: expected an integer, got 'two' (str)"),
    (["run", "--config", "{tmp}/words.yaml"], "encoder_words: must be 1 to 4"),
    (["run", "--config", "{tmp}/vocab.yaml"], "vocabulary: has no 'comfortably'"),
    (["run", "--seed", "-1"], "seed: must be 0 or more, got -1"),
    (["run", "--precision", "99"], "display.precision: must be 0 to 17, got 99"),
    (
        ["step", "--stage", "masked_attention"],
        "unknown stage 'masked_attention'; did you mean masked-attention?",
    ),
    (["step", "--stage", "attention"], "valid kinds: embedding, positional-encoding, self-attention"),
    (["step", "--stage", "embedding", "--layer", "0"], "--layer 0: stage embedding has no stage in layer 0"),
    (["step", "--stage", "self-attention", "--layer", "3"], "has no stage in layer 3 (layers: 0"),
    (["export", "{tmp}/exists.json"], "exists.json: already exists; pass --force to overwrite it"),
    (["export", "{tmp}"], "is a directory"),
    (["export", "{tmp}/out.txt"], "unknown format .txt; use .json, .npz, .html, .md or .tex"),
    (["export", "{tmp}/nowhere/out.json"], "nowhere: no such directory"),
    (["export", "{tmp}/new.json", "--stage", "nope"], "unknown stage 'nope'"),
]
FILES = {
    "bad.yaml": "model:\n[d_model: 4\n",
    "tag.yaml": "seed: !!python/object/apply:os.system [echo hacked]\n",
    "typo.yaml": "model:\n  d_modle: 8\n",
    "heads.yaml": "model:\n  num_heads: 3\n",
    "zero.yaml": "model:\n  d_ff: 0\n",
    "type.yaml": "model:\n  num_heads: two\n",
    "words.yaml": "encoder_words: 9\n",
    "vocab.yaml": "vocabulary: [<start>, <end>, the, cat, is, sleeping]\n",
    "exists.json": "{}",
}


@pytest.mark.parametrize(
    ("args", "message"), BAD, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(BAD)]
)
def test_bad_input_is_one_line_and_exit_code_2(
    runner: CliRunner, tmp_path: Path, args: list[str], message: str
) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    assert (tmp_path / "exists.json").read_text() == "{}"


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_python_dash_m_works_like_walkthrough() -> None:
    result = run_module("-m", "transformer_walkthrough", "step", "--stage", "probabilities")
    assert result.returncode == 0 and "output.probabilities" in result.stdout
    bad = run_module("-m", "transformer_walkthrough", "step", "--stage", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown stage 'x'")


def test_no_color_is_honoured_even_when_colour_is_forced() -> None:
    forced = run_module(
        "-m", "transformer_walkthrough", "step", "-s", "encoder.embedding", env={"FORCE_COLOR": "1"}
    )
    assert ANSI.search(forced.stdout)  # colour where asked for...
    plain = run_module(
        "-m",
        "transformer_walkthrough",
        "step",
        "-s",
        "encoder.embedding",
        env={"FORCE_COLOR": "1", "NO_COLOR": "1"},
    )
    assert not ANSI.search(plain.stdout.replace("\x1b[1m", "").replace("\x1b[0m", "").replace("\x1b[2m", ""))


def test_help_does_not_import_numpy() -> None:
    code = (
        "import sys; from transformer_walkthrough.cli import app\n"
        "try:\n    app(['--help'], prog_name='walkthrough')\nexcept SystemExit:\n    pass\n"
        "print('numpy' in sys.modules, 'yaml' in sys.modules)"
    )
    result = run_module("-c", code)
    assert result.stdout.strip().splitlines()[-1] == "False False"


def test_large_json_export_warns_and_offers_no_weights(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)  # the default trace holds 1,2xx numbers
    result = runner.invoke(app, ["export", "-"])
    assert result.exit_code == 0
    numbers = sum(
        len(row)
        for s in json.loads(result.stdout)["stages"]
        for m in s["matrices"].values()
        for row in m["values"]
    )
    assert result.stderr == (
        f"warning: {numbers:,} numbers make about {numbers * 20 / 1e6:,.0f} MB of JSON; "
        f"--no-weights leaves the weights out; as .npz, {numbers * 8 / 1e6:,.0f} MB\n"
    )
    fewer = runner.invoke(app, ["export", "-", "--no-weights"])
    assert "--no-weights" not in fewer.stderr
    assert "W_Q1" not in fewer.stdout and "A1" in fewer.stdout
