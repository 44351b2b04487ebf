"""What a kind of stage is: one object that owns everything about it.

A ``Kind`` says what its stage is (title, one-sentence explanation and formula as functions of
the config), which parameters it has (``params``), how it computes and records
(its forward function, beside it in its module), how its gradient flows back (``backward``), how
``verify`` computes it a second way (``second``), how ``explain`` writes out the arithmetic of a
cell of each of its matrices (``explain``, by the matrix's base name), which of its matrices share
a row on screen (``groups``) and how a document typesets their names (``tex``). ``verify``,
``explain``, ``render``, ``documents`` and the parameter list loop over kinds and over the
metadata each matrix is recorded with (``trace.Matrix``), and parse no matrix name back. Where a
stage sits and what it reads is ``architecture``'s (the walk); the parameters a kind declares
(``Spec``) are named there by ``parameters``. Still keyed by kind elsewhere: the shapes a stage
records, counted before the pass by ``size``, and the torch reference, which rebuilds
PyTorch's own layers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import numpy as np

from ..architecture import layer_of

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..formula import Formula
    from ..trace import Stage, Trace
    from .hand import Check

Arrays = dict[str, np.ndarray]


class Weights(Protocol):
    """What a kind reads its parameters through (``model.weights.Weights``): the array a stage uses
    under a local name, noted in the stage. A protocol, so that the kinds, which the parameters'
    specs are read from, import nothing that reads those specs."""

    def take(self, stage: Any, local: str) -> np.ndarray: ...


class Grads(NamedTuple):
    matrices: Arrays  # dL/d(matrix) for the stage's matrices, by name (inputs among them)
    params: Arrays  # dL/d(parameter), by the stage's local parameter name (W_QKV, gamma, …)


__all__ = [
    "Arrays", "Cells", "Explainer", "Grads", "Kind", "Sizes", "Spec", "Step", "StepOf", "Weights", "cache_of", "col", "linear_step",
    "named", "one", "row", "said", "step", "sum_step",
]  # fmt: skip


class Spec(NamedTuple):
    """A parameter's shape and how it is first drawn (an ``init`` of ``weights``)."""

    shape: tuple[int, ...]
    init: str  # "embedding", "xavier", "xavier-qkv", "bias", "normal", "zeros", "ones", "positions"
    fan_in: int = 0  # for "bias" and "normal": the layer's input width
    blocks: tuple[int, ...] = ()  # for "xavier-qkv": the widths of the column blocks, each drawn alone
    per_stack: bool = False  # one for the whole stack: the first layer's, which every layer uses (T5's R)


class Sizes(NamedTuple):
    """What a stage's parameters are sized by, beyond the model config."""

    vocab: int  # rows of the side's embedding table, columns of the output layer
    head_in: int  # the output layer's input width (d_model, or every position's for the flatten head)


Explainer = Callable[["Cell", "Trace"], list[str]]

Cells = tuple[tuple[str, int, int], ...]  # (matrix name, row, column) of the stage, each


class Step(NamedTuple):
    """How a cell is computed: the kind of step (dot, softmax, norm, rotation, activation, sinusoid,
    sum, lookup, copy) and the cells of its stage it is computed from (a worksheet's answer key)."""

    kind: str
    inputs: Cells = ()


# The step of cell (i, j) of a matrix, given its stage, the trace and the matrix's name; None when
# no worksheet asks for it (a learned position's row, a table the stage only reads).
StepOf = Callable[["Stage", "Trace", str, int, int], "Step | None"]


def named(stage: Stage, base: str, head: int | None = None) -> str | None:
    """The name of matrix ``base`` of ``head`` in the stage, or None when it has none."""
    from ..trace import matrix_name

    return matrix_name(base, head) if stage.has(base, head) else None


def row(stage: Stage, name: str | None, r: int) -> Cells:
    """Every cell of row r of the matrix (none for no matrix)."""
    return () if name is None else tuple((name, r, c) for c in range(stage.matrices[name].shape[1]))


def col(stage: Stage, name: str | None, c: int) -> Cells:
    """Every cell of column c of the matrix (none for no matrix)."""
    return () if name is None else tuple((name, r, c) for r in range(stage.matrices[name].shape[0]))


def one(name: str | None, r: int, c: int) -> Cells:
    return () if name is None else ((name, r, c),)


def step(kind: str, *parts: Cells) -> Step:
    return Step(kind, tuple(cell for part in parts for cell in part))


