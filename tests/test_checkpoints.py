"""Marian checkpoints against transformers: tiny random models and tokenizers made here, offline.

A session fixture trains two SentencePiece models (source and target) on a few sentences, writes
the vocab.json that joins them, and saves a random MarianMTModel of the same vocabulary twice: as
``model.safetensors`` (``save_pretrained``) and as a ``pytorch_model.bin`` (``torch.save`` of the
state dict, as the hub's older opus-mt repos hold it: every tied name and the sinusoid tables).
Another builds checkpoints of two vocabularies (``separate_vocabs``) of different sizes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import sentencepiece as spm
import torch
import transformers

from tests.shards import sharded_copy
from tests.tiny_marian import (
    D_MODEL,
    HEADS,
    SENTENCES,
    SEPARATE_VARIANTS,
    TARGET_TEXT,
    pieces_of,
)
from transformer_walkthrough.checkpoints import (
    CheckpointError,
    MarianTokenizer,
    load_marian,
    read_torch_bin,
    read_weights,
    resolve,
)
from transformer_walkthrough.checkpoints.family import invert
from transformer_walkthrough.checkpoints.marian import MARIAN
from transformer_walkthrough.errors import WalkthroughError


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# tokenizer


def test_tokenization_equals_transformers(marian, reference_tokenizer):
    ours = MarianTokenizer(marian[0])
    unknown = 0
    for text in SENTENCES:
        ids = ours.encode_source(text)
        assert ids == reference_tokenizer(text)["input_ids"], text
        assert ours.encode_target(text) == reference_tokenizer(text_target=text)["input_ids"], text
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == reference_tokenizer.decode(
                ids, skip_special_tokens=skip
            ), text
        unknown += ids.count(ours.unk_id)
    assert unknown > 3  # pieces missing from vocab.json and characters never seen both became <unk>
    assert ours.source_vocabulary == tuple(
        reference_tokenizer.convert_ids_to_tokens(range(len(ours.source_vocabulary)))
    )


# Loading a vocabulary costs about 2x (Marian's vocab.json) to 5x (GPT-2's tokenizer.json) parsing
# its file with json.loads; a quadratic reading would be hundreds of times it.
VOCABULARY_BAR = 25


def test_vocabulary_with_gaps_and_a_large_vocabulary_loads_fast(marian, tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    for name in ("source.spm", "target.spm"):
        shutil.copy(marian[0] / name, folder / name)
    size = 58_101
    vocab = {"</s>": 0, "<unk>": 1, **{f"▁w{i}": i for i in range(2, size - 1) if i != 7}, "<pad>": size - 1}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    data = (folder / "vocab.json").read_bytes()
    times, peer = [], []
    for _ in range(3):  # in turns: a slow moment of a shared machine falls on both
        start = time.perf_counter()
        json.loads(data.decode("utf-8"))
        peer.append(time.perf_counter() - start)
        start = time.perf_counter()
        tok = MarianTokenizer(folder)
        times.append(time.perf_counter() - start)
    assert len(tok.source_vocabulary) == size
    assert tok.source_vocabulary[58_000] == "▁w58000" and tok.source_vocabulary[size - 1] == "<pad>"
    gap = spm.SentencePieceProcessor(model_file=str(folder / "source.spm")).id_to_piece(7)
    assert tok.source_vocabulary[7] == gap  # an id vocab.json skips: the SentencePiece piece, as transformers
    # 0.2 s is the target, measured by the benchmarks; the test guards against the quadratic
    # (hundreds of times the peer) without trusting one absolute time on a busy machine.
    ratio = min(times) / min(peer)
    assert ratio <= VOCABULARY_BAR, f"loading a {size}-piece vocabulary took {ratio:.0f}x json.loads of it"


# ---------------------------------------------------------------------------------------------
# converter


@pytest.mark.parametrize("which", [0, 1], ids=["safetensors", "pytorch_model.bin"])
def test_every_weight_equals_transformers(marian, which):
    folder, reference = marian[which], marian[2]
    ckpt = load_marian(folder, dtype="float64")
    state = reference.state_dict()
    rows = MARIAN.rows(ckpt.model)  # the family's name map, walked backward below
    assert set(ckpt.weights) == {r.ours for r in rows} | {"encoder.embedding/E", "output.logits/b"}
    assert all(ckpt.weights[row.ours].dtype == np.float64 for row in rows)
    theirs = invert(rows, ckpt.weights)
    assert set(theirs) == {name for name in state if ".layers." in name}  # every layer's tensor, once
    for name, array in theirs.items():
        np.testing.assert_array_equal(array, state[name].double().numpy(), err_msg=name)
    assert ckpt.weights["encoder.0.self-attention/W_QKV"].shape == (16, 48)
    E = state["model.shared.weight"].numpy()
    np.testing.assert_array_equal(ckpt.weights["encoder.embedding/E"], E)
    np.testing.assert_array_equal(ckpt.weights["encoder.embedding/E"].T, state["lm_head.weight"].numpy().T)
    np.testing.assert_array_equal(ckpt.weights["output.logits/b"], state["final_logits_bias"].numpy()[0])
    vocab = E.shape[0]
    assert ckpt.model == {
        "d_model": 16,
        "num_heads": 2,
        "d_ff": 32,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "norm_first": False,
        "final_norm": False,
        "activation": "silu",
        "positional_encoding": "sinusoidal-halves",
        "scale_embeddings": True,
        "attention_bias": True,
        "tie_embeddings": True,
        "layer_norm_eps": 1e-5,
        "max_positions": 64,
    }
    assert (ckpt.decoder_start_token_id, ckpt.eos_token_id, ckpt.pad_token_id) == (vocab - 1, 0, vocab - 1)
    assert len(ckpt.tokenizer.source_vocabulary) == vocab
    assert ckpt.source.endswith(("(model.safetensors)", "(pytorch_model.bin)")[which])
    assert load_marian(folder).weights["encoder.0.feed-forward/W_1"].dtype == np.float32


def test_separate_tables_stay_separate(marian, tmp_path):
    """share_encoder_decoder_embeddings and tie_word_embeddings false: three arrays, not one."""
    folder = _copy(marian[0], tmp_path / "untied")
    config = transformers.MarianConfig.from_pretrained(folder)
    config.share_encoder_decoder_embeddings = config.tie_word_embeddings = False
    torch.manual_seed(1)
    model = transformers.MarianMTModel(config)
    model.save_pretrained(folder)
    state = model.state_dict()
    ckpt = load_marian(folder, dtype="float64")
    assert ckpt.model["tie_embeddings"] is False
    for ours, theirs in (
        ("encoder.embedding/E", "model.encoder.embed_tokens.weight"),
        ("decoder.embedding/E", "model.decoder.embed_tokens.weight"),
        ("output.logits/W", "lm_head.weight"),
    ):
        expected = state[theirs].double().numpy()
        np.testing.assert_array_equal(
            ckpt.weights[ours], expected.T if ours.startswith("output") else expected
        )
    assert not np.array_equal(ckpt.weights["encoder.embedding/E"], ckpt.weights["decoder.embedding/E"])


# ---------------------------------------------------------------------------------------------
# separate vocabularies (separate_vocabs): vocab.json for the encoder, target_vocab.json for the decoder


def test_separate_vocabularies_tokenize_as_transformers(marian_separate):
    folder = marian_separate["untied"][0]
    reference = transformers.MarianTokenizer.from_pretrained(folder)  # reads tokenizer_config.json
    assert reference.separate_vocabs
    ours = MarianTokenizer(folder)
    source, target = pieces_of(folder / "vocab.json"), pieces_of(folder / "target_vocab.json")
    assert len(source) > len(target)
    assert ours.source_vocabulary == source
    assert ours.target_vocabulary == target == tuple(reference.convert_ids_to_tokens(range(len(target))))
    unknown = 0
    for text in [*SENTENCES, *TARGET_TEXT]:
        ids = ours.encode_source(text)
        assert ids == reference(text)["input_ids"], text
        labels = ours.encode_target(text)
        assert labels == reference(text_target=text)["input_ids"], text
        for skip in (True, False):
            assert ours.decode(labels, skip_special_tokens=skip) == reference.decode(
                labels, skip_special_tokens=skip
            ), text
        unknown += labels.count(ours.unk_id)
    assert unknown > 3  # target pieces left out of target_vocab.json became <unk> on the decoder's side
    # the same text has other ids on each side: the vocabularies are really two
    assert ours.encode_source(TARGET_TEXT[0]) != ours.encode_target(TARGET_TEXT[0])


@pytest.mark.parametrize("variant", SEPARATE_VARIANTS)
def test_separate_vocabularies_keep_a_table_of_their_own_size(marian_separate, variant):
    """The encoder's table has a row per source piece, the decoder's and the output layer's one per
    target piece; "shared" is one table for both, which each vocabulary fills to its size."""
    folder, reference = marian_separate[variant]
    ckpt = load_marian(folder, dtype="float64")
    state = {k: v.numpy() for k, v in reference.state_dict().items()}
    w = ckpt.weights
    E = w["encoder.embedding/E"]  # the one table, where the checkpoint shares it
    ours = {
        "model.encoder.embed_tokens.weight": E,
        "model.decoder.embed_tokens.weight": w.get("decoder.embedding/E", E),
        "lm_head.weight": w.get("output.logits/W", E.T).T,
        "final_logits_bias": w["output.logits/b"][None],
    }
    for name, array in ours.items():
        np.testing.assert_array_equal(array, state[name], err_msg=name)
    share, _ = SEPARATE_VARIANTS[variant]
    assert ckpt.model["tie_embeddings"] is share
    source_rows = state["model.encoder.embed_tokens.weight"].shape[0]
    target_rows = state["model.decoder.embed_tokens.weight"].shape[0]
    assert (source_rows == target_rows) is share
    assert ckpt.tokenizer.source_vocabulary == pieces_of(folder / "vocab.json")
    assert len(ckpt.tokenizer.source_vocabulary) == source_rows
    # Rows of the shared table past target_vocab.json's ids are labelled by target.spm's pieces, the
    # fallback of transformers' _convert_id_to_token (whose convert_ids_to_tokens names the source's
    # <pad> id "<pad>" first, an added token: a label of the other vocabulary, not followed here).
    target = pieces_of(folder / "target_vocab.json")
    pieces = spm.SentencePieceProcessor(model_file=str(folder / "target.spm"))
    past = tuple(pieces.id_to_piece(i) for i in range(len(target), target_rows))
    assert len(past) == (source_rows - len(target) if share else 0)
    assert ckpt.tokenizer.target_vocabulary == target + past


def test_a_target_vocabulary_larger_than_the_decoders_table_is_one_line(marian_separate, tmp_path):
    folder = _copy(marian_separate["untied"][0], tmp_path / "big-target")
    vocab = json.loads((folder / "target_vocab.json").read_text(encoding="utf-8"))
    rows = len(vocab)
    (folder / "target_vocab.json").write_text(json.dumps({**vocab, "▁extra": rows}), encoding="utf-8")
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    expected = f"target_vocab.json has ids up to {rows}, the decoder's embedding table only {rows} rows"
    assert expected in _one_line(err)


def test_the_bin_holds_every_tied_name_and_the_sinusoid_tables(marian):
    tensors = read_torch_bin(marian[1] / "pytorch_model.bin")
    state = marian[2].state_dict()
    assert set(tensors) == set(state)  # so the converter accounted for aliases and buffers too
    for name, value in tensors.items():
        np.testing.assert_array_equal(value, state[name].float().numpy(), err_msg=name)


def _sinusoid_halves(n: int, d: int) -> np.ndarray:  # [n] -> [n, d]: sin | cos, positions from 0
    angle = np.arange(n)[:, None] / 10000 ** (2 * np.arange(d // 2) / d)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def test_encoder_attention_layer0_equals_transformers(marian):
    """An independent forward of encoder layer 0's attention weights from the converted arrays."""
    folder, reference = marian[0], marian[2]
    ckpt = load_marian(folder, dtype="float64")
    ids = ckpt.tokenizer.encode_source("the cat is sleeping comfortably.")
    n, d, h = len(ids), D_MODEL, HEADS
    d_k = d // h
    # transformers rounds its sinusoid table to float32 even in a float64 model; so does this reference.
    P = _sinusoid_halves(64, d).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(P, reference.model.encoder.embed_positions.weight.detach().numpy())
    X = ckpt.weights["encoder.embedding/E"][ids] * np.sqrt(d) + P[:n]
    W, b = ckpt.weights["encoder.0.self-attention/W_QKV"], ckpt.weights["encoder.0.self-attention/b_QKV"]
    QKV = X @ W + b
    Q, K = QKV[:, :d], QKV[:, d : 2 * d]
    expected = []
    for head in range(h):
        cols = slice(head * d_k, (head + 1) * d_k)
        S = Q[:, cols] @ K[:, cols].T / np.sqrt(d_k)
        A = np.exp(S - S.max(axis=1, keepdims=True))
        expected.append(A / A.sum(axis=1, keepdims=True))
    with torch.no_grad():
        out = reference.model.encoder(torch.tensor([ids]), output_attentions=True)
    actual = out.attentions[0][0].numpy()
    assert actual.shape == (h, n, n)
    np.testing.assert_allclose(np.stack(expected), actual, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# bad input: one line, nothing run, nothing allocated


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def test_wrong_model_type_is_one_line(marian, tmp_path):
    folder = _copy(marian[0], tmp_path / "bart")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bart"}))
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert "model_type is 'bart'" in _one_line(err)


def test_unknown_activation_is_one_line(marian, tmp_path):
    folder = _copy(marian[0], tmp_path / "act")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_fast"}))
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert "'gelu_fast' is not supported" in _one_line(err)


def test_missing_spm_is_one_line(marian, tmp_path):
    folder = _copy(marian[0], tmp_path / "nospm")
    (folder / "target.spm").unlink()
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert "missing tokenizer file target.spm" in _one_line(err)


def test_a_tensor_that_is_not_marian_is_refused(marian, tmp_path):
    from safetensors.numpy import save_file

    folder = _copy(marian[0], tmp_path / "extra")
    tensors = read_weights(folder)[0]
    save_file(
        {**{k: tensors[k] for k in tensors}, "model.encoder.extra": np.zeros(3, np.float32)},
        str(folder / "model.safetensors"),
    )
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert "model.encoder.extra is not part of a Marian model" in _one_line(err)


def test_truncated_safetensors_is_one_line(marian, tmp_path):
    folder = _copy(marian[0], tmp_path / "cut")
    data = (folder / "model.safetensors").read_bytes()
    for size in (len(data) // 2, 20, 5):
        (folder / "model.safetensors").write_bytes(data[:size])
        with pytest.raises(CheckpointError) as err:
            load_marian(folder)
        assert "truncated" in _one_line(err)


def test_a_header_claiming_a_huge_tensor_allocates_nothing(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4 * 10**12]}})
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 16)
    with pytest.raises(CheckpointError) as err:
        read_weights(tmp_path)["w"]
    assert "truncated" in _one_line(err)


