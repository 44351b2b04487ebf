"""Replay of a hostile review of tokenizer.json (about 500 variants, run as subprocesses): the
defects it found, and the legitimate files it checked against transformers.

- A component whose ``"type"`` is a list or an object (unhashable) raised TypeError in the check:
  a traceback.
- A vocabulary in which every id is an added token (``model.vocab`` empty) made ``labels([])``
  return one label for no token: a ValueError (zip strict) and a traceback.
- Added tokens were labelled by the file's ``"id"``, which the library ignores (it assigns ids
  itself, one token at a time, and only logs a warning): a file whose ids disagree showed one
  token's label on another's id.
- A Split regex that is slow (polynomial, under Oniguruma's retry limit) on one prompt is stopped
  at the call timeout, as one line.
"""

from __future__ import annotations

import copy
import json
import os
import random
import warnings
from typing import Any

import pytest

from tests.test_hostile_tokenizers import _folder
from tests.test_robustness import fails
from transformer_walkthrough.checkpoints import native
from transformer_walkthrough.checkpoints.bpe import ByteLevelBPETokenizer, _library_ids, labels
from transformer_walkthrough.cli import app

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the child-process guard needs os.fork")

EOS = "<|endoftext|>"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
TEXTS = [
    "The cat is sleeping comfortably.",
    "   spaces   around   ",
    "naïve café über Straße — 5,6 %",
    "数字 and ✓ emoji 🐈‍⬛ never seen",
    "line one\nline two\ttabbed",
    f"{EOS}The cat{EOS}",
    "1234567 12 3",
    "\u202eRTL\u202c e\u0301\u0301 ＡＢＣ ﬁ",
    "I'm you'RE they'll",
    "( % <a><b>",
]


def _added(i: int, content: str, special: bool = True, **flags: bool) -> dict[str, Any]:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special, **flags}  # fmt: skip


def _drop(data: dict, token: str) -> None:
    """``token`` out of the vocabulary, with every merge that names or makes it."""
    data["model"]["vocab"].pop(token)
    data["model"]["merges"] = [m for m in data["model"]["merges"] if token not in (*m, "".join(m))]


# ---------------------------------------------------------------------------------------------
# a "type" that is not a string


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(normalizer={"type": ["NFC"]}),
        lambda d: d.update(normalizer={"type": {"a": 1}}),
        lambda d: d.update(pre_tokenizer={"type": []}),
        lambda d: d.update(decoder={"type": "Sequence", "decoders": [{"type": ["ByteLevel"]}]}),
        lambda d: d.update(post_processor={"type": {}}),
    ],
    ids=["list", "object", "empty list", "in a Sequence", "post-processor"],
)
def test_an_unhashable_component_type_is_one_line(runner, gpt2, tmp_path, edit):
    folder = _folder(gpt2, tmp_path / "m", edit)
    fails(runner, ["run", "--model", str(folder), "--prompt", "The cat"], "not a ")


# ---------------------------------------------------------------------------------------------
# every id an added token


def test_labels_of_no_token_are_none():
    assert labels([]) == []


