"""The trace: every matrix of one forward pass under a stable name, the spine of the tool.

A stage (``decoder.0.masked-attention``) has a kind (``masked-attention``), a title, a one-line
explanation, a formula, and named matrices (``S1``) with row and column labels. The model records
into it as it computes (``stage.rec("S1", S, rows, cols)`` returns ``S``); ``run``, ``step`` and
every export read the same trace. Matrices are stored as given (often views), never copied.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from .errors import StageError, close_matches

if TYPE_CHECKING:
    from .config import Config


class Kind(NamedTuple):
    name: str  # shown in the title: "Encoder layer 0 · <name>"
    explanation: str  # one plain-English sentence
    formula: str  # the paper's arithmetic; lines separated by "\n"


_ATTENTION = (
    "Q_h = {q}·W_Qh,  K_h = {kv}·W_Kh,  V_h = {kv}·W_Vh    (h = 1 … num_heads)\n"
    "S_h = Q_h·K_hᵀ / √d_k\n"
    "A_h = softmax({s})    (row-wise)\n"
    "O_h = A_h·V_h\n"
    "output = concat(O_1, …, O_num_heads)·W_O"
)

# Every kind of stage, in the order they first appear in a forward pass.
KINDS: dict[str, Kind] = {
    "embedding": Kind(
        "embedding",
        "Each token looks up its row of the embedding table E, a vector of d_model numbers "
        "(random until the model is trained).",
        "output[i] = E[token_i]",
    ),
    "positional-encoding": Kind(
        "positional encoding",
        "Attention by itself ignores word order, so a fixed pattern of sines and cosines, "
        "different for every position, is added to each token's vector.",
        "PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))\n"
        "PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))\n"
        "output = X + PE",
    ),
    "self-attention": Kind(
        "multi-head self-attention",
        "Every token scores every token (query against key), turns the scores into weights with "
        "softmax and takes the weighted mix of their values; each head does this in its own "
        "d_k-dimensional subspace.",
        _ATTENTION.format(q="X", kv="X", s="S_h"),
    ),
    "add-norm": Kind(
        "add & norm",
        "The sublayer's output is added back to its input (a residual connection), then each row "
        "is normalised to mean 0 and variance 1, scaled by gamma and shifted by beta.",
        "sum = X + sublayer\n"
        "output = gamma ⊙ (sum − mean) / √(var + eps) + beta\n"
        "    (mean and var of each row of sum; var divides by d_model)",
    ),
    "feed-forward": Kind(
        "position-wise feed-forward",
        "Each position goes on its own through the same two-layer network: widen to d_ff, keep "
        "the positive part (ReLU), come back to d_model.",
        "hidden = max(0, X·W_1 + b_1)\noutput = hidden·W_2 + b_2",
    ),
    "masked-attention": Kind(
        "masked multi-head self-attention",
        "Self-attention where the mask M puts −∞ above the diagonal, so no position can look at "
        "a later one: softmax turns −∞ into a weight of exactly 0.",
        _ATTENTION.format(q="X", kv="X", s="S_h + M"),
    ),
    "cross-attention": Kind(
        "multi-head cross-attention",
        "The decoder's tokens ask the questions (queries from X) and the encoder output answers "
        "(keys and values from memory): this is how the source sentence reaches the decoder.",
        _ATTENTION.format(q="X", kv="memory", s="S_h"),
    ),
    "logits": Kind(
        "output linear layer",
        "One linear layer turns each decoder position's vector into a score (logit) for every "
        "word of the vocabulary.",
        "logits = X·W + b",
    ),
    "probabilities": Kind(
        "softmax over the vocabulary",
        "Softmax turns each row of logits into probabilities that sum to 1; the most likely "
        "word is the prediction for the next token.",
        "probabilities = softmax(logits)    (row-wise)",
    ),
}


@functools.lru_cache(maxsize=64)
def dims(n: int) -> tuple[str, ...]:
    """Labels of n dimensions: d0, d1, …"""
    return tuple(f"d{j}" for j in range(n))


def is_weight(name: str) -> bool:
    """A learned parameter (E, W_Q1, b_1, gamma, W, …), as opposed to an activation computed from them."""
    return name in ("E", "W", "b", "gamma", "beta") or name.startswith(("W_", "b_"))


class Matrix(NamedTuple):
    """A 2-D array with a label for every row and column."""

    values: np.ndarray
    rows: tuple[str, ...]
    cols: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]


@dataclass
class Stage:
    """One step of the forward pass and every matrix it used or made, in computing order."""

    id: str
    kind: str
    title: str
    explanation: str
    formula: str
    matrices: dict[str, Matrix] = field(default_factory=dict)
    # What the forward function returned, kept for its backward (never shown or exported).
    cache: Any = field(default=None, repr=False, compare=False)
    records: ClassVar[bool] = True  # a _NullStage does not: stages may skip work only shown

    def rec(self, name: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        """Record ``values`` as matrix ``name`` and return it unchanged; a 1-D array is one row."""
        if values.ndim == 1:
            values = values.reshape(1, -1)
        if values.shape != (len(rows), len(cols)):
            raise ValueError(f"{self.id}/{name}: shape {values.shape} but {len(rows)}×{len(cols)} labels")
        self.matrices[name] = Matrix(values, tuple(rows), tuple(cols))
        return values

    @property
    def layer(self) -> int | None:
        """The layer index in the id (``decoder.0.cross-attention`` -> 0), None outside layers."""
        parts = self.id.split(".")
        return int(parts[1]) if len(parts) == 3 else None

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.matrices[name].values
        except KeyError:
            raise StageError(
                f"stage {self.id} has no matrix {name!r}; it has {', '.join(self.matrices)}"
            ) from None

    def get(self, name: str, default: Any = None) -> Any:
        """The matrix's values, or ``default`` when the stage has none by that name."""
        return self.matrices[name].values if name in self.matrices else default

    def __contains__(self, name: object) -> bool:
        return name in self.matrices


