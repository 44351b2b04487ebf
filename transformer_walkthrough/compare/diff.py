"""Two forward passes side by side: what a convention, or training, changes, stage by stage.

Each weight is drawn from a stream keyed by the seed and its name (``weights.stream``), so two
configs that differ in one convention share every weight they both have: the difference between
their traces is the convention's effect alone. With one config and two weights files, it is what
training changed.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import WalkthroughError
from ..model.trace import Stage, Trace
from .checks import gap


class MatrixDiff(NamedTuple):
    name: str
    largest: float  # max |A − B|; inf when the shapes differ
    shapes: tuple[tuple[int, ...], tuple[int, ...]]


class StageDiff(NamedTuple):
    """One stage of either trace: in both (with its matrices compared), or in one only."""

    id: str
    where: str  # "both", "A" or "B"
    matrices: list[MatrixDiff]  # the matrices both have, in A's order
    only: list[str]  # matrices that only one of the two stages has

    @property
    def largest(self) -> MatrixDiff | None:
        """The matrix that differs most, or None when every shared matrix is equal."""
        worst = max(self.matrices, key=lambda d: d.largest, default=None)
        return worst if worst is not None and worst.largest > 0 else None

    def output_differs(self, a: Stage) -> bool:
        return any(d.name == a.output and d.largest > 0 for d in self.matrices)


def check_comparable(a: Trace, b: Trace) -> None:
    """Two traces can be compared cell by cell only over the same vocabulary. (Other tokens are
    allowed: the matrices they shape are then reported as of different shapes.)"""
    if a.vocabulary != b.vocabulary:
        only = [w for w in b.vocabulary if w not in set(a.vocabulary)][:3]
        raise WalkthroughError(
            "the two configs have different vocabularies"
            + (f" (B has {', '.join(map(repr, only))})" if only else "")
            + ", so their rows of E and columns of W and the logits are not the same words; "
            "give both the same vocabulary"
        )


def compare(a: Trace, b: Trace) -> list[StageDiff]:
    """Every stage of A and B, in A's order with B's own stages placed where B has them."""
    check_comparable(a, b)
    out: list[StageDiff] = []
    b_ids = list(b.stages)
    placed = 0  # how far through B's stages the listing has come
    for stage in a:
        if stage.id not in b.stages:
            out.append(StageDiff(stage.id, "A", [], []))
            continue
        k = b_ids.index(stage.id)
        out += [StageDiff(i, "B", [], []) for i in b_ids[placed:k] if i not in a.stages]
        placed = max(placed, k + 1)
        other = b[stage.id]
        shared = [n for n in stage.matrices if n in other.matrices]
        only = [n for n in stage.matrices if n not in other.matrices]
        only += [n for n in other.matrices if n not in stage.matrices]
        matrices = [MatrixDiff(n, gap(stage[n], other[n]), (stage[n].shape, other[n].shape)) for n in shared]
        out.append(StageDiff(stage.id, "both", matrices, only))
    out += [StageDiff(i, "B", [], []) for i in b_ids[placed:] if i not in a.stages]
    return out


def first_divergence(a: Trace, diffs: list[StageDiff]) -> str | None:
    """The first stage present in both whose output differs: where the two passes part."""
    for d in diffs:
        if d.where == "both" and d.output_differs(a[d.id]):
            return d.id
    return None
