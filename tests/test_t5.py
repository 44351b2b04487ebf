"""T5 and Flan-T5 checkpoints (``model_type: t5``): tiny random ones built offline with transformers'
``save_pretrained`` (tests/tiny_t5.py), converted by the family's record and held against
transformers' eager ``T5ForConditionalGeneration``: the tokenizer's ids against ``AutoTokenizer``,
every attention weight of the three kinds of attention and the logits in float64 (the RMSNorm's
float32 cast removed, ``tests/exact_t5.py``) and in float32 as shipped, greedy generation against
``generate(do_sample=False)``; the command line; and the bad inputs, one line each."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from typer.testing import CliRunner

from transformer_walkthrough.checkpoints.checkpoint import load_checkpoint
from transformer_walkthrough.checkpoints.run import MAX_TRANSLATION, load, translate, walk
from transformer_walkthrough.cli import app
from transformer_walkthrough.model import generation, transformer
from transformer_walkthrough.model.generation import compare, generate_cached
from transformer_walkthrough.model.kinds.attention.pieces import Project

from . import exact_t5
from .tiny_t5 import MODELS, SENTENCES

SOURCE = "translate English to German: The cat is sleeping comfortably."
TARGET = "die Katze schläft bequem."


@pytest.mark.parametrize("name", MODELS)
def test_the_source_ids_equal_autotokenizer(t5_family, name: str) -> None:
    folder, _ = t5_family[name]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer = load_checkpoint(str(folder)).tokenizer
    for text in [*SENTENCES, TARGET]:
        assert tokenizer.encode_source(text) == theirs(text)["input_ids"], text
        ids = theirs(text)["input_ids"]
        assert tokenizer.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text
    assert tokenizer.encode_source("x")[-1] == 1  # </s> appended


def _reference(model, trace) -> object:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([list(trace.source_ids)]),
            decoder_input_ids=torch.tensor([list(trace.target_ids)]),
            output_attentions=True,
        )


@pytest.mark.parametrize("name", MODELS)
def test_every_attention_and_the_logits_equal_transformers_in_float64(
    monkeypatch: pytest.MonkeyPatch, t5_family, name: str
) -> None:
    exact_t5.float64(monkeypatch)
    folder, model = t5_family[name]
    trace = walk(str(folder), SOURCE, TARGET, dtype="float64").trace
    assert trace.target_ids[0] == 0  # the decoder starts from <pad>
    out = _reference(model, trace)
    for kind, theirs in (("encoder.{}.self-attention", out.encoder_attentions),
                         ("decoder.{}.masked-attention", out.decoder_attentions),
                         ("decoder.{}.cross-attention", out.cross_attentions)):  # fmt: skip
        for i, layer in enumerate(theirs):
            for h in range(1, 3):
                assert np.max(np.abs(trace[kind.format(i)][f"A{h}"] - layer[0, h - 1].numpy())) <= 1e-9, (
                    kind,
                    i,
                    h,
                )
    assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", MODELS)
def test_float32_equals_transformers_as_shipped(t5_family, name: str) -> None:
    folder, model = t5_family[name]
    trace = walk(str(folder), SOURCE, TARGET, dtype="float32").trace
    out = _reference(copy.deepcopy(model).float(), trace)
    logits = trace["output.logits"]["logits"]
    scale = max(1.0, float(np.max(np.abs(logits))))
    assert np.max(np.abs(logits - out.logits[0].numpy())) <= 1e-4 * scale
    A = trace["decoder.1.cross-attention"]["A1"]
    assert np.max(np.abs(A - out.cross_attentions[1][0, 0].numpy())) <= 1e-4


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_equals_generate(t5_family, name: str) -> None:
    folder, model = t5_family[name]
    for source in (SOURCE, *SENTENCES[1:4]):
        ours = translate(str(folder), source, dtype="float64", max_len=20)
        assert all(len(s.ids) == 1 for s in ours.steps)  # the decoder is fed one token a step: the cache
        ids = torch.tensor([list(ours.teacher_forced.source_ids)])
        theirs = model.generate(ids, do_sample=False, num_beams=1, max_new_tokens=20)[0].tolist()
        assert ours.ids[: len(theirs)] == theirs and theirs[0] == 0, source


@pytest.mark.parametrize("name", MODELS)
def test_every_cached_step_equals_the_full_pass(
    monkeypatch: pytest.MonkeyPatch, t5_family, name: str
) -> None:
    """Step t's queries, keys, values, masked and cross attention weights and logits are row t of one
    teacher-forced pass over everything fed; the encoder and the cross-attention's keys and values
    are computed once, not at every step."""
    loaded = load(str(t5_family[name][0]), SOURCE, "float64")
    calls = {"encoder": 0, "memory": 0}
    encode, memory_keys = transformer.encode, Project.memory_keys

    def counted(what, f):
        def call(*args):
            calls[what] += 1
            return f(*args)

        return call

    monkeypatch.setattr(generation, "encode", counted("encoder", encode))
    monkeypatch.setattr(Project, "memory_keys", staticmethod(counted("memory", memory_keys)))
    steps = generate_cached(loaded.config, loaded.weights, [0], 12, source_ids=loaded.ids)
    assert len(steps) == 12 and [len(s.ids) for s in steps] == [1] * 12  # no eos_id: all 12 steps
    assert calls == {"encoder": 1, "memory": loaded.config.model.num_decoder_layers}
    assert steps[-1].cache_rows == 12 and steps[-1].layers[0].cross.shape == (2, 1, len(loaded.ids))
    monkeypatch.undo()
    assert max(compare(loaded.config, loaded.weights, steps, loaded.ids)) <= 1e-12


def test_the_relative_bias_tables_are_the_first_layers(t5_family) -> None:
    folder, model = t5_family["t5"]
    ckpt = load_checkpoint(str(folder), "float64")
    sd = model.state_dict()
    assert np.array_equal(
        ckpt.weights["encoder.0.self-attention/R"],
        sd["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
    )
    assert not any(k.endswith("/R") and ".1." in k for k in ckpt.weights)
    assert ckpt.model["score_scale"] == "none" and ckpt.model["scale_tied_output"] is True
    flan = load_checkpoint(str(t5_family["flan-t5"][0]), "float64")
    assert flan.model["feed_forward"] == "gated" and flan.model["activation"] == "gelu-tanh"
    assert flan.model["tie_embeddings"] is False and flan.model["scale_tied_output"] is False


def test_the_command_line_runs_steps_and_translates(t5_family) -> None:
    runner, folder = CliRunner(), str(t5_family["flan-t5"][0])
    result = runner.invoke(app, ["run", "--model", folder, "--source", SOURCE, "--target", TARGET])
    assert result.exit_code == 0, result.output
    step = runner.invoke(app, ["step", "--model", folder, "--source", SOURCE, "--target", TARGET,
                               "--stage", "masked-attention", "--layer", "1"])  # fmt: skip
    assert step.exit_code == 0, step.output
    assert "decoder.1.masked-attention" in step.output and "buckets" in step.output
    translated = runner.invoke(app, ["run", "--model", folder, "--source", "the cat", "--dtype", "float64"])
    assert translated.exit_code == 0, translated.output
    text = translate(folder, "the cat", dtype="float64", max_len=MAX_TRANSLATION).text
    assert translated.output.splitlines()[0] == f"translation (greedy): {text}"


def _broken(t5_family, tmp_path, change) -> str:
    folder = tmp_path / "broken"
    shutil.copytree(t5_family["t5"][0], folder)
    change(folder)
    return str(folder)


def _config(folder, **keys) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | keys))


def _without_first_bias(folder) -> None:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    del tensors["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    save_file(tensors, folder / "model.safetensors")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: _config(f, relative_attention_num_buckets=0),
         "relative_attention_num_buckets is 0, not a positive"),
        (lambda f: _config(f, relative_attention_max_distance=4),
         "need 4 or more buckets and a max distance beyond"),
        (lambda f: _config(f, feed_forward_proj="gated-silu"),
         "feed_forward_proj 'gated-silu' is not supported"),
        (_without_first_bias,
         "missing tensor encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
    ],
)  # fmt: skip
def test_bad_checkpoints_are_one_line_and_exit_2(t5_family, tmp_path, change, message: str) -> None:
    folder = _broken(t5_family, tmp_path, change)
    result = CliRunner().invoke(app, ["run", "--model", folder, "--source", "the cat"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr


@pytest.mark.parametrize("layout", ["spiece.model", "tokenizer.json", "converted"])
def test_t5s_normalisation_equals_autotokenizer(t5_tokenizers, layout: str) -> None:
    """T5's real rule, nmt_nfkc (NFKC, whitespace collapsed, leading and trailing spaces dropped):
    SentencePiece's own on spiece.model, the ``tokenizers`` library's on tokenizer.json's charsmap,
    against ``AutoTokenizer`` (which reads tokenizer.json) on accents, digits, full-width forms,
    extra spaces, tabs, unknown characters and special tokens."""
    from transformer_walkthrough.checkpoints.tokenizer import T5Tokenizer

    from .tiny_t5 import NORMALISED

    folder = t5_tokenizers[layout]
    ours = T5Tokenizer(folder, size=80)
    assert ours.file.name == ("spiece.model" if layout == "spiece.model" else "tokenizer.json")
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    for text in NORMALISED:
        ids = theirs(text)["input_ids"]
        assert ours.encode_source(text) == ids, text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text
    # the normalisation is at work: full-width digits are digits, spaces collapse
    assert ours.encode_source("２０２６") == ours.encode_source("2026")
    assert ours.encode_source("  the   cat ") == ours.encode_source("the cat")


def test_a_checkpoint_with_tokenizer_json_alone_runs(t5_family, tmp_path) -> None:
    folder = tmp_path / "json-only"
    shutil.copytree(t5_family["flan-t5"][0], folder)
    (folder / "spiece.model").unlink()
    assert load_checkpoint(str(folder)).tokenizer.file.name == "tokenizer.json"
    ours = translate(str(folder), SOURCE, dtype="float64", max_len=8)
    assert ours.ids == translate(str(t5_family["flan-t5"][0]), SOURCE, dtype="float64", max_len=8).ids


def _json(folder, change) -> None:
    data = json.loads((folder / "tokenizer.json").read_text())
    change(data)
    (folder / "tokenizer.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["model"].update(type="BPE", vocab={"a": 0}, merges=[]),
         "model.type is 'BPE', not a model this family's tokenizer has (Unigram)"),
        (lambda d: d.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "AAAAQA=="}),
         "claims a trie of 1,073,741,824 bytes in a charsmap of 4"),
        (lambda d: d.update(normalizer={"type": "Replace", "pattern": {"Regex": "(a+)+$"}, "content": "b"}),
         "normalizer.pattern"),
        (lambda d: d["model"]["vocab"].__setitem__(3, ["x", float("nan")]), "model.vocab[3]"),
    ],
)  # fmt: skip
def test_a_bad_tokenizer_json_is_one_line(t5_family, tmp_path, change, message: str) -> None:
    folder = _broken(t5_family, tmp_path, lambda f: (f / "spiece.model").unlink())
    _json(Path(folder), change)
    result = CliRunner().invoke(app, ["run", "--model", folder, "--source", "the cat"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
