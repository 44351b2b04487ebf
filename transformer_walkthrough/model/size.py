"""What a trace will hold, counted before the pass: the numbers of every matrix its stages record,
and how many matrices ``run`` prints.

The count walks Figure 1 (``architecture``): each stage's parameters come from its kind's specs
(``Kind.params``), its other matrices from ``recorded`` below, at the sizes of the tokens each
stack reads. The layers of a stack record matrices of the same shapes, so one layer is counted
and multiplied: a config asking for 2⁷⁰ layers is judged at once. A parameter is counted in
every stage that records it (a tied table twice: as E, and as W = Eᵀ), and so are the rotary
tables (cos and sin) of every self-attention: what ``run``, ``export`` and a notebook hold is
what is counted. ``tests/test_size.py`` holds the count equal to the matrices of every shipped
config's trace.

A table's rows labelled by their index (T's ``segment k``, a learned P's ``pos k``) are a string
each, made for it: ~80 bytes a row against 4 for each of its d_model numbers, so they are counted
too (``labelled_rows``): a toy of 40 million segments would hold 640 MB of T and 3 GB of labels.

A trace that keeps some stages only (``trace.Keep``) is counted for those; one that streams its
stages (each shown or written, then dropped) for the largest of them, the one stage it holds at once.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple

from ..config import MAX_BYTES, MAX_TABLES, tokenize
from ..errors import ConfigError
from .architecture import DECODER, ENCODER, MEMORY, Place, bottom, final_norm, head, layer, stacks
from .functional import SCORES_AT_ONCE
from .kinds import KINDS, Sizes, Spec
from .trace import EVERYTHING, Keep

if TYPE_CHECKING:
    from ..config import Config, ModelConfig

Shape = tuple[int, ...]
# The tables whose rows are labelled one by one as they are recorded, and what a label costs: a
# short str ("segment 12", "pos 7"; ~60 bytes) and its slot in the tuple of labels.
LABELLED = ("T", "P")
LABEL_BYTES = 80


class Size(NamedTuple):
    """What a trace costs before any work: the numbers it keeps, the matrices it shows."""

    numbers: int
    tables: int


class Rows(NamedTuple):
    """The rows a stage's matrices have: its queries' (its stack's tokens) and, for attention, its
    keys' (the encoder's tokens in cross-attention)."""

    queries: int
    keys: int


def recorded(place: Place, m: ModelConfig, sizes: Sizes, rows: Rows, head: int | None = None) -> list[Shape]:
    """The shapes of every matrix the stage records in a full pass: its parameters (attention's
    W_QKV and b_QKV as one block per head, as ``run`` shows them), its inputs, what it computes,
    its output; an attention stage's of one query head (and its key/value head) with ``head``."""
    n, d, v = rows.queries, m.d_model, sizes.vocab
    specs = KINDS[place.kind].params(m, sizes)
    params = [spec.shape for spec in specs.values()]
    kind = place.kind
    if kind == "embedding":  # E alone, or BERT's sum: token + segment + position
        summed = 2 + bool(m.segments) if m.sums_embeddings else 0
        return [*params, *[(n, d)] * (summed + 1)]
    if kind == "positional-encoding":  # X, PE, output
        return [*params, *[(n, d)] * 3]
    if kind in ("layer-norm", "embedding-norm", "add-norm") and m.norm == "rmsnorm-plus-one":
        params.append((d,))  # the weight as applied, 1 + gamma, beside gamma as stored
    if kind in ("layer-norm", "embedding-norm"):  # X, output
        return [*params, *[(n, d)] * 2]
    if kind == "add-norm":  # X, sublayer, sum, output
        return [*params, *[(n, d)] * 4]
    if kind == "residual":  # X, sublayer, output
        return [(n, d)] * 3
    if kind == "feed-forward":  # X, output; pre and hidden, or gate, up and hidden
        return [*params, *[(n, d)] * 2, *[(n, m.d_ff)] * (3 if m.feed_forward == "gated" else 2)]
    if kind == "experts":
        return [*params, *_experts(m, n)]
    if kind == "transform":  # X, dense, hidden, output
        return [*params, *[(n, d)] * 4]
    flat = m.output_head == "flatten"  # the output layer reads one row of every position's numbers
    if kind == "logits":  # X (and flattened, or T5's scaled), logits (and uncapped, before the soft cap)
        capped = 1 + (m.logit_softcap is not None)
        scaled = [(n, d)] if m.scale_tied_output else []
        return [*params, (n, d), *scaled, *([(1, n * d), *[(1, v)] * capped] if flat else [(n, v)] * capped)]
    if kind == "probabilities":  # logits, probabilities
        return [(1 if flat else n, v)] * 2
    assert place.sublayer is not None and place.sublayer.keys is not None, kind  # attention
    return _attention(place, m, specs, rows, head)


