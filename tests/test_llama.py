"""Llama-family checkpoints (Llama, Qwen2, Mistral, llama3 rope scaling) against transformers.

On the tiny trained checkpoints of ``tests/tiny_llama.py``: token ids against ``AutoTokenizer``;
every attention weight matrix and the logits against the model run eagerly with
``output_attentions=True`` (float64 with transformers' three float32 casts removed, ``exact_llama``;
float32 as shipped); greedy generation against transformers' ``generate``; the hub path offline;
and bad input, one line.
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

from tests import exact_llama
from tests.shards import sharded_copy
from tests.tiny_llama import MODELS, PROMPTS
from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.run import continue_prompt, load, walk_prompt
from transformer_walkthrough.model.generation import compare, generated_ids

FAMILIES = list(MODELS)
PROMPT = "The cat is sleeping comfortably. The dog is"  # longer than Mistral's window of 4


def _reference(folder: Path, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager"
    )
    if dtype == torch.float64:
        exact_llama.inv_freq_64(model)
    return model.eval()


def _ids(folder: Path, text: str) -> list[int]:
    return transformers.AutoTokenizer.from_pretrained(folder)(text).input_ids


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("name", FAMILIES)
def test_token_ids_equal_auto_tokenizer(llama_family, name):
    folder = llama_family[name]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    for text in [*PROMPTS, PROMPT]:
        ids = ckpt.tokenizer.encode(text)
        assert ids == reference(text).input_ids, text
    bos = reference.bos_token_id
    adds_bos = reference("The cat").input_ids[0] == bos if bos is not None else False
    assert (ckpt.tokenizer.encode("The cat")[0] == bos) == adds_bos
    assert adds_bos == (name not in ("qwen2", "qwen3"))  # Llama 3 and 2 style add theirs; Qwen's has none


@pytest.mark.parametrize("name", FAMILIES)
def test_every_attention_matrix_and_the_logits_equal_transformers_in_float64(llama_family, name, monkeypatch):
    exact_llama.float64(monkeypatch)
    folder = llama_family[name]
    walk = walk_prompt(str(folder), PROMPT, "float64")
    trace, m = walk.trace, walk.config.model
    ids = list(trace.target_ids)
    assert ids == _ids(folder, PROMPT)
    with torch.no_grad():
        out = _reference(folder)(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for i in range(m.num_decoder_layers):
        stage = trace[f"decoder.{i}.masked-attention"]
        for h in range(m.num_heads):
            gap = np.max(np.abs(stage[f"A{h + 1}"] - out.attentions[i][0, h].numpy()))
            assert gap <= 1e-9, (name, i, h, gap)
    assert np.max(np.abs(trace["decoder.final-norm"]["output"] - out.hidden_states[-1][0].numpy())) <= 1e-9
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", FAMILIES)
def test_float32_equals_transformers_as_shipped(llama_family, name):
    folder = llama_family[name]
    trace = walk_prompt(str(folder), PROMPT, "float32").trace
    with torch.no_grad():
        out = _reference(folder, torch.float32)(
            torch.tensor([list(trace.target_ids)]), output_attentions=True
        )
    m = walk_prompt(str(folder), "x").config.model
    for i in range(m.num_decoder_layers):
        for h in range(m.num_heads):
            ours, theirs = (
                trace[f"decoder.{i}.masked-attention"][f"A{h + 1}"],
                out.attentions[i][0, h].numpy(),
            )
            assert np.max(np.abs(ours - theirs)) <= 1e-4 * np.max(np.abs(theirs)), (name, i, h)
    logits, expected = trace["output.logits"]["logits"], out.logits[0].numpy()
    assert np.max(np.abs(logits - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_the_conventions_read_from_config_json(llama_family):
    models = {name: walk_prompt(str(f), "The cat").config.model for name, f in llama_family.items()}
    llama, qwen2, mistral, rope = (models[n] for n in ("llama", "qwen2", "mistral", "llama3-rope"))
    assert (llama.num_heads, llama.kv_heads, llama.tie_embeddings, llama.attention_bias) == (
        4,
        2,
        False,
        False,
    )
    assert (qwen2.kv_heads, qwen2.tie_embeddings, qwen2.attention_bias, qwen2.rope_theta) == (
        1,
        True,
        "qkv",
        1e6,
    )
    assert mistral.sliding_window == 4 and llama.sliding_window is None
    assert (rope.rope_scaling, rope.rope_factor, rope.rope_original_max_positions, rope.d_k) == (
        "llama3",
        8.0,
        16,
        6,
    )
    assert rope.d_k * rope.num_heads != rope.d_model  # head_dim given: W_O is (H·d_k, d_model)
    for m in models.values():
        assert (m.norm, m.positional_encoding, m.feed_forward, m.activation) == (
            "rmsnorm",
            "rotary",
            "gated",
            "silu",
        )


def test_the_sliding_window_is_the_band_of_the_mask(llama_family):
    trace = walk_prompt(str(llama_family["mistral"]), PROMPT, "float64").trace
    M = trace["decoder.0.masked-attention"]["M"]
    n = len(M)
    assert n > 4
    seen = [[j for j in range(n) if M[i, j] == 0] for i in range(n)]
    assert seen == [list(range(max(0, i - 3), i + 1)) for i in range(n)]  # itself and the 3 before
    short = walk_prompt(str(llama_family["mistral"]), "The cat", "float64").trace
    M = short["decoder.0.masked-attention"]["M"]
    assert len(M) <= 4 and np.array_equal(M == 0, np.tril(np.ones(M.shape, dtype=bool)))  # causal only


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_generation_equals_transformers_token_for_token(llama_family, name, monkeypatch):
    exact_llama.float64(monkeypatch)
    folder = llama_family[name]
    reference = _reference(folder)
    ended = 0
    for text in ["The cat is", "The dog", "A bird sings"]:
        loaded = load(str(folder), text, "float64", prompt=True)
        made = continue_prompt(loaded, max_len=12)
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([loaded.ids]), attention_mask=torch.ones(1, len(loaded.ids), dtype=torch.long),
                do_sample=False, num_beams=1, max_new_tokens=12, pad_token_id=0,
            )[0].tolist()  # fmt: skip
        assert generated_ids(made.steps) == expected, (name, text)
        eos = loaded.checkpoint.eos_token_id
        ended += made.steps[-1].chosen in (eos if isinstance(eos, tuple) else (eos,))
    assert ended >= 1  # trained: greedy decoding ends on its end token


@pytest.mark.parametrize("name", FAMILIES)
def test_each_cached_step_equals_the_full_pass(llama_family, name):
    loaded = load(str(llama_family[name]), PROMPT, "float64", prompt=True)
    made = continue_prompt(loaded, max_len=8)
    m = loaded.config.model
    for t, step in enumerate(made.steps[1:], 1):
        for layer in step.layers:  # the cache holds the G key/value heads, one row more a step
            assert layer.K.shape == (m.kv_heads, len(loaded.ids) + t, m.d_k)
    gaps = compare(loaded.config, loaded.weights, made.steps)
    assert max(gaps) <= 1e-12, gaps


def test_eos_given_as_a_list_ends_generation_on_either(llama_family):
    folder = llama_family["llama"]
    config = json.loads((folder / "config.json").read_text())
    assert isinstance(config["eos_token_id"], list) and len(config["eos_token_id"]) == 2
    ckpt = load_checkpoint(str(folder), "float64", prompt=True)
    assert ckpt.eos_token_id == tuple(config["eos_token_id"])


def _hub(folder: Path, cache: Path, repo: str) -> None:
    revision = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / revision)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)


def test_the_hub_path_works_offline_with_shards(llama_family, tmp_path):
    shards = sharded_copy(llama_family["llama"], tmp_path / "shards", transformers.LlamaForCausalLM, "8KB")
    count = len(list(shards.glob("model-*.safetensors")))
    assert count >= 3 and not (shards / "model.safetensors").exists()
    _hub(shards, tmp_path / "hub", "tiny-org/llama-shards")
    code = (
        "import numpy as np\n"
        "from transformer_walkthrough.checkpoints.run import walk_prompt\n"
        "w = walk_prompt('tiny-org/llama-shards', 'The cat is', 'float64')\n"
        "print(w.checkpoint.source); np.save('logits.npy', w.trace['output.logits']['logits'])"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "home"),
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tiny-org/llama-shards (model.safetensors.index.json, {count} shards)"
    one = walk_prompt(str(llama_family["llama"]), "The cat is", "float64").trace["output.logits"]["logits"]
    assert np.array_equal(np.load(tmp_path / "logits.npy"), one)


# ---------------------------------------------------------------------------------------------
# bad input: one line


def _edited(folder: Path, to: Path, **changes) -> Path:
    shutil.copytree(folder, to)
    config = json.loads((to / "config.json").read_text())
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    (to / "config.json").write_text(json.dumps(config))
    return to


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "phi3"},
         "model_type is 'phi3'; supported: 'marian', 'gpt2', 'llama', 'mistral', 'qwen2'"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
         "rope type 'yarn' is not supported (supported: default, linear, llama3)"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}},
         "rope_scaling's rope type 'dynamic' is not supported"),
        ({"num_key_value_heads": 3},
         "num_attention_heads (4) is not divisible by num_key_value_heads (3)"),
        ({"head_dim": 8},  # a head_dim that disagrees with the tensors
         "tensor model.layers.0.self_attn.q_proj.weight has shape [16, 16], config.json implies [32, 16]"),
        ({"hidden_act": "gelu"}, "hidden_act is 'gelu'; the family's MLP is SwiGLU (silu)"),
        ({"num_hidden_layers": 3}, "missing tensor model.layers.2.input_layernorm.weight"),
        ({"num_hidden_layers": 1},
         "tensor model.layers.1.input_layernorm.weight and 8 more is not part of a llama model"),
        ({"intermediate_size": 31},
         "tensor model.layers.0.mlp.gate_proj.weight has shape [32, 16], config.json implies [31, 16]"),
        ({"tie_word_embeddings": True}, "lm_head.weight differs from model.embed_tokens.weight"),
        ({"eos_token_id": "</s>"}, "eos_token_id is '</s>', not a token id or a list of them"),
        ({"rms_norm_eps": -1}, "rms_norm_eps is -1, not a number above 0"),
        ({"model_type": "mistral", "attention_bias": True},
         "attention_bias is true; Mistral's attention has no biases"),
    ],
)  # fmt: skip
def test_a_config_that_disagrees_is_one_line(llama_family, tmp_path, changes, message):
    folder = _edited(llama_family["llama"], tmp_path / "edited", **changes)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert message in _one_line(err)


def test_a_missing_tensor_is_named(llama_family, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = shutil.copytree(llama_family["qwen2"], tmp_path / "missing")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert "missing tensor model.layers.1.self_attn.k_proj.bias" in _one_line(err)


def test_qwen2_with_a_window_on_some_layers_is_refused(llama_family, tmp_path):
    folder = _edited(llama_family["qwen2"], tmp_path / "window", use_sliding_window=True, sliding_window=4)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert "use_sliding_window is true" in _one_line(err)


def test_qwen3_normalises_each_head_s_queries_and_keys_as_transformers_does(llama_family, monkeypatch):
    """Qwen3's q_norm and k_norm are our QK-norm: read from the family's map into gamma_Q and gamma_K,
    and every normed query and key equals what transformers' own q_norm and k_norm give (float64)."""
    exact_llama.float64(monkeypatch)
    folder = llama_family["qwen3"]
    walk = walk_prompt(str(folder), PROMPT, "float64")
    m = walk.config.model
    assert (m.qk_norm, m.d_k, m.num_heads, m.kv_heads, m.d_model) == ("head", 8, 4, 2, 16)
    model = _reference(folder)
    normed: dict[tuple[int, str], torch.Tensor] = {}
    for i, layer in enumerate(model.model.layers):
        for which in "qk":
            norm = getattr(layer.self_attn, f"{which}_norm")
            norm.register_forward_hook(lambda mod, args, out, key=(i, which): normed.__setitem__(key, out[0]))
            stage_gamma = walk.trace[f"decoder.{i}.masked-attention"][f"gamma_{which.upper()}"][0]
            assert np.array_equal(stage_gamma, norm.weight.detach().numpy())  # the map read it as stored
    with torch.no_grad():
        model(torch.tensor([list(walk.trace.target_ids)]))
    for i in range(m.num_decoder_layers):
        stage = walk.trace[f"decoder.{i}.masked-attention"]
        for h in range(1, m.num_heads + 1):
            assert np.max(np.abs(stage[f"norm_Q{h}"] - normed[i, "q"][:, h - 1].numpy())) <= 1e-12
        for g in range(1, m.kv_heads + 1):
            assert np.max(np.abs(stage[f"norm_K{g}"] - normed[i, "k"][:, g - 1].numpy())) <= 1e-12