# A pickle written opcode by opcode, as torch writes a state dict, so that it can lie.
def _text(s: str) -> bytes:
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()


def _state_dict_pickle(numel: int, shape: tuple[int, ...]) -> bytes:
    ints = b"".join(b"J" + struct.pack("<i", v) for v in shape)
    row_major = [int(np.prod(shape[k + 1 :])) for k in range(len(shape))]
    strides = b"".join(b"J" + struct.pack("<i", v) for v in row_major)
    storage = b"((" + _text("storage") + b"ctorch\nFloatStorage\n" + _text("0") + _text("cpu")
    storage += b"\x8a\x08" + struct.pack("<q", numel) + b"tQ"
    tensor = b"ctorch._utils\n_rebuild_tensor_v2\n" + storage + b"J\0\0\0\0(" + ints + b"t(" + strides
    tensor += b"t\x89ccollections\nOrderedDict\n)Rt" + b"R"
    return b"\x80\x02ccollections\nOrderedDict\n)R(" + _text("w") + tensor + b"u."


def _write_bin(path: Path, pickled: bytes, data: bytes = b"") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", data)
    return path


def test_a_handwritten_state_dict_reads_and_a_lying_one_is_refused(tmp_path):
    data = np.arange(6, dtype="<f4").tobytes()
    good = read_torch_bin(_write_bin(tmp_path / "good.bin", _state_dict_pickle(6, (2, 3)), data))
    np.testing.assert_array_equal(good["w"], np.arange(6.0).reshape(2, 3))
    with pytest.raises(CheckpointError) as err:  # a storage of 2**40 floats backed by 24 bytes
        read_torch_bin(_write_bin(tmp_path / "huge.bin", _state_dict_pickle(2**40, (2**20, 2**20)), data))
    assert "should hold 4398046511104 bytes" in _one_line(err)
    with pytest.raises(CheckpointError) as err:  # a view past its storage's end
        read_torch_bin(_write_bin(tmp_path / "past.bin", _state_dict_pickle(6, (3, 3)), data))
    assert "reaches element" in _one_line(err)


