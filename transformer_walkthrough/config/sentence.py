"""The toy sentence: ``Config``, the file's top level — the sentence, how its words split between
encoder and decoder, the vocabulary, the blanks, the seed — with the sections under it.

Its checks hold the sentence to the model it feeds (an encoder-only model reads every word, a
decoder-only one has no encoder to feed), the vocabulary to the words and the blanks to the task,
(a config too large to hold or show is refused by the model, before any work: ``model.size``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import ClassVar

from .display import DisplayConfig
from .model import ModelConfig
from .schema import Checked, doc, quote
from .tokens import END, FILL_MASK_TOKENS, MASK, SPECIAL_TOKENS, START, answers, masked, tokenize
from .training import TrainingConfig


@dataclass(frozen=True)
class Config(Checked):
    """The whole walkthrough: the sentence, how it is split, the vocabulary, the seed, the model."""

    sentence: str = doc("lower-cased, punctuation stripped", "The cat is sleeping comfortably.")
    encoder_words: int = doc("the first words feed the encoder; the rest the decoder (encoder-only: all)", 3)
    vocabulary: tuple[str, ...] | None = doc("omit to build it from the sentence", None)
    blanks: tuple[int, ...] = doc(
        "task fill-mask: the words hidden behind [MASK], by position from 0 (3: sleeping)", ()
    )
    seed: int = doc("the same seed gives the same weights on every machine", 42)
    model: ModelConfig = field(default_factory=ModelConfig)
    display: DisplayConfig = field(default_factory=DisplayConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        words = tokenize(self.sentence)
        pair_words = [w for pair in self.training.dataset for text in pair for w in tokenize(text)]
        self._require(len(words) >= 2, "sentence", f"needs at least two words, got {quote(self.sentence)}")
        if self.model.encoder_only:
            self._require(
                self.encoder_words == len(words),
                "encoder_words",
                f"must be {len(words)}, the sentence's words: an encoder-only model reads them all, "
                f"got {self.encoder_words}",
            )
        elif self.model.decoder_only:
            self._require(
                self.encoder_words == 0,
                "encoder_words",
                f"must be 0 when model.num_encoder_layers is 0 (a decoder-only model has no encoder "
                f"to feed), got {self.encoder_words}",
            )
        else:
            self._require(
                1 <= self.encoder_words < len(words),
                "encoder_words",
                f"must be 1 to {len(words) - 1} (the sentence has {len(words)} words and the decoder "
                f"needs at least one), got {self.encoder_words}"
                + ("; 0 needs model.num_encoder_layers: 0 (decoder-only)" if self.encoder_words == 0 else ""),
            )
        self._require(self.seed >= 0, "seed", f"must be 0 or more, got {self.seed}")
        self._check_blanks(words)
        vocabulary = self.vocabulary
        specials = self.special_tokens
        if vocabulary is None:
            # Special tokens first, then the words in order of first appearance.
            vocabulary = tuple(dict.fromkeys([*specials, *words, *pair_words]))
            object.__setattr__(self, "vocabulary", vocabulary)
        counts = collections.Counter(vocabulary)  # one pass: a 50,257-word vocabulary is instant
        repeated = sorted(w for w, n in counts.items() if n > 1)
        self._require(
            not repeated, "vocabulary", f"lists {', '.join(map(quote, repeated[:3]))} twice"
            + (f" ({len(repeated)} words in all)" if len(repeated) > 3 else "")
        )  # fmt: skip
        missing = [w for w in dict.fromkeys([*specials, *words, *pair_words]) if w not in counts]
        self._require(
            not missing,
            "vocabulary",
            f"has no {', '.join(map(quote, missing[:3]))}{' …' if len(missing) > 3 else ''}: it holds "
            f"{', '.join(vocabulary[:10])}{' …' if len(vocabulary) > 10 else ''} (the sentence is "
            f"lower-cased; {', '.join(specials[:-1])} and {specials[-1]} are always needed)",
        )
        if self.model.positional_encoding == "learned":
            longest = max(len(t) for pair in self.pairs for t in pair)
            rows = self.model.max_positions - self.model.position_offset
            self._require(
                longest <= rows,
                "model.max_positions",
                f"learned positions have {rows} rows"
                + (f" from row {self.model.position_offset}" if self.model.position_offset else "")
                + f", but a sentence needs {longest}",
            )

    def _check_blanks(self, words: list[str]) -> None:
        """A fill-mask sentence has its blanks, each a word of it, once; no other task has any."""
        if self.model.task != "fill-mask":
            self._require(
                not self.blanks, "blanks", f"are for model.task: fill-mask; the task is {self.model.task}"
            )
            return
        self._require(
            bool(self.blanks),
            "blanks",
            "a fill-mask model needs a word to hide behind [MASK]: give its position, e.g. blanks: [3]",
        )
        bad = [b for b in self.blanks if not 0 <= b < len(words)]
        self._require(
            not bad, "blanks", f"{bad[0] if bad else 0} is no word of the sentence (0 to {len(words) - 1})"
        )
        self._require(len(set(self.blanks)) == len(self.blanks), "blanks", "lists a word twice")

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tokens every vocabulary of this task holds: <start> and <end>, or [CLS], [SEP], [MASK]."""
        return FILL_MASK_TOKENS if self.model.encoder_only else SPECIAL_TOKENS

    @property
    def source_tokens(self) -> tuple[str, ...]:
        """The encoder's input: the first ``encoder_words`` words; an encoder-only model's, the
        whole sentence between [CLS] and [SEP], each blank's word hidden behind [MASK]."""
        words = tokenize(self.sentence)
        if self.model.encoder_only:
            return masked(words, self.blanks)
        return tuple(words[: self.encoder_words])

    @property
    def target_tokens(self) -> tuple[str, ...]:
        """The decoder's input: the remaining words wrapped in <start> … <end> (none: encoder-only)."""
        if self.model.encoder_only:
            return ()
        return (START, *tokenize(self.sentence)[self.encoder_words :], END)

    @property
    def answers(self) -> tuple[str | None, ...]:
        """Per row of the encoder-only model's input, the word hidden there, None where none is."""
        if not self.model.encoder_only:
            return ()
        return answers(tokenize(self.sentence), self.blanks)

    @property
    def sentences(self) -> list[list[str]]:
        """Each sentence a fill-mask model learns from, as words: the config's, then each dataset
        pair's two texts read as one sentence."""
        more = [tokenize(f"{s} {t}") for s, t in self.training.dataset]
        return [tokenize(self.sentence), *more]

    @property
    def pairs(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """What training learns: (source tokens, decoder tokens) for the sentence, then the dataset."""
        if self.model.encoder_only:  # one stack: each sentence feeds the encoder, no decoder
            return [(masked(words, ()), ()) for words in self.sentences]
        if self.model.decoder_only:  # no encoder: the whole pair feeds the decoder
            more = [((), (START, *tokenize(s), *tokenize(t), END)) for s, t in self.training.dataset]
        else:
            more = [(tuple(tokenize(s)), (START, *tokenize(t), END)) for s, t in self.training.dataset]
        return [(self.source_tokens, self.target_tokens), *more]

    def vocabulary_of(self, side: str) -> tuple[str, ...]:
        """The pieces that name the embedding rows of ``side`` ("encoder", "decoder", or "output",
        the output layer's columns): the toy has one vocabulary for all three (a checkpoint whose
        encoder has its own vocabulary says so in ``CheckpointConfig``)."""
        if side not in ("encoder", "decoder", "output"):
            raise ValueError(f"no side {side!r}: encoder, decoder or output")
        return self.vocabulary or ()

    def token_ids(self, tokens: tuple[str, ...]) -> list[int]:
        """Each token's row in the embedding table."""
        index = self.index
        return [index[t] for t in tokens]

    mask_token: ClassVar[str] = MASK  # a fill-mask model's blank (a checkpoint's may be <mask>)

    @property
    def mask_id(self) -> int | None:
        """The blank's row in the vocabulary, None when it has none."""
        return self.index.get(self.mask_token)

    @property
    def index(self) -> dict[str, int]:
        """Each word's row in the embedding table, built once."""
        cached = self.__dict__.get("_index")
        if cached is None:
            cached = {word: i for i, word in enumerate(self.vocabulary or ())}
            object.__setattr__(self, "_index", cached)
        return cached
