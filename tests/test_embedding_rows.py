"""A word keeps its vector: each row of an embedding table is drawn from a stream keyed by the seed,
the table and the word (issue 22, point 1), and trained weights say which words they know."""

from __future__ import annotations

import dataclasses
import zipfile

import numpy as np
import pytest

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.errors import WalkthroughError
from transformer_walkthrough.files.npzfile import read_npz, read_vocabulary
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.model.weights import stream


def _sentence(source: str, target: str) -> Config:
    config = Config()
    words = [*source.split(), *target.split()]
    vocabulary = [*config.vocabulary[:2], *dict.fromkeys(words)]  # <start>, <end>, then the words
    return dataclasses.replace(config, sentence=f"{source} {target}", encoder_words=len(source.split()),
                               vocabulary=tuple(vocabulary))  # fmt: skip


def test_a_new_word_gets_a_new_vector_and_the_others_keep_theirs() -> None:
    cat, dog = Config(), _sentence("the dog is", "barking")
    E_cat, E_dog = init_weights(cat)["encoder.embedding/E"], init_weights(dog)["encoder.embedding/E"]
    row = {w: i for i, w in enumerate(cat.vocabulary)}
    for word in ("<start>", "<end>", "the", "is"):  # the same word, the same row, at another index
        assert np.array_equal(E_dog[dog.vocabulary.index(word)], E_cat[row[word]])
    assert dog.vocabulary.index("dog") == row["cat"]  # dog sits where cat sat …
    assert not np.allclose(E_dog[row["cat"]], E_cat[row["cat"]])  # … with a vector of its own
    # the row is the word's own stream, uniform in [0, 1) as the article draws E
    expected = stream(cat.seed, "encoder.embedding/E[dog]").random(cat.model.d_model)
    assert np.array_equal(E_dog[dog.vocabulary.index("dog")], expected)
    out_cat = run_forward(cat)["encoder.embedding"]["output"]
    out_dog = run_forward(dog)["encoder.embedding"]["output"]
    assert not np.allclose(out_cat[1], out_dog[1]) and np.array_equal(out_cat[0], out_dog[0])


def test_trained_weights_say_which_words_are_new(runner, tmp_path) -> None:
    path = tmp_path / "w.npz"
    done = runner.invoke(app, ["train", "--steps", "3", "--output", str(path)])
    assert done.exit_code == 0, done.output
    assert read_vocabulary(path) == Config().vocabulary
    assert load_weights(Config(), path)["encoder.embedding/E"].shape == (7, 4)  # the vocabulary is no weight
    with pytest.raises(WalkthroughError) as err:
        load_weights(_sentence("the dog is", "barking"), path)
    message = str(err.value)
    assert (
        "\n" not in message
        and "trained on 7 words (<start>, <end>, the, cat, is, sleeping, comfortably)" in message
    )
    assert "dog, barking are new to it" in message
    result = runner.invoke(app, ["run", "--source", "the dog is", "--target", "barking", "-w", str(path)])
    assert result.exit_code == 2 and "dog, barking are new to it" in result.output
    # tables of the same size, another word: never cat's trained row under dog's name
    with pytest.raises(WalkthroughError, match="dog is new to it"):
        load_weights(_sentence("the dog is", "sleeping comfortably"), path)
    same = Config()
    shuffled = dataclasses.replace(same, vocabulary=(*same.vocabulary[:2], *reversed(same.vocabulary[2:])))
    with pytest.raises(WalkthroughError, match="in another order than this config's vocabulary"):
        load_weights(shuffled, path)


@pytest.mark.parametrize(
    "words",
    [np.array([["a", "b"]]), np.array(["a"] * 100_001), np.array([1.0, 2.0], dtype=object)],
    ids=["2-D", "more than 100,000 words", "objects"],
)
def test_a_bad_vocabulary_member_is_refused(tmp_path, words) -> None:
    path = tmp_path / "w.npz"
    with zipfile.ZipFile(path, "w") as z, z.open("vocabulary.npy", "w") as f:
        np.lib.format.write_array(f, words, allow_pickle=True)
    with pytest.raises(WalkthroughError):
        read_npz(path)
    assert read_vocabulary(path) is None
