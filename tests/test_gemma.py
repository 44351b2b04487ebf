"""Gemma and OLMo 2 checkpoints (``--model`` with model_type ``gemma``, ``olmo2``) against transformers.

On the tiny trained checkpoints of ``tests/tiny_gemma.py``: token ids against ``AutoTokenizer``
(Gemma's ``<bos>`` added); every attention weight matrix and the logits against the model run
eagerly with ``output_attentions=True`` (float64 with transformers' float32 casts removed,
``exact_gemma``; float32 as shipped); greedy generation against ``generate``; what config.json says,
read into the conventions; and bad input, one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers

from tests import exact_gemma, exact_llama
from tests.tiny_gemma import MODELS
from tests.tiny_llama import PROMPTS
from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.run import continue_prompt, load, walk_prompt
from transformer_walkthrough.model.generation import compare, generated_ids

PROMPT = "The cat is sleeping comfortably. The dog is"


def _reference(folder: Path, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager"
    )
    if dtype == torch.float64:
        exact_llama.inv_freq_64(model)
    return model.eval()


@pytest.mark.parametrize("name", MODELS)
def test_token_ids_equal_auto_tokenizer(gemma_family, name):
    folder = gemma_family[name]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    for text in [*PROMPTS, PROMPT]:
        assert ckpt.tokenizer.encode(text) == reference(text).input_ids, text
    assert (ckpt.tokenizer.encode("The cat")[0] == reference.bos_token_id) == (name == "gemma")


def test_the_conventions_read_from_config_json(gemma_family):
    gemma = load_checkpoint(str(gemma_family["gemma"]), "float64", prompt=True).model
    olmo2 = load_checkpoint(str(gemma_family["olmo2"]), "float64", prompt=True).model
    assert (gemma["norm_placement"], gemma["norm"], gemma["activation"], gemma["feed_forward"]) == (
        "pre", "rmsnorm-plus-one", "gelu-tanh", "gated",
    )  # fmt: skip
    assert gemma["scale_embeddings"] and gemma["tie_embeddings"] and gemma["num_kv_heads"] == 1
    assert gemma["head_dim"] == 8 and gemma["qk_norm"] is False
    assert (olmo2["norm_placement"], olmo2["norm"], olmo2["qk_norm"], olmo2["activation"]) == (
        "output", "rmsnorm", "whole", "silu",
    )  # fmt: skip
    assert not olmo2["scale_embeddings"] and not olmo2["tie_embeddings"]


@pytest.mark.parametrize("name", MODELS)
def test_every_attention_matrix_and_the_logits_equal_transformers_in_float64(gemma_family, name, monkeypatch):
    exact_gemma.float64(monkeypatch)
    folder = gemma_family[name]
    walk = walk_prompt(str(folder), PROMPT, "float64")
    trace, m = walk.trace, walk.config.model
    ids = list(trace.target_ids)
    assert ids == transformers.AutoTokenizer.from_pretrained(folder)(PROMPT).input_ids
    with torch.no_grad():
        out = _reference(folder)(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for i in range(m.num_decoder_layers):
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(m.num_heads):
            gap = np.max(np.abs(stage[f"A{h + 1}"] - out.attentions[i][0, h].numpy()))
            assert gap <= 1e-9, (name, i, h, gap)
    assert np.max(np.abs(trace["decoder.final-norm"]["output"] - out.hidden_states[-1][0].numpy())) <= 1e-9
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", MODELS)
def test_float32_equals_transformers_as_shipped(gemma_family, name):
    folder = gemma_family[name]
    walk = walk_prompt(str(folder), PROMPT, "float32")
    trace, m = walk.trace, walk.config.model
    with torch.no_grad():
        out = _reference(folder, torch.float32)(
            torch.tensor([list(trace.target_ids)]), output_attentions=True
        )
    for i in range(m.num_decoder_layers):
        for h in range(m.num_heads):
            ours, theirs = (
                trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"],
                out.attentions[i][0, h].numpy(),
            )
            assert np.max(np.abs(ours - theirs)) <= 1e-4 * np.max(np.abs(theirs)), (name, i, h)
    logits, expected = trace["output.logits"]["logits"], out.logits[0].numpy()
    assert logits.dtype == np.float32
    assert np.max(np.abs(logits - expected)) <= 1e-4 * np.max(np.abs(expected))


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_equals_transformers_token_for_token(gemma_family, name, monkeypatch):
    exact_gemma.float64(monkeypatch)
    folder = gemma_family[name]
    reference = _reference(folder)
    for text in ["The cat is", "The dog", "A bird sings"]:
        loaded = load(str(folder), text, "float64", prompt=True)
        made = continue_prompt(loaded, max_len=12)
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([loaded.ids]), attention_mask=torch.ones(1, len(loaded.ids), dtype=torch.long),
                do_sample=False, num_beams=1, max_new_tokens=12, pad_token_id=0,
            )[0].tolist()  # fmt: skip
        assert generated_ids(made.steps) == expected, (name, text)
    gaps = compare(loaded.config, loaded.weights, made.steps)  # each cached step equals the full pass
    assert max(gaps) <= 1e-12, gaps


def test_a_bfloat16_gemma_is_widened_exactly(gemma_family, tmp_path):
    source = gemma_family["gemma"]
    folder = tmp_path / "bf16"
    transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(folder)
    for f in source.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    assert np.array_equal(
        ckpt.weights["decoder.0.norm-1/gamma"], theirs["model.layers.0.input_layernorm.weight"].numpy()
    )
    trace = walk_prompt(str(folder), PROMPT, "float32").trace
    with torch.no_grad():
        expected = _reference(folder, torch.float32)(torch.tensor([list(trace.target_ids)])).logits[0].numpy()
    assert np.max(np.abs(trace["output.logits"]["logits"] - expected)) <= 1e-4 * np.max(np.abs(expected))


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        (
            "gemma",
            {"hidden_act": "relu"},
            "hidden_act is 'relu'; the family's MLP is GeGLU (gelu_pytorch_tanh)",
        ),
        ("gemma", {"attention_bias": True}, "attention_bias is true; Gemma's attention has no biases"),
        ("olmo2", {"attention_bias": True}, "attention_bias is true; OLMo 2's attention has no biases"),
    ],
)
def test_a_config_that_disagrees_is_one_line(gemma_family, tmp_path, name, changes, message):
    folder = tmp_path / name
    shutil.copytree(gemma_family[name], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert str(err.value) == f"{folder / 'config.json'}: {message}"
