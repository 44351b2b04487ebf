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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..model.architecture import DECODER, ENCODER
from .budget import Budget, out_of_memory
from .errors import CheckpointError
from .family import Block, Family, Param, Tensor, check_finite, convert, first_tensor, with_defaults
from .jsonfile import shown
from .tensors import Taker, check_layers, float_dtype, read_config_json, read_weights
from .tokenizer import T5Tokenizer

# T5Config's defaults (transformers), for the keys an older config.json leaves out.
CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6,
    "num_decoder_layers": None, "num_heads": 8, "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu",
    "tie_word_embeddings": True, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
    "n_positions": 512,
}  # fmt: skip
# feed_forward_proj -> (our feed_forward, our activation): T5's ReLU, T5 v1.1's and Flan-T5's gated GELU
# (gelu_new, GELU's tanh form: transformers maps "gated-gelu" to it)
PROJECTIONS = {"relu": ("standard", "relu"), "gated-gelu": ("gated", "gelu-tanh")}


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


@dataclass
class T5Checkpoint:
    """A T5 checkpoint in this project's terms: model config keys, named weights, tokenizer."""

    family: Family
    model: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: T5Tokenizer
    decoder_start_token_id: int  # the pad token: T5's decoder starts from <pad>
    eos_token_id: int
    pad_token_id: int
    source: str
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None


def load_t5(path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None) -> T5Checkpoint:
    """The T5 checkpoint in folder ``path``, converted; ``name`` (a hub id) is used in ``source``."""
    folder = Path(path)
    with out_of_memory(folder):
        return _load(folder, float_dtype(dtype), name)


def _load(folder: Path, dtype: np.dtype, name: str | None) -> T5Checkpoint:
    config = _read_config(folder)
    feed_forward, activation = PROJECTIONS[config["feed_forward_proj"]]
    tied = config["tie_word_embeddings"]
    model = {
        "d_model": config["d_model"], "num_heads": config["num_heads"], "head_dim": config["d_kv"],
        "d_ff": config["d_ff"], "num_encoder_layers": config["num_layers"],
        "num_decoder_layers": config["num_decoder_layers"], "norm_first": True, "final_norm": True,
        "norm": "rmsnorm", "positional_encoding": "relative",
        "relative_buckets": config["relative_attention_num_buckets"],
        "relative_max_distance": config["relative_attention_max_distance"], "score_scale": "none",
        "feed_forward": feed_forward, "activation": activation, "ffn_bias": False, "attention_bias": False,
        "output_bias": False, "tie_embeddings": tied, "scale_tied_output": tied,
        "layer_norm_eps": config["layer_norm_epsilon"], "max_positions": config["n_positions"],
    }  # fmt: skip
    budget = Budget()
    tensors, file = read_weights(folder, budget)
    where = f"{folder / file}"
    names = set(tensors)
    for side, block in zip(("encoder", "decoder"), T5.stacks, strict=True):
        key = "num_layers" if side == "encoder" else "num_decoder_layers"
        check_layers(names, first_tensor(block), key, config[key], where)
    taker = Taker(tensors, where)
    taker.charge(budget, dtype)
    weights = convert(T5.rows(model), taker, dtype)
    rows = config["vocab_size"]  # as transformers, which refuses a table of another size
    E = taker.take("shared.weight", (rows, config["d_model"]), ("vocab_size", "d_model"))
    weights["encoder.embedding/E"] = np.ascontiguousarray(E, dtype=dtype)
    for alias in (
        "encoder.embed_tokens.weight",
        "decoder.embed_tokens.weight",
        *(("lm_head.weight",) * tied),
    ):
        if alias in names and not np.array_equal(taker.take(alias, E.shape), E):  # a saved copy of shared
            raise CheckpointError(f"{where}: {alias} differs from shared.weight, which T5 embeds with")
    if not tied:  # Flan-T5: both stacks embed with shared, the output layer is lm_head
        weights["decoder.embedding/E"] = weights["encoder.embedding/E"].copy()
        weights["output.logits/W"] = np.ascontiguousarray(
            taker.take("lm_head.weight", E.shape).T, dtype=dtype
        )
    taker.used.add(
        "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"
    )  # ignored, as there
    taker.refuse_unused(T5.name)
    check_finite(weights, where)
    return T5Checkpoint(
        family=T5, model=model, weights=weights, tokenizer=T5Tokenizer(folder, size=rows),
        decoder_start_token_id=config["decoder_start_token_id"], eos_token_id=config["eos_token_id"],
        pad_token_id=config["pad_token_id"], source=f"{name or folder} ({file})",
    )  # fmt: skip


def _read_config(folder: Path) -> dict[str, Any]:
    """config.json with T5Config's defaults filled in, every value this converter uses checked."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    if raw.get("model_type") != T5.model_type:
        raise CheckpointError(
            f"{path}: model_type is {shown(raw.get('model_type'))}; this is not a T5 checkpoint"
        )
    config = with_defaults(T5, raw)
    if config["num_decoder_layers"] is None:  # T5Config: as many as the encoder's
        config["num_decoder_layers"] = config["num_layers"]
    sized = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
             "relative_attention_num_buckets", "relative_attention_max_distance", "n_positions")  # fmt: skip
    for key in sized:
        if type(config[key]) is not int or config[key] < 1:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a positive integer")
    buckets, reach = config["relative_attention_num_buckets"], config["relative_attention_max_distance"]
    if buckets < 4 or reach <= buckets // 2:
        raise CheckpointError(
            f"{path}: relative_attention_num_buckets {buckets} and relative_attention_max_distance {reach}: "
            "need 4 or more buckets and a max distance beyond the exact range (buckets // 2)"
        )
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if type(config[key]) is not int or config[key] < 0:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a token id")
    if type(config["tie_word_embeddings"]) is not bool:
        raise CheckpointError(
            f"{path}: tie_word_embeddings is {shown(config['tie_word_embeddings'])}, not true or false"
        )
    eps = config["layer_norm_epsilon"]
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:  # infinity too (the toy's check named its key)
        raise CheckpointError(f"{path}: layer_norm_epsilon is {shown(eps)}, not a small positive number")
    if config["feed_forward_proj"] not in PROJECTIONS:
        raise CheckpointError(
            f"{path}: feed_forward_proj {shown(config['feed_forward_proj'])} is not supported "
            f"(supported: {', '.join(PROJECTIONS)})"
        )
    return config


T5 = Family(
    model_type="t5",
    name="T5",
    architecture="encoder-decoder",
    transformers="T5ForConditionalGeneration",
    tokenizer=T5Tokenizer,
    defaults=CONFIG_DEFAULTS,
    name_map=NAME_MAP,
    sizes=sizes,
    load=load_t5,
    context_key=None,  # relative positions: n_positions bounds no input
)
FAMILIES = (T5,)
