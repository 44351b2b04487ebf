"""The toy's tokens: the special ones, a sentence into words, and a fill-mask model's input."""

from __future__ import annotations

import re

START, END = "<start>", "<end>"
SPECIAL_TOKENS = (START, END)
# A fill-mask model's (BERT's): the sentence is read between [CLS] and [SEP], a blank is [MASK].
CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
FILL_MASK_TOKENS = (CLS, SEP, MASK)


def tokenize(sentence: str) -> list[str]:
    """Lower-case words with the punctuation stripped: "The cat is." -> ["the", "cat", "is"]."""
    return re.findall(r"[\w']+", sentence.lower())


def masked(words: list[str], blanks: tuple[int, ...]) -> tuple[str, ...]:
    """An encoder-only model's input: [CLS], the words with each blank hidden behind [MASK], [SEP]."""
    return (CLS, *(MASK if i in blanks else w for i, w in enumerate(words)), SEP)


def answers(words: list[str], blanks: tuple[int, ...]) -> tuple[str | None, ...]:
    """Each row of ``masked(words, blanks)``: the word a blank hides there, None on every other row."""
    return (None, *(w if i in blanks else None for i, w in enumerate(words)), None)
