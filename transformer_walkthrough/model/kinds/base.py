"""What a kind of stage is: one object that owns everything about it.

A ``Kind`` says what its stage is (title, one-sentence explanation, formula and LaTeX as
functions of the config), which parameters it has (``params``), how it computes and records
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Stage, Trace
    from .hand import Check

Arrays = dict[str, np.ndarray]


class Grads(NamedTuple):
    matrices: Arrays  # dL/d(matrix) for the stage's matrices, by name (inputs among them)
    params: Arrays  # dL/d(parameter), by the stage's local parameter name (W_QKV, gamma, …)


__all__ = ["Arrays", "Explainer", "Grads", "Kind", "Sizes", "Spec", "said"]


class Spec(NamedTuple):
    """A parameter's shape and how it is first drawn (an ``init`` of ``weights``)."""

    shape: tuple[int, ...]
    init: str  # "embedding", "xavier", "xavier-qkv", "bias", "zeros", "ones", "positions"
    fan_in: int = 0  # for "bias": the layer's input width
    blocks: tuple[int, ...] = ()  # for "xavier-qkv": the widths of the column blocks, each drawn alone


class Sizes(NamedTuple):
    """What a stage's parameters are sized by, beyond the model config."""

    vocab: int  # rows of the side's embedding table, columns of the output layer
    head_in: int  # the output layer's input width (d_model, or every position's for the flatten head)


Explainer = Callable[["Cell", "Trace"], list[str]]


def _no_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return {}


@dataclass(frozen=True)
class Kind:
    id: str  # "masked-attention"
    title: str | Callable[[ModelConfig], str]  # shown in the header: "Decoder layer 0 · <title>"
    explanation: Callable[[ModelConfig], str]  # plain English, as true under the config
    formula: Callable[[ModelConfig], str]  # the arithmetic under this config; lines split by "\n"
    latex: Callable[[ModelConfig], list[str]]  # the same, as the lines of a LaTeX align*
    backward: Callable[[Stage, np.ndarray, Arrays, ModelConfig], Grads] | None
    second: Callable[[Stage, Trace, ModelConfig], list[Check]]  # verify's independent computation
    explain: Mapping[str, Explainer]  # a cell's arithmetic, by the matrix's base name
    params: Callable[[ModelConfig, Sizes], dict[str, Spec]] = _no_params  # by local name, untied
    groups: Mapping[str, str] = field(default_factory=dict)  # base -> the row it shares per head
    tex: Mapping[str, str] = field(default_factory=dict)  # base -> its LaTeX symbol; {h}: the head
    article: str = ""  # where the article says otherwise: said on the article's toy, not on a checkpoint

    def open(self, trace: object, stage_id: str, m: ModelConfig) -> Stage:
        """A new stage of this kind in ``trace``, titled and explained as the kind says under ``m``
        (and, on the toy, with the article's mistake noted: a checkpoint's config names its source)."""
        title = self.title(m) if callable(self.title) else self.title
        explanation = self.explanation(m)
        if self.article and not getattr(trace.config, "checkpoint", ""):  # type: ignore[attr-defined]
            explanation = f"{explanation} {self.article}"
        return trace.stage(stage_id, self.id, title, explanation, self.formula(m))  # type: ignore[attr-defined]


def said(text: str) -> Callable[[ModelConfig], str]:
    """An explanation that does not depend on the config."""
    return lambda m: text
