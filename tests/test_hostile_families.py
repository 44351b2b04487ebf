"""Issue 37, part three: the hostile round on the families added since (Gemma, OLMo 2, Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, T5): each defect the round found, as its reproducer.

Every one ends in a run or in one ``error:`` line and exit code 2: never a traceback, a hang,
gigabytes or a file left behind.
"""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there

from tests.test_hostile_files import refused_in_child
from transformer_walkthrough.cli import app
from transformer_walkthrough.model.trace import Matrix
from transformer_walkthrough.views.blocks import matrix_block
from transformer_walkthrough.views.widgets import View

# ---- an expert no token chose: a matrix of no rows ------------------------------------------------


@pytest.mark.parametrize("columns", [3, 16, 200])
def test_a_matrix_of_no_rows_is_its_header_within_the_width(columns):
    """An idle expert's X, gate and hidden have no rows: the block is its title and header, its
    columns summarised to fit 80 cells as any matrix's (it failed: max() of no row labels)."""
    cols = tuple(f"d{j}" for j in range(columns))
    block = matrix_block("expert1.X", Matrix(np.zeros((0, columns)), (), cols), View(width=80))
    console = Console(width=80, no_color=True, record=True, file=io.StringIO())
    console.print(block)
    lines = console.export_text().splitlines()
    assert lines[0].startswith(f"expert1.X  (0×{columns})")
    assert "d0" in lines[1] and f"d{columns - 1}" in lines[1]
    assert ("…" in lines[1]) == (columns > 3) and max(map(len, lines)) <= 80  # 16 take 86 cells


def test_a_mixture_whose_expert_no_token_chose_runs(moe_family):
    """The tiny Mixtral routes this prompt's 13 tokens to three of its four experts in a layer:
    `run` printed every stage up to the idle expert's, then a traceback."""
    args = ["run", "--model", str(moe_family["mixtral"]), "--prompt", "The cat is sleeping comfortably."]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "(0×16)" in result.stdout  # an idle expert's rows are shown: none


# ---- more experts in config.json than in the tensors: counted before a row is made for each ------


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [("mixtral", "num_local_experts", 10**30), ("mixtral", "num_local_experts", 2**62),
     ("qwen2_moe", "num_experts", 10**30), ("olmoe", "num_experts", 5)],
    ids=["mixtral 10**30", "mixtral 2**62", "qwen2_moe 10**30", "olmoe 5"],
)  # fmt: skip
def test_more_experts_than_the_tensors_hold_name_the_key(moe_family, tmp_path, name, key, value):
    """10**30 experts made 10**30 rows of tensor names first: a hang, never an error."""
    folder = shutil.copytree(moe_family[name], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    other = "num_local_experts" if key == "num_experts" else "num_experts"
    config.pop(other, None)  # transformers 5 writes both
    (folder / "config.json").write_text(json.dumps({**config, key: value}), encoding="utf-8")
    said = f"(config.json's {key} is {value:,}, the tensors have 4 experts)"
    refused_in_child(["run", "--model", str(folder), "--prompt", "The cat"], said)


# ---- rotary parameters that are no object ---------------------------------------------------------


@pytest.mark.parametrize("value", [[], "", 0, False], ids=repr)
def test_rotary_parameters_that_are_no_object_are_refused(gemma_family, tmp_path, value):
    """transformers refuses them (a field of type RopeParameters); an empty one was read as none.
    (transformers reads an empty legacy rope_scaling as none, and so does this converter.)"""
    key = "rope_parameters"
    folder = shutil.copytree(gemma_family["olmo2"], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, key: value}), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 2, result.stdout[-500:]
    said = f"error: {folder / 'config.json'}: {key} is {value!r}, not an object"
    assert result.stderr.splitlines() == [said]


# ---- T5: config.json's vocab_size against the table ----------------------------------------------


@pytest.mark.parametrize("vocab", [10, 10**6, 10**30])
def test_a_t5_vocab_size_the_table_does_not_have_is_refused(t5_family, tmp_path, vocab):
    """transformers refuses the checkpoint (a size mismatch); the table's own rows were used."""
    folder = shutil.copytree(t5_family["t5"][0], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": vocab}), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--source", "The cat"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stdout[-500:]
    assert f"tensor shared.weight has shape [{config['vocab_size']}, 16]" in result.stderr
    assert result.stderr.rstrip().endswith("(vocab_size, d_model)")


@pytest.mark.parametrize("eps", [float("inf"), 1, 10**400, float("nan"), -1e-6])
def test_a_t5_layer_norm_epsilon_past_small_names_its_key(t5_family, tmp_path, eps):
    """Infinity was refused by the toy's check, naming model.layer_norm_eps, a key no T5 file has."""
    folder = shutil.copytree(t5_family["t5"][0], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["layer_norm_epsilon"] = "EPS"
    text = json.dumps(config).replace('"EPS"', json.dumps(eps) if isinstance(eps, float) else str(eps))
    (folder / "config.json").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--source", "The cat"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stdout[-500:]
    assert f"{folder / 'config.json'}: layer_norm_epsilon is " in result.stderr
    assert result.stderr.rstrip().endswith(", not a small positive number")


# ---- Qwen's layer_types, which transformers masks by ---------------------------------------------


@pytest.mark.parametrize(
    "types",
    [["full_attention"], ["bogus", "full_attention"], "full_attention", [1, 2],
     ["sliding_attention", "full_attention"], ["full_attention"] * 3],
    ids=["one of two", "bogus", "a string", "numbers", "a sliding layer", "three of two"],
)  # fmt: skip
def test_qwen_layer_types_other_than_full_are_refused(moe_family, tmp_path, types):
    """They were ignored: every layer ran full attention, where transformers masks a sliding layer
    by its window, and fails on a missing layer or another value."""
    folder = shutil.copytree(moe_family["qwen2_moe"], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["layer_types"] == ["full_attention"] * 2  # what transformers writes: it runs
    (folder / "config.json").write_text(json.dumps({**config, "layer_types": types}), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stdout[-500:]
    assert f"config.json: layer_types is {types!r}"[:60] in result.stderr
    assert 'only "full_attention" for each of the 2 layers is read' in result.stderr
