"""A T5 or Flan-T5 checkpoint converted to this project's parameter names and layout.

T5 (Raffel et al., 2020) is the paper's encoder–decoder with its positions moved into attention:
no positional encoding is added to the embeddings; instead each head adds a learned bias to its
scores, read from a table by the bucket of the distance key − query (``positional_encoding:
relative``), the table kept by the first layer of each stack only (``relative_attention_bias``)
and shared by the others. The scores are not divided by √d_k (``score_scale: none``); every norm
is an RMSNorm before its sublayer (pre-norm, no mean, no bias), with one more atop each stack; no
projection has a bias. The feed-forward is ReLU (``feed_forward_proj: relu``, T5) or gated GELU
(``gated-gelu``, T5 v1.1 and Flan-T5: ``act(X·wi_0) ⊙ X·wi_1``, GELU's tanh form). One table
``shared`` embeds both stacks' tokens; T5 ties the output layer to it and scales the decoder's rows
by d_model^-0.5 first (``scale_tied_output``), Flan-T5 has an output layer of its own
(``lm_head``, ``tie_word_embeddings: false``) and no scaling.

Weights here act on the right (``y = x @ W``), so every ``nn.Linear.weight`` is transposed; q, k, v
sit side by side in one ``W_QKV = [W_Q | W_K | W_V]`` of num_heads · d_kv columns each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model.architecture import DECODER, ENCODER
from .family import Block, Family, Param, Tensor


def gated(m: Mapping[str, Any]) -> bool:
    """Whether the feed-forward is gated (``gated-gelu``: wi_0 and wi_1), or one wi (``relu``)."""
    return m["feed_forward"] == "gated"


def standard(m: Mapping[str, Any]) -> bool:
    return not gated(m)


def _attention(stage: str, module: str) -> tuple[Param, ...]:
    """An attention's rows: q, k, v side by side as W_QKV, o as W_O (no biases)."""
    qkv = (Tensor(f"{module}.{x}.weight", "inner", "d") for x in "qkv")
    return (
        Param(f"{stage}/W_QKV", *qkv, transposed=True),
        Param(f"{stage}/W_O", Tensor(f"{module}.o.weight", "d", "inner"), transposed=True),
    )


def _norm(stage: str, sublayer: int) -> Param:
    """The RMSNorm before sublayer k: its weight as ``gamma``."""
    return Param(f"{stage}/gamma", Tensor(f"layer.{sublayer}.layer_norm.weight", "d"))


def _feed_forward(sublayer: int) -> tuple[Param, ...]:
    """ReLU's wi and wo (T5), or gated GELU's wi_0 (gate), wi_1 (up) and wo (T5 v1.1, Flan-T5)."""
    ff = f"layer.{sublayer}.DenseReluDense"
    return (
        Param("feed-forward/W_1", Tensor(f"{ff}.wi.weight", "ff", "d"), transposed=True, when=standard),
        Param("feed-forward/W_2", Tensor(f"{ff}.wo.weight", "d", "ff"), transposed=True, when=standard),
        Param("feed-forward/W_gate", Tensor(f"{ff}.wi_0.weight", "ff", "d"), transposed=True, when=gated),
        Param("feed-forward/W_up", Tensor(f"{ff}.wi_1.weight", "ff", "d"), transposed=True, when=gated),
        Param("feed-forward/W_down", Tensor(f"{ff}.wo.weight", "d", "ff"), transposed=True, when=gated),
    )


def _bias_table(side: str, stage: str) -> Block:
    """The relative bias table of a stack's first layer, (buckets, heads) as ours: the only layer
    that has one (``relative_attention_bias``); the later layers use it."""
    table = Tensor("layer.0.SelfAttention.relative_attention_bias.weight", "buckets", "heads")
    return Block(side, prefix=f"{side}.block.0.", params=(Param(f"0.{stage}/R", table),))


def _final_norm(side: str) -> Block:
    return Block(
        side, prefix=f"{side}.", params=(Param("final-norm/gamma", Tensor("final_layer_norm.weight", "d")),)
    )


# Our parameter <- their tensors (the embeddings and the output layer: the converter's own lines).
# Pre-norm: each sublayer's RMSNorm before it, norm-k; the relative bias table in layer 0 only.
NAME_MAP = (
    Block(ENCODER, prefix="encoder.block.{n}.", layers="encoder_layers", params=(
        _norm("norm-1", 0), *_attention("self-attention", "layer.0.SelfAttention"),
        _norm("norm-2", 1), *_feed_forward(1),
    )),
    _bias_table(ENCODER, "self-attention"),
    _final_norm(ENCODER),
    Block(DECODER, prefix="decoder.block.{n}.", layers="decoder_layers", params=(
        _norm("norm-1", 0), *_attention("masked-attention", "layer.0.SelfAttention"),
        _norm("norm-2", 1), *_attention("cross-attention", "layer.1.EncDecAttention"),
        _norm("norm-3", 2), *_feed_forward(2),
    )),
    _bias_table(DECODER, "masked-attention"),
    _final_norm(DECODER),
)  # fmt: skip


def sizes(m: Mapping[str, Any]) -> dict[str, int]:
    """The map's size names, from the model's keys."""
    d_kv = m["head_dim"] or m["d_model"] // m["num_heads"]
    return {
        "d": m["d_model"], "ff": m["d_ff"], "inner": m["num_heads"] * d_kv,
        "heads": m["num_heads"], "buckets": m["relative_buckets"],
        "encoder_layers": m["num_encoder_layers"], "decoder_layers": m["num_decoder_layers"],
    }  # fmt: skip


T5 = Family(
    model_type="t5",
    name="T5",
    architecture="encoder-decoder",
    transformers="T5ForConditionalGeneration",
    tokenizer=None,  # type: ignore[arg-type]  # the SentencePiece reader: below, with the converter
    defaults={},
    name_map=NAME_MAP,
    sizes=sizes,
    load=None,  # type: ignore[arg-type]
)
