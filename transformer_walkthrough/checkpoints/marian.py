"""A Marian (opus-mt) checkpoint converted to this project's parameter names and layout.

Marian is the paper's encoder–decoder with a few conventions of its own, each read from
``config.json`` rather than assumed: post-norm layers, a feed-forward activation named by
``activation_function`` (opus-mt's "swish" is SiLU), embeddings scaled by √d_model
(``scale_embedding``), sinusoids split in halves (sines in the first d_model/2 columns, cosines in
the rest, positions from 0), biases on every projection, one embedding table shared by the encoder,
the decoder and the output layer, and an output bias ``final_logits_bias``. Some checkpoints have
two vocabularies (tokenizer_config.json's ``separate_vocabs``): the encoder's table then has a row
per source piece (``vocab_size``), the decoder's and the output layer's one per target piece
(``decoder_vocab_size``), and config.json says the tables are not shared.

Weights here act on the right (``y = x @ W + b``), so every ``nn.Linear.weight`` is transposed; the
query, key and value projections sit side by side in one ``W_QKV = [W_Q | W_K | W_V]``, head h
using the h-th block of d_k columns of each third, as ``view(…, heads, head_dim)`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HF_ACTIVATIONS  # activation_function's names for ours
from ..model.architecture import DECODER, ENCODER
from .budget import Budget, out_of_memory
from .errors import CheckpointError
from .family import Block, Family, Param, Tensor, check_finite, convert, first_tensor, with_defaults
from .jsonfile import MAX_CONFIG_BYTES, read_json, shown
from .tensors import Taker, check_layers, float_dtype, read_config_json, read_weights
from .tokenizer import MarianTokenizer

# MarianConfig's defaults (transformers), for the keys an older config.json leaves out.
CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "scale_embedding": False,
    "decoder_start_token_id": 58100,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}

# Tensors a Marian checkpoint may hold that are not parameters: the sinusoid tables, which
# transformers recomputes (older checkpoints saved them; newer ones leave them out).
IGNORED_BUFFERS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def _attention(stage: str, module: str) -> tuple[Param, ...]:
    """An attention's rows: q, k, v side by side as W_QKV and b_QKV, out_proj as W_O and b_O."""
    q, k, v, o = (f"{module}.{p}" for p in ("q_proj", "k_proj", "v_proj", "out_proj"))
    return (
        Param(f"{stage}/W_QKV", *(Tensor(f"{x}.weight", "d", "d") for x in (q, k, v)), transposed=True),
        Param(f"{stage}/b_QKV", *(Tensor(f"{x}.bias", "d") for x in (q, k, v))),
        Param(f"{stage}/W_O", Tensor(f"{o}.weight", "d", "d"), transposed=True),
        Param(f"{stage}/b_O", Tensor(f"{o}.bias", "d")),
    )


def _add_norm(stage: str, module: str) -> tuple[Param, ...]:
    """A LayerNorm's rows: its weight as ``gamma``, its bias as ``beta``."""
    return (
        Param(f"{stage}/gamma", Tensor(f"{module}.weight", "d")),
        Param(f"{stage}/beta", Tensor(f"{module}.bias", "d")),
    )


_FEED_FORWARD = (
    Param("feed-forward/W_1", Tensor("fc1.weight", "ff", "d"), transposed=True),
    Param("feed-forward/b_1", Tensor("fc1.bias", "ff")),
    Param("feed-forward/W_2", Tensor("fc2.weight", "d", "ff"), transposed=True),
    Param("feed-forward/b_2", Tensor("fc2.bias", "d")),
)
# Our parameter <- their tensors, every layer's (the embeddings and the output layer: _convert's
# own lines). Marian is post-norm: each sublayer's LayerNorm after its sum, add-norm-k.
NAME_MAP = (
    Block(ENCODER, prefix="model.encoder.layers.{n}.", layers="encoder_layers", params=(
        *_attention("self-attention", "self_attn"),
        *_add_norm("add-norm-1", "self_attn_layer_norm"),
        *_FEED_FORWARD,
        *_add_norm("add-norm-2", "final_layer_norm"),
    )),
    Block(DECODER, prefix="model.decoder.layers.{n}.", layers="decoder_layers", params=(
        *_attention("masked-attention", "self_attn"),
        *_add_norm("add-norm-1", "self_attn_layer_norm"),
        *_attention("cross-attention", "encoder_attn"),
        *_add_norm("add-norm-2", "encoder_attn_layer_norm"),
        *_FEED_FORWARD,
        *_add_norm("add-norm-3", "final_layer_norm"),
    )),
)  # fmt: skip


def sizes(m: Mapping[str, Any]) -> dict[str, int]:
    """The map's size names, from the model's keys."""
    return {"d": m["d_model"], "ff": m["d_ff"], "encoder_layers": m["num_encoder_layers"],
            "decoder_layers": m["num_decoder_layers"]}  # fmt: skip