class _Exploit:
    def __init__(self, call, arg):
        self.call, self.arg = call, arg

    def __reduce__(self):
        return (self.call, (self.arg,))


@pytest.mark.parametrize("call", [os.system, eval, subprocess.call], ids=["os.system", "eval", "subprocess"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, call):
    import pickle

    marker = tmp_path / "marker"
    command = f"touch {marker}" if call is not eval else f"open({str(marker)!r}, 'w')"
    arg = command.split() if call is subprocess.call else command
    folder = tmp_path / "evil"
    folder.mkdir()
    _write_bin(folder / "pytorch_model.bin", pickle.dumps({"w": _Exploit(call, arg)}, protocol=2))
    with pytest.raises(CheckpointError) as err:
        read_weights(folder)
    assert "refused" in _one_line(err) and "nothing from the file was run" in str(err.value)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# sharded checkpoints: transformers' own save_pretrained in small shards


@pytest.fixture(scope="module")
def marian_shards(marian, tmp_path_factory):
    return sharded_copy(marian[0], tmp_path_factory.mktemp("shards") / "marian", transformers.MarianMTModel)


def test_a_sharded_checkpoint_loads_the_same_arrays_as_one_file(marian, marian_shards):
    shards = sorted(p.name for p in marian_shards.glob("model-*.safetensors"))
    assert len(shards) >= 3 and not (marian_shards / "model.safetensors").exists()
    one, sharded = load_marian(marian[0], "float64"), load_marian(marian_shards, "float64")
    assert sharded.weights.keys() == one.weights.keys()
    for name, array in one.weights.items():
        np.testing.assert_array_equal(sharded.weights[name], array, err_msg=name)
    assert sharded.source == f"{marian_shards} (model.safetensors.index.json, {len(shards)} shards)"


def _edit_index(folder: Path, edit) -> None:
    index = folder / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    edit(raw["weight_map"])
    index.write_text(json.dumps(raw))


def _move_first(weight_map: dict) -> None:
    first = next(iter(weight_map))
    weight_map[first] = next(f for f in sorted(set(weight_map.values())) if f != weight_map[first])


@pytest.mark.parametrize(
    ("case", "message"),
    [("outside", "not a .safetensors file beside the index"),
     ("missing shard", "is missing or not a file"),
     ("unlisted tensor", "but the index does not list it"),
     ("moved tensor", "but the index puts it in"),
     ("not json", "not readable JSON"),
     ("no map", "no weight_map")],
)  # fmt: skip
def test_a_broken_shard_index_is_one_line(marian_shards, tmp_path, case, message):
    folder = _copy(marian_shards, tmp_path / "broken")
    index = folder / "model.safetensors.index.json"
    if case == "outside":
        _edit_index(folder, lambda m: m.update({next(iter(m)): "../model.safetensors"}))
    if case == "missing shard":
        next(folder.glob("model-*.safetensors")).unlink()
    if case == "unlisted tensor":
        _edit_index(folder, lambda m: m.pop(next(iter(m))))
    if case == "moved tensor":
        _edit_index(folder, _move_first)
    if case == "not json":
        index.write_text("{")
    if case == "no map":
        index.write_text("{}")
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert message in _one_line(err)


@pytest.mark.parametrize("file", ["config.json", "generation_config.json", "vocab.json",
                                  "tokenizer_config.json", "model.safetensors.index.json"])  # fmt: skip
@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, '{"n": ' + "9" * 5000 + "}", "\udcff"])
def test_json_that_python_cannot_hold_is_one_line(marian_shards, tmp_path, file, content):
    """Nested past the recursion limit, an integer past 4,300 digits, bytes that are not UTF-8:
    json.loads raises RecursionError, ValueError, UnicodeDecodeError, each caught in one place."""
    folder = _copy(marian_shards, tmp_path / "json")
    (folder / file).write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert str(folder / file) in _one_line(err)


