"""Checkpoint families as records (checkpoints/family.py): one record per model_type, and each name
map walked forward (the converters) and backward (the tests' references) is the identity."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_walkthrough.checkpoints.checkpoint import FAMILIES
from transformer_walkthrough.checkpoints.family import convert, invert
from transformer_walkthrough.checkpoints.tensors import Taker

# Every switch of every family on: biases everywhere (Llama's attention_bias), the MLM head, segments.
MODEL = {
    "d_model": 8, "num_heads": 2, "num_kv_heads": 1, "head_dim": 6, "d_ff": 12, "num_encoder_layers": 2,
    "num_decoder_layers": 3, "max_positions": 10, "segments": 2, "output_transform": True,
    "attention_bias": True, "ffn_bias": True, "qk_norm": "head", "experts": 3, "relative_buckets": 8,
    "feed_forward": "gated",
}  # fmt: skip


def test_one_record_per_model_type_in_the_order_messages_list_them():
    assert [f.model_type for f in FAMILIES] == [
        "marian", "gpt2", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe",
        "gemma", "gemma2", "gemma3_text", "olmo2", "bert", "roberta", "distilbert", "t5",
    ]  # fmt: skip
    assert [f.model_type for f in FAMILIES if f.encoder_decoder] == ["marian", "t5"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_the_name_map_walked_forward_then_backward_is_the_identity(family):
    rows = family.rows(MODEL)
    rng = np.random.default_rng(0)
    theirs = {p.name: rng.standard_normal(p.shape) for row in rows for p in row.theirs}
    assert len(theirs) == sum(len(row.theirs) for row in rows)  # each tensor is read once
    ours = convert(rows, Taker(theirs, "theirs"), np.dtype(np.float64))
    assert {name: w.shape for name, w in ours.items()} == {row.ours: row.shape() for row in rows}
    back = invert(rows, ours)
    assert back.keys() == theirs.keys()
    for name, tensor in theirs.items():
        np.testing.assert_array_equal(back[name], tensor, err_msg=name)


def test_an_optional_row_is_there_only_when_its_switch_is_on():
    llama = next(f for f in FAMILIES if f.model_type == "llama")
    plain = {row.ours for row in llama.rows({**MODEL, "attention_bias": False, "ffn_bias": False})}
    qwen2 = {row.ours for row in llama.rows({**MODEL, "attention_bias": "qkv", "ffn_bias": False})}
    assert qwen2 - plain == {f"decoder.{n}.masked-attention/b_QKV" for n in range(3)}
    assert not any("/b_" in name for name in plain)


def test_a_mixture_maps_one_row_per_expert():
    mixtral = next(f for f in FAMILIES if f.model_type == "mixtral")
    rows = {row.ours: row for row in mixtral.rows(MODEL)}
    assert [n for n in rows if n.startswith("decoder.0.experts/")] == [
        "decoder.0.experts/W_router",
        *(f"decoder.0.experts/expert{e}.W_{w}" for w in ("gate", "up", "down") for e in range(3)),
    ]
    assert [(part.name, part.shape) for part in rows["decoder.2.experts/expert1.W_up"].theirs] == [
        ("model.layers.2.block_sparse_moe.experts.1.w3.weight", (12, 8)),
    ]
    assert not any("feed-forward" in n for n in rows)