def test_qwen3_with_a_window_on_some_layers_is_refused(llama_family, tmp_path):
    folder = _edited(llama_family["qwen3"], tmp_path / "window", use_sliding_window=True, sliding_window=4)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert "use_sliding_window is true: Qwen3's window on some layers only" in _one_line(err)


def test_a_prompt_longer_than_max_position_embeddings_is_refused(llama_family):
    with pytest.raises(CheckpointError) as err:
        walk_prompt(str(llama_family["llama"]), "The cat is sleeping. " * 40)
    assert "this model reads at most 64" in _one_line(err)


def test_a_bfloat16_checkpoint_is_widened_exactly(llama_family, tmp_path):
    """Llama 3.2 and SmolLM2 ship bfloat16 weights: each widens to float32 exactly (a bfloat16 is the
    top half of a float32), so our float32 pass equals transformers' on the same file."""
    source = llama_family["qwen2"]
    folder = tmp_path / "bf16"
    transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(folder)
    for f in source.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    assert np.array_equal(ckpt.weights["decoder.embedding/E"], theirs["model.embed_tokens.weight"].numpy())
    q = ckpt.weights["decoder.0.masked-attention/W_QKV"][:, :16]
    assert np.array_equal(q, theirs["model.layers.0.self_attn.q_proj.weight"].numpy().T)
    trace = walk_prompt(str(folder), PROMPT, "float32").trace
    model = _reference(folder, torch.float32)
    with torch.no_grad():
        expected = model(torch.tensor([list(trace.target_ids)])).logits[0].numpy()
    assert np.max(np.abs(trace["output.logits"]["logits"] - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_generation_config_names_what_generation_stops_on(llama_family, tmp_path):
    """transformers' generate stops on generation_config.json's eos_token_id (Qwen2-Instruct names two
    there, one in config.json): so does ours."""
    folder = shutil.copytree(llama_family["qwen2"], tmp_path / "instruct")
    config = json.loads((folder / "config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, config["eos_token_id"]]}))
    assert load_checkpoint(str(folder), "float32", prompt=True).eos_token_id == (5, config["eos_token_id"])
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": "x"}))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert "generation_config.json: eos_token_id is 'x'" in _one_line(err)