def linear_step(x: str, W: str, b: str) -> StepOf:
    """The step of a cell of x·W + b: a dot of row i of x and column j of W, plus b_j (if any)."""

    def of(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return step(
            "dot", row(stage, named(stage, x), i), col(stage, named(stage, W), j), one(named(stage, b), 0, j)
        )

    return of


def sum_step(*terms: str) -> StepOf:
    """The step of a cell of a sum of matrices (X + sublayer): the same cell of each."""

    def of(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return step("sum", *(one(named(stage, t), i, j) for t in terms))

    return of


def _no_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return {}


@dataclass(frozen=True)
class Kind:
    id: str  # "masked-attention"
    title: str | Callable[[ModelConfig], str]  # shown in the header: "Decoder layer 0 · <title>"
    explanation: Callable[[ModelConfig], str]  # plain English, as true under the config
    # the arithmetic under this config, as data (``model.formula``): the views write it as plain
    # text, LaTeX and MathML
    formula: Callable[[ModelConfig], Formula]
    backward: Callable[[Stage, np.ndarray, Arrays, ModelConfig], Grads] | None
    second: Callable[[Stage, Trace, ModelConfig], list[Check]]  # verify's independent computation
    explain: Mapping[str, Explainer]  # a cell's arithmetic, by the matrix's base name
    params: Callable[[ModelConfig, Sizes], dict[str, Spec]] = _no_params  # by local name, untied
    steps: Mapping[str, StepOf] = field(default_factory=dict)  # a cell's step, by the matrix's base name
    groups: Mapping[str, str] = field(default_factory=dict)  # base -> the row it shares per head
    tex: Mapping[str, str] = field(default_factory=dict)  # base -> its LaTeX symbol; {h}: the head
    # Where the article says otherwise (a sentence, or one under the config; "" where it agrees):
    # said at the stage on the toy, not on a checkpoint, whose config names its own source.
    article: str | Callable[[ModelConfig], str] = ""
    # what a stage of this kind in layer N says of that layer alone (its type in ``layer_types``): a
    # few words for its title and a sentence for its explanation; ("", "") for nothing more
    layered: Callable[[ModelConfig, int], tuple[str, str]] | None = None

    def open(
        self, trace: object, stage_id: str, m: ModelConfig, inputs: Sequence[tuple[str, str]] = ()
    ) -> Stage:
        """A new stage of this kind in ``trace``, titled and explained as the kind says under ``m``
        (and, on the toy, with the article's mistake noted: a checkpoint's config names its source)."""
        explanation = _said(self.explanation, m)
        article = self.article(m) if callable(self.article) else self.article
        if article and not getattr(trace.config, "checkpoint", ""):  # type: ignore[attr-defined]
            explanation = f"{explanation} {article}"
        said = _said(self.formula, m)
        layer = layer_of(stage_id)
        if self.layered is not None and layer is not None:
            words, sentence = self.layered(m, layer)
            explanation = f"{explanation} {sentence}" if words else explanation
        title = self.title_of(stage_id, m)
        return trace.stage(stage_id, self.id, title, explanation, said, inputs)  # type: ignore[attr-defined]

    def title_of(self, stage_id: str, m: ModelConfig) -> str:
        """The title a stage of this kind gets under ``m`` (what a document's contents list before
        the pass has run): the kind's, and in a layer the few words ``layered`` says of it."""
        title = self.title(m) if callable(self.title) else self.title
        layer = layer_of(stage_id)
        if self.layered is not None and layer is not None:
            words, _ = self.layered(m, layer)
            title = f"{title} ({words})" if words else title
        return title


@functools.lru_cache(maxsize=256)
def _said(say: Callable[[ModelConfig], Any], m: ModelConfig) -> Any:
    """What a kind says under a config, said once: every layer's stage of a kind says the same
    (a formula is a few hundred terms; a base-size pass opens 66 stages)."""
    return say(m)


Cache = TypeVar("Cache", bound=tuple[Any, ...])


def cache_of(stage: Stage, cache: type[Cache]) -> Cache:
    """What the stage's forward kept for its backward (``stage.cache``), as the type its kind declares
    beside it: ``cache_of(stage, EmbeddingCache)``, ``cache_of(stage, F.FeedForward)``."""
    kept = stage.cache
    if not isinstance(kept, cache):  # a kind that keeps one type and reads another: a bug
        raise TypeError(f"{stage.id}: its forward kept {type(kept).__name__}, not {cache.__name__}")
    return kept


def said(text: str) -> Callable[[ModelConfig], str]:
    """An explanation that does not depend on the config."""
    return lambda m: text