TOP_K = 3  # next-word candidates kept per position


class Prediction(NamedTuple):
    """What the model predicts after one decoder position (or after all, for the flatten head)."""

    position: int | None  # None for the flatten head, which predicts once from every position
    after: str  # the decoder input at that position
    expected: str | None  # the true next token, where the sentence has one
    top: list[tuple[str, float]]  # the most likely next tokens, most likely first

    @property
    def word(self) -> str:
        return self.top[0][0]

    @property
    def probability(self) -> float:
        return self.top[0][1]


@dataclass
class Trace:
    """Every stage of one forward pass, in order, with the config and tokens that produced it."""

    config: Config
    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    stages: dict[str, Stage] = field(default_factory=dict)

    def stage(self, stage_id: str, kind: str, formula: str | None = None) -> Stage:
        """Open a new stage; ``formula`` overrides the kind's when the config changes the arithmetic."""
        info = KINDS[kind]
        side, *layer, _ = stage_id.split(".")
        where = f"{side.capitalize()} layer {layer[0]}" if layer else side.capitalize()
        new = Stage(stage_id, kind, f"{where} · {info.name}", info.explanation, formula or info.formula)
        self.stages[stage_id] = new
        return new

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return self.config.vocabulary or ()

    @functools.cached_property
    def prediction(self) -> list[Prediction]:
        """The top next tokens after each decoder position, with the sentence's true next token.

        The flatten head makes one prediction from all positions at once. Worked out from the
        probabilities when first asked for: training, which never looks, does not pay for it.
        """
        if "output.probabilities" not in self.stages:
            return []
        probabilities = self["output.probabilities"]["probabilities"]
        tokens, vocabulary = self.target_tokens, self.vocabulary
        k = min(TOP_K, probabilities.shape[1])
        # The k largest of each row, then in order: most likely first, ties by vocabulary order.
        top = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
        order = np.lexsort((top, -np.take_along_axis(probabilities, top, axis=1)), axis=1)
        top = np.take_along_axis(top, order, axis=1)
        out = []
        for i, (row, ids) in enumerate(zip(probabilities, top.tolist(), strict=True)):
            best = [(vocabulary[j], float(row[j])) for j in ids]
            if self.config.model.output_head == "flatten":
                out.append(Prediction(None, " ".join(tokens), None, best))
            else:
                expected = tokens[i + 1] if i + 1 < len(tokens) else None
                out.append(Prediction(i, tokens[i], expected, best))
        return out

    def __getitem__(self, stage_id: str) -> Stage:
        try:
            return self.stages[stage_id]
        except KeyError:
            raise StageError(self._unknown(stage_id)) from None

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages.values())

    def __len__(self) -> int:
        return len(self.stages)

    def select(self, names: Sequence[str] = (), layer: int | None = None) -> list[Stage]:
        """The stages named by kind (``masked-attention``) or exact id, in order; all if none.

        ``layer`` keeps only the stages of that layer. Raises StageError for an unknown name or
        a selection that is empty.
        """
        kinds = {s.kind for s in self}
        for name in names:
            if name not in kinds and name not in self.stages:
                raise StageError(self._unknown(name))
        chosen = [s for s in self if not names or s.kind in names or s.id in names]
        if layer is not None:
            layers = sorted({s.layer for s in self if s.layer is not None})
            chosen = [s for s in chosen if s.layer == layer]
            if not chosen:
                what = f"stage {', '.join(names)}" if names else "the model"
                raise StageError(
                    f"--layer {layer}: {what} has no stage in layer {layer} "
                    f"(layers: {', '.join(map(str, layers))}; embeddings and output have none)"
                )
        return chosen

    def _unknown(self, name: str) -> str:
        kinds = list(dict.fromkeys(s.kind for s in self))
        close = close_matches(name, kinds + list(self.stages))
        hint = f"did you mean {close[0]}? " if close else ""
        return (
            f"unknown stage {name!r}; {hint}valid kinds: {', '.join(kinds)}; "
            f"or a stage id: {', '.join(self.stages)}"
        )


class _NullStage:
    """A stage that records nothing: ``rec`` hands back its argument, so the model runs unchanged."""

    formula = ""
    cache = None
    records = False

    def rec(self, name: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        return values


class NullTrace(Trace):
    """A trace that keeps no matrices: the forward pass at full speed and with no memory held."""

    def stage(self, stage_id: str, kind: str, formula: str | None = None) -> Stage:
        return _NullStage()  # type: ignore[return-value]
