"""A checkpoint walked through (``--model``) against transformers, on the tiny random Marian of conftest.

Every attention weight matrix (encoder self-attention, decoder masked and cross-attention; every
head of every layer) and the logits are compared with ``MarianMTModel`` run eagerly with
``output_attentions=True``; greedy generation with ``generate(num_beams=1, do_sample=False)``.
The same on checkpoints of two vocabularies (``separate_vocabs``), whose encoder is labelled by
the source's pieces and the decoder by the target's.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
import torch
import transformers
from jsonschema import Draft202012Validator

from tests.arithmetic import reads
from tests.tiny_marian import D_MODEL, HEADS, LAYERS, SEPARATE_VARIANTS, pieces_of
from transformer_walkthrough.checkpoints.run import CheckpointConfig, translate, walk
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import ModelConfig
from transformer_walkthrough.errors import ConfigError, WalkthroughError
from transformer_walkthrough.files.export import schema
from transformer_walkthrough.model.architecture import DECODER, ENCODER, OUTPUT
from transformer_walkthrough.model.trace import token_labels
from transformer_walkthrough.model.transformer import forward

SOURCE = "the cat is sleeping comfortably. the cat"  # "▁the" and "t" repeat: labels by position
TARGET = "die Katze schläft bequem."
SOURCES = ["the cat is sleeping comfortably.", "a dog runs in the park!", "where is the bus stop?"]


def _exact_table(n: int, d: int) -> np.ndarray:
    """Marian's sinusoids in float64, by transformers' own formula: sines | cosines, positions from 0."""
    angle = np.array([[pos / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for pos in range(n)])
    return np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1)


@pytest.fixture(scope="module")
def exact(marian):
    """The float64 reference with the exact float64 sinusoid table.

    transformers fills ``embed_positions.weight`` through ``torch.FloatTensor`` (float32) even in a
    ``.double()`` model, a rounding of ~3e-8 that reaches the attention weights at ~5e-8; this
    copy of the model gets the table computed in float64 by the same formula (``_exact_table``),
    copied into the encoder's and the decoder's ``embed_positions`` weights.
    """
    return _with_exact_table(marian[2])


def _with_exact_table(reference):
    """A copy of a float64 reference whose sinusoid tables are ``_exact_table`` (see ``exact``)."""
    model = copy.deepcopy(reference)
    rows = model.model.encoder.embed_positions.weight.shape[0]
    table = torch.from_numpy(_exact_table(rows, D_MODEL))
    with torch.no_grad():
        model.model.encoder.embed_positions.weight.copy_(table)
        model.model.decoder.embed_positions.weight.copy_(table)
    return model


def _gaps(trace, out, relative: bool) -> dict[str, float]:
    """The largest difference of each attention kind and of the logits (relative: to the matrix's largest)."""

    def gap(ours: np.ndarray, theirs: torch.Tensor) -> float:
        theirs = theirs.detach().numpy()
        assert ours.shape == theirs.shape
        d = float(np.max(np.abs(ours - theirs)))
        return d / float(np.max(np.abs(theirs))) if relative else d

    kinds = {
        "self": ("encoder.{}.self-attention", out.encoder_attentions),
        "masked": ("decoder.{}.masked-attention", out.decoder_attentions),
        "cross": ("decoder.{}.cross-attention", out.cross_attentions),
    }
    gaps = {}
    for kind, (stage, attentions) in kinds.items():
        assert len(attentions) == LAYERS
        gaps[kind] = max(
            gap(trace[stage.format(n)][f"A{h + 1}"], attentions[n][0, h])
            for n in range(LAYERS)
            for h in range(HEADS)
        )
    gaps["logits"] = gap(trace["output.logits"]["logits"], out.logits[0])
    return gaps


def _transformers(model, trace):
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([trace.source_ids]),
            decoder_input_ids=torch.tensor([trace.target_ids]),
            output_attentions=True,
        )


def test_every_attention_matrix_and_the_logits_equal_transformers_in_float64(marian, exact):
    walked = walk(str(marian[0]), SOURCE, TARGET, dtype="float64")
    trace = walked.trace
    assert trace["encoder.0.self-attention"]["A1"].dtype == np.float64
    gaps = _gaps(trace, _transformers(exact, trace), relative=False)
    assert max(gaps.values()) <= 1e-9, gaps  # measured: ~1e-16 for the attention, ~1e-15 for the logits
    # the exact table matters: with transformers' float32-rounded one the gaps are 1e5 times larger
    # (measured: attention ~5e-11, logits ~1e-9)
    rounded = _gaps(trace, _transformers(marian[2], trace), relative=False)
    assert max(rounded.values()) > 1e3 * max(gaps.values()), (rounded, gaps)


