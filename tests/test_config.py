"""The config: defaults, the embedded file, overrides, and every way a file can be wrong."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from transformer_walkthrough.config import (
    Config,
    ModelConfig,
    config_to_yaml,
    load_config,
    tokenize,
)
from transformer_walkthrough.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_default_is_the_article_example() -> None:
    config = load_config()
    assert config == Config()
    assert config.source_tokens == ("the", "cat", "is")
    assert config.target_tokens == ("<start>", "sleeping", "comfortably", "<end>")
    assert config.vocabulary == ("<start>", "<end>", "the", "cat", "is", "sleeping", "comfortably")
    assert (config.model.d_model, config.model.num_heads, config.model.d_k, config.model.d_ff) == (4, 2, 2, 8)
    assert config.model.output_head == "per-position"
    assert config.seed == 42 and config.display.precision == 2


def test_the_default_is_configs_article_yaml() -> None:
    # The shipped example says the article's values; the defaults are the same config. A field added
    # later (rope_theta, say) takes its default in both, so neither file is pinned to the other.
    assert load_config() == load_config(ROOT / "configs" / "article.yaml") == Config()


def test_config_yaml_names_every_field_with_its_doc_and_reads_back(tmp_path: Path) -> None:
    text = config_to_yaml(Config())
    assert load_config(write(tmp_path, text)) == Config()
    for section in (Config, ModelConfig):
        for f in dataclasses.fields(section):
            if f.name not in ("model", "display", "training"):
                assert f"{f.name}:" in text and f.metadata["doc"] in text, f.name
    odd = Config(
        sentence='A "quoted": sentence, # with marks',
        encoder_words=2,
        seed=7,
        model=ModelConfig(d_model=6, num_heads=3, layer_norm_eps=1e-9),
    )
    assert load_config(write(tmp_path, config_to_yaml(odd))) == odd


def test_every_example_config_loads() -> None:
    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert paths
    for path in paths:
        load_config(path)


def test_missing_keys_take_defaults_and_vocabulary_is_built(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "sentence: The dog saw the cat!\nencoder_words: 2\nmodel: {d_model: 6}\n")
    )
    assert config.vocabulary == ("<start>", "<end>", "the", "dog", "saw", "cat")
    assert config.source_tokens == ("the", "dog")
    assert config.target_tokens == ("<start>", "saw", "the", "cat", "<end>")
    assert config.model.d_model == 6 and config.model.num_heads == 2


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "seed: 1\ndisplay: {precision: 3}\n"), seed=5, precision=6)
    assert config.seed == 5 and config.display.precision == 6


def test_empty_file_is_the_default(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "# nothing here\n")) == Config()


def test_exponent_without_a_dot_is_a_number(tmp_path: Path) -> None:
    # PyYAML reads 1e-6 as a string; the config reads it as the number a person meant.
    assert load_config(write(tmp_path, "model:\n  layer_norm_eps: 1e-6\n")).model.layer_norm_eps == 1e-6


def test_tokenize_lower_cases_and_strips_punctuation() -> None:
    assert tokenize("The cat is sleeping comfortably.") == ["the", "cat", "is", "sleeping", "comfortably"]
    assert tokenize("Don't stop, Mr. Cat!") == ["don't", "stop", "mr", "cat"]


BAD = [
    ("model:\n  d_modle: 4\n", "unknown key model.d_modle; did you mean model.d_model?"),
    ("sentense: hi there\n", "unknown key sentense; did you mean sentence?"),
    ("d_model: 8\n", "unknown key d_model; did you mean model.d_model?"),
    ("model:\n  colour: red\n", "unknown key model.colour (known keys: model.d_model"),
    ("model:\n  d_model: 6\n  num_heads: 4\n", "model.d_model: 6 is not divisible by model.num_heads = 4"),
    ("model:\n  d_model: 0\n", "model.d_model: must be a positive integer, got 0"),
    ("model:\n  d_ff: -8\n", "model.d_ff: must be a positive integer, got -8"),
    (
        "model:\n  num_decoder_layers: 0\n",
        "model.task: an encoder-only model (num_decoder_layers: 0) has no next token",
    ),
    (
        "model:\n  num_decoder_layers: -1\n",
        "model.num_decoder_layers: must be 0 (encoder-only) or more, got -1",
    ),
    (
        "model:\n  num_encoder_layers: 0\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "model.num_decoder_layers: a model needs layers",
    ),
    ("model:\n  task: fill-mask\n", "model.task: fill-mask reads one stack: it needs num_decoder_layers: 0"),
    (
        "model:\n  segments: 2\n",
        "model.segments: segment embeddings mark the sentences an encoder-only model",
    ),
    ("model:\n  position_offset: 2\n", "model.position_offset: is a row of the learned table P"),
    ("blanks: [1]\n", "blanks: are for model.task: fill-mask"),
    (
        "encoder_words: 5\nmodel:\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "blanks: a fill-mask model needs a word to hide behind [MASK]",
    ),
    (
        "encoder_words: 5\nblanks: [5]\nmodel:\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "blanks: 5 is no word of the sentence (0 to 4)",
    ),
    (
        "encoder_words: 5\nblanks: [1, 1]\nmodel:\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "blanks: lists a word twice",
    ),
    (
        "blanks: [1]\nmodel:\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "encoder_words: must be 5, the sentence's words: an encoder-only model reads them all, got 3",
    ),
    (
        "encoder_words: 5\nblanks: [1]\nvocabulary: [<start>, <end>, the, cat, is, sleeping, comfortably]\n"
        "model:\n  num_decoder_layers: 0\n  task: fill-mask\n",
        "vocabulary: has no '[CLS]', '[SEP]', '[MASK]'",
    ),
    ("model:\n  d_model: four\n", "model.d_model: expected an integer, got 'four' (str)"),
    ("model:\n  d_model: 4.5\n", "model.d_model: expected an integer, got 4.5 (float)"),
    ("model:\n  d_model: true\n", "model.d_model: expected an integer, got True (bool)"),
    ("model:\n  scale_embeddings: maybe\n", "model.scale_embeddings: expected true or false, got 'maybe'"),
    (
        "model:\n  output_head: pooled\n",
        "model.output_head: must be one of per-position, flatten; got 'pooled'",
    ),
    ("model:\n  layer_norm_eps: 0\n", "model.layer_norm_eps: must be positive"),
    ("model: 4\n", "model: expected a section of keys, got 4 (int)"),
    ("encoder_words: 5\n", "encoder_words: must be 1 to 4 (the sentence has 5 words"),
    ("encoder_words: 0\n", "encoder_words: must be 1 to 4"),
    ("sentence: hello\n", "sentence: needs at least two words"),
    ("vocabulary: [<start>, <end>, the, cat, is, sleeping]\n", "vocabulary: has no 'comfortably'"),
    ("vocabulary: [<start>, the, cat, is, sleeping, comfortably]\n", "vocabulary: has no '<end>'"),
    (
        "vocabulary: [<start>, <end>, the, the, cat, is, sleeping, comfortably]\n",
        "vocabulary: lists 'the' twice",
    ),
    ("vocabulary: the cat\n", "vocabulary: expected a list, got 'the cat' (str)"),
    ("vocabulary: [<start>, <end>, 3]\n", "vocabulary[2]: expected a string, got 3 (int)"),
    ("seed: -1\n", "seed: must be 0 or more, got -1"),
    ("display:\n  precision: 40\n", "display.precision: must be 0 to 17, got 40"),
    ("- just\n- a list\n", "expected a mapping of keys at the top, got a list"),
    ("model:\n  d_model: [4\n", "line 3, column 1: malformed YAML"),
    ("model:\n  d_model: 4\n   num_heads: 2\n", "line 3, column 13: malformed YAML"),
    (
        "seed: !!python/object/apply:os.system [echo hi]\n",
        "line 1, column 7: the tag !!python/object/apply:os.system is not allowed",
    ),
]


@pytest.mark.parametrize(
    ("text", "message"), BAD, ids=[m.split(":")[0] + "-" + str(i) for i, (_, m) in enumerate(BAD)]
)
def test_bad_config_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file$"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_bad_override_names_the_key() -> None:
    with pytest.raises(ConfigError, match="seed: must be 0 or more, got -3"):
        load_config(seed=-3)


def test_config_built_in_python_is_checked_too() -> None:
    with pytest.raises(ConfigError, match="not divisible"):
        ModelConfig(d_model=5, num_heads=2)
    with pytest.raises(ConfigError, match="has no 'mat'"):
        Config(sentence="the cat sat on the mat", vocabulary=("<start>", "<end>", "the", "cat", "sat", "on"))


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().seed = 3  # type: ignore[misc]


def test_every_folder_of_code_is_a_package_a_plain_install_ships() -> None:
    """pyproject finds the packages (``packages.find``): a folder of code without ``__init__.py``
    would be left out of ``pip install .`` while the tests' editable install still saw it."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["transformer_walkthrough*"]))
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "transformer_walkthrough").rglob("*")
        if p.suffix in (".py", ".json") and "__pycache__" not in p.parts
    }
    assert folders <= found and "transformer_walkthrough.model.kinds" in found