def _experts(m: ModelConfig, n: int) -> list[Shape]:
    """X, router_logits, router_probs, chosen, routing_weights; each expert's X, its feed-forward's
    matrices and output on the tokens routed to it; the shared expert's and its gate; the output.
    Which expert gets which token is known only after the pass, but not how many rows there are in
    all: n·k (each token goes to k experts). They are counted as if the first expert had them all and
    the others none, which holds the same numbers in as many matrices."""
    k, d, E = m.experts_per_token or 0, m.d_model, m.experts
    hidden = 3 if m.feed_forward == "gated" else 2  # gate, up, hidden; or pre, hidden
    shapes: list[Shape] = [(n, d), (n, E), (n, E), (n, k), (n, k)]
    for e in range(E):
        rows = n * k if e == 0 else 0
        shapes += [(rows, d), *[(rows, m.d_expert)] * hidden, (rows, d)]
    if m.shared_experts:
        shapes += [(n, d), *[(n, m.d_shared)] * hidden, (n, d), (n, 1)]
    return [*shapes, (n, d)]


def _attention(
    place: Place, m: ModelConfig, specs: dict[str, Spec], rows: Rows, head: int | None
) -> list[Shape]:
    n, k, d, d_k = rows.queries, rows.keys, m.d_model, m.d_k
    h, g = (m.num_heads, m.kv_heads) if head is None else (1, 1)  # the heads recorded: every one, or one
    cross = place.sublayer is not None and place.sublayer.keys == MEMORY
    causal = place.sublayer is not None and place.sublayer.causal
    rotated = m.positional_encoding == "rotary" and not cross  # rotary turns a self-attention's Q and K
    biased = m.biases_positions and not cross  # T5: buckets, and each head's B and S + B
    blocks = [(d, d_k)] * (h + 2 * g) + ([(d_k,)] * (h + 2 * g) if "b_QKV" in specs else [])
    out = [spec.shape for name, spec in specs.items() if name not in ("W_QKV", "b_QKV")]
    shapes = [*blocks, *out, (n, d), (n, m.num_heads * d_k), (n, d)]  # …, X, concat, output
    shapes += [(k, d)] if cross else []  # memory
    shapes += [(n, k)] if causal else []  # M
    shapes += [(n, d_k)] * 2 if rotated else []  # cos, sin
    shapes += [(n, k)] if biased else []  # buckets
    per_key = [(k, d_k)] * (2 + rotated + bool(m.qk_norm))  # K, V (and rot_K, norm_K)
    return shapes + (_per_query(m, rows, place) + _scored(m, rows, place)) * h + per_key * g


def _per_query(m: ModelConfig, rows: Rows, place: Place) -> list[Shape]:
    """A query head's matrices of d_k columns: Q and O (and rot_Q, norm_Q)."""
    cross = place.sublayer is not None and place.sublayer.keys == MEMORY
    rotated = m.positional_encoding == "rotary" and not cross
    return [(rows.queries, m.d_k)] * (2 + rotated + bool(m.qk_norm))


def _scored(m: ModelConfig, rows: Rows, place: Place) -> list[Shape]:
    """A query head's matrices of a column per key: S and A (and S+M, cap_S, B and S+B): what
    attention in blocks never holds whole (``functional.attention_in_blocks``)."""
    assert place.sublayer is not None
    cross = place.sublayer.keys == MEMORY
    biased = m.biases_positions and not cross
    many = 2 + place.sublayer.causal + (m.attention_softcap is not None) + 2 * biased
    return [(rows.queries, rows.keys)] * many