def test_float32_equals_transformers_to_1e_4_relative(marian):
    walked = walk(str(marian[0]), SOURCE, TARGET, dtype="float32")
    assert walked.trace["output.logits"]["logits"].dtype == np.float32
    model = transformers.MarianMTModel.from_pretrained(marian[0], attn_implementation="eager").eval()
    gaps = _gaps(walked.trace, _transformers(model, walked.trace), relative=True)
    assert max(gaps.values()) <= 1e-4, gaps  # measured: ~3e-7


def test_tokens_are_the_tokenizers_ids_and_repeats_are_labelled_by_position(marian, reference_tokenizer):
    trace = walk(str(marian[0]), SOURCE, TARGET, dtype="float64").trace
    expected = reference_tokenizer(SOURCE, text_target=TARGET)
    assert list(trace.source_ids) == expected["input_ids"]
    start = marian[2].config.decoder_start_token_id
    assert list(trace.target_ids) == [start, *expected["labels"]]  # shift_tokens_right of the labels
    labels = trace.source_tokens
    assert len(set(labels)) == len(labels)
    pieces = reference_tokenizer.convert_ids_to_tokens(expected["input_ids"])
    repeated = [p for p in pieces if pieces.count(p) > 1]
    assert repeated, "the sentence should repeat a piece"
    first, where = repeated[0], pieces.index(repeated[0])
    # a bare space mark "▁" by its position in brackets ("▁@9" would read as a token "@9"), others piece@i
    assert (f"{first} ({where})" if set(first) <= {"▁"} else f"{first}@{where}") in labels
    assert trace.weights_source == f"{marian[0]} (model.safetensors)"


def _greedy(model, folder: Path, source: str, max_new_tokens: int) -> list[int]:
    from transformer_walkthrough.checkpoints import MarianTokenizer

    ids = torch.tensor([MarianTokenizer(folder).encode_source(source)])
    with torch.no_grad():
        return model.generate(ids, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)[0].tolist()


def test_generate_equals_transformers_greedy_token_for_token(marian, exact):
    for source in SOURCES:
        ours = translate(str(marian[0]), source, dtype="float64", max_len=12)
        assert ours.ids == _greedy(exact, marian[0], source, 12), source
        assert ours.ids[-1] == 0  # forced_eos_token_id ends it at the limit, as in transformers


def test_generate_never_picks_a_bad_word_as_generation_config_says(marian, exact, tmp_path):
    """A checkpoint whose output bias makes <pad> the likeliest token everywhere: banned by
    bad_words_ids [[pad]] (generation_config.json), neither side ever picks it."""
    folder = tmp_path / "pad"
    model = copy.deepcopy(exact)
    pad = model.config.pad_token_id
    with torch.no_grad():
        model.final_logits_bias[0, pad] = 50.0
    model.save_pretrained(folder)
    for name in ("source.spm", "target.spm", "vocab.json", "generation_config.json"):
        shutil.copy(marian[0] / name, folder / name)
    assert json.loads((folder / "generation_config.json").read_text())["bad_words_ids"] == [[pad]]
    ours = translate(str(folder), SOURCES[0], dtype="float64", max_len=8)
    assert pad not in ours.ids[1:]
    assert ours.steps[0].probabilities[pad] > 0.99  # it would have been chosen
    assert ours.ids == _greedy(model, folder, SOURCES[0], 8)


# ---------------------------------------------------------------------------------------------
# the command line, through CliRunner


def _cli(runner, *args: str):
    return runner.invoke(app, [*args])


def test_run_with_model_shows_pieces_summarised_and_the_prediction(runner, marian):
    result = _cli(runner, "run", "--model", str(marian[0]), "--source", SOURCE, "--target", TARGET)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "translation (greedy)" not in out  # the target was given: teacher forcing
    trace = walk(str(marian[0]), SOURCE, TARGET).trace
    repeated = [label for label in trace.source_tokens if "@" in label]
    assert repeated and all(f"\n{label} " in out for label in repeated)
    rows, vocab = trace["output.logits"]["logits"].shape
    logits = out[out.index(f"logits  ({rows}×{vocab})") :].splitlines()
    assert "…" in logits[1]  # vocabulary-sized matrices summarised on screen
    assert "Prediction" in out


