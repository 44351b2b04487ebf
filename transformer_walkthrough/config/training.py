"""The ``training:`` section: how ``walkthrough train`` learns, and the pairs it learns besides the
sentence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .schema import Checked, doc, quote
from .tokens import tokenize

MAX_DATASET = 1_000  # training.dataset's pairs: the toy learns its sentence and a few more


@dataclass(frozen=True)
class TrainingConfig(Checked):
    """How `walkthrough train` learns: Adam on the mean next-token cross-entropy."""

    _section: ClassVar[str] = "training"

    steps: int = doc("Adam steps", 150)
    learning_rate: float = doc("Adam's step size", 0.03)
    dataset: tuple[tuple[str, str], ...] = doc(
        "more [source, target] pairs to learn besides the sentence", ()
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(0 < self.steps <= 100_000, "steps", f"must be 1 to 100,000, got {self.steps}")
        self._require(
            self.learning_rate > 0, "learning_rate", f"must be positive, got {self.learning_rate:g}"
        )
        # Every training step is a pass over every pair: 50,000 pairs made one step take 97 s.
        self._require(
            len(self.dataset) <= MAX_DATASET,
            "dataset",
            f"holds {len(self.dataset):,} pairs; at most {MAX_DATASET:,} (each step trains on every pair)",
        )
        for k, (source, _) in enumerate(self.dataset):
            self._require(bool(tokenize(source)), f"dataset[{k}]", f"has no source words: {quote(source)}")