def _in_blocks(m: ModelConfig, place: Place, numbers: int, rows: Rows) -> int:
    """The numbers an attention stage that nothing keeps holds as it is computed, of the ``numbers``
    it would record: not every head's scores and weights, only the block of them that attention
    in blocks holds at once (``functional.SCORES_AT_ONCE``)."""
    scored = sum(math.prod(s) for s in _scored(m, rows, place)) * m.num_heads
    return numbers - scored + min(scored, SCORES_AT_ONCE)


def _kinds_of_layer(side: str, m: ModelConfig) -> list[tuple[int, int]]:
    """The stack's layers in two kinds, dense and sparse (``ModelConfig.sparse``): for each kind
    that occurs, its first layer and how many there are, counted without a loop over the layers."""
    layers = m.num_encoder_layers if side == ENCODER else m.num_decoder_layers
    if m.experts == 0:
        return [(0, layers)] if layers else []
    step = m.sparse_step
    dense_on_step = {i for i in m.dense_layers if i < layers and (i + 1) % step == 0}
    sparse = layers // step - len(dense_on_step)
    first_sparse = next((i for i in range(step - 1, layers, step) if i not in dense_on_step), None)
    first_dense = next((i for i in range(layers) if not m.sparse(i)), None)
    kinds = [(first_dense, layers - sparse), (first_sparse, sparse)]
    return [(first, count) for first, count in kinds if first is not None and count]


def trace_size(m: ModelConfig, source: int, target: int, vocabulary: int, keep: Keep = EVERYTHING) -> Size:
    """The numbers and matrices of one traced forward pass of ``source`` encoder tokens and
    ``target`` decoder tokens, with a ``vocabulary`` of that many pieces (each side's table, the
    output layer's columns), as ``keep`` keeps it: the numbers of the stages kept (of one head
    with ``keep.head``), plus the largest stage streamed (held while it is shown, then dropped);
    the tables of both."""
    chosen = keep.ids(m)
    numbers = tables = largest = 0
    sizes = _sizes(m, source, target, vocabulary)
    for place, rows, times in _places(m, source, target):
        read = times if chosen is None else _kept_times(place, m, chosen)
        if not read:
            continue
        shapes = recorded(place, m, sizes, rows, keep.head)
        stage = sum(math.prod(s) for s in shapes)
        numbers += 0 if keep.stream is not None else read * stage
        tables += read * len(shapes)
        largest = max(largest, stage)
    return Size(numbers + (largest if keep.stream is not None else 0), tables)


def largest_computed(
    m: ModelConfig, source: int, target: int, vocabulary: int, keep: Keep = EVERYTHING
) -> int:
    """The numbers of the largest stage the pass computes and does not keep before it stops
    (``trace.Keep``): its arrays are held while it is computed, then dropped (a stage kept holds
    what is counted as kept); an attention stage holds only a block of its scores at a time
    (``_in_blocks``). The pass stops after the last stage kept, so the top (the last stack's
    final norm, the output layer) counts only when one of its stages is kept."""
    chosen = keep.ids(m)
    if chosen is None:  # every stage is kept (or streamed, and counted so)
        return 0
    ends = {p.id for p in (*final_norm(stacks(m)[-1], m), *head(m))}
    whole = bool(ends & chosen)
    sizes = _sizes(m, source, target, vocabulary)
    largest = 0
    for place, rows, times in _places(m, source, target):
        if (not whole and place.id in ends) or _kept_times(place, m, chosen) == times:
            continue  # never computed, or kept in every layer
        numbers = sum(math.prod(s) for s in recorded(place, m, sizes, rows))
        if place.sublayer is not None and place.sublayer.keys is not None:
            numbers = _in_blocks(m, place, numbers, rows)
        largest = max(largest, numbers)
    return largest


def _sizes(m: ModelConfig, source: int, target: int, vocabulary: int) -> Sizes:
    """The sizes of the parameters that depend on the input: the vocabulary, the output layer's rows."""
    top = {ENCODER: source, DECODER: target}[stacks(m)[-1]]
    return Sizes(vocabulary, m.d_model * (top if m.output_head == "flatten" else 1))


