"""What a config costs before any work: the numbers its trace would hold and the tables ``run``
would print, and the refusal of a config over either limit, naming the key that saves the most."""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .tokens import tokenize

if TYPE_CHECKING:
    from .sentence import Config


class Size(typing.NamedTuple):
    """What a config costs before any work: the numbers its trace holds, the tables ``run`` prints."""

    numbers: int
    tables: int


MAX_BYTES = 1 << 31  # 2 GiB of matrices in the trace: the paper's base model (d_model 512, 6+6 layers) fits
# Matrices printed by `run`: the base model prints about 1,600, SmolLM2-135M about 3,900, Llama 3.2 1B
# about 6,000, Mistral 7B (whose weights pass the memory budget only on a large machine) 12,500.
MAX_TABLES = 20_000


def estimate_size(
    d_model: int, num_heads: int, d_ff: int, encoder_layers: int, decoder_layers: int,
    source: int, target: int, vocabulary: int, positions: int = 0, flatten: bool = False,
    gated: bool = False, d_k: int | None = None,
) -> Size:  # fmt: skip
    """Numbers and tables of one forward trace, counted from the sizes alone (an upper bound, roughly).

    ``source`` and ``target`` are the encoder's and the decoder's token counts; ``positions`` the
    rows of a learned position table, one per stack (0 for sinusoids); ``gated`` a gated
    feed-forward (a third weight and two more d_ff-wide matrices). Every stage records its input,
    its weights and its intermediates, so this is the sum of their areas.
    """
    d, h, n, m, v = d_model, num_heads, source, target, vocabulary
    d_k = max(d // max(h, 1), 1) if d_k is None else d_k  # a head's width: head_dim when given

    def attention(queries: int, keys: int, masked: bool) -> Size:
        weights, rows = 3 * d * d_k, (2 * queries + 2 * keys) * d_k  # (an upper bound under GQA)
        per_head = weights + rows + (2 + 2 * masked) * queries * keys
        numbers = queries * d + keys * d * (queries != keys) + h * per_head + 2 * queries * d + d * d + 4 * d
        return Size(numbers, h * (9 + 2 * masked) + 4)

    def feed_forward(rows: int) -> Size:
        if gated:  # X, W_gate, b_gate, gate, W_up, b_up, up, hidden, W_down, b_down, output
            return Size(2 * rows * d + 3 * d * d_ff + 3 * rows * d_ff + 2 * d_ff + d, 11)
        return Size(2 * rows * d + 2 * d * d_ff + rows * d_ff + d_ff + d, 7)

    def add_norm(rows: int) -> Size:
        return Size(4 * rows * d + 2 * d, 6)

    def layers(count: int, parts: list[Size]) -> Size:
        return Size(count * sum(p.numbers for p in parts), count * sum(p.tables for p in parts))

    head_in = m * d if flatten else d
    # A decoder-only model (no encoder layers) has no encoder stack and no cross-attention.
    encoder = [Size(v * d + n * d, 2), Size(3 * n * d, 3)] if encoder_layers else []
    cross = [attention(m, n, False), add_norm(m)] if encoder_layers else []
    parts = [
        *encoder, Size(v * d + m * d, 2), Size(3 * m * d, 3),
        layers(encoder_layers, [attention(n, n, False), add_norm(n), feed_forward(n), add_norm(n)]),
        layers(decoder_layers, [attention(m, m, True), add_norm(m), *cross, feed_forward(m), add_norm(m)]),
        Size(head_in * v + v + 3 * m * v + m * d, 5),
        Size((1 + (encoder_layers > 0)) * positions * d, (1 + (encoder_layers > 0)) * (positions > 0)),
    ]  # fmt: skip
    return Size(sum(p.numbers for p in parts), sum(p.tables for p in parts))


def check_size(config: Config) -> None:
    """Refuse, before any work, a config whose trace would not fit in memory or on a screen.

    The message says what it would need and which key, set back to its default, saves the most.
    """
    model = config.model
    words = len(tokenize(config.sentence))
    # The arguments of estimate_size, each under the key that sets it, and the key's default.
    sizes = {
        "model.d_model": (model.d_model, 4), "model.num_heads": (model.num_heads, 2),
        "model.d_ff": (model.d_ff, 8), "model.num_encoder_layers": (model.num_encoder_layers, 1),
        "model.num_decoder_layers": (model.num_decoder_layers, 1),
        "sentence": (max(len(s) for s, _ in config.pairs), 3),
        "sentence (decoder)": (max([len(t) for _, t in config.pairs] + [words - config.encoder_words]), 4),
        "vocabulary": (len(config.vocabulary or ()), 7),
        "model.max_positions": (model.max_positions if model.positional_encoding == "learned" else 0, 64),
    }  # fmt: skip

    gated = model.feed_forward == "gated"  # a third weight and two more d_ff-wide matrices per layer

    def cost(key: str | None = None) -> tuple[int, int]:
        values = [default if k == key else value for k, (value, default) in sizes.items()]
        size = estimate_size(*values, flatten=model.output_head == "flatten", gated=gated, d_k=model.head_dim)
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
