"""The trace: every matrix of one forward pass under a stable name, the spine of the tool.

A stage (``decoder.0.masked-attention``) has a kind (``masked-attention``), a title, a one-line
explanation, a formula, and named matrices (``S1``) with row and column labels. The model records
into it as it computes (``stage.rec("S", S, rows, cols, head=1)`` records head 1's ``S1`` and
returns ``S``: the base name and the head are kept with the matrix); ``run``, ``step`` and
every export read the same trace. Matrices are stored as given (often views), never copied.
"""

from __future__ import annotations

import collections
import functools
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import StageError, close_matches, shorten
from .architecture import ENCODER, Ref, side_of, walk

if TYPE_CHECKING:
    from ..config import Config, ModelConfig


@functools.lru_cache(maxsize=64)
def dims(n: int, prefix: str = "d") -> tuple[str, ...]:
    """Labels of n dimensions, named by their space: d0, d1, … of d_model; k0, … of a head's d_k;
    f0, … of the feed-forward's d_ff."""
    return tuple(f"{prefix}{j}" for j in range(n))


@functools.lru_cache(maxsize=64)
def head_dims(num_heads: int, d_k: int) -> tuple[str, ...]:
    """The columns of the heads set side by side (concat): h1.k0, h1.k1, …, h2.k0, …"""
    return tuple(f"h{h + 1}.k{j}" for h in range(num_heads) for j in range(d_k))


def positions(tokens: Sequence[str], start: int = 0) -> tuple[str, ...]:
    """Rows that belong to positions, not to the words there: "pos 2 · is" (from ``start``)."""
    return tuple(f"pos {k} · {token}" for k, token in enumerate(tokens, start))


# What a matrix is, recorded with it, so that no reader has to guess from its name.
WEIGHT = "weight"  # a learned parameter (or a view of one: W_Q1 is a block of W_QKV)
INPUT = "input"  # an earlier stage's output, read here (its source is in Stage.sources)
ACTIVATION = "activation"  # computed in this stage
ATTENTION = "attention"  # attention weights A_h: each row sums to 1
PROBABILITIES = "probabilities"  # next-token probabilities: each row sums to 1
MASK = "mask"  # the causal mask M: a constant of 0 and −∞
CONSTANT = "constant"  # fixed numbers that are not learned: the sinusoidal PE


def matrix_name(base: str, head: int | None = None) -> str:
    """The name a matrix is shown and exported under: its base, numbered by its head when it has
    one (Q and head 2 -> Q2; S+M and head 1 -> S1+M, the masked scores of head 1)."""
    if head is None:
        return base
    stem, plus, rest = base.partition("+")
    return f"{stem}{head}{plus}{rest}"


class Matrix(NamedTuple):
    """A 2-D array with a label for every row and column, its role in the stage, and what it is:
    its base name (``Q``), the head it belongs to (``2``; None for the whole stage's matrices) and,
    for a view of a parameter, the parameter it slices (``W_Q2`` is a block of ``W_QKV``). Readers
    go by these, never by parsing the name back."""

    values: np.ndarray
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    role: str = ACTIVATION
    base: str = ""  # "" when made outside a stage (a difference, a gradient): the name is the base
    head: int | None = None
    param: str | None = None  # the parameter (local name) this weight is a view of; None: itself

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]

    @property
    def is_weight(self) -> bool:
        return self.role == WEIGHT

    @property
    def is_constant(self) -> bool:
        """The mask or the sinusoids: fixed numbers, so their gradient is never shown or exported."""
        return self.role in (MASK, CONSTANT)

    @property
    def is_whole(self) -> bool:
        """A constant of whole numbers (the experts a router chose, T5's buckets): ids and counts,
        shown without decimals ("2", not "2.00")."""
        return self.role == CONSTANT and bool(np.all(np.mod(self.values, 1) == 0))

    # Its name, shape and role, not the megabytes of an array's repr. In Jupyter the report's shaded
    # table is shown instead: the package registers the views for that (``transformer_walkthrough``'s
    # ``__init__``); the model does not import them.
    def __repr__(self) -> str:
        name = matrix_name(self.base, self.head) if self.base else "matrix"
        r, c = self.shape
        return f"<Matrix {name} {r}×{c} {self.role}: rows {_few(self.rows)}; cols {_few(self.cols)}>"