def test_run_without_target_translates_first(runner, marian):
    result = _cli(runner, "run", "--model", str(marian[0]), "--source", "the cat", "--dtype", "float64")
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    text = translate(str(marian[0]), "the cat", dtype="float64", max_len=63).text
    assert first == f"translation (greedy): {text}"


def test_step_with_model_one_layer(runner, marian):
    result = _cli(runner, "step", "--model", str(marian[0]), "--source", "the cat", "--target", TARGET,
                  "--stage", "cross-attention", "--layer", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "decoder.1.cross-attention" in result.output and "decoder.0.cross-attention" not in result.output


def test_export_with_model_carries_ids_model_and_full_matrices(runner, marian, tmp_path):
    path = tmp_path / "out.json"
    result = _cli(runner, "export", str(path), "--model", str(marian[0]), "--source", SOURCE,
                  "--target", TARGET, "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    Draft202012Validator(schema()).validate(doc)
    trace = walk(str(marian[0]), SOURCE, TARGET, dtype="float64").trace
    assert doc["source_ids"] == list(trace.source_ids) and doc["target_ids"] == list(trace.target_ids)
    assert doc["model"] == f"{marian[0]} (model.safetensors)"
    assert "source_vocabulary" not in doc and doc["config"]["source_vocabulary"] is None  # one vocabulary
    logits = next(s for s in doc["stages"] if s["id"] == "output.logits")["matrices"]["logits"]
    assert np.array_equal(np.array(logits["values"]), trace["output.logits"]["logits"])  # every column


def test_export_of_the_toy_carries_ids_and_no_model(runner):
    result = _cli(runner, "export", "-")
    doc = json.loads(result.output)
    assert doc["source_ids"] == [2, 3, 4] and doc["target_ids"] == [0, 5, 6, 1] and doc["model"] is None
    assert "source_vocabulary" not in doc and "source_vocabulary" not in doc["config"]
    Draft202012Validator(schema()).validate(doc)


def test_explain_a_logit_cell_by_label_and_an_ambiguous_label(runner, marian):
    base = ["explain", "--model", str(marian[0]), "--source", SOURCE, "--target", TARGET,
            "--dtype", "float64"]  # fmt: skip
    trace = walk(str(marian[0]), SOURCE, TARGET, dtype="float64").trace
    column = trace.vocabulary[7]
    result = _cli(runner, *base, "--stage", "output.logits", "--matrix", "logits", "--cell", f"1,{column}")
    assert result.exit_code == 0, result.output
    value = trace["output.logits"]["logits"][1, 7]
    assert f"= {value:.4f}" in result.output.splitlines()[0]
    repeated = next(label for label in trace.source_tokens if "@" in label).split("@")[0]
    result = _cli(runner, *base, "--stage", "encoder.0.self-attention", "--matrix", "A1",
                  "--cell", f"{repeated},0")  # fmt: skip
    assert result.exit_code == 2
    assert f"is ambiguous: give one of {repeated}@" in result.output


def test_generate_with_model_compares_with_teacher_forcing(runner, marian):
    result = _cli(runner, "generate", "--model", str(marian[0]), "--source", "the cat", "--max-len", "6",
                  "--compare", "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the tables wrap at 80 columns
    assert "Step i of generation = row i of the teacher-forced pass" in text
    worst = float(re.search(r"Step i equals row i .* \(max \|diff\| (\S+)\)", text).group(1))
    assert worst <= 1e-9
    ours = translate(str(marian[0]), "the cat", dtype="float64", max_len=6)
    assert f"the cat → {ours.text}" in text


def test_verify_with_model_agrees(runner, marian):
    result = _cli(runner, "verify", "--model", str(marian[0]), "--source", SOURCE, "--target", TARGET,
                  "--against", "torch")  # fmt: skip
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert "checks agree" in last and "(float32)" in last


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


@pytest.mark.parametrize(
    "case",
    ["missing folder", "other model_type", "missing tokenizer", "no source", "source without model",
     "config with model", "bad dtype"],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(runner, marian, tmp_path, case):
    folder = str(marian[0])
    args = {"missing folder": ["--model", str(tmp_path / "nothing"), "--source", "x"],
            "no source": ["--model", folder],
            "source without model": ["--source", "the cat"],
            "config with model": ["--model", folder, "--source", "x", "--seed", "3"],
            "bad dtype": ["--model", folder, "--source", "x", "--dtype", "float16"]}.get(case)  # fmt: skip
    if case == "other model_type":
        copy_ = _copy(marian[0], tmp_path / "bert")
        config = json.loads((copy_ / "config.json").read_text())
        (copy_ / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
        args = ["--model", str(copy_), "--source", "x"]
    if case == "missing tokenizer":
        copy_ = _copy(marian[0], tmp_path / "no-spm")
        (copy_ / "target.spm").unlink()
        args = ["--model", str(copy_), "--source", "x"]
    result = _cli(runner, "run", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output


def test_a_target_piece_the_vocabulary_lacks_is_unk_as_in_marian_tokenizer(marian, reference_tokenizer):
    text = "数字 ✓ Katze"
    trace = walk(str(marian[0]), "the cat", text, dtype="float64").trace
    expected = reference_tokenizer(text_target=text)["input_ids"]
    assert list(trace.target_ids[1:]) == expected
    assert reference_tokenizer.unk_token_id in expected


# ---------------------------------------------------------------------------------------------
# separate vocabularies (tokenizer_config.json's separate_vocabs): the encoder reads vocab.json's
# pieces, the decoder, the output layer and generation target_vocab.json's (fewer, here)


@pytest.fixture(scope="module")
def separate(marian_separate):
    """variant -> (folder, its float64 reference with the exact sinusoid table)."""
    return {
        variant: (folder, _with_exact_table(model)) for variant, (folder, model) in marian_separate.items()
    }


@pytest.mark.parametrize("variant", SEPARATE_VARIANTS)
def test_separate_vocabularies_equal_transformers_and_each_side_has_its_own_labels(separate, variant):
    folder, reference = separate[variant]
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    trace = walk(str(folder), SOURCE, TARGET, dtype="float64").trace
    expected = tokenizer(SOURCE, text_target=TARGET)
    assert list(trace.source_ids) == expected["input_ids"]
    assert list(trace.target_ids) == [reference.config.decoder_start_token_id, *expected["labels"]]
    gaps = _gaps(trace, _transformers(reference, trace), relative=False)
    assert max(gaps.values()) <= 1e-9, gaps  # measured: ~3e-15 for the attention, ~1e-14 for the logits

    source = pieces_of(folder / "vocab.json")
    target = trace.vocabulary
    assert target[: len(tokenizer.target_encoder)] == pieces_of(folder / "target_vocab.json")
    assert trace["encoder.embedding"].matrices["E"].rows == source
    assert trace["decoder.embedding"].matrices["E"].rows == target
    assert trace["output.logits"].matrices["logits"].cols == target
    assert trace.source_tokens == token_labels([source[i] for i in trace.source_ids])
    assert trace.target_tokens == token_labels(tokenizer.convert_ids_to_tokens(list(trace.target_ids)))
    # labelled by the target vocabulary, the encoder's rows would read otherwise
    assert trace.source_tokens != token_labels([target[i] for i in trace.source_ids if i < len(target)])
    for stage in trace:
        for name, m in stage.matrices.items():
            where = f"{stage.id}/{name}"
            if stage.id.startswith("encoder.") and not m.is_weight and not m.is_constant:
                assert m.rows == trace.source_tokens, where
            if stage.kind == "cross-attention" and re.fullmatch(r"[SA]\d+", name):
                assert (m.rows, m.cols) == (trace.target_tokens, trace.source_tokens), where


def test_source_ids_are_checked_against_the_source_vocabulary(separate):
    """The encoder reads ids up to its own vocabulary's last, past the target's; each side refuses
    the first id past its own, in one line."""
    folder, reference = separate["untied"]
    walked = walk(str(folder), "the cat", "die Katze", dtype="float64")
    config, w = walked.config, walked.weights
    n_source, n_target = len(config.vocabulary_of(ENCODER)), len(config.vocabulary)
    assert n_source > n_target
    source_ids, target_ids = [n_source - 1, n_target, 0], [n_target - 1, 5]
    ours = forward(config, w, source_ids, target_ids)
    with torch.no_grad():
        logits = reference(
            input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids])
        ).logits
    np.testing.assert_allclose(ours, torch.softmax(logits[0], -1).numpy(), rtol=0, atol=1e-12)
    for side, bad, last in (("source", [n_source], n_source - 1), ("target", [n_target], n_target - 1)):
        ids = {"source_ids": [0], "target_ids": [0], f"{side}_ids": bad}
        with pytest.raises(WalkthroughError) as err:
            forward(config, w, **ids)
        assert str(err.value) == f"{side} ids: need 1 or more ids from 0 to {last}; got {bad}"


def test_separate_vocabularies_generate_as_transformers(separate):
    folder, reference = separate["untied"]
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    for source in SOURCES:
        ours = translate(str(folder), source, dtype="float64", max_len=10)
        with torch.no_grad():
            theirs = reference.generate(
                torch.tensor([tokenizer(source)["input_ids"]]),
                num_beams=1,
                do_sample=False,
                max_new_tokens=10,
            )[0].tolist()
        assert ours.ids == theirs, source
        pieces = ours.teacher_forced.vocabulary
        assert [pieces[step.chosen] for step in ours.steps] == tokenizer.convert_ids_to_tokens(theirs[1:])
        # the text of the chosen tokens: the start token, the target's <pad>, is no word of it (transformers'
        # decode would keep it: its special tokens are the source vocabulary's ids)
        assert ours.text == tokenizer.decode(theirs[1:], skip_special_tokens=True)
        assert "<pad>" not in ours.text and "<pad>" in tokenizer.decode(theirs, skip_special_tokens=True)


def _section(out: str, stage_id: str) -> str:
    """The part of `run`'s output that shows one stage: from its header to the next one's."""
    start = out.index(f"  {stage_id} ─")
    following = re.search(r"^.+ · .+  [\w.-]+ ─+$", out[start + 1 :], re.M)
    return out[start : start + 1 + following.start()] if following else out[start:]


def _row_labels(section: str, title: str) -> list[str]:
    """The row labels of the table titled ``title`` (``X  (6×16)``), "⋮" where rows are left out."""
    lines = section[section.index(f"\n{title}\n") + 1 :].splitlines()[3:]  # title, columns, rule
    rows = []
    for line in lines:
        if not line or re.fullmatch(r"\S+  \(\d+×\d+\)", line):
            break
        rows.append(line.split()[0])
    return rows


def test_run_with_separate_vocabularies_shows_source_pieces_on_the_encoders_rows(runner, marian_separate):
    folder = marian_separate["untied"][0]
    result = _cli(runner, "run", "--model", str(folder), "--source", "the cat", "--target", TARGET)
    assert result.exit_code == 0, result.output
    out = result.output
    trace = walk(str(folder), "the cat", TARGET).trace
    source, target = pieces_of(folder / "vocab.json"), pieces_of(folder / "target_vocab.json")
    labels = list(trace.source_tokens)
    assert labels == list(token_labels([source[i] for i in trace.source_ids]))
    # E's rows, shown by their ends: the source pieces in the encoder, the target pieces in the decoder
    shown = {}
    for stage, pieces in (("encoder.embedding", source), ("decoder.embedding", target)):
        rows = _row_labels(_section(out, stage), f"E  ({len(pieces)}×{D_MODEL})")
        head, tail = rows[: rows.index("⋮")], rows[rows.index("⋮") + 1 :]
        assert (head, tail) == (list(pieces[: len(head)]), list(pieces[len(pieces) - len(tail) :])), stage
        shown[stage] = head
    assert shown["encoder.embedding"] != shown["decoder.embedding"]
    square = f"A1  ({len(labels)}×{len(labels)})"
    for n in range(LAYERS):
        assert _row_labels(_section(out, f"encoder.{n}.self-attention"), square) == labels
        cross = _section(out, f"decoder.{n}.cross-attention")
        title = f"A1  ({len(trace.target_tokens)}×{len(labels)})"
        assert cross[cross.index(f"\n{title}\n") :].splitlines()[2].split() == labels  # its columns
    assert _row_labels(_section(out, "encoder.1.add-norm-2"), f"output  ({len(labels)}×{D_MODEL})") == labels


def test_export_with_separate_vocabularies_carries_both(runner, marian_separate, tmp_path):
    folder = marian_separate["untied"][0]
    path = tmp_path / "separate.json"
    result = _cli(runner, "export", str(path), "--model", str(folder), "--source", "the cat",
                  "--target", TARGET, "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    Draft202012Validator(schema()).validate(doc)
    source, target = pieces_of(folder / "vocab.json"), pieces_of(folder / "target_vocab.json")
    assert doc["source_vocabulary"] == list(source) and doc["vocabulary"] == list(target)
    assert doc["config"]["source_vocabulary"] == list(source)
    stages = {s["id"]: s["matrices"] for s in doc["stages"]}
    assert stages["encoder.embedding"]["E"]["rows"] == list(source)
    assert stages["decoder.embedding"]["E"]["rows"] == list(target)
    assert doc["source_tokens"] == list(token_labels([source[i] for i in doc["source_ids"]]))
    assert stages["decoder.0.cross-attention"]["A2"]["cols"] == doc["source_tokens"]


def test_explain_an_encoder_embedding_cell_by_its_source_piece(runner, marian_separate):
    folder = marian_separate["untied"][0]
    source, target = pieces_of(folder / "vocab.json"), pieces_of(folder / "target_vocab.json")
    piece = next(p for p in source if p not in target and "," not in p)  # a piece the decoder has not
    i = source.index(piece)
    base = ["explain", "--model", str(folder), "--source", "the cat", "--target", TARGET,
            "--dtype", "float64"]  # fmt: skip
    result = _cli(runner, *base, "--stage", "encoder.embedding", "--matrix", "E", "--cell", f"{piece},d3")
    assert result.exit_code == 0, result.output
    head = result.output.splitlines()[0]
    E = walk(str(folder), "the cat", TARGET, dtype="float64").weights["encoder.embedding/E"]
    prefix = f"encoder.embedding · E[{piece}, d3] = E[{i}, 3] = "
    assert head.startswith(prefix)
    reads(prefix + "{}", head, E[i, 3])  # to its printed digits: 4 significant ones for a small value
    result = _cli(runner, *base, "--stage", "decoder.embedding", "--matrix", "E", "--cell", f"{piece},d3")
    assert result.exit_code == 2
    assert f"row {piece!r} is not a row of E" in result.output


def test_a_checkpoint_config_reads_the_encoders_vocabulary_of_its_own():
    source, target = ("<unk>", "▁the", "▁cat"), ("<unk>", "▁die")
    for tied in (False, True):
        model = ModelConfig(d_model=4, num_heads=2, d_ff=8, tie_embeddings=tied)
        make = functools.partial(
            CheckpointConfig, sentence="the cat", encoder_words=0, vocabulary=target, model=model
        )
        assert [make().vocabulary_of(side) for side in (ENCODER, DECODER, OUTPUT)] == [target] * 3
        if tied:  # one table cannot have rows for both
            with pytest.raises(
                ConfigError, match="source vocabulary has 3 pieces and the target vocabulary 2"
            ):
                make(source_vocabulary=source)
        else:
            own = make(source_vocabulary=source)
            assert [own.vocabulary_of(side) for side in (ENCODER, DECODER, OUTPUT)] == [
                source,
                target,
                target,
            ]


@pytest.mark.parametrize(
    ("file", "key", "value"),
    [("generation_config.json", "bad_words_ids", [[3], [5, 10**6]]),
     ("config.json", "decoder_start_token_id", 10**6),
     ("generation_config.json", "forced_eos_token_id", 10**6)],
)  # fmt: skip
def test_a_special_token_id_past_the_vocabulary_is_one_line_exit_2(runner, marian, tmp_path, file, key,
                                                                    value):  # fmt: skip
    """Generation indexes the logits with these ids: one past the decoder's pieces is refused at load,
    not met mid-translation (a banned id there raised IndexError)."""
    copy_ = _copy(marian[0], tmp_path / "ids")
    settings = json.loads((copy_ / file).read_text())
    (copy_ / file).write_text(json.dumps({**settings, key: value}))
    pieces = marian[2].config.vocab_size  # the decoder's table, a row per piece
    for command in (["run", "--source", "the cat"], ["generate", "--source", "the cat"]):
        result = _cli(runner, command[0], "--model", str(copy_), *command[1:])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        name = "bad_words_ids[1][1]" if key == "bad_words_ids" else key
        assert f"{name} is {10**6}, but the decoder's vocabulary has ids 0 to" in lines[0]
        assert lines[0].endswith(f" to {pieces - 1}")
