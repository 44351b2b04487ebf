"""BERT, DistilBERT (WordPiece: tokenizer.json or vocab.txt) and RoBERTa (byte-level BPE) tokenizers
against ``transformers.AutoTokenizer`` (5.18), offline: tiny tokenizers trained in each family's
folder layout (``tests.tiny_tokenizers``); ids, decoding, mask/cls/sep ids and labels compared.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("transformers")
import transformers

from tests import tiny_tokenizers as tiny
from transformer_walkthrough.checkpoints import BPETokenizer, CheckpointError, WordPieceTokenizer
from transformer_walkthrough.checkpoints.checkpoint import FAMILIES as CHECKPOINT_FAMILIES
from transformer_walkthrough.checkpoints.family import find

PROMPTS = [
    "The cat is [MASK] comfortably.",
    "The cat is <mask> comfortably.",
    "<mask>",
    "a<mask> b <mask>c",
    "THE CAT Is SLEEPING",
    "Café naïve résumé Über",
    "e\u0301 (e and a combining accent)",
    "猫は寝ている。中文和日本語の文字",
    "Punctuation!? (yes), [no]; {maybe}: 'quoted' \"double\" — dash…",
    "unknown Ω ☃ words",
    "many   spaces  between",
    " leading and trailing ",
    "",
    "line one\nline two\ttab",
    "it's don't they're",
    "playing" * 20,  # past 100 characters: WordPiece's [UNK]
    "zero\u200bwidth and \x00 control",
    "[CLS] [SEP] [PAD] [UNK] <s> </s>",
    "emoji 🐈 👍🏽",
]

FAMILIES: dict[str, tuple[Callable[[Path], tiny.Tiny], str | None]] = {
    "bert uncased, tokenizer.json": (tiny.bert_style, "bert"),
    "bert cased, tokenizer.json": (lambda f: tiny.bert_style(f, lower=False), "bert"),
    "bert uncased, vocab.txt": (lambda f: tiny.bert_style(f, with_tokenizer_json=False), "bert"),
    "bert cased, vocab.txt": (lambda f: tiny.bert_style(f, lower=False, with_tokenizer_json=False), "bert"),
    "bert cased vocab.txt, accents stripped, no CJK split": (
        lambda f: tiny.bert_style(
            f,
            lower=False,
            with_tokenizer_json=False,
            config={"do_lower_case": False, "strip_accents": True, "tokenize_chinese_chars": False},
        ),
        "bert",
    ),
    "bert uncased vocab.txt, accents kept": (
        lambda f: tiny.bert_style(f, with_tokenizer_json=False, config={"strip_accents": False}),
        "bert",
    ),
    "bert tokenizer.json, config without do_lower_case": (
        lambda f: tiny.bert_style(f, lower=False, config={"tokenizer_class": "BertTokenizer"}),
        None,
    ),
    "distilbert vocab.txt": (
        lambda f: tiny.bert_style(f, with_tokenizer_json=False, config={"do_lower_case": True}),
        "distilbert",
    ),
    "distilbert tokenizer.json, DistilBertTokenizer": (
        lambda f: tiny.bert_style(f, config={"tokenizer_class": "DistilBertTokenizer"}),
        "distilbert",
    ),
    "roberta tokenizer.json": (tiny.roberta_style, "roberta"),
    "roberta vocab.json + merges.txt": (
        lambda f: tiny.roberta_style(f, with_tokenizer_json=False),
        "roberta",
    ),
}


@pytest.fixture(scope="session")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert_tokenizers")
    out = {}
    for n, (name, (build, model_type)) in enumerate(FAMILIES.items()):
        folder = root / f"f{n}"
        info = build(folder)
        if model_type:
            tiny.write_model_type(folder, model_type)
        reader = find(CHECKPOINT_FAMILIES, model_type or "bert").tokenizer  # the family's own reader
        out[name] = reader(folder), transformers.AutoTokenizer.from_pretrained(folder), info
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_ids_equal_transformers(pairs, name):
    ours, theirs, _ = pairs[name]
    for text in PROMPTS:
        assert ours.encode(text) == theirs(text).input_ids, text


@pytest.mark.parametrize("name", list(FAMILIES))
def test_decoding_equals_transformers(pairs, name):
    ours, theirs, _ = pairs[name]
    for text in PROMPTS:
        ids = theirs(text).input_ids
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_mask_cls_and_sep_as_transformers(pairs, name):
    ours, theirs, info = pairs[name]
    assert (ours.mask_token, ours.mask_id) == (theirs.mask_token, theirs.mask_token_id)
    assert (ours.cls_id, ours.sep_id) == (theirs.cls_token_id, theirs.sep_token_id) == (info.bos, info.eos)
    ids = theirs("the cat").input_ids
    assert (
        (ours.bos_id, ours.suffix_ids)
        == (ids[0], (ids[-1],))
        == (theirs.cls_token_id, (theirs.sep_token_id,))
    )


def test_the_masked_prompt_shows_cls_mask_sep_and_continuations(pairs):
    ours, theirs, _ = pairs["bert uncased, vocab.txt"]
    ids = ours.encode("The cat is [MASK] sleepily.")
    shown = [ours.labels[i] for i in ids]
    assert shown == theirs.convert_ids_to_tokens(ids)  # WordPiece's tokens are shown as they are
    assert shown[0] == "[CLS]" and shown[-1] == "[SEP]" and "[MASK]" in shown
    assert any(t.startswith("##") for t in shown), shown


@pytest.mark.parametrize("name", [n for n in FAMILIES if "bert" in n and "roberta" not in n])
def test_wordpiece_labels_are_the_vocabulary(pairs, name):
    ours, theirs, _ = pairs[name]
    assert list(ours.labels) == theirs.convert_ids_to_tokens(list(range(len(ours.labels))))
    assert all(label.isprintable() for label in ours.labels)


def test_roberta_labels_show_spaces(pairs):
    ours, _, _ = pairs["roberta tokenizer.json"]
    shown = [ours.labels[i] for i in ours.encode("The cat is <mask> comfortably.")]
    assert shown[0] == "<s>" and shown[-1] == "</s>" and "<mask>" in shown
    assert "·cat" in shown


def test_a_hostile_vocab_txt_label_is_escaped(tmp_path):
    tiny.bert_style(tmp_path, with_tokenizer_json=False)
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[10] = "\x1b[2J\u202e"
    (tmp_path / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    assert BPETokenizer(tmp_path).labels[10] == "<U+001B>[2J<U+202E>"


def _bert_folder(tmp_path: Path) -> Path:
    tiny.bert_style(tmp_path, with_tokenizer_json=False)
    tiny.write_model_type(tmp_path, "bert")
    return tmp_path


def _vocab_lines(folder: Path) -> list[str]:
    return (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda f: (f / "vocab.txt").write_text("\n".join([*_vocab_lines(f), "x" * 1025])),
            "has 1,025 characters (1 to 1024)",
        ),
        (lambda f: (f / "vocab.txt").write_text("\n".join([*_vocab_lines(f), "the"])), "repeats line"),
        (lambda f: (f / "vocab.txt").write_text("\n".join([*_vocab_lines(f), "dog "])), "ends in whitespace"),
        (lambda f: (f / "vocab.txt").write_text("[UNK]\n\n[CLS]\n[SEP]\n"), "line 2 has 0 characters"),
        (lambda f: (f / "vocab.txt").write_bytes(b"[UNK]\n\xff\xfe\n"), "not UTF-8"),
        (lambda f: (f / "vocab.txt").write_text("[CLS]\n[SEP]\na\n"), "'[UNK]', which is not in model.vocab"),
        (lambda f: (f / "tokenizer_config.json").write_text('{"do_lower_case": "yes"}'), "not true or false"),
        (
            lambda f: (f / "tokenizer_config.json").write_text('{"strip_accents": 1}'),
            "not true, false or null",
        ),
        (lambda f: (f / "tokenizer_config.json").write_text('{"add_eos_token": true}'), "sets add_eos_token"),
        (
            lambda f: ((f / "config.json").unlink(), (f / "tokenizer_config.json").write_text("{}")),
            "TokenizersBackend needs a tokenizer.json",  # AutoTokenizer: no class to read vocab.txt with
        ),
    ],
)
def test_bad_vocab_txt_and_configs_are_one_line(tmp_path, edit, message):
    folder = _bert_folder(tmp_path)
    edit(folder)
    with pytest.raises(CheckpointError) as err:
        WordPieceTokenizer(folder).encode("hi")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_vocab_txt_too_large_or_too_long_is_one_line(tmp_path, monkeypatch):
    folder = _bert_folder(tmp_path)
    monkeypatch.setattr("transformer_walkthrough.checkpoints.tokenizer_folder.MAX_VOCAB_ENTRIES", 100)
    with pytest.raises(CheckpointError, match=r"vocab.txt: has \d+ lines \(at most 100 tokens\)"):
        BPETokenizer(folder)
    monkeypatch.setattr("transformer_walkthrough.checkpoints.tokenizer_folder.MAX_VOCAB_TXT_BYTES", 100)
    with pytest.raises(CheckpointError, match=r"vocab\.txt") as err:
        BPETokenizer(folder)
    assert "\n" not in str(err.value)


def test_wordpiece_refuses_a_bpe_folder(tmp_path):
    tiny.roberta_style(tmp_path)
    tiny.write_model_type(tmp_path, "roberta")
    with pytest.raises(CheckpointError, match="not a WordPiece tokenizer"):
        WordPieceTokenizer(tmp_path)