def _few(labels: Sequence[str], n: int = 4) -> str:
    """The first labels and the last, around "…": a repr names the rows, it does not list 50,257."""
    shown = [*labels[: n - 1], "…", labels[-1]] if len(labels) > n else list(labels)
    return ", ".join(shorten(label, 24) for label in shown)


@dataclass
class Stage:
    """One step of the forward pass and every matrix it used or made, in computing order.

    ``sources`` says which earlier stage's output each input matrix is (``X`` <- the stage id),
    ``params`` which parameter each weight it used is: the backward pass, ``verify`` and
    ``explain`` walk that graph instead of wiring Figure 1 again.
    """

    id: str
    kind: str
    title: str
    explanation: str
    formula: str
    matrices: dict[str, Matrix] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # input name -> the stage it came from
    params: dict[str, Ref] = field(default_factory=dict)  # local parameter name -> the parameter
    output: str = "output"  # the matrix that the stage hands on
    # What the forward kept for its backward (never shown or exported): a NamedTuple its kind
    # declares beside it (``kinds.embedding.EmbeddingCache``, ``functional.FeedForward``), read back
    # as that type by ``kinds.base.cache_of``.
    cache: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    # Where each input will come from, as the walk of Figure 1 says (``architecture.Place.inputs``):
    # ``input`` notes it in ``sources`` when the stage records that input.
    declared: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The trace it belongs to, weakly (a cycle would wait for the garbage collector): shown alone
    # in a notebook, a stage draws its place in Figure 1 and typesets its formula from it.
    owner: Any = field(default=None, repr=False, compare=False)
    # Whether its matrices are kept (``Keep``): a stage the policy drops records its sources and
    # the name of its output, nothing else, and its kind may skip the work only shown.
    records: bool = field(default=True, repr=False, compare=False)
    # The one query head whose matrices an attention stage records (``Keep.head``, ``--head``); the
    # others' outputs are computed without their scores. None: every head's.
    only_head: int | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        first = itertools.islice(self.matrices.items(), 8)
        shapes = ", ".join(f"{name} {m.shape[0]}×{m.shape[1]}" for name, m in first)
        more = f", … ({len(self.matrices)} matrices)" if len(self.matrices) > 8 else ""
        return f"<Stage {self.id} ({self.kind}): {shapes}{more}>"

    def rec(
        self, base: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str], role: str = ACTIVATION,
        *, head: int | None = None, param: str | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Record ``values`` as matrix ``base`` (of ``head``, named ``matrix_name(base, head)``) and
        return it unchanged; a 1-D array is one row."""
        name = matrix_name(base, head)
        if values.ndim == 1:
            values = values.reshape(1, -1)
        if values.shape != (len(rows), len(cols)):
            raise ValueError(f"{self.id}/{name}: shape {values.shape} but {len(rows)}×{len(cols)} labels")
        if self.records:
            self.matrices[name] = Matrix(values, tuple(rows), tuple(cols), role, base, head, param)
        return values

    def input(self, name: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> np.ndarray:
        """Record an input and the earlier stage whose output it is (as the walk declared it)."""
        if name in self.declared:
            self.sources[name] = self.declared[name]
        return self.rec(name, values, rows, cols, INPUT)

    def out(
        self, name: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str], role: str = ACTIVATION
    ) -> np.ndarray:
        """Record the stage's output: what the next stages read, and what they name as their source."""
        self.output = name
        return self.rec(name, values, rows, cols, role)

    def weight(
        self, base: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str],
        *, head: int | None = None, param: str | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Record a parameter the stage used, or (``param``) the block of one that ``head`` reads."""
        return self.rec(base, values, rows, cols, WEIGHT, head=head, param=param)

    def of(self, base: str, head: int | None = None) -> np.ndarray:
        """The values of matrix ``base`` of ``head``: ``stage.of("K", 2)`` is head 2's keys."""
        return self[matrix_name(base, head)]

    def has(self, base: str, head: int | None = None) -> bool:
        return matrix_name(base, head) in self.matrices

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


def token_labels(pieces: Sequence[str]) -> tuple[str, ...]:
    """Row and column labels of a sequence: each token's piece, ``piece@position`` where it repeats.

    "▁the ▁cat ▁saw ▁the" -> ▁the@0, ▁cat, ▁saw, ▁the@3: every label names one row, so that a
    cell can be asked for by label (``explain --cell ▁the@3,▁cat``). A piece that is nothing but
    space marks (``▁``, GPT-2's ``Ġ``) is labelled ``▁ (9)`` instead: ``▁@9`` reads as a token "@9".
    """
    counts = collections.Counter(pieces)

    def named(i: int, p: str) -> str:
        if counts[p] == 1:
            return p
        return f"{p} ({i})" if is_space_mark(p) else f"{p}@{i}"

    return tuple(named(i, p) for i, p in enumerate(pieces))


