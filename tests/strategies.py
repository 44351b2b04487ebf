"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from transformer_walkthrough.config import Config, ModelConfig

WORDS = ["the", "cat", "dog", "is", "sat", "on", "mat", "sleeping", "very", "comfortably"]


@st.composite
def configs(
    draw: st.DrawFn, max_layers: int = 2, heads: tuple[str, ...] = ("per-position", "flatten")
) -> Config:
    """Any valid config: 1-4 heads of 1-4 dims, any d_ff, 1-``max_layers`` layers, a random sentence."""
    num_heads, d_k = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=9))
    model = ModelConfig(
        d_model=num_heads * d_k,
        num_heads=num_heads,
        d_ff=draw(st.integers(1, 12)),
        num_encoder_layers=draw(st.integers(1, max_layers)),
        num_decoder_layers=draw(st.integers(1, max_layers)),
        output_head=draw(st.sampled_from(heads)),
        scale_embeddings=draw(st.booleans()),
    )
    return Config(
        sentence=" ".join(words),
        encoder_words=draw(st.integers(1, len(words) - 1)),
        seed=draw(st.integers(0, 2**32 - 1)),
        model=model,
    )