@dataclass
class MarianCheckpoint:
    """A Marian checkpoint in this project's terms: model config keys, named weights, tokenizer.

    ``bad_words_ids`` and ``forced_eos_token_id`` are what config.json (or generation_config.json)
    tells generation: opus-mt bans ``<pad>`` (``[[58100]]``) and ends on ``</s>`` at the length limit.
    """

    family: Family
    model: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: MarianTokenizer
    decoder_start_token_id: int
    eos_token_id: int
    pad_token_id: int
    source: str
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None


def load_marian(
    path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None
) -> MarianCheckpoint:
    """The Marian checkpoint in folder ``path``, converted; ``name`` (a hub id) is used in ``source``.

    What reading and converting allocate is charged to one ``Budget`` before it is allocated."""
    folder = Path(path)
    with out_of_memory(folder):
        return _load(folder, float_dtype(dtype), name)


def _load(folder: Path, dtype: np.dtype, name: str | None) -> MarianCheckpoint:
    config = _read_config(folder)
    model = {
        "d_model": config["d_model"],
        "num_heads": config["encoder_attention_heads"],
        "d_ff": config["encoder_ffn_dim"],
        "num_encoder_layers": config["encoder_layers"],
        "num_decoder_layers": config["decoder_layers"],
        "norm_first": False,
        "final_norm": False,
        "activation": HF_ACTIVATIONS[config["activation_function"]],
        "positional_encoding": "sinusoidal-halves",
        "scale_embeddings": bool(config["scale_embedding"]),
        "attention_bias": True,
        "tie_embeddings": False,  # below: what the tables turn out to be
        "layer_norm_eps": 1e-5,  # nn.LayerNorm's default: Marian's layers do not set it
        "max_positions": config["max_position_embeddings"],
    }
    budget = Budget()
    tensors, file = read_weights(folder, budget)
    weights, model["tie_embeddings"] = _convert(tensors, config, model, dtype, f"{folder / file}", budget)
    source_rows = weights["encoder.embedding/E"].shape[0]
    target_rows = weights["output.logits/b"].shape[0]  # the decoder's table: a row per output column
    tokenizer = MarianTokenizer(folder, size=source_rows, target_size=target_rows)
    target_file = "target_vocab.json" if tokenizer.separate_vocabs else "vocab.json"
    for which, vocabulary, table, rows in (
        ("vocab.json", tokenizer.source_vocabulary, "the encoder's embedding table", source_rows),
        (target_file, tokenizer.target_vocabulary, "the decoder's embedding table", target_rows),
    ):
        if len(vocabulary) > rows:
            raise CheckpointError(
                f"{folder}: {which} has ids up to {len(vocabulary) - 1}, {table} only {rows} rows"
            )
    return MarianCheckpoint(
        family=MARIAN,
        model=model,
        weights=weights,
        tokenizer=tokenizer,
        decoder_start_token_id=config["decoder_start_token_id"],
        eos_token_id=config["eos_token_id"],
        pad_token_id=config["pad_token_id"],
        source=f"{name or folder} ({file})",
        bad_words_ids=config["bad_words_ids"],
        forced_eos_token_id=config["forced_eos_token_id"],
    )


def _read_config(folder: Path) -> dict[str, Any]:
    """config.json with MarianConfig's defaults filled in, every value this converter uses checked."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    if raw.get("model_type") != MARIAN.model_type:
        raise CheckpointError(
            f"{path}: model_type is {shown(raw.get('model_type'))}; only 'marian' checkpoints are supported"
        )
    config = with_defaults(MARIAN, raw)
    config.update(_generation_settings(folder, raw))
    for key in (
        "vocab_size",
        "max_position_embeddings",
        "encoder_layers",
        "decoder_layers",
        "d_model",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "encoder_attention_heads",
        "decoder_attention_heads",
    ):
        if type(config[key]) is not int or config[key] < 1:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a positive integer")
    for key in ("decoder_start_token_id", "pad_token_id", "eos_token_id"):
        if type(config[key]) is not int or config[key] < 0:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a token id")
    for key in ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings"):
        if type(config[key]) is not bool:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not true or false")
    activation = config["activation_function"]
    if not isinstance(activation, str) or activation not in HF_ACTIVATIONS:  # a list is not hashable
        raise CheckpointError(
            f"{path}: activation_function {shown(activation)} is not supported "
            f"(supported: {', '.join(HF_ACTIVATIONS)})"
        )
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if config[enc] != config[dec]:
            raise CheckpointError(
                f"{path}: {enc} ({config[enc]}) differs from {dec} ({config[dec]}); "
                "the walkthrough's model has one value for both"
            )
    if config["d_model"] % config["encoder_attention_heads"]:
        raise CheckpointError(
            f"{path}: d_model {config['d_model']} is not a multiple of "
            f"encoder_attention_heads {config['encoder_attention_heads']}"
        )
    return config


def _generation_settings(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``bad_words_ids`` and ``forced_eos_token_id``, from generation_config.json where it has them
    (as transformers reads them), else from config.json; each checked."""
    settings = {key: config.get(key) for key in ("bad_words_ids", "forced_eos_token_id")}
    path = folder / "generation_config.json"
    if path.exists():  # a FIFO or a device there is refused by read_json, not skipped as absent
        generation = read_json(path, MAX_CONFIG_BYTES)
        if isinstance(generation, dict):
            settings.update({k: generation[k] for k in settings if k in generation})
    bad = settings["bad_words_ids"] or []
    if not (
        isinstance(bad, list)
        and all(isinstance(s, list) and s and all(type(i) is int and i >= 0 for i in s) for s in bad)
    ):
        raise CheckpointError(f"{folder}: bad_words_ids is {shown(bad)}, not a list of lists of token ids")
    forced = settings["forced_eos_token_id"]
    if forced is not None and (type(forced) is not int or forced < 0):
        raise CheckpointError(f"{folder}: forced_eos_token_id is {shown(forced)}, not a token id")
    return {"bad_words_ids": tuple(tuple(s) for s in bad), "forced_eos_token_id": forced}