SPACE_MARKS = frozenset("▁Ġ")  # SentencePiece's and byte-level BPE's visible space


def is_space_mark(piece: str) -> bool:
    """Whether ``piece`` is only a tokenizer's visible space (``▁``, ``ĠĠ``), no letter of its own."""
    return piece != "" and set(piece) <= SPACE_MARKS


def weights_origin(seed: int, source: str | None, checkpoint: bool = False) -> str:
    """Where the weights' numbers come from, said in every header: random weights predict nothing,
    and a learner holding the article's "sleeping 0.42" must not think the tool is broken.

    Only where they come from, never whether they were trained: a checkpoint may be a random one
    (the tests' tiny checkpoints are), and ``train --save-initial`` writes the untrained weights."""
    if source is None:
        return f"random (seed {seed}), untrained — `walkthrough train` teaches it"
    return f"from the {'checkpoint' if checkpoint else 'file'} {source}"


TOP_K = 3  # next-word candidates kept per position


def top_k(p: np.ndarray, k: int) -> np.ndarray:  # (n,) -> (min(k, n),)
    """The ids of the k largest entries of p, largest first, ties in id order (argmax's choice first).

    ``np.argpartition`` alone may keep any of the ids tied at the k-th place (a uniform row's top 3
    could be 5, 7, 9): so everything above the k-th value is kept, and then the lowest tied ids.
    NaN counts as the smallest, as in ``np.sort``.
    """
    k = min(k, p.size)
    q = -p
    kth = np.partition(q, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: the NaNs follow them in id order
        return np.argsort(q, kind="stable")[:k]
    above = np.flatnonzero(q < kth)
    best = np.concatenate([above, np.flatnonzero(q == kth)[: k - above.size]])
    return best[np.lexsort((best, q[best]))]


class Prediction(NamedTuple):
    """What the model predicts after one decoder position (or after all, for the flatten head), or
    at one blank of a fill-mask model's input."""

    position: int | None  # None for the flatten head, which predicts once from every position
    after: str  # the decoder input at that position (fill-mask: the blank's label, [MASK])
    expected: str | None  # the true next token (or hidden word), where the sentence has one
    top: list[tuple[str, float]]  # the most likely next tokens, most likely first

    @property
    def word(self) -> str:
        return self.top[0][0]

    @property
    def probability(self) -> float:
        return self.top[0][1]


# ---------------------------------------------------------------------------------------------
# What a trace keeps. Every command computes the same pass; what it shows decides what stays in
# memory. The policy is stated once, here, and read by the trace as it records, by the size
# estimate (``size.trace_size``) before the pass, and by the pass itself, which stops once every
# stage it keeps is recorded.
# ---------------------------------------------------------------------------------------------


Streamed = Callable[[Stage], None]  # what receives each stage a streamed pass completes


@dataclass(frozen=True)
class Keep:
    """Which stages of a pass a command reads, and whether it keeps them or takes each in turn.

    ``choose`` picks the ids read from the model's config, before any work (``Keep.stages`` picks
    them as ``--stage`` and ``--layer`` name them; the attention view picks the stages with heads,
    the lens each layer's output): None reads every stage. Without ``stream`` the trace keeps
    them; with it, ``stream`` receives each the moment it is complete (``run`` prints it, ``export``
    writes it) and the stage is dropped after that, so that memory holds one stage at a time, not
    the pass. Either way the pass stops once the last stage chosen is complete.
    """

    choose: Callable[[ModelConfig], Iterable[str]] | None = None
    stream: Streamed | None = None
    # One query head (from 1): the attention stages read record its matrices alone, and compute
    # the others' outputs without holding their scores (``--head``). None: every head's.
    head: int | None = None

    @classmethod
    def stages(cls, names: Sequence[str] = (), layer: int | None = None, head: int | None = None) -> Keep:
        """The stages named by kind or id (all if none: no choice), of ``layer`` when given, as
        ``Trace.select`` chooses them, their attention of ``head`` alone when given: an unknown
        name, layer or head is refused before the pass."""
        if not names and layer is None:
            return cls(head=head)
        return cls(
            lambda m: choose(
                [(p.id, p.kind, p.layer) for p in walk(m)], [kind_named(n, m) for n in names], layer
            ),
            head=head,
        )

    @property
    def everything(self) -> bool:
        """Whether every stage stays whole: no choice made, nothing streamed, every head."""
        return self.choose is None and self.stream is None and self.head is None

    def ids(self, m: ModelConfig) -> frozenset[str] | None:
        """The ids of the stages read (``choose`` checks them against the walk of Figure 1, and
        ``head`` against the model's heads), kept or streamed; None: every stage."""
        chosen = None if self.choose is None else frozenset(self.choose(m))
        if self.head is not None:
            if not 1 <= self.head <= m.num_heads:
                raise StageError(f"--head: this model has heads 1 to {m.num_heads}, got {self.head}")
            attention = {p.id for p in walk(m) if p.sublayer is not None and p.sublayer.keys is not None}
            if chosen is not None and not chosen & attention:
                raise StageError(f"--head {self.head}: none of the stages chosen has heads (attention has)")
        return chosen


EVERYTHING = Keep()


class NothingMoreKept(Exception):  # noqa: N818 — no error: the end of what the pass is asked for
    """Raised as a stage opens once every stage the trace keeps is recorded: the layers above
    would be computed for nothing (``transformer.run_forward`` stops the pass there)."""


def choose(
    stages: Sequence[tuple[str, str, int | None]], names: Sequence[str], layer: int | None
) -> list[str]:
    """The ids among ``stages`` (id, kind, layer) named by kind or exact id, in order; all if
    no name; only those of ``layer`` when given. Raises StageError for an unknown name or a
    choice that is empty."""
    ids = [sid for sid, _, _ in stages]
    kinds = {kind for _, kind, _ in stages}
    for name in names:
        if name not in kinds and name not in ids:
            raise StageError(unknown_stage(name, stages))
    chosen = [(sid, at) for sid, kind, at in stages if not names or kind in names or sid in names]
    if layer is None:
        return [sid for sid, _ in chosen]
    layers = sorted({at for _, _, at in stages if at is not None})
    kept = [sid for sid, at in chosen if at == layer]
    if not kept:
        what = f"stage {', '.join(names)}" if names else "the model"
        raise StageError(
            f"--layer {layer}: {what} has no stage in layer {layer} "
            f"(layers: {', '.join(map(str, layers))}; embeddings, final norms and output have none)"
        )
    return kept


def kind_named(name: str, m: ModelConfig) -> str:
    """A --stage name as the kind it names: ``rms-norm``, as `stages` lists an RMSNorm's norm
    stage, is the kind ``layer-norm`` (the stage a LayerNorm or an RMSNorm takes, as the config
    says); any other name is itself."""
    return "layer-norm" if name == "rms-norm" and m.norm != "layernorm" else name


def unknown_stage(name: str, stages: Sequence[tuple[str, str, int | None]]) -> str:
    """What an unknown --stage is told: the nearest name, every kind, every id."""
    kinds = list(dict.fromkeys(kind for _, kind, _ in stages))
    ids = [sid for sid, _, _ in stages]
    close = close_matches(name, kinds + ids)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"unknown stage {name!r}; {hint}valid kinds: {', '.join(kinds)}; or a stage id: {', '.join(ids)}"


def stage_title(stage_id: str, title: str) -> str:
    """A stage's title as shown, its place first: "Decoder layer 0 · masked self-attention"."""
    side, *layer, _ = stage_id.split(".")
    where = f"{side.capitalize()} layer {layer[0]}" if layer else side.capitalize()
    return f"{where} · {title}"


@dataclass
class Trace:
    """Every stage of one forward pass, in order, with the config and tokens that produced it.

    What it keeps of each stage is its ``keep`` policy's to say (``Keep``): every matrix of every
    stage by default. A stage the policy drops stays in ``stages`` as its id, kind, sources and
    output's name (the map of Figure 1 and "where from" read those), with no matrix.
    """

    config: Config
    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    stages: dict[str, Stage] = field(default_factory=dict)
    weights_source: str | None = None  # the file the weights came from; None: drawn from the seed
    weights_checkpoint: bool = False  # whether weights_source is a checkpoint (not a .npz file)
    source_ids: tuple[int, ...] = ()  # the embedding rows the encoder read, one per source token
    target_ids: tuple[int, ...] = ()  # the embedding rows the decoder read, one per target token
    segment_ids: tuple[int, ...] = ()  # each encoder token's segment (BERT's token types); (): all 0
    answer_ids: tuple[int, ...] = ()  # fill-mask: each encoder row's hidden word, -1 where none; (): unknown
    keep: Keep = field(default=EVERYTHING, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._chosen = self.keep.ids(self.config.model)  # None: every stage
        self._waiting = set(self._chosen or ())  # the stages chosen and not yet complete
        self._open: Stage | None = None  # the stage being recorded: complete when the next opens

    @property
    def weights_origin(self) -> str:
        return weights_origin(self.config.seed, self.weights_source, self.weights_checkpoint)

    def stage(
        self,
        stage_id: str,
        kind: str,
        title: str | None = None,
        explanation: str = "",
        formula: Any = "",
        inputs: Sequence[tuple[str, str]] = (),
    ) -> Stage:
        """Open a new stage (``Kind.open`` passes what its kind says about it, and the stages its
        inputs come from)."""
        self.finish()
        if self._chosen is not None and not self._waiting:
            raise NothingMoreKept(stage_id)
        records = self._chosen is None or stage_id in self._chosen
        title = stage_title(stage_id, title or kind)
        new = Stage(stage_id, kind, title, explanation, formula, declared=dict(inputs),
                    owner=weakref.ref(self), records=records,
                    only_head=self.keep.head if records else None)  # fmt: skip
        self.stages[stage_id] = new
        self._open = new
        return new

    def finish(self) -> None:
        """The stage being recorded is complete: kept, or handed to the policy's stream and then
        dropped (the prediction read from the probabilities before they go); a stage not chosen
        recorded nothing and keeps no cache."""
        done, self._open = self._open, None
        if done is None or self.keep.everything:
            return
        self._waiting.discard(done.id)
        if done.records and self.keep.stream is None:
            return
        if done.records:
            self.keep.stream(done)  # type: ignore[misc]  # not None: checked above
            if done.id == "output.probabilities":
                self.prediction  # noqa: B018 — worked out now, while the probabilities are here
        done.matrices, done.cache, done.records = {}, None, False

    @property
    def kept(self) -> frozenset[str] | None:
        """The ids of the stages whose matrices the trace keeps; None: every stage."""
        if self.keep.stream is not None:
            return frozenset()
        return self._chosen

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The decoder's pieces: its embedding rows, the output layer's columns, the predictions."""
        return self.config.vocabulary or ()

    def vocabulary_of(self, side: str) -> tuple[str, ...]:
        """The pieces of ``side``'s embedding rows (``Config.vocabulary_of``): the encoder's may be
        its own, a checkpoint's source vocabulary."""
        return self.config.vocabulary_of(side)

    def ids(self, stage_id: str) -> tuple[int, ...]:
        """The token ids of the stack that stage ``stage_id`` belongs to (its rows' embedding rows)."""
        return self.source_ids if side_of(stage_id) == ENCODER else self.target_ids

    @functools.cached_property
    def prediction(self) -> list[Prediction]:
        """The top next tokens after each decoder position, with the sentence's true next token.

        The flatten head makes one prediction from all positions at once. Worked out from the
        probabilities when first asked for: training, which never looks, does not pay for it.
        """
        probabilities = self.stages.get("output.probabilities")
        if probabilities is None or "probabilities" not in probabilities:  # dropped unread: none kept
            return []
        if self.config.model.encoder_only:
            return self._blanks()
        probabilities = self["output.probabilities"]["probabilities"]
        tokens, vocabulary = self.target_tokens, self.vocabulary
        out = []
        for i, row in enumerate(probabilities):
            best = [(vocabulary[j], float(row[j])) for j in top_k(row, TOP_K).tolist()]
            if self.config.model.output_head == "flatten":
                out.append(Prediction(None, " ".join(tokens), None, best))
            else:
                following = self.target_ids[i + 1] if i + 1 < len(self.target_ids) else None
                expected = None if following is None else vocabulary[following]
                out.append(Prediction(i, tokens[i], expected, best))
        return out

    def _blanks(self) -> list[Prediction]:
        """A fill-mask model's prediction: at each blank (a row whose token is the mask token), the
        most likely words, with the word the sentence hid there when it is known."""
        probabilities = self["output.probabilities"]["probabilities"]
        vocabulary, mask = self.vocabulary, self.config.mask_id
        out = []
        for i, token in enumerate(self.source_ids):
            if token != mask:
                continue
            row = probabilities[i]
            best = [(vocabulary[j], float(row[j])) for j in top_k(row, TOP_K).tolist()]
            answer = self.answer(i)
            out.append(
                Prediction(i, self.source_tokens[i], None if answer is None else vocabulary[answer], best)
            )
        return out

    def answer(self, i: int) -> int | None:
        """The word a fill-mask sentence hid at encoder row i (its id); None where none is known:
        not a blank, or a checkpoint's prompt, whose blanks hide nothing we know."""
        answer = self.answer_ids[i] if i < len(self.answer_ids) else -1
        return answer if answer >= 0 else None

    def __repr__(self) -> str:
        m = self.config.model
        sides = (("source", self.source_tokens), ("target", self.target_tokens))
        inputs = [f"{side} {shorten(' '.join(tokens), 60)!r}" for side, tokens in sides if tokens]
        weights = f"random, seed {self.config.seed}" if self.weights_source is None else self.weights_source
        return (
            f"<Trace {', '.join(inputs)}: {len(self)} stages, d_model {m.d_model}, {m.num_heads} heads, "
            f"{m.num_encoder_layers} + {m.num_decoder_layers} layers; weights: {weights}>"
        )

    def __getitem__(self, stage_id: str) -> Stage:
        try:
            return self.stages[stage_id]
        except KeyError:
            raise StageError(self._unknown(stage_id)) from None

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages.values())

    def __len__(self) -> int:
        return len(self.stages)

    def kind_said(self, stage: Stage) -> str:
        """The stage's kind as `stages` lists it: an RMSNorm's norm stage is a ``rms-norm`` (its
        kind is ``layer-norm``, the stage a LayerNorm or an RMSNorm takes, as the config says)."""
        if stage.kind == "layer-norm" and self.config.model.norm != "layernorm":
            return "rms-norm"
        return stage.kind

    def select(self, names: Sequence[str] = (), layer: int | None = None) -> list[Stage]:
        """The stages named by kind (``masked-attention``, or as `stages` says it: ``rms-norm``)
        or exact id, in order; all if none.

        ``layer`` keeps only the stages of that layer. Raises StageError for an unknown name or
        a selection that is empty.
        """
        m = self.config.model
        return [self.stages[sid] for sid in choose(self._places(), [kind_named(n, m) for n in names], layer)]

    def _places(self) -> list[tuple[str, str, int | None]]:
        return [(s.id, s.kind, s.layer) for s in self]

    def _unknown(self, name: str) -> str:
        return unknown_stage(name, self._places())


class _NullStage:
    """A stage that records nothing: ``rec`` hands back its argument, so the model runs unchanged."""

    formula = ""
    cache = None
    records = False
    only_head = None

    def __init__(self, stage_id: str, kind: str) -> None:
        self.id, self.kind, self.params = stage_id, kind, {}

    def rec(self, name: str, values: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        return values

    input = out = weight = rec


class NullTrace(Trace):
    """A trace that keeps no matrices: the forward pass at full speed and with no memory held."""

    def stage(self, stage_id: str, kind: str, *args: Any) -> Stage:
        return _NullStage(stage_id, kind)  # type: ignore[return-value]


class _LastRowStage(_NullStage):
    """A stage that records nothing but the last row of the matrices ``names``, into ``kept``."""

    def __init__(self, stage_id: str, kind: str, kept: dict[str, np.ndarray], names: Sequence[str]) -> None:
        super().__init__(stage_id, kind)
        self.kept, self.names = kept, names

    def rec(self, name: str, values: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        if name in self.names:
            self.kept[name] = values[-1].copy()
        return values

    input = out = weight = rec


@dataclass
class LastRows(NullTrace):
    """A trace that keeps nothing but the last row of the matrices ``names`` of each stage of kind
    ``kind``, in ``rows`` under each such stage's id: what a generation step shows of
    the token it read last (the experts it went to) at the speed of an unrecorded pass."""

    kind: str = ""
    names: tuple[str, ...] = ()
    rows: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def stage(self, stage_id: str, kind: str, *args: Any) -> Stage:
        if kind != self.kind:
            return super().stage(stage_id, kind, *args)
        kept = self.rows[stage_id] = {}
        return _LastRowStage(stage_id, kind, kept, self.names)  # type: ignore[return-value]