def test_a_shard_that_is_a_fifo_is_refused_not_waited_on(marian_shards, tmp_path):
    folder = _copy(marian_shards, tmp_path / "fifo")
    shard = next(folder.glob("model-*.safetensors"))
    shard.unlink()
    os.mkfifo(shard)
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as err:
        load_marian(folder)
    assert f"shard {shard.name} is missing or not a file" in _one_line(err)
    assert time.perf_counter() - started < 10


def test_shard_headers_share_one_budget(marian_shards, tmp_path, monkeypatch):
    """Headers count together against the one limit of a single file's header, so that an index naming
    one large file many times (under as many names) cannot multiply the memory it takes."""
    from transformer_walkthrough.checkpoints import safetensors_file as tensors

    sizes = [
        tensors.read_safetensors(p).header_bytes for p in sorted(marian_shards.glob("model-*.safetensors"))
    ]
    monkeypatch.setattr(tensors, "MAX_HEADER_BYTES", sum(sizes) - 1)
    with pytest.raises(CheckpointError) as err:
        load_marian(marian_shards)
    assert f"over the {sizes[-1] - 1:,} that a checkpoint's headers may take together" in _one_line(err)
    monkeypatch.setattr(tensors, "MAX_HEADER_BYTES", sum(sizes))
    assert load_marian(marian_shards).weights