def test_a_vocabulary_of_added_tokens_only_runs(runner, gpt2, tmp_path):
    folder = _folder(gpt2, tmp_path / "m", lambda d: d["model"].update(vocab={}, merges=[]))
    tok = ByteLevelBPETokenizer(folder, size=320)
    assert tok.vocabulary[0] == EOS and tok.encode(f"x{EOS}") == [0]
    tok.close()
    result = runner.invoke(app, ["run", "--model", str(folder), "--prompt", f"The cat{EOS}"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    fails(runner, ["run", "--model", str(folder), "--prompt", "The cat"], "has no tokens")


# ---------------------------------------------------------------------------------------------
# added tokens have the ids the library gives them, not the file's


def _wrong_id(d: dict) -> None:
    d["added_tokens"] = [_added(5, EOS)]  # EOS is 0 in model.vocab; 5 is "%"


def _out_of_order(d: dict) -> None:
    _drop(d, "rt")
    _drop(d, "re")  # ids 318 and 319 free: the file gives <b> 319 and <a> 318, the library the reverse
    d["added_tokens"] = [_added(0, EOS), _added(319, "<b>"), _added(318, "<a>")]


def _in_a_gap(d: dict) -> None:
    _drop(d, "%")  # id 5 free; the library still gives <a> the id len(vocab) = 319, the id of "rt"
    d["added_tokens"] = [_added(0, EOS), _added(5, "<a>")]


def _twice(d: dict) -> None:
    d["added_tokens"] = [_added(0, EOS), _added(1, EOS), _added(300, "the", special=False)]


@pytest.mark.parametrize("edit", [_wrong_id, _out_of_order, _in_a_gap, _twice])
def test_added_tokens_are_labelled_as_the_library_numbers_them(gpt2, tmp_path, edit):
    from tokenizers import Tokenizer

    folder = _folder(gpt2, tmp_path / "m", edit)
    library = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ours = ByteLevelBPETokenizer(folder, size=320)
    try:
        for text in TEXTS:
            ids = ours.encode(text)
            assert ids == library.encode(text).ids, text
            assert [ours.vocabulary[i] for i in ids] == [library.id_to_token(i) for i in ids], text
        added = library.get_added_tokens_decoder()
        for i, token in added.items():
            assert ours.vocabulary[i] == token.content
        assert ours.special == {i for i, t in added.items() if t.special}
    finally:
        ours.close()


def test_added_token_ids_agree_with_the_library_on_random_files(gpt2):
    from tokenizers import Tokenizer

    base = json.loads((gpt2[0]["hub"] / "tokenizer.json").read_text(encoding="utf-8"))
    rng = random.Random(18)
    contents = [EOS, "<a>", "<b>", "<c>", "cat", "h", "%"]
    for _ in range(150):
        data = copy.deepcopy(base)
        if rng.random() < 0.3:
            for token in ("%", "&", "rt"):
                _drop(data, token)
        if rng.random() < 0.1:
            data["model"].update(vocab={}, merges=[])
        data["added_tokens"] = [
            _added(
                rng.randint(0, 330),
                rng.choice(contents),
                special=rng.random() < 0.5,
                rstrip=rng.random() < 0.2,
                normalized=rng.random() < 0.5,
            )
            for _ in range(rng.randint(0, 8))
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            library = Tokenizer.from_str(json.dumps(data))
        expected = {i: t.content for i, t in library.get_added_tokens_decoder().items()}
        got = _library_ids(data["added_tokens"], data["model"]["vocab"])
        assert {i: t for i, (t, _) in got.items()} == expected, data["added_tokens"]


# ---------------------------------------------------------------------------------------------
# a regex slow on one prompt; duplicate keys


def test_a_regex_slow_on_one_prompt_is_stopped_at_the_call_timeout(runner, gpt2, tmp_path, monkeypatch):
    def edit(d: dict) -> None:
        split = {"type": "Split", "pattern": {"Regex": "a*a*a*[^a]"}, "behavior": "Isolated", "invert": False}
        byte_level = {**BYTE_LEVEL, "use_regex": False}
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, byte_level]}

    monkeypatch.setattr(native, "CALL_TIMEOUT", 1.0)
    folder = _folder(gpt2, tmp_path / "m", edit)
    fails(runner, ["run", "--model", str(folder), "--prompt", "a" * 3000], "took more than 1 s")


def test_a_duplicate_key_reaches_the_library_as_it_was_checked(runner, gpt2, tmp_path):
    folder = _folder(gpt2, tmp_path / "m")
    path = folder / "tokenizer.json"
    text = path.read_text(encoding="utf-8")
    charsmap = '{"type": "Precompiled", "precompiled_charsmap": "AA=="}'
    path.write_text(text.replace('"normalizer": null', f'"normalizer": null, "normalizer": {charsmap}'))
    fails(runner, ["run", "--model", str(folder), "--prompt", "The cat"], "normalizer is type 'Precompiled'")
    path.write_text(text.replace('"normalizer": null', f'"normalizer": {charsmap}, "normalizer": null'))
    result = runner.invoke(app, ["run", "--model", str(folder), "--prompt", "The cat"])
    assert result.exit_code == 0, (result.stderr, result.exception)


# ---------------------------------------------------------------------------------------------
# legitimate files: accepted, and tokenized as transformers' PreTrainedTokenizerFast


def _llama3(d: dict) -> None:
    split = {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False}
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, {**BYTE_LEVEL, "use_regex": False}]}
    bos = [{"SpecialToken": {"id": EOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    template = {
        "type": "TemplateProcessing",
        "single": bos,
        "pair": [*bos, {"SpecialToken": {"id": EOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {EOS: {"id": EOS, "ids": [0], "tokens": [EOS]}},
    }
    byte_level = {**BYTE_LEVEL, "add_prefix_space": True, "trim_offsets": False}
    d["post_processor"] = {"type": "Sequence", "processors": [byte_level, template]}
    d["model"]["ignore_merges"] = True


def _qwen2(d: dict) -> None:
    _llama3(d)
    d["normalizer"] = {"type": "NFC"}
    d["post_processor"] = {**BYTE_LEVEL, "trim_offsets": False, "use_regex": False}
    d["model"]["ignore_merges"] = False
    d["added_tokens"].append(_added(300, "the", special=False))


def _smollm(d: dict) -> None:
    digits = {"type": "Digits", "individual_digits": True}
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [digits, BYTE_LEVEL]}


def _gpt2_hub(d: dict) -> None:
    model = d["model"]
    d["model"] = {"dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "vocab": model["vocab"],
                  "merges": [" ".join(m) for m in model["merges"]]}  # fmt: skip
    d["added_tokens"][0]["normalized"] = True
    for kind in ("pre_tokenizer", "post_processor", "decoder"):
        d[kind].pop("use_regex")


FAMILIES = {
    "gpt2-hub": _gpt2_hub,
    "llama3": _llama3,
    "qwen2": _qwen2,
    "smollm": _smollm,
    "added lstrip rstrip": lambda d: d["added_tokens"][0].update(lstrip=True, rstrip=True),
    "added single_word": lambda d: d["added_tokens"][0].update(single_word=True),
    "byte_fallback without <0xNN>": lambda d: d["model"].update(byte_fallback=True),
    "duplicate merges": lambda d: d["model"].update(merges=d["model"]["merges"] * 2),
    "NFKC and Lowercase": lambda d: d.update(
        normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    ),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_legitimate_files_tokenize_as_transformers(gpt2, tmp_path, name):
    from transformers import PreTrainedTokenizerFast

    folder = _folder(gpt2, tmp_path / "m", FAMILIES[name])
    reference = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    ours = ByteLevelBPETokenizer(folder, size=320)
    try:
        for text in TEXTS:
            ids = ours.encode(text)
            assert ids == reference(text)["input_ids"], text
            assert ours.decode(ids) == reference.decode(ids), text
            assert [ours.vocabulary[i] for i in ids] == reference.convert_ids_to_tokens(ids), text
    finally:
        ours.close()