def _places(m: ModelConfig, source: int, target: int) -> list[tuple[Place, Rows, int]]:
    """Each stage of the walk, the rows of its matrices, and how many times it comes (a layer's
    stages once, times the layers: every layer records the same shapes)."""
    tokens = {ENCODER: source, DECODER: target}
    top = tokens[stacks(m)[-1]]
    counted: list[tuple[Place, Rows, int]] = []
    for side in stacks(m):
        n = tokens[side]
        counted += [(p, Rows(n, n), 1) for p in (*bottom(side, m), *final_norm(side, m))]
        for first, layers in _kinds_of_layer(side, m):  # the layers of a kind record the same shapes
            for block in layer(side, first, m):
                keys = source if block.sublayer.keys == MEMORY else n
                counted += [(p, Rows(n, keys), layers) for p in block.places]
    counted += [(p, Rows(top, top), 1) for p in head(m)]
    return counted


def _kept_times(place: Place, m: ModelConfig, kept: frozenset[str]) -> int:
    """How many copies of the stage (one per layer of its kind, dense or sparse; 1 outside the
    layers) are kept: the kept ids counted, never the layers (a config may ask for 2⁷⁰ of them)."""
    if place.layer is None:
        return int(place.id in kept)
    side, _, name = place.id.split(".")
    layers = m.num_encoder_layers if side == ENCODER else m.num_decoder_layers
    sparse = m.sparse(place.layer)
    copies = [sid.split(".") for sid in kept if sid.count(".") == 2]
    return sum(
        1
        for s, i, n in copies
        if (s, n) == (side, name) and i.isdigit() and int(i) < layers and m.sparse(int(i)) == sparse
    )


def labelled_rows(m: ModelConfig) -> int:
    """The rows of the tables below each stack (``architecture.bottom``) that are labelled one by one
    (``LABELLED``): T's segments, a learned P's positions. E's rows and the output layer's columns
    are the vocabulary's own strings, an activation's rows its tokens."""
    sizes = Sizes(vocab=0, head_in=0)  # E's rows do not matter here
    return sum(
        spec.shape[0]
        for side in stacks(m)
        for place in bottom(side, m)
        for name, spec in KINDS[place.kind].params(m, sizes).items()
        if name in LABELLED
    )


# ---------------------------------------------------------------------------------------------
# What a pass beyond the trace keeps: the cached generation, the backward.
# ---------------------------------------------------------------------------------------------


class Held(NamedTuple):
    """A part of what a command keeps while it runs: what it is, how it is counted, its numbers."""

    what: str
    how: str  # the product it is counted by, in the model's own sizes
    numbers: int


def generation_kept(
    m: ModelConfig, source: int, prompt: int, new: int, vocabulary: int, compare: bool = False
) -> list[Held]:
    """What ``generate`` keeps, generating ``new`` tokens after ``prompt`` (after ``source``
    encoder tokens): the key/value cache, every layer's K and V for every position fed (the last
    token chosen is never fed); the encoder's keys and values each cross-attention projects once;
    each step's distribution (probabilities and logits) and each layer's attention row for the
    token read last (``generation.LayerStep``: step 0 keeps the prompt's last row, not its
    n × n); while the prompt is read, its largest stage; with ``compare``, one full pass's every
    stage (``generation.compare``)."""
    layers, g, h, d_k = m.num_decoder_layers, m.kv_heads, m.num_heads, m.d_k
    fed = prompt + new - 1
    parts = [
        Held(
            "the key/value cache",
            f"{layers:,} layers × 2 (K and V) × {g:,} key/value heads × {d_k:,} × {fed:,} positions",
            layers * 2 * g * d_k * fed,
        )
    ]
    if source:
        parts.append(
            Held(
                "the source's keys and values",
                f"{layers:,} layers × 2 × {g:,} key/value heads × {d_k:,} × {source:,} source tokens",
                layers * 2 * g * d_k * source,
            )
        )
    row = 2 * vocabulary + layers * h * (d_k + 2 * fed + source)  # at most: its row over every key
    parts.append(
        Held(
            "each step's distribution and attention rows",
            f"{new:,} steps × (2 × {vocabulary:,} + {layers:,} layers × {h:,} heads × "
            f"({d_k:,} + 2 × {fed:,}{f' + {source:,}' if source else ''}))",
            new * row,
        )
    )
    parts.append(
        Held("the prompt's pass", "its largest stage", largest_computed(m, source, prompt, vocabulary))
    )
    if compare:
        full = trace_size(m, source, fed, vocabulary).numbers
        parts.append(Held("--compare's full pass", f"every stage of {fed:,} tokens", full))
    return parts


