"""Gemma 2 and Gemma 3 checkpoints through the command line (``--model DIR --prompt TEXT``).

On the tiny trained checkpoints of conftest's ``gemma_family``: every command runs on them and says
which layers are sliding and which full; bad input (an unknown kind of layer, a pattern of the wrong
length, a soft cap of 0 or below, a head_dim the tensors disagree with) is one line on stderr, exit
code 2, nothing written; a tokenizer with one token more than the embedding table's rows (as Gemma 3's
real tokenizer.json: 262,145 tokens over 262,144 rows) loads, and only a prompt that uses that token
is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import transformers

from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app

PROMPT = "The cat is sleeping comfortably. The dog is"  # 30 ids: longer than the window of 4


def _cli(runner, *args: str):
    return runner.invoke(app, [*args])


@pytest.mark.parametrize("name", ["gemma2", "gemma3_text"])
def test_every_command_reads_the_checkpoint(runner, gemma_family, tmp_path, name):
    folder = str(gemma_family[name])
    result = _cli(runner, "stages", "--model", folder, "--prompt", "The cat")
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines() if line.startswith("decoder.2.")]
    # a norm on both sides of each sublayer
    assert listed[:3] == ["decoder.2.norm-1", "decoder.2.masked-attention", "decoder.2.output-norm-1"], listed
    kinds = {"gemma2": ("sliding", "full", "sliding"), "gemma3_text": ("sliding", "sliding", "full")}[name]
    for layer, kind in enumerate(kinds):
        result = _cli(runner, "step", "--model", folder, "--prompt", PROMPT,
                      "--stage", f"decoder.{layer}.masked-attention")  # fmt: skip
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert f"Layer {layer} is a {kind} layer (layer_types)" in text, (layer, kind)
        if name == "gemma3_text":  # a rotary base per kind of layer; Gemma 2's one for all goes unsaid
            base = "10000 (local_rope_theta)" if kind == "sliding" else "1000000 (rope_theta)"
            assert f"turn by the rotary base {base}" in text, (layer, base)
        else:
            assert "local_rope_theta" not in text
    for args in (
        ["run"],
        ["generate", "--max-len", "6", "--compare"],
        ["export", str(tmp_path / "out.json")],
    ):
        result = _cli(runner, *args, "--model", folder, "--prompt", PROMPT)
        assert result.exit_code == 0, (args, result.output)
    assert json.loads((tmp_path / "out.json").read_text())["stages"]


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("gemma3_text", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
         "config.json: layer_types[1] is 'chunked_attention'; supported: sliding_attention, full_attention"),
        ("gemma3_text", {"layer_types": ["sliding_attention", "full_attention"]},
         "config.json: layer_types has 2 entries for num_hidden_layers 3: one per layer"),
        ("gemma3_text", {"layer_types": None, "sliding_window_pattern": 0},
         "config.json: sliding_window_pattern is 0, not a positive integer"),
        ("gemma2", {"attn_logit_softcapping": 0},
         "config.json: attn_logit_softcapping is 0, not a number above 0"),
        ("gemma2", {"final_logit_softcapping": -30.0},
         "config.json: final_logit_softcapping is -30.0, not a number above 0"),
        ("gemma3_text", {"final_logit_softcapping": 0.0},
         "config.json: final_logit_softcapping is 0.0, not a number above 0"),
        ("gemma3_text", {"head_dim": 16},
         "q_proj.weight has shape [32, 16], config.json implies [64, 16] (num_attention_heads × head_dim"),
        ("gemma2", {"head_dim": 4},
         "q_proj.weight has shape [32, 16], config.json implies [16, 16] (num_attention_heads × head_dim"),
        ("gemma3_text", {"query_pre_attn_scalar": 0},
         "config.json: query_pre_attn_scalar is 0, not a number above 0"),
        ("gemma3_text", {"sliding_window": None},
         "config.json: sliding_window is None, but layer_types has sliding"),
        ("gemma3_text",
         {"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0},
                              "full_attention": {}}},
         "config.json: rope_parameters.sliding_attention's rope type is 'linear': the sliding layers turn"),
        ("gemma3_text", {"use_bidirectional_attention": True},
         "config.json: use_bidirectional_attention is True"),
        ("gemma2", {"hidden_activation": "relu"},
         "config.json: hidden_activation is 'relu'; the family's MLP is GeGLU"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    runner, gemma_family, tmp_path, name, edit, message
):
    folder = shutil.copytree(gemma_family[name], tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **edit}))
    out = tmp_path / "out.json"
    for args in (["run"], ["generate"], ["export", str(out)]):
        result = _cli(runner, *args, "--model", str(folder), "--prompt", "The cat")
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not out.exists()


EXTRA = "<image_soft_token>"


def _one_token_more(folder: Path, to: Path) -> Path:
    """``folder`` with one special token added past the embedding table's last row, in tokenizer.json
    and tokenizer_config.json's added_tokens_decoder, as Gemma 3's files list ``<image_soft_token>``."""
    from tokenizers import AddedToken, Tokenizer

    shutil.copytree(folder, to)
    rows = json.loads((to / "config.json").read_text())["vocab_size"]
    tok = Tokenizer.from_file(str(to / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(EXTRA, special=True, normalized=False)])
    tok.save(str(to / "tokenizer.json"))
    config = json.loads((to / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"][str(rows)] = {
        "content": EXTRA, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
        "special": True,
    }  # fmt: skip
    (to / "tokenizer_config.json").write_text(json.dumps(config))
    return to


def test_a_tokenizer_with_more_ids_than_rows_refuses_only_the_prompt_that_uses_one(
    runner, gemma_family, tmp_path
):
    folder = _one_token_more(gemma_family["gemma3_text"], tmp_path / "extra")
    rows = json.loads((folder / "config.json").read_text())["vocab_size"]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert len(reference) == rows + 1 and reference.convert_tokens_to_ids(EXTRA) == rows
    # the folder loads; a prompt without the token runs, its logits one column per row of the table
    walk = walk_prompt(str(folder), "The cat is", "float64")
    assert list(walk.trace.target_ids) == reference("The cat is").input_ids
    assert walk.trace["output.logits"]["logits"].shape[-1] == rows  # generation picks among these only
    assert len(walk.trace.vocabulary) == rows
    result = _cli(runner, "generate", "--model", str(folder), "--prompt", "The cat is", "--max-len", "6")
    assert result.exit_code == 0, result.output
    # a prompt with it: refused, naming the token and its id; nothing written
    out = tmp_path / "out.json"
    for args in (["run"], ["generate"], ["export", str(out)]):
        result = _cli(runner, *args, "--model", str(folder), "--prompt", f"The cat{EXTRA} is")
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert lines == [
            f"error: the text has the token '{EXTRA}', id {rows}, which the model cannot read: its embedding "
            f"table has {rows} rows (ids 0 to {rows - 1})"
        ], result.output
    assert not out.exists()
