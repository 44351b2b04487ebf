"""Checkpoint families as records (checkpoints/family.py): one record per model_type, and each name
map walked forward (the converters) and backward (the tests' references) is the identity."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_walkthrough.checkpoints.checkpoint import FAMILIES
from transformer_walkthrough.checkpoints.family import convert, invert

# Every switch of every family on: biases everywhere (Llama's attention_bias), the MLM head, segments.
MODEL = {
    "d_model": 8, "num_heads": 2, "num_kv_heads": 1, "head_dim": 6, "d_ff": 12, "num_encoder_layers": 2,
    "num_decoder_layers": 3, "max_positions": 10, "segments": 2, "output_transform": True,
    "attention_bias": True, "ffn_bias": True, "qk_norm": "head",
}  # fmt: skip


def test_one_record_per_model_type_in_the_order_messages_list_them():
    assert [f.model_type for f in FAMILIES] == [
        "marian", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "olmo2",
        "bert", "roberta", "distilbert",
    ]  # fmt: skip
    assert [f.architecture for f in FAMILIES if f.encoder_decoder] == ["encoder-decoder"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_the_name_map_walked_forward_then_backward_is_the_identity(family):
    rows = family.rows(MODEL)
    rng = np.random.default_rng(0)
    theirs = {name: rng.standard_normal(shape) for row in rows for name, shape in row.theirs}
    assert len(theirs) == sum(len(row.theirs) for row in rows)  # each tensor is read once
    ours = convert(rows, lambda name, shape: theirs[name], np.dtype(np.float64))
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
