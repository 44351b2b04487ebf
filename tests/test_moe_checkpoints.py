"""Mixture-of-experts checkpoints (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE, OLMoE)
against transformers' own models (eager), on the tiny trained checkpoints of ``tests/tiny_moe.py``:
token ids against ``AutoTokenizer``; every attention weight, every layer's router logits (as
transformers returns them with ``output_router_logits=True``) and the logits in float64
(transformers' float32 casts removed, ``exact_moe``) and in float32 as shipped; greedy generation
against ``generate``; bad input, one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tests import exact_moe
from tests.tiny_moe import MODELS
from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.run import continue_prompt, load, walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.model.generation import generated_ids

PROMPT = "The cat is sleeping comfortably. The dog is"


def _reference(folder: Path, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager", experts_implementation="eager"
    )
    if dtype == torch.float64:
        exact_moe.inv_freq_64(model)
    return model.eval()


@pytest.mark.parametrize("name", MODELS)
def test_token_ids_equal_auto_tokenizer(moe_family, name):
    folder = moe_family[name]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    assert ckpt.tokenizer.encode(PROMPT) == reference(PROMPT).input_ids


# What each checkpoint's config.json says, read into our keys.
READ = {
    "mixtral": dict(experts=4, experts_per_token=2, d_expert=8, norm_topk=True, shared_experts=0),
    "qwen2_moe": dict(experts=4, experts_per_token=2, d_expert=6, norm_topk=False, shared_experts=1,
                      d_shared=12, attention_bias="qkv", tie_embeddings=True),
    "qwen3_moe": dict(experts=4, experts_per_token=2, d_expert=6, norm_topk=True, shared_experts=0,
                      qk_norm="head"),
    "olmoe": dict(experts=4, experts_per_token=2, d_expert=8, norm_topk=False, shared_experts=0,
                  qk_norm="whole"),
}  # fmt: skip


@pytest.mark.parametrize("name", MODELS)
def test_attention_router_logits_and_logits_equal_transformers_in_float64(moe_family, monkeypatch, name):
    exact_moe.float64(monkeypatch)
    folder = moe_family[name]
    walk = walk_prompt(str(folder), PROMPT, "float64")
    trace, m = walk.trace, walk.config.model
    assert {key: getattr(m, key) for key in READ[name]} == READ[name]
    ids = list(trace.target_ids)
    with torch.no_grad():
        out = _reference(folder)(torch.tensor([ids]), output_attentions=True, output_router_logits=True)
    for i in range(m.num_decoder_layers):
        for h in range(m.num_heads):
            theirs = out.attentions[i][0, h].numpy()
            assert np.max(np.abs(trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"] - theirs)) <= 1e-9
        stage = trace[f"decoder.{i}.experts"]
        assert np.max(np.abs(stage["router_logits"] - out.router_logits[i].numpy())) <= 1e-9
        used = len(np.unique(stage["chosen"]))
        assert used >= 2  # the prompt's tokens are spread over experts: the choice is exercised
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", MODELS)
def test_float32_equals_transformers_as_shipped(moe_family, name):
    folder = moe_family[name]
    trace = walk_prompt(str(folder), PROMPT, "float32").trace
    with torch.no_grad():
        out = _reference(folder, torch.float32)(
            torch.tensor([list(trace.target_ids)]), output_router_logits=True
        )
    logits, expected = trace["output.logits"]["logits"], out.logits[0].numpy()
    assert np.max(np.abs(logits - expected)) <= 1e-4 * np.max(np.abs(expected))
    router = trace["decoder.1.experts"]["router_logits"]
    assert np.max(np.abs(router - out.router_logits[1].numpy())) <= 1e-4 * np.max(np.abs(router))


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_equals_generate(moe_family, monkeypatch, name):
    exact_moe.float64(monkeypatch)
    folder = moe_family[name]
    reference = _reference(folder)
    for text in ["The cat is", "The dog", "A bird sings"]:
        loaded = load(str(folder), text, "float64", prompt=True)
        made = continue_prompt(loaded, max_len=12)
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([loaded.ids]), attention_mask=torch.ones(1, len(loaded.ids), dtype=torch.long),
                do_sample=False, num_beams=1, max_new_tokens=12, pad_token_id=0,
            )[0].tolist()  # fmt: skip
        assert generated_ids(made.steps) == expected, text


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for f in folder.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


EXPERT = {
    "mixtral": "model.layers.1.block_sparse_moe.experts.3.w2.weight",
    "qwen2_moe": "model.layers.1.mlp.shared_expert_gate.weight",
    "qwen3_moe": "model.layers.1.mlp.experts.3.down_proj.weight",
    "olmoe": "model.layers.0.mlp.experts.2.up_proj.weight",
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("bad", ["missing expert", "wrong shape", "k > E"])
def test_bad_checkpoints_are_one_line_and_exit_2(moe_family, tmp_path, bad, model):
    folder = _copy(moe_family[model], tmp_path / "bad")
    name = EXPERT[model]
    if bad == "k > E":
        config = json.loads((folder / "config.json").read_text())
        config["num_experts_per_tok"] = 5
        (folder / "config.json").write_text(json.dumps(config))
    else:
        tensors = load_file(folder / "model.safetensors")
        if bad == "missing expert":
            del tensors[name]
        else:
            tensors[name] = tensors[name][:, :3].copy()
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["export", str(out), "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:") and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()
    said = {"missing expert": name, "wrong shape": name, "k > E": "num_experts_per_tok"}[bad]
    assert said in result.stderr
