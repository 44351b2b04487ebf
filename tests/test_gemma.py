"""Gemma, Gemma 2, Gemma 3 and OLMo 2 checkpoints (``--model`` with model_type ``gemma``, ``gemma2``,
``gemma3_text``, ``olmo2``) against transformers.

On the tiny trained checkpoints of ``tests/tiny_gemma.py``: token ids against ``AutoTokenizer``
(Gemma's ``<bos>`` added); every attention weight matrix and the logits against the model run
eagerly with ``output_attentions=True`` (float64 with transformers' float32 casts removed,
``exact_gemma``; float32 as shipped); greedy generation against ``generate``; what config.json says,
read into the conventions; and bad input, one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers

from tests import exact_gemma
from tests.shards import sharded_copy
from tests.tiny_gemma import MODELS
from tests.tiny_llama import PROMPTS
from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.decoder import EMBEDDING
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.family import invert
from transformer_walkthrough.checkpoints.run import continue_prompt, load, walk_prompt
from transformer_walkthrough.model.generation import compare, generated_ids

PROMPT = "The cat is sleeping comfortably. The dog is"


def _reference(folder: Path, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager"
    )
    if dtype == torch.float64:
        exact_gemma.inv_freq_64(model)
    return model.eval()


@pytest.mark.parametrize("name", MODELS)
def test_token_ids_equal_auto_tokenizer(gemma_family, name):
    folder = gemma_family[name]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    for text in [*PROMPTS, PROMPT]:
        assert ckpt.tokenizer.encode(text) == reference(text).input_ids, text
    assert (ckpt.tokenizer.encode("The cat")[0] == reference.bos_token_id) == name.startswith("gemma")


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


def test_gemma2_and_3_read_their_layers_caps_and_rotary_bases(gemma_family):
    gemma2 = load_checkpoint(str(gemma_family["gemma2"]), "float64", prompt=True).model
    gemma3 = load_checkpoint(str(gemma_family["gemma3_text"]), "float64", prompt=True).model
    for m in (gemma2, gemma3):
        assert (m["norm_placement"], m["norm"], m["activation"], m["scale_embeddings"]) == (
            "both", "rmsnorm-plus-one", "gelu-tanh", True,
        )  # fmt: skip
        assert (m["sliding_window"], m["score_scale"], m["head_dim"], m["num_kv_heads"]) == (4, 12.0, 8, 2)
    assert gemma2["layer_types"] == ("sliding", "full", "sliding") and gemma2["qk_norm"] is False
    assert (gemma2["attention_softcap"], gemma2["logit_softcap"], gemma2["rope_theta"]) == (1.5, 5.0, 10000.0)
    assert "local_rope_theta" not in gemma2  # one base for every layer
    assert gemma3["layer_types"] == ("sliding", "sliding", "full") and gemma3["qk_norm"] == "head"
    assert (gemma3["attention_softcap"], gemma3["logit_softcap"]) == (None, None)
    # the full layer: θ = 1,000,000 scaled linearly by 8; the sliding ones: θ = 10,000, unscaled
    assert (gemma3["rope_theta"], gemma3["rope_scaling"], gemma3["rope_factor"]) == (1e6, "linear", 8.0)
    assert gemma3["local_rope_theta"] == 10000.0


def test_an_older_gemma3_config_is_read_as_transformers_reads_it(gemma_family, tmp_path, monkeypatch):
    """rope_theta, rope_local_base_freq, rope_scaling and sliding_window_pattern (Gemma 3's config.json
    on the hub) in place of layer_types and rope_parameters: the same model, as transformers builds it."""
    exact_gemma.float64(monkeypatch)
    folder = tmp_path / "older"
    shutil.copytree(gemma_family["gemma3_text"], folder)
    config = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "rope_parameters", "_sliding_window_pattern"):
        del config[key]
    config |= {"sliding_window_pattern": 2, "rope_theta": 20000.0, "rope_local_base_freq": 500.0,
               "rope_scaling": {"rope_type": "linear", "factor": 4.0}}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    walk = walk_prompt(str(folder), PROMPT, "float64")
    m = walk.config.model
    assert m.layer_types == ("sliding", "full", "sliding")  # every second layer full
    assert (m.rope_theta, m.rope_factor, m.local_rope_theta) == (20000.0, 4.0, 500.0)
    reference = _reference(folder)
    assert reference.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    with torch.no_grad():
        out = reference(torch.tensor([list(walk.trace.target_ids)]), output_attentions=True)
    for i in range(m.num_decoder_layers):
        for h in range(m.num_heads):
            theirs = out.attentions[i][0, h].numpy()
            assert np.max(np.abs(walk.trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"] - theirs)) <= 1e-9
    assert np.max(np.abs(walk.trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


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
    for text in ["The cat is", "The dog", "A bird sings", PROMPT]:  # PROMPT: longer than the window
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


@pytest.mark.parametrize("name", ["gemma", "gemma2", "gemma3_text"])
def test_a_bfloat16_gemma_is_widened_exactly(gemma_family, tmp_path, name):
    source = gemma_family[name]
    folder = tmp_path / "bf16"
    transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(folder)
    for f in source.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    back = invert(ckpt.family.rows(ckpt.model), ckpt.weights)  # every tensor of the map, as they widen it
    assert len(back) >= 10 and np.array_equal(ckpt.weights["decoder.embedding/E"], theirs[EMBEDDING].numpy())
    for key, tensor in back.items():
        assert np.array_equal(tensor, theirs[key].numpy()), key
    trace = walk_prompt(str(folder), PROMPT, "float32").trace
    with torch.no_grad():
        expected = _reference(folder, torch.float32)(torch.tensor([list(trace.target_ids)])).logits[0].numpy()
    assert np.max(np.abs(trace["output.logits"]["logits"] - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_each_cached_step_equals_the_full_pass_across_the_window(gemma_family):
    """A prompt longer than the sliding window (4), then steps whose window drops a key each time."""
    for name in ("gemma2", "gemma3_text"):
        loaded = load(str(gemma_family[name]), PROMPT, "float64", prompt=True)
        m = loaded.config.model
        assert len(loaded.ids) > m.sliding_window and "sliding" in m.layer_types
        made = continue_prompt(loaded, max_len=8)
        assert len(made.steps) >= 2  # a step past the prompt: its window drops a cached key
        gaps = compare(loaded.config, loaded.weights, made.steps)  # queries, keys, values, A, logits
        assert max(gaps) <= 1e-12, (name, gaps)


def _hub(folder: Path, cache: Path, repo: str) -> None:
    revision = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / revision)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)


@pytest.mark.parametrize("name", ["gemma2", "gemma3_text"])
def test_the_hub_path_works_offline_with_shards(gemma_family, tmp_path, name):
    cls = getattr(transformers, {"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}[name])
    shards = sharded_copy(gemma_family[name], tmp_path / "shards", cls, "8KB")
    count = len(list(shards.glob("model-*.safetensors")))
    assert count >= 3 and not (shards / "model.safetensors").exists()
    _hub(shards, tmp_path / "hub", f"tiny-org/{name}")
    code = (
        "import numpy as np\n"
        "from transformer_walkthrough.checkpoints.run import walk_prompt\n"
        f"w = walk_prompt('tiny-org/{name}', 'The cat is', 'float64')\n"
        "print(w.checkpoint.source); np.save('logits.npy', w.trace['output.logits']['logits'])"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "home"),
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tiny-org/{name} (model.safetensors.index.json, {count} shards)"
    one = walk_prompt(str(gemma_family[name]), "The cat is", "float64").trace["output.logits"]["logits"]
    assert np.array_equal(np.load(tmp_path / "logits.npy"), one)


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