def backward_kept(m: ModelConfig, source: int, target: int, vocabulary: int, parameters: int) -> list[Held]:
    """What a backward pass keeps (``backprop.backward``): every stage of the forward pass, which
    it reads top to bottom; dL/d of every one of their matrices, as many numbers again; and dL/d
    of each of the model's ``parameters`` numbers."""
    trace = trace_size(m, source, target, vocabulary).numbers
    tokens = f"{source:,} + {target:,} tokens" if source and target else f"{source + target:,} tokens"
    return [
        Held("the forward pass", f"every stage of {tokens}", trace),
        Held("its gradients", "dL/d of every matrix of every stage", trace),
        Held("the parameters' gradients", f"dL/d of {parameters:,} parameters", parameters),
    ]


def held_message(parts: list[Held], itemsize: int) -> str:
    """What is kept, part by part, and the whole: "the key/value cache, 2 layers × … = 29.0 KiB; …"."""
    return "; ".join(f"{p.what}, {p.how} = {amount(p.numbers * itemsize)}" for p in parts)


def amount(size: int) -> str:
    """A number of bytes as a reader takes it in: KiB, MiB or GiB, one decimal."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size / 2**10:,.1f} KiB"


def check_config(config: Config) -> None:
    """Refuse, before any work, a config whose trace would not fit in memory or on a screen.

    The message says what it would need and which key, set back to its default, saves the most.
    """
    model = config.model
    words = len(tokenize(config.sentence))
    # The sizes the trace's size is counted from, each under the key that sets it, and the key's default.
    sizes = {
        "model.d_model": (model.d_model, 4), "model.num_heads": (model.num_heads, 2),
        "model.d_ff": (model.d_ff, 8), "model.num_encoder_layers": (model.num_encoder_layers, 1),
        "model.num_decoder_layers": (model.num_decoder_layers, 1),
        "sentence": (max(len(s) for s, _ in config.pairs), 3),
        "sentence (decoder)": (max([len(t) for _, t in config.pairs] + [words - config.encoder_words]), 4),
        "vocabulary": (len(config.vocabulary or ()), 7),
        "model.max_positions": (model.max_positions if model.positional_encoding == "learned" else 0, 64),
        "model.segments": (model.segments, 0),
    }  # fmt: skip

    learned = model.positional_encoding == "learned"

    def cost(key: str | None = None) -> tuple[float, float]:

        values = {k: default if k == key else value for k, (value, default) in sizes.items()}
        fields = {k.removeprefix("model."): v for k, v in values.items() if k.startswith("model.")}
        if not learned:
            del fields["max_positions"]
        try:
            m = dataclasses.replace(model, **fields) if key and key.startswith("model.") else model
        except ConfigError:  # that key at its default does not fit the others: no way out
            return math.inf, math.inf
        size = trace_size(m, values["sentence"], values["sentence (decoder)"], values["vocabulary"])
        numbers = size.numbers * (8 if model.dtype == "float64" else 4)
        return numbers + labelled_rows(m) * LABEL_BYTES, size.tables

    need, tables = cost()
    if need <= MAX_BYTES and tables <= MAX_TABLES:
        return
    over = 0 if need > MAX_BYTES else 1
    key = min(sizes, key=lambda k: cost(k)[over]).removesuffix(" (decoder)")
    if need > MAX_BYTES:
        what = f"about {need / 2**30:,.1f} GiB of matrices; the limit is {MAX_BYTES / 2**30:g} GiB"
    else:
        what = f"{tables:,} matrices to show; the limit is {MAX_TABLES:,}"
    raise ConfigError(f"{key}: this model would need {what}; lower {key}")


__all__ = [
    "LABEL_BYTES", "Held", "Rows", "Size", "amount", "backward_kept", "check_config", "generation_kept",
    "held_message", "labelled_rows", "largest_computed", "recorded", "trace_size",
]  # fmt: skip
