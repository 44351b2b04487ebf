"""Hostile inputs found by a replay of issue 18's cases and their variants: each is one line on
stderr and exit code 2 (or a success where the input was fine), in bounded time and memory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch

from tests.test_hostile_files import (
    GPT2,
    copy,
    edit_config,
    fails,
    gpt2_shapes,
    refused_in_child,
    safetensors_file,
)


def test_one_tensor_under_every_layers_names_is_refused(gpt2, tmp_path):
    """A 3.8 MB .bin naming one tensor as each of 600 layers' weights took 3.6 GB to convert."""
    state = dict(torch.load(gpt2[0]["hub-bin"] / "pytorch_model.bin"))
    shared = {name.split(".", 2)[2]: t for name, t in state.items() if name.startswith("h.0.")}
    layers = 40
    state = {k: v for k, v in state.items() if not k.startswith("h.")}
    state.update({f"h.{n}.{k}": v for n in range(layers) for k, v in shared.items()})
    folder = copy(gpt2[0]["hub-bin"], tmp_path / "ckpt")
    edit_config(folder, n_layer=layers)
    torch.save(state, folder / "pytorch_model.bin")
    fails([*GPT2, str(folder), "--dtype", "float64"], f"one tensor is stored under {layers} names")


def test_a_sharded_checkpoint_is_sized_from_its_headers_not_read(gpt2, tmp_path):
    """8 GB of float32 in one sparse shard: refused by the budget before any tensor is read (the
    index's shards were once read whole, to check their names and to size them)."""
    folder = copy(gpt2[0]["hub"], tmp_path / "ckpt")
    (folder / "model.safetensors").unlink()
    config = edit_config(folder, n_embd=8192, n_head=8)
    shapes = gpt2_shapes(8192, config)
    shard = "model-00001-of-00001.safetensors"
    safetensors_file(folder / shard, shapes, overlap=False)
    index = {"metadata": {}, "weight_map": dict.fromkeys(shapes, shard)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused_in_child([*GPT2, str(folder)], "set WALKTHROUGH_MAX_MEMORY", timeout=20)


def test_an_npz_of_50000_members_is_refused_from_its_directory(tmp_path):
    """600,000 empty members took 30 s and 870 MB to refuse; the directory's size says it first."""
    member = io.BytesIO()
    np.save(member, np.zeros(0))
    path = tmp_path / "w.npz"
    with zipfile.ZipFile(path, "w") as z:
        for k in range(50_000):
            z.writestr(f"x{k}.npy", member.getvalue())
    fails(["run", "-w", str(path)], "its zip directory is")
    fails(["diff", "-w", str(path), "-w", str(path)], "its zip directory is")


def test_a_training_dataset_is_bounded(tmp_path):
    """50,000 pairs made one step of `train` take 97 s: at most 1,000 pairs, and the passes over
    them (steps × pairs) at most the steps one sentence may take."""
    big = tmp_path / "big.yaml"
    big.write_text("training: {dataset: [" + ", ".join(["[the dog is, barking loudly]"] * 1001) + "]}\n")
    fails(["train", "-c", str(big)], "at most 1,000")
    many = tmp_path / "many.yaml"
    many.write_text("training: {dataset: [" + ", ".join(["[the dog is, barking loudly]"] * 1000) + "]}\n")
    fails(["train", "-c", str(many)], "150,150 passes; the limit is 100,000")


def _without_stdin(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transformer_walkthrough", *args],
        capture_output=True,
        preexec_fn=lambda: os.close(0),
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )


def test_stdin_closed_is_no_error(gpt2):
    """`<&-`: the tour reads it as an empty file; the tokenizer's child no longer takes fd 0 (a
    pipe to it) for its /dev/null."""
    for args in (["tour"], ["run", "--prompt", "hi", "--model", str(gpt2[0]["hub"])]):
        done = _without_stdin(args)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert done.stderr == b"", done.stderr.decode()[-2000:]


def test_a_home_of_no_such_user_is_one_line():
    fails(["run", "--prompt", "hi", "--model", "~no-such-user-here/x"], "no such folder")


def test_a_failed_export_of_a_translation_says_only_its_error(marian, tmp_path):
    """The greedy translation's note is said once the export is written, as its size warning."""
    fails(
        ["export", str(tmp_path / "x.tex"), "--source", "привет мир", "--model", str(marian[0])], "pdflatex"
    )


def test_an_overflow_warning_is_not_said_before_an_error(tmp_path):
    from transformer_walkthrough.config import Config
    from transformer_walkthrough.model.transformer import init_weights

    w = init_weights(Config())
    arrays = dict(w.arrays)
    arrays["encoder.embedding/E"] = arrays["encoder.embedding/E"] * 1e300
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    fails(["step", "-s", "nope", "-w", str(path)], "unknown stage 'nope'")


def test_notes_still_follow_a_success(marian, tmp_path):
    from typer.testing import CliRunner

    from transformer_walkthrough.cli import app

    result = CliRunner().invoke(
        app, ["export", str(tmp_path / "x.json"), "--source", "the cat", "--model", str(marian[0])]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-2].startswith("translation (greedy): ")
    assert Path(tmp_path / "x.json").is_file()
