"""GPT-2 through the command line (``--model DIR --prompt TEXT``), on the tiny random GPT-2 of conftest.

The numbers the commands show or write are compared with ``GPT2LMHeadModel`` (eager, float64) and
its greedy ``generate``; bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch

from tests.arithmetic import reads
from tests.tiny_gpt2 import HEADS, LAYERS, POSITIONS, PROMPTS
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.errors import printable

PROMPT = "The cat is sleeping. The cat"  # "·cat" repeats: its rows are told apart by position


def _cli(runner, *args: str):
    return runner.invoke(app, [*args])


def _ids(gpt2, text: str) -> list[int]:
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(gpt2[0]["saved"])(text)["input_ids"]


def _greedy(gpt2, ids: list[int], new: int) -> list[int]:
    reference = gpt2[1]
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
            num_beams=1, max_new_tokens=new, pad_token_id=reference.config.eos_token_id,
        )  # fmt: skip
    return out[0].tolist()


def test_run_shows_the_prompts_tokens_and_the_prediction(runner, gpt2):
    result = _cli(runner, "run", "--model", str(gpt2[0]["saved"]), "--prompt", PROMPT)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "translation" not in out  # a prompt is read as it is: nothing is generated first
    trace = walk_prompt(str(gpt2[0]["saved"]), PROMPT).trace
    assert list(trace.target_ids) == _ids(gpt2, PROMPT)  # no start token: the prompt's ids as they are
    assert [s for s in trace.stages if s.startswith("encoder.") or "cross" in s] == []
    repeated = [label for label in trace.target_tokens if "@" in label]
    assert "·c@1" in repeated and "·c@11" in repeated  # the leading space shown as ·
    assert all(f"\n{label} " in out for label in repeated)
    assert "Prediction" in out and f"decoder.{LAYERS - 1}.masked-attention" in out


def test_export_equals_transformers_every_attention_matrix_and_the_logits(runner, gpt2, tmp_path):
    path = tmp_path / "gpt2.json"
    result = _cli(runner, "export", str(path), "--model", str(gpt2[0]["hub"]), "--prompt", PROMPT,
                  "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    ids = _ids(gpt2, PROMPT)
    assert doc["target_ids"] == ids and doc["source_ids"] == []
    stages = {s["id"]: s["matrices"] for s in doc["stages"]}
    with torch.no_grad():
        out = gpt2[1](torch.tensor([ids]), output_attentions=True)
    worst = 0.0
    for n in range(LAYERS):
        for h in range(HEADS):
            A = np.array(stages[f"decoder.{n}.masked-attention"][f"A{h + 1}"]["values"])
            worst = max(worst, float(np.abs(A - out.attentions[n][0, h].numpy()).max()))
    logits = np.array(stages["output.logits"]["logits"]["values"])
    worst = max(worst, float(np.abs(logits - out.logits[0].numpy()).max()))
    assert worst <= 1e-9, worst
    assert doc["model"] == f"{gpt2[0]['hub']} (model.safetensors)"


def test_step_one_layer_and_stages(runner, gpt2):
    folder = str(gpt2[0]["saved"])
    result = _cli(runner, "step", "--model", folder, "--prompt", PROMPT, "--stage", "masked-attention",
                  "--layer", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "decoder.1.masked-attention" in result.output and "decoder.0.masked" not in result.output
    result = _cli(runner, "stages", "--model", folder, "--prompt", "The cat")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith(("decoder.", "output."))]
    assert listed == list(walk_prompt(folder, "The cat").trace.stages)


def test_explain_an_attention_weight_by_label(runner, gpt2):
    folder = str(gpt2[0]["saved"])
    trace = walk_prompt(folder, PROMPT, "float64").trace
    row, col = trace.target_tokens[3], trace.target_tokens[1]
    result = _cli(runner, "explain", "--model", folder, "--prompt", PROMPT, "--dtype", "float64",
                  "--stage", "decoder.1.masked-attention", "--matrix", "A2",
                  "--cell", f"{row},{col}")  # fmt: skip
    assert result.exit_code == 0, result.output
    value = trace["decoder.1.masked-attention"]["A2"][3, 1]
    reads("A2[3, 1] = {}", result.output.splitlines()[0], value, search=True)


def test_explain_names_the_comma_token_by_its_label(runner, gpt2):
    folder = str(gpt2[0]["saved"])
    prompt = "The cat, the mat"
    trace = walk_prompt(folder, prompt, "float64").trace
    tokens = trace.target_tokens
    comma = tokens.index(",")  # the tokenizer's own piece: a label that holds the separator
    result = _cli(runner, "explain", "--model", folder, "--prompt", prompt, "--dtype", "float64",
                  "--stage", "decoder.0.masked-attention", "--matrix", "A1",
                  "--cell", f",,{tokens[0]}")  # fmt: skip
    assert result.exit_code == 0, result.output
    value = trace["decoder.0.masked-attention"]["A1"][comma, 0]
    reads(f"A1[{comma}, 0] = {{}}", result.output.splitlines()[0], value, search=True)


def test_verify_agrees_with_itself_and_torch(runner, gpt2):
    folder = str(gpt2[0]["saved"])
    result = _cli(runner, "verify", "--model", folder, "--prompt", PROMPT, "--against", "torch")
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert re.match(r"(\d+) of \1 checks agree", last) and "(float32)" in last


@pytest.mark.parametrize("text", PROMPTS[:4])
def test_generate_equals_transformers_greedy_token_for_token(runner, gpt2, text):
    ids = _ids(gpt2, text)
    new = 8
    expected = _greedy(gpt2, ids, new)
    result = _cli(runner, "generate", "--model", str(gpt2[0]["saved"]), "--prompt", text,
                  "--max-len", str(new), "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    from transformers import GPT2TokenizerFast

    tok = GPT2TokenizerFast.from_pretrained(gpt2[0]["saved"])
    made = expected[len(ids) :]
    lines = result.output.splitlines()
    said = printable(text) + printable(tok.decode(made))
    assert said in lines, (said, lines)
    assert f"{len(made)} tokens after a prompt of {len(ids)}, greedy" in " ".join(result.output.split())


def test_generate_shows_the_cache_growing_and_compares_with_the_full_pass(runner, gpt2):
    folder = str(gpt2[0]["saved"])
    n = len(_ids(gpt2, "The cat is"))
    result = _cli(runner, "generate", "--model", folder, "--prompt", "The cat is", "--max-len", "5",
                  "--compare", "--dtype", "float64", "--layer", "0", "--head", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    d_k = 16 // HEADS
    sizes = re.findall(r"\s(\d+)×(\d+)\s", result.output)
    assert [(int(a), int(b)) for a, b in sizes] == [(n + t, d_k) for t in range(5)]  # one row more a step
    assert "A2 of layer 0" in result.output
    text = " ".join(result.output.split())
    said = re.search(r"Step t equals row n \+ t − 1 of one full pass .* \(max \|diff\| (\S+)\)", text)
    worst = float(said[1])
    assert worst <= 1e-12


def test_generate_top_k_sampling_is_seeded(runner, gpt2):
    args = ["generate", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat", "--max-len", "10",
            "--top-k", "4"]  # fmt: skip
    first = _cli(runner, *args, "--seed", "7")
    assert first.exit_code == 0, first.output
    assert "drawn from the top 4 (seed 7)" in " ".join(first.output.split())
    assert _cli(runner, *args, "--seed", "7").output == first.output
    others = [_cli(runner, *args, "--seed", str(s)).output for s in (8, 9, 10)]
    assert any(o != first.output for o in others)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("source with gpt2", "is a decoder-only model (gpt2): give --prompt TEXT"),
        ("prompt with marian", "is an encoder-decoder model (marian): give --source TEXT"),
        ("prompt and source", "give one"),
        ("empty prompt", "--prompt: give some text"),
        ("prompt without model", "--prompt needs --model"),
        ("too long", f"this model reads at most {POSITIONS}"),
    ],
)
def test_bad_input_is_one_line_exit_2(runner, gpt2, marian, tmp_path, case, message):
    folder = str(gpt2[0]["saved"])
    args = {
        "source with gpt2": ["--model", folder, "--source", "the cat"],
        "prompt with marian": ["--model", str(marian[0]), "--prompt", "the cat"],
        "prompt and source": ["--model", folder, "--prompt", "a", "--source", "b"],
        "empty prompt": ["--model", folder, "--prompt", ""],
        "prompt without model": ["--prompt", "the cat"],
        "too long": ["--model", folder, "--prompt", "the cat " * POSITIONS],
    }[case]
    for command in ("run", "generate"):
        result = _cli(runner, command, *args)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


def test_an_end_token_past_the_vocabulary_is_never_chosen_as_in_transformers(runner, gpt2, tmp_path):
    """GPT2Config's default eos (50256) lies past a small model's pieces: it is only compared with
    the chosen token, so generation runs to --max-len, as transformers' greedy generate does."""
    folder = tmp_path / "eos"
    shutil.copytree(gpt2[0]["saved"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "eos_token_id": 50256}))
    ids, new = _ids(gpt2, "The cat"), 6
    result = _cli(runner, "generate", "--model", str(folder), "--prompt", "The cat", "--max-len", str(new),
                  "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    from transformers import GPT2TokenizerFast

    made = _greedy(gpt2, ids, new)[len(ids) :]
    assert len(made) == new
    said = printable("The cat") + printable(GPT2TokenizerFast.from_pretrained(gpt2[0]["saved"]).decode(made))
    assert said in result.output.splitlines()
    assert f"{new} tokens after a prompt of {len(ids)}, greedy" in " ".join(result.output.split())


def test_the_wrong_input_is_refused_before_the_weights_are_read(runner, gpt2, tmp_path):
    folder = tmp_path / "no-weights"
    shutil.copytree(gpt2[0]["saved"], folder)
    (folder / "model.safetensors").unlink()
    result = _cli(runner, "run", "--model", str(folder), "--source", "the cat")
    assert result.exit_code == 2 and "give --prompt TEXT" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--head", "3"], "--head: this model has heads 1 to 2, got 3"),
        (["--layer", "2"], "--layer: this model has layers 0 to 1, got 2"),
        (["--top-k", "0"], "--top-k: must be 1 or more, got 0"),
        (["--seed", "3"], "--seed with --model seeds the draw: give --temperature T (above 0), --top-k K"),
        (["--max-len", "0"], "--max-len: must be a positive integer"),
    ],
)
def test_bad_generation_options_are_one_line_exit_2(runner, gpt2, args, message):
    result = _cli(runner, "generate", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


def test_cache_options_need_a_prompt(runner):
    result = _cli(runner, "generate", "--layer", "0")
    assert result.exit_code == 2
    assert result.output.strip() == "error: --layer is for --model with --prompt (the key/value cache)"
