"""Mixtures whose layers are not all sparse: Qwen2-MoE's ``mlp_only_layers`` and Qwen3-MoE's
``decoder_sparse_step`` read into ``dense_layers`` and ``sparse_step``, a dense layer keeping its
``decoder.N.feed-forward`` of ``intermediate_size``; against transformers' own models (eager), on
the tiny trained checkpoints of ``tests/tiny_moe.py``'s ``MIXED``: every attention weight, each
sparse layer's router logits, each layer's MLP output and the logits in float64 (transformers'
float32 casts removed, ``exact_moe``); greedy generation against ``generate``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers
from typer.testing import CliRunner

from tests import exact_moe
from transformer_walkthrough.checkpoints.run import continue_prompt, load, walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.model.generation import generated_ids

PROMPT = "The cat is sleeping comfortably. The dog is"
# Which layers each checkpoint's config.json makes sparse, and what it says that with.
SPARSE = {"qwen2_moe_dense_first": [1, 2], "qwen3_moe_every_second": [1]}
READ = {
    "qwen2_moe_dense_first": dict(sparse_step=1, dense_layers=(0,), d_ff=8, d_expert=6),
    "qwen3_moe_every_second": dict(sparse_step=2, dense_layers=(), d_ff=8, d_expert=6),
}


def _reference(folder) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    )
    exact_moe.inv_freq_64(model)
    return model.eval()


@pytest.mark.parametrize("name", SPARSE)
def test_dense_layers_keep_their_feed_forward_and_equal_transformers(moe_mixed, monkeypatch, name):
    exact_moe.float64(monkeypatch)
    folder = moe_mixed[name]
    walk = walk_prompt(str(folder), PROMPT, "float64")
    trace, m, weights = walk.trace, walk.config.model, walk.weights
    assert {key: getattr(m, key) for key in READ[name]} == READ[name]
    layers = range(m.num_decoder_layers)
    assert [i for i in layers if m.sparse(i)] == SPARSE[name]
    reference = _reference(folder)
    mlp = {}  # each layer's MLP output, as transformers computes it
    for i, layer in enumerate(reference.model.layers):
        sparse = type(layer.mlp).__name__.endswith("SparseMoeBlock")
        assert sparse == (i in SPARSE[name])  # transformers reads the config.json as we do
        layer.mlp.register_forward_hook(lambda _m, _args, out, i=i: mlp.__setitem__(i, out[0]))
    ids = list(trace.target_ids)
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True, output_router_logits=True)
    assert len(out.router_logits) == len(SPARSE[name])  # one for each sparse layer, bottom to top
    for i in layers:
        for h in range(m.num_heads):
            theirs = out.attentions[i][0, h].numpy()
            assert np.max(np.abs(trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"] - theirs)) <= 1e-9
        if i in SPARSE[name]:
            stage = trace[f"decoder.{i}.experts"]
            assert f"decoder.{i}.feed-forward" not in trace
            router = out.router_logits[SPARSE[name].index(i)].numpy()
            assert np.max(np.abs(stage["router_logits"] - router)) <= 1e-9
        else:
            stage = trace[f"decoder.{i}.feed-forward"]
            assert f"decoder.{i}.experts" not in trace
            assert weights[f"decoder.{i}.feed-forward/W_up"].shape == (m.d_model, 8)  # intermediate_size
        assert np.max(np.abs(stage["output"] - mlp[i].numpy())) <= 1e-9
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", SPARSE)
def test_greedy_generation_equals_generate(moe_mixed, monkeypatch, name):
    exact_moe.float64(monkeypatch)
    folder = moe_mixed[name]
    reference = _reference(folder)
    for text in ["The cat is", "A bird sings"]:
        loaded = load(str(folder), text, "float64", prompt=True)
        made = continue_prompt(loaded, max_len=12)
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([loaded.ids]), attention_mask=torch.ones(1, len(loaded.ids), dtype=torch.long),
                do_sample=False, num_beams=1, max_new_tokens=12, pad_token_id=0,
            )[0].tolist()  # fmt: skip
        assert generated_ids(made.steps) == expected, text


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("mlp_only_layers", [0, "1"], "mlp_only_layers"),
        ("mlp_only_layers", 0, "mlp_only_layers"),
        ("mlp_only_layers", [-1], "mlp_only_layers"),
        ("decoder_sparse_step", 0, "decoder_sparse_step"),
        ("decoder_sparse_step", 1.5, "decoder_sparse_step"),
    ],
)
def test_bad_dense_layers_are_one_line_and_exit_2(moe_mixed, tmp_path, key, value, said):
    folder = tmp_path / "bad"
    shutil.copytree(moe_mixed["qwen2_moe_dense_first"], folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["export", str(out), "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:") and len(result.stderr.strip().splitlines()) == 1
    assert said in result.stderr and not out.exists()


def test_a_dense_layer_given_experts_tensors_is_refused(moe_mixed, tmp_path):
    """The file's layer 0 is dense and its layer 1 sparse: a config.json that says the opposite is
    refused (layer 0's router missing), never read as something else."""
    folder = tmp_path / "bad"
    shutil.copytree(moe_mixed["qwen2_moe_dense_first"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["mlp_only_layers"] = [1]
    (folder / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "model.layers.0.mlp.gate.weight" in result.stderr
