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
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple

from ..config import MAX_BYTES, MAX_TABLES, tokenize
from ..errors import ConfigError
from .architecture import DECODER, ENCODER, MEMORY, Place, bottom, final_norm, head, layer, stacks
from .kinds import KINDS, Sizes, Spec

if TYPE_CHECKING:
    from ..config import Config, ModelConfig

Shape = tuple[int, ...]


class Size(NamedTuple):
    """What a trace costs before any work: the numbers it holds, the matrices ``run`` prints."""

    numbers: int
    tables: int


class Rows(NamedTuple):
    """The rows a stage's matrices have: its queries' (its stack's tokens) and, for attention, its
    keys' (the encoder's tokens in cross-attention)."""

    queries: int
    keys: int


def recorded(place: Place, m: ModelConfig, sizes: Sizes, rows: Rows) -> list[Shape]:
    """The shapes of every matrix the stage records in a full pass: its parameters (attention's
    W_QKV and b_QKV as one block per head, as ``run`` shows them), its inputs, what it computes,
    its output."""
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
    if kind == "transform":  # X, dense, hidden, output
        return [*params, *[(n, d)] * 4]
    flat = m.output_head == "flatten"  # the output layer reads one row of every position's numbers
    if kind == "logits":  # X (and flattened), logits
        return [*params, (n, d), *([(1, n * d), (1, v)] if flat else [(n, v)])]
    if kind == "probabilities":  # logits, probabilities
        return [(1 if flat else n, v)] * 2
    assert place.sublayer is not None and place.sublayer.keys is not None, kind  # attention
    return _attention(place, m, specs, rows)


def _attention(place: Place, m: ModelConfig, specs: dict[str, Spec], rows: Rows) -> list[Shape]:
    n, k, d, d_k = rows.queries, rows.keys, m.d_model, m.d_k
    h, g = m.num_heads, m.kv_heads
    cross = place.sublayer is not None and place.sublayer.keys == MEMORY
    causal = place.sublayer is not None and place.sublayer.causal
    rotated = not m.adds_positions and not cross  # rotary turns a self-attention's Q and K
    blocks = [(d, d_k)] * (h + 2 * g) + ([(d_k,)] * (h + 2 * g) if "b_QKV" in specs else [])
    out = [spec.shape for name, spec in specs.items() if name not in ("W_QKV", "b_QKV")]
    shapes = [*blocks, *out, (n, d), (n, h * d_k), (n, d)]  # …, X, concat, output
    shapes += [(k, d)] if cross else []  # memory
    shapes += [(n, k)] if causal else []  # M
    shapes += [(n, d_k)] * 2 if rotated else []  # cos, sin
    per_query = [(n, d_k), (n, k), (n, k), (n, d_k)] + [(n, k)] * causal + [(n, d_k)] * rotated  # Q S A O
    per_key = [(k, d_k)] * (2 + rotated)  # K, V (and rot_K)
    return shapes + per_query * h + per_key * g


def trace_size(m: ModelConfig, source: int, target: int, vocabulary: int) -> Size:
    """The numbers and matrices of one traced forward pass of ``source`` encoder tokens and
    ``target`` decoder tokens, with a ``vocabulary`` of that many pieces (each side's table, the
    output layer's columns)."""
    tokens = {ENCODER: source, DECODER: target}
    top = tokens[stacks(m)[-1]]
    sizes = Sizes(vocabulary, m.d_model * (top if m.output_head == "flatten" else 1))
    counted: list[tuple[Place, Rows, int]] = []  # each stage, its rows, and how many times it comes
    for side in stacks(m):
        n = tokens[side]
        counted += [(p, Rows(n, n), 1) for p in (*bottom(side, m), *final_norm(side, m))]
        layers = m.num_encoder_layers if side == ENCODER else m.num_decoder_layers
        for block in layer(side, 0, m):  # every layer records the same shapes
            keys = source if block.sublayer.keys == MEMORY else n
            counted += [(p, Rows(n, keys), layers) for p in block.places]
    counted += [(p, Rows(top, top), 1) for p in head(m)]
    numbers = tables = 0
    for place, rows, times in counted:
        shapes = recorded(place, m, sizes, rows)
        numbers += times * sum(math.prod(s) for s in shapes)
        tables += times * len(shapes)
    return Size(numbers, tables)


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
        return size.numbers * (8 if model.dtype == "float64" else 4), size.tables

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


__all__ = ["Rows", "Size", "check_config", "recorded", "trace_size"]
