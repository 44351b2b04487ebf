"""A text longer than the checkpoint reads is refused in one line that says both lengths and the
config.json key that sets the limit, the family's own: ``max_position_embeddings`` (Llama, BERT,
RoBERTa less the rows before its first position), ``n_positions`` (GPT-2). T5's positions are
relative: nothing bounds its input, so a source longer than its ``n_positions`` runs, and equals
transformers."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.run import walk
from transformer_walkthrough.cli import app

from . import exact_t5

LINE = re.compile(r"error: the (\w+) has (\d+) tokens; this model reads at most (\d+) \((.*)\)\n")


def refused(*args: str) -> tuple[str, int, int, str]:
    """What the one line of a refusal says: which text, its tokens, the most read, and why."""
    done = CliRunner().invoke(app, list(args))
    assert done.exit_code == 2 and done.stdout == "", done.output
    said = LINE.fullmatch(done.stderr)
    assert said is not None, done.stderr
    what, tokens, most, why = said.groups()
    return what, int(tokens), int(most), why


def test_gpt2_names_n_positions(gpt2) -> None:
    from tests.tiny_gpt2 import POSITIONS

    folder = str(gpt2[0]["saved"])
    what, tokens, most, why = refused(
        "step", "-s", "embedding", "--model", folder, "--prompt", "the cat " * 40
    )
    assert (what, most, why) == ("prompt", POSITIONS, f"n_positions = {POSITIONS} in config.json")
    assert tokens > POSITIONS
    # generation says the same, and a prompt that just fits is read
    assert refused("generate", "--model", folder, "--prompt", "the cat " * 40)[2:] == (most, why)
    fits = CliRunner().invoke(app, ["step", "-s", "embedding", "--model", folder, "--prompt", "the cat"])
    assert fits.exit_code == 0, fits.output
    # a continuation that reaches the end of the position table says so, with the same key
    cut = CliRunner().invoke(
        app, ["generate", "--model", folder, "--prompt", "the cat " * 16, "--max-len", "40"]
    )
    assert cut.exit_code == 0, cut.output
    assert f"(stopped: the learned position table has {POSITIONS} rows: n_positions)" in cut.stdout


def test_llama_names_max_position_embeddings(llama_family) -> None:
    folder = str(llama_family["llama"])  # max_position_embeddings 64
    what, tokens, most, why = refused("run", "--model", folder, "--prompt", "The cat sat on the mat. " * 20)
    assert (what, most, why) == ("prompt", 64, "max_position_embeddings = 64 in config.json")
    assert tokens > 64


def test_roberta_names_the_key_and_the_rows_before_its_first_position(bert_family) -> None:
    from tests.tiny_bert import POSITIONS

    folder = str(bert_family["roberta"])  # max_position_embeddings POSITIONS + 2
    what, tokens, most, why = refused("run", "--model", folder, "--prompt", "The<mask>" * 40)
    assert (what, most) == ("prompt", POSITIONS) and tokens > POSITIONS
    rows = f"max_position_embeddings = {POSITIONS + 2} in config.json"
    assert why == f"{rows}, less the 2 rows before its first position"


def test_t5_has_no_limit_and_a_source_past_n_positions_equals_transformers(
    monkeypatch: pytest.MonkeyPatch, t5_family
) -> None:
    exact_t5.float64(monkeypatch)
    folder, model = t5_family["t5"]
    assert load_checkpoint(str(folder)).model["max_positions"] == 512  # n_positions, T5's default
    source = "translate English to German: " + "The cat is sleeping comfortably. " * 60
    trace = walk(str(folder), source, "die Katze", dtype="float64").trace
    assert len(trace.source_ids) > 512
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([list(trace.source_ids)]),
            decoder_input_ids=torch.tensor([list(trace.target_ids)]),
            output_attentions=True,
        )
    last = len(out.encoder_attentions) - 1
    assert (
        np.max(
            np.abs(trace[f"encoder.{last}.self-attention"]["A2"] - out.encoder_attentions[-1][0, 1].numpy())
        )
        <= 1e-9
    )
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9
