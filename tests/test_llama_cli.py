"""Llama-family checkpoints through the command line (``--model DIR --prompt TEXT``).

On the tiny trained checkpoints of conftest's ``llama_family``: what the commands show or write is
compared with transformers (the models run eagerly, float64 with their float32 casts removed,
``exact_llama``) and with the trace; bad input is one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers

from tests import exact_llama
from tests.arithmetic import reads
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.errors import printable

PROMPT = "The cat is sleeping comfortably. The cat"  # "·cat" repeats; longer than Mistral's window


def _cli(runner, *args: str):
    return runner.invoke(app, [*args])


def _reference(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager"
    )
    exact_llama.inv_freq_64(model)
    return model.eval()


def test_run_shows_every_token_fed_the_bos_included(runner, llama_family):
    folder = str(llama_family["mistral"])
    result = _cli(runner, "run", "--model", folder, "--prompt", PROMPT)
    assert result.exit_code == 0, result.output
    trace = walk_prompt(folder, PROMPT).trace
    ids = transformers.AutoTokenizer.from_pretrained(folder)(PROMPT).input_ids
    assert list(trace.target_ids) == ids and trace.target_tokens[0] == "<s>"  # the BOS it adds, shown
    assert "·cat@2" in trace.target_tokens  # SentencePiece's ▁ shown as ·
    assert [s for s in trace.stages if "positional" in s] == []  # rotary: no position table
    out = result.output
    assert "Prediction" in out and "decoder.1.masked-attention" in out and "RMSNorm" in out
    assert "sliding window of 4" in " ".join(out.split())


def test_stages_and_step_one_layer(runner, llama_family):
    folder = str(llama_family["llama"])
    result = _cli(runner, "stages", "--model", folder, "--prompt", "The cat")
    assert result.exit_code == 0, result.output
    listed = [
        line.split()[0] for line in result.output.splitlines() if line.startswith(("decoder.", "output."))
    ]
    assert listed == list(walk_prompt(folder, "The cat").trace.stages)
    assert "decoder.final-norm" in listed and "decoder.0.norm-1" in listed
    result = _cli(runner, "step", "--model", folder, "--prompt", PROMPT, "--stage", "masked-attention",
                  "--layer", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "decoder.1.masked-attention" in result.output and "decoder.0.masked" not in result.output
    assert "rot_Q1" in result.output and "rot_K2" in result.output and "rot_K3" not in result.output


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "llama3-rope"])
def test_export_equals_transformers_every_attention_matrix_and_the_logits(
    runner, llama_family, tmp_path, monkeypatch, name
):
    exact_llama.float64(monkeypatch)
    folder = llama_family[name]
    path = tmp_path / "llama.json"
    result = _cli(
        runner, "export", str(path), "--model", str(folder), "--prompt", PROMPT, "--dtype", "float64"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    ids = doc["target_ids"]
    assert ids == transformers.AutoTokenizer.from_pretrained(folder)(PROMPT).input_ids
    stages = {s["id"]: s["matrices"] for s in doc["stages"]}
    with torch.no_grad():
        out = _reference(folder)(torch.tensor([ids]), output_attentions=True)
    worst = 0.0
    for n, layer in enumerate(out.attentions):
        for h in range(layer.shape[1]):
            A = np.array(stages[f"decoder.{n}.masked-attention"][f"A{h + 1}"]["values"])
            worst = max(worst, float(np.abs(A - layer[0, h].numpy()).max()))
    logits = np.array(stages["output.logits"]["logits"]["values"])
    worst = max(worst, float(np.abs(logits - out.logits[0].numpy()).max()))
    assert worst <= 1e-9, worst


def _explain(runner, folder, stage, matrix, cell):
    result = _cli(runner, "explain", "--model", folder, "--prompt", PROMPT, "--dtype", "float64",
                  "--stage", stage, "--matrix", matrix, "--cell", cell)  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def test_explain_a_rotation_a_swiglu_an_rmsnorm_and_a_shared_key_head(runner, llama_family):
    folder = str(llama_family["llama3-rope"])
    trace = walk_prompt(folder, PROMPT, "float64").trace
    cases = [
        ("decoder.1.masked-attention", "rot_Q3", (4, 1), "turned by its position's angle"),
        ("decoder.0.feed-forward", "hidden", (2, 5), "SwiGLU"),
        ("decoder.0.norm-1", "output", (3, 2), "RMSNorm"),
        ("decoder.final-norm", "output", (1, 0), "RMSNorm"),
        ("decoder.0.masked-attention", "K2", (1, 1), "query heads 3, 4 all read K2"),
        ("decoder.0.masked-attention", "S4", (5, 2), "query head 4 reads key head 2"),
        ("decoder.0.masked-attention", "cos", (6, 1), "(llama3)"),
    ]
    for stage, matrix, (i, j), said in cases:
        out = _explain(runner, folder, stage, matrix, f"{i},{j}")
        value = trace[stage][matrix][i, j]
        first = out.splitlines()[0]
        reads(f"{matrix}[{i}, {j}] = {{}}", first, value, search=True)
        assert said in " ".join(out.split()), (matrix, out)


def test_explain_a_mask_cell_outside_the_sliding_window(runner, llama_family):
    out = " ".join(
        _explain(runner, str(llama_family["mistral"]), "decoder.0.masked-attention", "M", "6,1").split()
    )
    assert "M[6, 1] = −∞: column 1" in out and "outside the sliding window of 4" in out


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_verify_agrees(runner, llama_family, name):
    result = _cli(runner, "verify", "--model", str(llama_family[name]), "--prompt", PROMPT)
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert re.match(r"(\d+) of \1 checks agree", last) and "(float32)" in last
    text = " ".join(result.output.split())
    assert "cos and sin recomputed" in text
    if name == "mistral":
        assert "M is 0 in the band of the last 4 positions, −∞ elsewhere" in text


def test_generate_equals_transformers_greedy_and_its_cache_the_full_pass(runner, llama_family, monkeypatch):
    exact_llama.float64(monkeypatch)
    folder = llama_family["llama"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok("The cat is").input_ids
    with torch.no_grad():
        expected = _reference(folder).generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
            num_beams=1, max_new_tokens=10, pad_token_id=0,
        )[0].tolist()  # fmt: skip
    result = _cli(runner, "generate", "--model", str(folder), "--prompt", "The cat is", "--max-len", "10",
                  "--dtype", "float64", "--compare", "--layer", "1", "--head", "3")  # fmt: skip
    assert result.exit_code == 0, result.output
    made = expected[len(ids) :]
    said = printable("The cat is") + printable(tok.decode(made))
    assert said in result.output.splitlines(), (said, result.output)
    text = " ".join(result.output.split())
    assert f"{len(made)} tokens after a prompt of {len(ids)}, greedy" in text
    assert "per key/value head (2, each read by 2 query heads)" in text
    worst = float(
        re.search(r"Step t equals row n \+ t − 1 of one full pass .* \(max \|diff\| (\S+)\)", text)[1]
    )
    assert worst <= 1e-12


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"model_type": "phi3"}, "supported: 'marian', 'gpt2', 'llama', 'mistral', 'qwen2'"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "rope type 'yarn' is not supported"),
        ({"num_key_value_heads": 3}, "is not divisible by num_key_value_heads (3)"),
        (None, "this model reads at most 64"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(runner, llama_family, tmp_path, edit, message):
    import shutil

    folder = shutil.copytree(llama_family["llama"], tmp_path / "model")
    prompt = "The cat is sleeping. " * 40 if edit is None else "The cat"
    if edit is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **edit}))
    out = tmp_path / "out.json"
    for args in (["run"], ["generate"], ["export", str(out)]):
        result = _cli(runner, *args, "--model", str(folder), "--prompt", prompt)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not out.exists()