def _convert(
    tensors: Mapping[str, np.ndarray], config: dict[str, Any], model: dict[str, Any], dtype: np.dtype,
    where: str, budget: Budget,
) -> tuple[dict[str, np.ndarray], bool]:  # fmt: skip
    """Their tensors -> our weights (``NAME_MAP`` walked forward, then the tables), each checkpoint
    tensor used once or known; returns (weights, tied).

    The layers are counted and the memory charged before the first row is made."""
    d_model = config["d_model"]
    names = set(tensors)
    for side, block in zip(("encoder", "decoder"), MARIAN.stacks, strict=True):
        key = f"{side}_layers"
        check_layers(names, first_tensor(block), key, config[key], where)
    taker = Taker(tensors, where)
    taker.charge(budget, dtype)
    shape, take, used = taker.shape, taker.take, taker.used
    weights = convert(MARIAN.rows(model), taker, dtype)

    # Embeddings and output layer: one table for all three when the checkpoint shares and ties them.
    share, tie = config["share_encoder_decoder_embeddings"], config["tie_word_embeddings"]
    encoder_table = "model.shared.weight"
    if encoder_table not in names:  # a checkpoint of separate tables names the encoder's own
        encoder_table = "model.encoder.embed_tokens.weight"
    E_enc = take(encoder_table, (shape(encoder_table)[0], d_model))
    if share:
        decoder_table, E_dec = encoder_table, E_enc
    else:
        decoder_table = "model.decoder.embed_tokens.weight"
        E_dec = take(decoder_table, (shape(decoder_table)[0], d_model))
    target_vocab = E_dec.shape[0]
    W_out = E_dec if tie else take("lm_head.weight", (target_vocab, d_model))
    # Copies of the shared table that some checkpoints store under every name that uses it.
    for alias, table_name, table in (
        ("model.encoder.embed_tokens.weight", encoder_table, E_enc),
        ("model.decoder.embed_tokens.weight", decoder_table, E_dec),
        ("lm_head.weight", decoder_table, E_dec),
    ):
        is_copy = alias in names and alias not in used and (alias != "lm_head.weight" or tie)
        if is_copy and not np.array_equal(take(alias, table.shape), table):
            raise CheckpointError(
                f"{where}: {alias} differs from {table_name}, which config.json says "
                "it is (share_encoder_decoder_embeddings / tie_word_embeddings)"
            )
    if "final_logits_bias" in names:
        b = take("final_logits_bias", (1, target_vocab))[0]
    else:  # transformers starts it at zero when a checkpoint leaves it out
        b = np.zeros(target_vocab)
    used.update(n for n in IGNORED_BUFFERS if n in names)
    taker.refuse_unused(MARIAN.name)

    tied = share and tie
    ends = {"encoder.embedding/E": E_enc}
    if not tied:
        ends.update({"decoder.embedding/E": E_dec, "output.logits/W": W_out.T})
    ends["output.logits/b"] = b
    weights.update({k: np.ascontiguousarray(v, dtype=dtype) for k, v in ends.items()})
    check_finite(weights, where)
    return weights, tied


MARIAN = Family(
    model_type="marian",
    name="Marian",
    architecture="encoder-decoder",
    transformers="MarianMTModel",
    tokenizer=MarianTokenizer,
    defaults=CONFIG_DEFAULTS,
    name_map=NAME_MAP,
    sizes=sizes,
    size_keys={"d": "d_model", "ff": "encoder_ffn_dim"},
    load=load_marian,
)
FAMILIES = (MARIAN,)
