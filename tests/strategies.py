"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from transformer_walkthrough.config import (
    ACTIVATIONS,
    ATTENTION_BIASES,
    FEED_FORWARDS,
    FINAL_NORMS,
    LAYER_TYPES,
    NORM_PLACEMENTS,
    NORMS,
    OUTPUT_HEADS,
    POSITIONAL_ENCODINGS,
    QK_NORMS,
    ROPE_SCALINGS,
    ROTATED_POSITIONS,
    SCORE_SCALES,
    TORCH_LAYERS,
    Config,
    ModelConfig,
)
from transformer_walkthrough.model.weights import Weights

WORDS = ["the", "cat", "dog", "is", "sat", "on", "mat", "sleeping", "very", "comfortably"]


@st.composite
def configs(
    draw: st.DrawFn,
    max_layers: int = 2,
    heads: tuple[str, ...] = tuple(OUTPUT_HEADS),
    conventions: bool = False,
    torch: bool = False,
) -> Config:
    """Any valid config: 1-4 heads of 1-4 dims, any d_ff, 1-``max_layers`` layers, a random sentence.

    With ``conventions``, any combination of the conventions too: pre- or post-norm, final norms,
    every norm, every activation, both feed-forwards with or without biases, every positional
    encoding, tied embeddings, attention biases of each kind and output biases, shared key/value
    heads, score scales, soft caps, sliding and full layers with their rotary bases, decoder-only,
    encoder-only (fill-mask, with BERT's segments, embedding norm, transform and position offset,
    and any set of blanks); with ``torch``, only the values PyTorch's layers
    have (``TORCH_LAYERS``).
    """

    def values(key: str, every: tuple) -> list:
        return [v for v in every if not torch or v in TORCH_LAYERS.get(key, every)]

    positions = (
        draw(st.sampled_from(values("positional_encoding", tuple(POSITIONAL_ENCODINGS))))
        if conventions
        else None
    )
    num_heads = draw(st.integers(1, 4))
    d_k = draw(st.sampled_from([2, 4]) if positions in ROTATED_POSITIONS else st.integers(1, 4))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=9))
    head = draw(st.sampled_from(heads))
    more = {}
    decoder_only = encoder_only = False
    blanks: tuple[int, ...] = ()
    if conventions:
        stacks = draw(st.sampled_from(["both", "decoder-only"] + ["encoder-only"] * (head == "per-position")))
        stacks = stacks if "fill-mask" in values("task", ("next-token", "fill-mask")) else "both"
        decoder_only, encoder_only = stacks == "decoder-only", stacks == "encoder-only"
        more = dict(
            norm_placement=draw(st.sampled_from(values("norm_placement", tuple(NORM_PLACEMENTS)))),
            final_norm=draw(st.sampled_from(FINAL_NORMS)),
            norm=draw(st.sampled_from(values("norm", tuple(NORMS)))),
            activation=draw(st.sampled_from(list(ACTIVATIONS))),
            feed_forward=draw(st.sampled_from(values("feed_forward", tuple(FEED_FORWARDS)))),
            ffn_bias=draw(st.sampled_from(values("ffn_bias", (True, False)))),
            positional_encoding=positions,
            max_positions=draw(st.integers(len(words) + 2, 16)),
            tie_embeddings=head == "per-position" and draw(st.booleans()),
            attention_bias=draw(st.sampled_from(values("attention_bias", ATTENTION_BIASES))),
            qk_norm=draw(st.sampled_from(values("qk_norm", QK_NORMS))),
            score_scale=draw(st.sampled_from(values("score_scale", (*SCORE_SCALES, 3.0)))),
            attention_softcap=draw(st.sampled_from(values("attention_softcap", (None, 0.5, 4.0)))),
            logit_softcap=draw(st.sampled_from(values("logit_softcap", (None, 0.5, 4.0)))),
            num_kv_heads=draw(st.sampled_from(
                values("num_kv_heads", (None, *(g for g in range(1, num_heads + 1) if num_heads % g == 0))))),
            output_bias=draw(st.booleans()),
            sliding_window=draw(st.sampled_from(values("sliding_window", (None, 1, 2, 3)))),
        )  # fmt: skip
        more["scale_tied_output"] = more["tie_embeddings"] and draw(st.sampled_from(
            values("scale_tied_output", (False, True))))  # fmt: skip
        if encoder_only:  # BERT's switches, and the blanks it fills
            more |= dict(
                task="fill-mask",
                segments=draw(st.integers(0, 2)),
                embedding_norm=draw(st.booleans()),
                output_transform=draw(st.booleans()),
                position_offset=draw(st.integers(0, 2)) if positions == "learned" else 0,
            )
            more["max_positions"] += more["position_offset"] + 2  # [CLS] and [SEP]
            chosen = draw(st.sets(st.integers(0, len(words) - 1), min_size=1, max_size=len(words)))
            blanks = tuple(sorted(chosen))
        if positions == "relative":  # few buckets and a short reach: every branch on a short sentence
            buckets = draw(st.integers(4, 9))
            more |= dict(
                relative_buckets=buckets,
                relative_max_distance=draw(st.integers(buckets // 2 + 1, 9)),
                attention_softcap=None,  # the config refuses both: no model caps biased scores
            )
        if positions in ROTATED_POSITIONS:
            more |= dict(
                rope_scaling=draw(st.sampled_from(list(ROPE_SCALINGS))),
                rope_factor=draw(st.sampled_from([1.0, 2.0, 8.0])),
                rope_original_max_positions=draw(st.integers(2, 16)),  # small: every branch of llama3
            )
    num_decoder_layers = 0 if encoder_only else draw(st.integers(1, max_layers))
    if (
        conventions
        and num_decoder_layers
        and more.get("sliding_window")
        and None not in values("layer_types", (0,))
    ):
        pattern = st.lists(
            st.sampled_from(list(LAYER_TYPES)), min_size=num_decoder_layers, max_size=num_decoder_layers
        )
        more["layer_types"] = draw(st.none() | pattern.map(tuple))
        if more["layer_types"] and positions in ROTATED_POSITIONS:
            more["local_rope_theta"] = draw(st.sampled_from([None, 100.0]))
    own_width = conventions and draw(st.sampled_from(values("head_dim", (None, True))))
    model = ModelConfig(
        d_model=draw(st.integers(1, 8)) if own_width else num_heads * d_k,
        head_dim=d_k if own_width else None,
        num_heads=num_heads,
        d_ff=draw(st.integers(1, 12)),
        num_encoder_layers=0 if decoder_only else draw(st.integers(1, max_layers)),
        num_decoder_layers=num_decoder_layers,
        output_head=head,
        scale_embeddings=draw(st.booleans()),
        **more,
    )
    return Config(
        sentence=" ".join(words),
        encoder_words=0
        if decoder_only
        else len(words)
        if encoder_only
        else draw(st.integers(1, len(words) - 1)),
        blanks=blanks,
        seed=draw(st.integers(0, 2**32 - 1)),
        model=model,
    )


def fits_torch(config: Config) -> bool:
    """Whether PyTorch's own transformer layers have every convention of ``config`` (``TORCH_LAYERS``):
    the configs the torch reference can be built for. The others are compared with transformers'
    models (tests/test_llama_style.py) and by finite differences."""
    return all(getattr(config.model, key) in values for key, values in TORCH_LAYERS.items())


# How far a central difference of the loss may be from the true slope, whatever the machine: its
# rounding is about eps·|L|/h = 2.2e-16 · 2 / 1e-6, about 4e-10 (its truncation, h²·L'''/6, is far smaller).
SLOPE_ABS = 1e-9


def loss_slope(config: Config, w: Weights, name: str, index: tuple[int, ...], h: float = 1e-6) -> float:
    """The loss's central difference along one entry of parameter ``name``: (L(+h) − L(−h)) / 2h,
    the number backprop's gradient of that entry must equal (``w`` is restored afterwards)."""
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import run_forward

    array = w[name]
    old = array[index]
    try:
        array[index] = old + h
        up = backward(run_forward(config, w), w).loss
        array[index] = old - h
        down = backward(run_forward(config, w), w).loss
    finally:
        array[index] = old
    return (up - down) / (2 * h)