def test_torch_shards_are_refused_in_one_line(tmp_path):
    (tmp_path / "pytorch_model.bin.index.json").write_text("{}")
    with pytest.raises(CheckpointError) as err:
        read_weights(tmp_path)
    assert "pytorch_model.bin.index.json) is not read" in _one_line(err)


# ---------------------------------------------------------------------------------------------
# hub cache, extras


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_hub_id_is_read_from_the_cache_offline(marian, tmp_path):
    cache = tmp_path / "hub"
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--tiny-org--opus-mt-xx-yy"
    shutil.copytree(marian[0], repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    code = (
        "from transformer_walkthrough.checkpoints import resolve, load_marian\n"
        "p = resolve('tiny-org/opus-mt-xx-yy'); c = load_marian(p, name='tiny-org/opus-mt-xx-yy')\n"
        "print(p); print(c.source)"
    )
    done = _python(code, HF_HUB_CACHE=str(cache), HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        str(repo / "snapshots" / revision),
        "tiny-org/opus-mt-xx-yy (model.safetensors)",
    ]


def test_a_sharded_hub_id_is_read_from_the_cache_offline(marian_shards, tmp_path):
    """The hub path fetches the index first, then the shards it names: both come from the cache."""
    cache = tmp_path / "hub"
    revision = "89abcdef0123456789abcdef0123456789abcdef"
    repo = cache / "models--tiny-org--opus-mt-shards"
    shutil.copytree(marian_shards, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    code = (
        "from transformer_walkthrough.checkpoints import resolve, load_marian\n"
        "p = resolve('tiny-org/opus-mt-shards'); print(load_marian(p, name='hub').source)"
    )
    done = _python(code, HF_HUB_CACHE=str(cache), HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    shards = len(list(marian_shards.glob("model-*.safetensors")))
    assert done.stdout.strip() == f"hub (model.safetensors.index.json, {shards} shards)"


def test_a_sharded_hub_download_fetches_the_index_then_its_shards_from_one_commit(
    marian_shards, tmp_path, monkeypatch
):
    """What is asked of the hub (its client stood in for: no network here): config, tokenizer and
    the weights' file or index first; then exactly the shards the index names, at that commit."""
    import huggingface_hub

    from transformer_walkthrough.checkpoints.hub import CONFIG_AND_TOKENIZER

    snapshot = shutil.copytree(marian_shards, tmp_path / "0123456789abcdef0123456789abcdef01234567")
    calls = []

    def snapshot_download(repo_id, revision=None, allow_patterns=(), local_files_only=False):
        calls.append((repo_id, revision, sorted(allow_patterns)))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    assert resolve("tiny-org/shards") == snapshot
    first = sorted([*CONFIG_AND_TOKENIZER, "model.safetensors", "model.safetensors.index.json",
                    "pytorch_model.bin.index.json"])  # fmt: skip
    shards = sorted(p.name for p in marian_shards.glob("model-*.safetensors"))
    assert calls == [("tiny-org/shards", None, first), ("tiny-org/shards", snapshot.name, shards)]


def test_hub_id_offline_without_cache_is_one_line(tmp_path):
    code = (
        "from transformer_walkthrough.checkpoints import resolve\n"
        "from transformer_walkthrough.errors import WalkthroughError\n"
        "try:\n    resolve('Helsinki-NLP/opus-mt-en-de')\n"
        "except WalkthroughError as e:\n    print(e)\n"
    )
    done = _python(
        code, HF_HUB_CACHE=str(tmp_path / "empty"), HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert "Helsinki-NLP/opus-mt-en-de: not in the local hub cache" in done.stdout
    assert "pass its path" in done.stdout


def test_not_a_folder_nor_a_hub_id_is_one_line(tmp_path):
    from transformer_walkthrough.checkpoints import resolve

    with pytest.raises(CheckpointError) as err:
        resolve(str(tmp_path / "no" / "such" / "folder"))
    assert "no such folder" in _one_line(err)


def test_without_the_extra_the_import_says_which_to_install():
    code = (
        "import sys; sys.modules['sentencepiece'] = None\n"
        "from transformer_walkthrough.errors import WalkthroughError\n"
        "try:\n    import transformer_walkthrough.checkpoints\n"
        "except WalkthroughError as e:\n    print(e)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == "real checkpoints need sentencepiece: pip install 'transformer-walkthrough[models]'\n"
    )


def test_the_toy_imports_none_of_the_extra():
    heavy = ("safetensors", "sentencepiece", "tokenizers", "huggingface_hub", "torch", "transformers")
    code = (
        "import sys\nimport transformer_walkthrough.cli, transformer_walkthrough.model.transformer\n"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_checkpoint_error_is_a_walkthrough_error():
    assert issubclass(CheckpointError, WalkthroughError)
