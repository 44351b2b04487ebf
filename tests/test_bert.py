"""BERT, RoBERTa and DistilBERT checkpoints (checkpoints/bert.py) against transformers.

On the tiny checkpoints of ``tests/tiny_bert.py`` (conftest's ``bert_family``): token ids and the
mask token against ``AutoTokenizer``; every attention weight matrix and the logits against the model
run eagerly with ``output_attentions=True`` (float64: transformers' BERT has no float32 casts, so
the two agree to rounding; float32 as shipped); the top-5 fill of each blank against transformers'
``fill-mask`` pipeline; what each file layout converts to; the hub path; and bad input, one line.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers
from safetensors.numpy import load_file, save_file

from tests.tiny_bert import MASKED, POSITIONS, SENTENCES
from transformer_walkthrough.checkpoints.bert import load_bert
from transformer_walkthrough.checkpoints.checkpoint import FAMILIES, load_checkpoint
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.run import load, walk_prompt
from transformer_walkthrough.model.transformer import run_forward

FILL = ["bert", "roberta", "distilbert", "bert-untied", "bert-pretraining"]  # with an MLM head
ALL = [*FILL, "bert-encoder"]


def _mask(folder: Path) -> str:
    return transformers.AutoTokenizer.from_pretrained(folder).mask_token


def _prompts(folder: Path) -> list[str]:
    """The masked sentences in the checkpoint's own mask token ([MASK], RoBERTa's <mask>)."""
    mask = _mask(folder)
    return [m.format(*[mask] * m.count("{}")) for m in MASKED]


def _reference(folder: Path, dtype: torch.dtype = torch.float64, head: bool = True) -> torch.nn.Module:
    kind = transformers.AutoModelForMaskedLM if head else transformers.AutoModel
    return kind.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


def test_the_blocked_transpose_is_the_transpose():
    """nn.Linear's weights are transposed a block of rows at a time: the same numbers, any shape
    (rows past one block, a last block cut short), cast to the dtype asked, and into a strided
    destination (W_QKV's thirds)."""
    from transformer_walkthrough.checkpoints.tensors import TRANSPOSE_ROWS, transpose_into, transposed

    a = np.arange(2 * TRANSPOSE_ROWS + 7, dtype=np.float32).reshape(-1, 1) * 10 + np.arange(5)
    for dtype in (np.float32, np.float64):
        t = transposed(a, np.dtype(dtype))
        assert t.dtype == dtype and t.flags.c_contiguous and t.shape == (5, 2 * TRANSPOSE_ROWS + 7)
        assert t[3, 300] == 3003.0
        np.testing.assert_array_equal(t, a.T)
    out = np.zeros((5, 3 * a.shape[0]), np.float64)
    transpose_into(out[:, a.shape[0] : 2 * a.shape[0]], a)
    np.testing.assert_array_equal(out[:, a.shape[0] : 2 * a.shape[0]], a.T)
    assert not out[:, : a.shape[0]].any() and not out[:, 2 * a.shape[0] :].any()


@pytest.mark.parametrize("name", ALL)
def test_token_ids_and_the_mask_equal_auto_tokenizer(bert_family, name):
    folder = bert_family[name]
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ckpt = load_checkpoint(str(folder), "float32", prompt=True)
    for text in [*SENTENCES, *_prompts(folder), "Unknown words: Ω ☃ 猫", "  spaces  "]:
        assert ckpt.tokenizer.encode(text) == reference(text).input_ids, text
    assert (ckpt.mask_token, ckpt.mask_id) == (reference.mask_token, reference.mask_token_id)
    ids = ckpt.tokenizer.encode("The cat")
    assert (ids[0], ids[-1]) == (reference.cls_token_id, reference.sep_token_id)  # [CLS] … [SEP], <s> … </s>


@pytest.mark.parametrize("name", ALL)
def test_every_attention_matrix_and_the_logits_equal_transformers_in_float64(bert_family, name):
    folder = bert_family[name]
    ckpt, config, w, _ = load(str(folder), "x", "float64", prompt=True)
    reference = _reference(folder, head=ckpt.mlm_head)
    m = config.model
    for text in [*_prompts(folder), SENTENCES[0]]:
        ids = ckpt.tokenizer.encode(text)
        trace = run_forward(config, w, source_ids=ids)
        with torch.no_grad():
            out = reference(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
        for n in range(m.num_encoder_layers):
            stage = trace[f"encoder.{n}.self-attention"]
            for h in range(m.num_heads):
                gap = np.max(np.abs(stage[f"A{h + 1}"] - out.attentions[n][0, h].numpy()))
                assert gap <= 1e-9, (name, n, h, gap)
        last = trace[f"encoder.{m.num_encoder_layers - 1}.add-norm-2"]["output"]
        assert np.max(np.abs(last - out.hidden_states[-1][0].numpy())) <= 1e-9
        if ckpt.mlm_head:
            assert np.max(np.abs(trace["output.logits"]["logits"] - out.logits[0].numpy())) <= 1e-9


@pytest.mark.parametrize("name", FILL)
def test_float32_equals_transformers_as_shipped(bert_family, name):
    folder = bert_family[name]
    reference = _reference(folder, torch.float32)
    for text in _prompts(folder):
        trace = walk_prompt(str(folder), text, "float32").trace
        assert trace["output.logits"]["logits"].dtype == np.float32
        with torch.no_grad():
            out = reference(torch.tensor([list(trace.source_ids)]), output_attentions=True)
        for n, layer in enumerate(out.attentions):
            for h in range(layer.shape[1]):
                ours, theirs = trace[f"encoder.{n}.self-attention"][f"A{h + 1}"], layer[0, h].numpy()
                assert np.max(np.abs(ours - theirs)) <= 1e-4 * np.max(np.abs(theirs)), (name, n, h)
        logits, expected = trace["output.logits"]["logits"], out.logits[0].numpy()
        assert np.max(np.abs(logits - expected)) <= 1e-4 * np.max(np.abs(expected))


@pytest.mark.parametrize("name", FILL)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_top_5_of_each_blank_equal_the_fill_mask_pipeline(bert_family, name, dtype):
    folder = bert_family[name]
    pipe = transformers.pipeline("fill-mask", model=str(folder), tokenizer=str(folder), top_k=5)
    for text in _prompts(folder):
        walk = walk_prompt(str(folder), text, dtype)
        ids, p = list(walk.trace.source_ids), walk.trace["output.probabilities"]["probabilities"]
        blanks = [i for i, t in enumerate(ids) if t == walk.checkpoint.mask_id]
        expected = pipe(text)
        expected = [expected] if len(blanks) == 1 else expected  # one list per blank
        assert len(expected) == len(blanks) >= 1
        for row, fills in zip(blanks, expected, strict=True):
            top = list(np.argsort(-p[row], kind="stable")[:5])
            assert top == [f["token"] for f in fills], (name, text, row)
            assert np.allclose(p[row][top], [f["score"] for f in fills], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert"])
def test_the_blank_of_the_article_is_filled_with_a_margin(bert_family, name):
    """Trained: "the cat is [MASK] comfortably." -> sleeping, far ahead of the next word."""
    folder = bert_family[name]
    walk = walk_prompt(str(folder), _prompts(folder)[0], "float64")
    ids, p = list(walk.trace.source_ids), walk.trace["output.probabilities"]["probabilities"]
    row = p[ids.index(walk.checkpoint.mask_id)]
    first, second = np.sort(row)[::-1][:2]
    assert walk.checkpoint.tokenizer.vocabulary[int(np.argmax(row))] in ("sleeping", "Ġsleeping")
    assert first > 0.5 and first > 5 * second


def test_the_conventions_read_from_config_json(bert_family):
    models = {name: load_checkpoint(str(f), "float64", prompt=True) for name, f in bert_family.items()}
    bert, roberta, distil, encoder = (models[n] for n in ("bert", "roberta", "distilbert", "bert-encoder"))
    for ckpt in (bert, roberta, distil):
        m = ckpt.model
        assert (m["task"], m["num_decoder_layers"], m["norm_first"], m["final_norm"]) == (
            "fill-mask", 0, False, False,
        )  # fmt: skip
        assert (m["embedding_norm"], m["output_transform"], m["tie_embeddings"], m["activation"]) == (
            True, True, True, "gelu",
        )  # fmt: skip
        assert ckpt.mlm_head and "output.logits/W" not in ckpt.weights  # tied: W = Eᵀ
    assert (bert.model["segments"], bert.model["position_offset"], bert.model["max_positions"]) == (
        2, 0, POSITIONS,
    )  # fmt: skip
    assert (roberta.model["segments"], roberta.model["position_offset"], roberta.model["max_positions"]) == (
        1, 2, POSITIONS + 2,
    )  # fmt: skip
    assert distil.model["segments"] == 0 and "encoder.embedding/T" not in distil.weights
    assert distil.model["layer_norm_eps"] == 1e-12  # DistilBERT's, whatever its config says
    assert (encoder.model["task"], encoder.model["output_transform"], encoder.model["activation"]) == (
        "encode", False, "gelu-tanh",
    )  # fmt: skip
    assert not encoder.mlm_head and not [k for k in encoder.weights if k.startswith("output.")]
    assert "encoder.embedding/T" in encoder.weights


def test_an_untied_head_is_its_own_matrix_and_bias(bert_family):
    folder = bert_family["bert-untied"]
    ckpt = load_bert(folder, "float64")
    model = _reference(folder)
    decoder = model.cls.predictions.decoder
    assert ckpt.model["tie_embeddings"] is False
    np.testing.assert_array_equal(ckpt.weights["output.logits/W"], decoder.weight.detach().numpy().T)
    np.testing.assert_array_equal(ckpt.weights["output.logits/b"], decoder.bias.detach().numpy())
    assert not np.array_equal(decoder.bias.detach().numpy(), model.cls.predictions.bias.detach().numpy())


def test_the_hubs_bert_for_pretraining_file_is_bert_for_masked_lm(bert_family):
    """The pooler, the next-sentence head, LayerNorm.gamma/beta and the buffers: the same weights."""
    names = load_file(bert_family["bert-pretraining"] / "model.safetensors")
    assert "cls.seq_relationship.weight" in names and "bert.pooler.dense.weight" in names
    assert "bert.embeddings.LayerNorm.gamma" in names and "bert.embeddings.position_ids" in names
    hub, saved = (load_bert(bert_family[n], "float64") for n in ("bert-pretraining", "bert"))
    assert hub.weights.keys() == saved.weights.keys()
    for key, w in saved.weights.items():
        np.testing.assert_array_equal(hub.weights[key], w, err_msg=key)


def test_robertas_positions_start_at_the_pad_id_plus_one(bert_family):
    """<s>, the first token, reads row 2 of P; rows 0 and 1 are never read (as transformers)."""
    folder = bert_family["roberta"]
    walk = walk_prompt(str(folder), _prompts(folder)[0], "float64")
    ids, P = list(walk.trace.source_ids), walk.weights["encoder.embedding/P"]
    np.testing.assert_array_equal(walk.trace["encoder.embedding"]["position"], P[2 : 2 + len(ids)])
    embeddings = _reference(folder).roberta.embeddings
    positions = embeddings.create_position_ids_from_input_ids(torch.tensor([ids]), embeddings.padding_idx)
    assert positions[0].tolist() == list(range(2, 2 + len(ids)))


def test_a_checkpoint_without_an_mlm_head_is_the_encoder_alone(bert_family):
    folder = bert_family["bert-encoder"]
    walk = walk_prompt(str(folder), SENTENCES[0], "float64")  # no blank needed: nothing is filled
    assert walk.config.model.task == "encode"
    assert not [s for s in walk.trace.stages if s.startswith("output.")]
    with torch.no_grad():
        out = _reference(folder, head=False)(torch.tensor([list(walk.trace.source_ids)]))
    last = walk.trace[f"encoder.{walk.config.model.num_encoder_layers - 1}.add-norm-2"]["output"]
    assert np.max(np.abs(last - out.last_hidden_state[0].numpy())) <= 1e-9


def test_the_hub_fetches_what_a_bert_base_folder_needs_and_nothing_else(bert_family, tmp_path, monkeypatch):
    """bert-base-uncased's repo as the hub client sees it (the client stood in for: no network), with
    vocab.txt and no tokenizer.json, and TensorFlow, Flax and Rust weights beside the safetensors:
    only the config, the tokenizer's files and model.safetensors are fetched, and it converts."""
    import huggingface_hub

    from transformer_walkthrough.checkpoints.hub import resolve

    repo = shutil.copytree(bert_family["bert-pretraining"], tmp_path / "repo")
    (repo / "tokenizer.json").unlink()
    for other in ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "coreml/model.mlmodel"):
        (repo / other).parent.mkdir(exist_ok=True)
        (repo / other).write_bytes(b"not read")
    snapshot = tmp_path / "snapshot" / "0123456789abcdef0123456789abcdef01234567"

    def snapshot_download(repo_id, revision=None, allow_patterns=(), local_files_only=False):
        for f in repo.rglob("*"):
            name = str(f.relative_to(repo))
            if f.is_file() and any(fnmatch.fnmatch(name, p) for p in allow_patterns):
                (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, snapshot / name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    assert resolve("tiny-org/bert-base") == snapshot
    fetched = sorted(p.name for p in snapshot.rglob("*") if p.is_file())
    assert fetched == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    ckpt = load_checkpoint("tiny-org/bert-base", "float64", prompt=True)
    assert ckpt.source == "tiny-org/bert-base (model.safetensors)"
    reference = transformers.AutoTokenizer.from_pretrained(bert_family["bert"])
    assert ckpt.tokenizer.encode(_prompts(repo)[0]) == reference(_prompts(repo)[0]).input_ids


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
    ("name", "changes", "message"),
    [
        ("bert", {"model_type": "albert"},
         "model_type is 'albert'; supported: " + ", ".join(repr(f.model_type) for f in FAMILIES)),
        ("bert", {"position_embedding_type": "relative_key"},
         "position_embedding_type is 'relative_key': only 'absolute' (a learned table P) is supported"),
        ("bert", {"is_decoder": True},
         "is_decoder is True: BERT as a decoder (a causal mask) is not supported"),
        ("bert", {"add_cross_attention": True},
         "add_cross_attention is True: cross-attention layers are not supported"),
        ("bert", {"hidden_act": "gelu_fast"}, "hidden_act 'gelu_fast' is not supported"),
        ("bert", {"hidden_size": 24},
         "tensor bert.embeddings.word_embeddings.weight has shape [{vocab}, 32], "
         "config.json implies [{vocab}, 24]"),
        ("bert", {"num_attention_heads": 5}, "hidden_size (32) is not divisible by num_attention_heads (5)"),
        ("bert", {"num_hidden_layers": 3},
         "missing tensor bert.encoder.layer.2.attention.self.query.weight (config.json's "
         "num_hidden_layers is 3, the tensors have 2 layers)"),
        ("bert", {"num_hidden_layers": 1},
         "tensor bert.encoder.layer.1.attention.output.LayerNorm.bias and 15 more is not part of a BERT"),
        ("bert", {"type_vocab_size": 3},
         "token_type_embeddings.weight has shape [2, 32], config.json implies [3, 32]"),
        ("bert", {"max_position_embeddings": 64}, "position_embeddings.weight has shape [32, 32]"),
        ("bert", {"layer_norm_eps": 0}, "layer_norm_eps is 0, not a small positive number"),
        ("bert", {"tie_word_embeddings": False},
         "missing tensor cls.predictions.decoder.weight (tie_word_embeddings is false)"),
        ("roberta", {"hidden_act": "gelu_new"}, "RoBERTa's MLM head always uses gelu"),
        ("roberta", {"pad_token_id": None}, "pad_token_id is null, but RoBERTa's positions start at"),
        ("roberta", {"pad_token_id": 40},
         "RoBERTa's positions start at pad_token_id + 1 = 41, past the 34 rows"),
        ("distilbert", {"n_heads": 5}, "dim (32) is not divisible by n_heads (5)"),
        ("distilbert", {"activation": "tanh"}, "activation 'tanh' is not supported"),
        ("distilbert", {"hidden_dim": 48},
         "ffn.lin1.weight has shape [64, 32], config.json implies [48, 32]"),
    ],
)  # fmt: skip
def test_a_config_that_disagrees_is_one_line(bert_family, tmp_path, name, changes, message):
    vocab = json.loads((bert_family[name] / "config.json").read_text())["vocab_size"]
    folder = _edited(bert_family[name], tmp_path / "bad", **changes)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert message.format(vocab=vocab) in _one_line(err)


def _with_tensors(folder: Path, to: Path, edit) -> Path:
    shutil.copytree(folder, to)
    tensors = load_file(to / "model.safetensors")
    save_file(edit(dict(tensors)), to / "model.safetensors")
    return to


WORDS = "bert.embeddings.word_embeddings.weight"


def _drop(name):
    return lambda t: {k: v for k, v in t.items() if k != name}


def _set(name, value):
    return lambda t: {**t, name: value(t) if callable(value) else value}


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("bert", _drop("cls.predictions.transform.LayerNorm.bias"),
         "missing tensor cls.predictions.transform.LayerNorm.bias"),
        ("bert", _drop("bert.encoder.layer.1.attention.self.value.bias"),
         "missing tensor bert.encoder.layer.1.attention.self.value.bias"),
        ("bert", _set("classifier.weight", np.ones((2, 32), np.float32)),
         "tensor classifier.weight is not part of a BERT model"),
        ("bert", _set("bert.encoder.layer.0.intermediate.dense.weight", np.ones((32, 64), np.float32)),
         "tensor bert.encoder.layer.0.intermediate.dense.weight has shape [32, 64], "
         "config.json implies [64, 32]"),
        ("bert", _set("cls.predictions.decoder.weight", lambda t: t[WORDS] + 1),
         "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight"),
        ("bert", _set("cls.predictions.decoder.bias", lambda t: t["cls.predictions.bias"] + 1),
         "cls.predictions.decoder.bias differs from cls.predictions.bias, which transformers ties it to"),
        ("bert", _set("bert.pooler.dense.weight", np.ones((32, 16), np.float32)),
         "tensor bert.pooler.dense.weight has shape [32, 16], config.json implies [32, 32]"),
        ("bert-pretraining", _set("bert.embeddings.position_ids", np.arange(8)[None]),
         "tensor bert.embeddings.position_ids has shape [1, 8], config.json implies [1, 32]"),
        ("bert-pretraining", _set("cls.seq_relationship.weight", np.ones((3, 32), np.float32)),
         "tensor cls.seq_relationship.weight has shape [3, 32], config.json implies [2, 32]"),
        ("bert-untied", _drop("cls.predictions.decoder.bias"),
         "missing tensor cls.predictions.decoder.bias (tie_word_embeddings is false: "
         "the output layer's own bias)"),
        ("roberta", _set("lm_head.decoder.weight", lambda t: t["roberta." + WORDS[5:]] * 2),
         "lm_head.decoder.weight differs from roberta.embeddings.word_embeddings.weight"),
        ("distilbert", _drop("vocab_projector.bias"), "missing tensor vocab_projector.bias"),
        ("distilbert", _set("distilbert.embeddings.token_type_embeddings.weight", np.ones((2, 32))),
         "tensor distilbert.embeddings.token_type_embeddings.weight is not part of a DistilBERT model"),
        ("bert", _set("bert.embeddings.LayerNorm.weight", np.full(32, np.nan, np.float32)),
         "encoder.embedding-norm/gamma holds NaN or infinite values"),
    ],
)  # fmt: skip
def test_tensors_that_do_not_belong_are_one_line(bert_family, tmp_path, name, edit, message):
    folder = _with_tensors(bert_family[name], tmp_path / "bad", edit)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert message in _one_line(err)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (None, "the tokenizer has no mask token (tokenizer_config.json's mask_token, in its vocabulary)"),
        # transformers adds a token the vocabulary lacks, past the embedding table's rows
        ("[BLANK]", "the embedding table only"),
    ],
)
def test_a_tokenizer_without_the_mask_token_is_one_line(bert_family, tmp_path, mask, message):
    folder = shutil.copytree(bert_family["bert"], tmp_path / "no-mask")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "mask_token": mask}))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(str(folder), "float32", prompt=True)
    assert message in _one_line(err)
