"""Llama's layer, which every decoder-only family of ``llama.py``, ``moe.py`` and ``gemma.py`` is:
its name map, and the converter those families share.

Today's decoder-only models are one architecture, which ``config.json`` spells out and this
converter reads rather than assumes: pre-norm layers with RMSNorm (``input_layernorm`` before the
attention, ``post_attention_layernorm`` before the MLP, ``model.norm`` atop the stack), rotary
positions applied to each head's queries and keys (no position table), a gated MLP
(``down(act(gate(x)) ⊙ up(x))``), grouped-query attention (``num_key_value_heads`` G key/value
heads for H query heads), biases where the family's config says, and an output layer tied to the
embedding table or not. What a family reads in its own way — its window, its biases, its rotary
bases, its experts — is its module's ``own`` function, which ``load`` is given with the family's
records; the rest is read here, once for all of them.

Their projections are ``nn.Linear``, whose weight is stored ``(out, in)`` and applied as
``x·Wᵀ``: each is transposed into this project's ``(in, out)``, and ``q_proj``, ``k_proj``,
``v_proj`` are set side by side as ``W_QKV = [W_Q | W_K | W_V]``, H query heads' blocks of d_k
columns, then G key heads', then G value heads' (``kinds.attention.columns``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HF_ACTIVATIONS
from ..model.architecture import DECODER
from .bpe import BPETokenizer
from .budget import Budget, out_of_memory
from .config_keys import boolean, end_ids, number, positive_int, token_id
from .errors import CheckpointError
from .family import (
    Block,
    Family,
    Param,
    Tensor,
    check_finite,
    convert,
    find,
    first_tensor,
    refuse_nulls,
    with_defaults,
)
from .jsonfile import MAX_CONFIG_BYTES, read_json, shown
from .tensors import Taker, check_experts, check_layers, float_dtype, read_config_json, read_weights


def qkv_biases(m: Mapping[str, Any]) -> bool:
    """Biases on Q, K and V: Qwen2's ("qkv"), or Llama's ``attention_bias`` (on O too)."""
    return bool(m["attention_bias"])


def o_bias(m: Mapping[str, Any]) -> bool:
    return m["attention_bias"] is True


def mlp_biases(m: Mapping[str, Any]) -> bool:
    return bool(m["ffn_bias"])


def qk_norm(m: Mapping[str, Any]) -> bool:
    """Qwen3's RMSNorm of each head's queries and keys, before the rotation."""
    return m.get("qk_norm") == "head"


# Our parameter <- their tensors, as stored: nn.Linear's (out, in) transposed, q, k and v side by
# side as W_QKV. An optional row (when=) is there only when the model has that switch on; a new
# per-layer tensor (Qwen3's q_norm and k_norm) is one more row, with its switch.
NAME_MAP = (
    Block(DECODER, prefix="model.layers.{n}.", layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        Param("masked-attention/W_QKV", Tensor("self_attn.q_proj.weight", "q", "d"),
              Tensor("self_attn.k_proj.weight", "kv", "d"), Tensor("self_attn.v_proj.weight", "kv", "d"),
              transposed=True),
        Param("masked-attention/b_QKV", Tensor("self_attn.q_proj.bias", "q"),
              Tensor("self_attn.k_proj.bias", "kv"), Tensor("self_attn.v_proj.bias", "kv"), when=qkv_biases),
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "d_k"), when=qk_norm),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "d_k"), when=qk_norm),
        Param("masked-attention/W_O", Tensor("self_attn.o_proj.weight", "d", "q"), transposed=True),
        Param("masked-attention/b_O", Tensor("self_attn.o_proj.bias", "d"), when=o_bias),
        Param("norm-2/gamma", Tensor("post_attention_layernorm.weight", "d")),
        Param("feed-forward/W_gate", Tensor("mlp.gate_proj.weight", "ff", "d"), transposed=True),
        Param("feed-forward/b_gate", Tensor("mlp.gate_proj.bias", "ff"), when=mlp_biases),
        Param("feed-forward/W_up", Tensor("mlp.up_proj.weight", "ff", "d"), transposed=True),
        Param("feed-forward/b_up", Tensor("mlp.up_proj.bias", "ff"), when=mlp_biases),
        Param("feed-forward/W_down", Tensor("mlp.down_proj.weight", "d", "ff"), transposed=True),
        Param("feed-forward/b_down", Tensor("mlp.down_proj.bias", "d"), when=mlp_biases),
    )),
    Block(DECODER, (Param("final-norm/gamma", Tensor("model.norm.weight", "d")),)),
)  # fmt: skip
# A layer's rows before its MLP, and its MLP's: a mixture keeps the first and replaces the second.
ATTENTION_ROWS = tuple(p for p in NAME_MAP[0].params if not p.ours.startswith("feed-forward/"))
FEED_FORWARD_ROWS = tuple(p for p in NAME_MAP[0].params if p.ours.startswith("feed-forward/"))
# The embedding table and the output layer, tied or not: _convert's own lines.
EMBEDDING, OUTPUT_LAYER = "model.embed_tokens.weight", "lm_head.weight"


def sizes(m: Mapping[str, Any]) -> dict[str, int]:
    """The map's size names, from the model's keys: H query heads and G key/value heads of d_k."""
    d_k = m["head_dim"] or m["d_model"] // m["num_heads"]
    kv_heads = m["num_kv_heads"] or m["num_heads"]
    experts = m.get("experts", 0)
    expert = m.get("expert_d_ff") or m["d_ff"]  # each expert's width, and the shared expert's
    return {"d": m["d_model"], "d_k": d_k, "q": m["num_heads"] * d_k, "kv": kv_heads * d_k,
            "ff": m["d_ff"], "layers": m["num_decoder_layers"], "E": experts, "experts": experts,
            "eff": expert, "sff": m.get("shared_expert_d_ff") or expert, "one": 1}  # fmt: skip


# config.json's keys behind each size name of the map, named when a tensor disagrees with them.
SIZE_KEYS = {
    "d": "hidden_size", "d_k": "head_dim", "q": "num_attention_heads × head_dim",
    "kv": "num_key_value_heads × head_dim", "ff": "intermediate_size",
}  # fmt: skip
TABLE_KEYS = ("vocab_size", "hidden_size")  # the embedding table's and the output layer's


# transformers 5's LlamaConfig defaults, for the keys an older config.json leaves out. None: derived
# (num_key_value_heads: one per query head; head_dim: hidden_size / num_attention_heads).
COMMON_DEFAULTS: dict[str, Any] = {
    "head_dim": None, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1, "use_sliding_window": False,
    "pad_token_id": None,
}  # fmt: skip
# The keys whose null means something (no head_dim given: derived; no window; no cap); any other
# key's null falls back to the family's default, but where transformers refuses it (``NOT_NULL``
# and each record's ``not_null``).
KEEP_NONE = (
    "num_key_value_heads", "head_dim", "eos_token_id", "bos_token_id", "pad_token_id", "sliding_window",
    "layer_types",  # Gemma 2 and 3: null, the pattern of sliding_window_pattern
    "attn_logit_softcapping", "final_logit_softcapping",  # null: no cap
)  # fmt: skip

# The keys whose null every family's transformers config refuses: each wants a number or true/false.
NOT_NULL = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
)  # fmt: skip

# A family module's own reading of config.json (the family's defaults filled in, and the file as it
# is): ModelConfig's keys that the family reads its own way, each value checked; at least its
# activation (``activation``) and its rotary keys (``config_keys.rope_keys``).
Own = Callable[[dict[str, Any], dict[str, Any], Path], dict[str, Any]]


@dataclass
class LlamaCheckpoint:
    """A checkpoint of Llama's layer: model config keys, named weights, tokenizer (``checkpoint.Checkpoint``).

    Like GPT-2's, the prompt's ids are the decoder's input as they are (with the BOS token when the
    tokenizer adds one); nothing is banned or forced. ``eos_token_id`` may be several ids (Llama 3:
    ``<|end_of_text|>`` and ``<|eot_id|>``), any of which ends a generation.
    """

    family: Family
    model: dict[str, Any]
    weights: dict[str, np.ndarray]
    tokenizer: BPETokenizer
    bos_token_id: int | None
    eos_token_id: int | tuple[int, ...] | None
    pad_token_id: int | None
    source: str
    decoder_start_token_id: None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None


def load(
    path: str | Path, dtype: str | np.dtype, name: str | None, families: Sequence[Family], own: Own
) -> LlamaCheckpoint:
    """The checkpoint in folder ``path``, of one of ``families``, converted; ``own`` reads what
    those families read their own way; ``name`` (a hub id) is used in ``source``.

    What reading and converting allocate is charged to one ``Budget`` before it is allocated."""
    folder = Path(path)
    with out_of_memory(folder):
        config, raw = read_config(folder, families)
        model = model_keys(config, own(config, raw, folder / "config.json"))
        budget = Budget()
        tensors, file = read_weights(folder, budget)
        weights = _convert(tensors, config, model, float_dtype(dtype), f"{folder / file}", budget)
        return LlamaCheckpoint(
            family=config["family"],
            model=model,
            weights=weights,
            tokenizer=BPETokenizer(folder, size=config["vocab_size"]),
            bos_token_id=config["bos_token_id"],
            eos_token_id=config["eos_token_id"],
            pad_token_id=config["pad_token_id"],
            source=f"{name or folder} ({file})",
        )


def read_config(folder: Path, families: Sequence[Family]) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json with its family's defaults filled in, every value that all these families read
    checked, and with ``family`` (the record of its model_type among ``families``); and the file
    as it is, for the family's own reading."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    family = raw.get("model_type")
    record = find(families, family)
    if record is None:
        raise CheckpointError(
            f"{path}: model_type is {shown(family)}; this converter reads "
            f"{', '.join(f.model_type for f in families)}"
        )
    refuse_nulls(record, raw, path)
    config = with_defaults(record, raw, KEEP_NONE)
    config["family"] = record
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "max_position_embeddings"):  # fmt: skip
        positive_int(config, key, path)
    heads = config["num_attention_heads"]
    if config["num_key_value_heads"] is None:
        config["num_key_value_heads"] = heads
    groups = positive_int(config, "num_key_value_heads", path)
    if heads % groups:
        raise CheckpointError(
            f"{path}: num_attention_heads ({heads}) is not divisible by num_key_value_heads ({groups}): "
            "each key/value head must serve the same number of query heads"
        )
    if config["head_dim"] is None:
        if config["hidden_size"] % heads:
            raise CheckpointError(
                f"{path}: hidden_size ({config['hidden_size']}) is not divisible by num_attention_heads "
                f"({heads}), and no head_dim is given"
            )
        config["head_dim"] = config["hidden_size"] // heads
    if positive_int(config, "head_dim", path) % 2:
        raise CheckpointError(
            f"{path}: head_dim is {config['head_dim']}: rotary turns pairs, so it must be even"
        )
    if number(config["rms_norm_eps"], "rms_norm_eps", path) >= 1:
        raise CheckpointError(
            f"{path}: rms_norm_eps is {shown(config['rms_norm_eps'])}, not a small positive number"
        )
    for key in ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window"):
        boolean(config, key, path)
    if config["pretraining_tp"] not in (1, None):
        raise CheckpointError(
            f"{path}: pretraining_tp is {shown(config['pretraining_tp'])}: "
            "only 1 (projections not split) is read"
        )
    for key in ("bos_token_id", "pad_token_id"):
        token_id(config, key, path)
    config["eos_token_id"] = end_ids(config["eos_token_id"], path)
    generation = _generation_eos(folder)  # what generate stops on, as transformers reads it
    if generation is not None:
        config["eos_token_id"] = end_ids(generation, folder / "generation_config.json")
    return config, raw


def activation(
    config: dict[str, Any], path: Path, key: str = "hidden_act", mlp: str = "SwiGLU",
    accepted: tuple[str, ...] = ("silu", "swish"),
) -> str:  # fmt: skip
    """ModelConfig's activation of the gated MLP, whose ``key`` must be one of ``accepted`` (a list
    is not hashable: ``in`` on a tuple is safe)."""
    if config[key] not in accepted:
        raise CheckpointError(
            f"{path}: {key} is {shown(config[key])}; the family's MLP is {mlp} ({accepted[0]})"
        )
    return HF_ACTIVATIONS[config[key]]


def model_keys(config: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's keys of a checked config.json: Llama's layer's, then those the family reads its
    own way (``own``), then the conventions its record fixes (Gemma's norm, OLMo 2's placement)."""
    return {
        "d_model": config["hidden_size"],
        "num_heads": config["num_attention_heads"],
        "num_kv_heads": config["num_key_value_heads"],
        "head_dim": None if config["head_dim"] * config["num_attention_heads"] == config["hidden_size"]
        else config["head_dim"],
        "d_ff": config["intermediate_size"],
        "num_encoder_layers": 0,
        "num_decoder_layers": config["num_hidden_layers"],
        "norm_placement": "pre",
        "final_norm": True,
        "norm": "rmsnorm",
        "layer_norm_eps": float(config["rms_norm_eps"]),
        "positional_encoding": "rotary",
        "max_positions": config["max_position_embeddings"],
        "sliding_window": None,
        "feed_forward": "gated",
        "ffn_bias": config["mlp_bias"],
        "attention_bias": config["attention_bias"],
        "qk_norm": False,
        "tie_embeddings": config["tie_word_embeddings"],
        "output_bias": False,
        "scale_embeddings": False,
        **own,
        **config["family"].conventions,
    }  # fmt: skip


def experts_key(config: Mapping[str, Any]) -> str:
    """The key that counts a mixture's experts: transformers 5 writes num_local_experts for every
    family (Qwen's num_experts is its alias)."""
    return "num_local_experts" if "num_local_experts" in config else "num_experts"


def _convert(
    tensors: Mapping[str, np.ndarray], config: dict[str, Any], model: dict[str, Any], dtype: np.dtype,
    where: str, budget: Budget,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Our named weights from the checkpoint's tensors (the family's map walked forward, then the
    table and the output layer), every shape checked against config.json first, and the layers
    and the memory counted before the first is made."""
    d, vocab, d_k = config["hidden_size"], config["vocab_size"], config["head_dim"]
    family, names = config["family"], set(tensors)
    layers = config["num_hidden_layers"]
    check_layers(names, first_tensor(family.stacks[0]), "num_hidden_layers", layers, where)
    if model.get("experts"):  # as many experts as config.json says, before their rows
        expert = next(p.theirs[0].name for b in family.stacks for p in b.params if p.each_expert)
        check_experts(names, expert, experts_key(config), model["experts"], where)
    taker = Taker(tensors, where)
    taker.charge(budget, dtype)
    take = taker.take
    weights = convert(family.rows(model), taker, dtype)

    E = take(EMBEDDING, (vocab, d), TABLE_KEYS)
    weights["decoder.embedding/E"] = np.ascontiguousarray(E, dtype=dtype)
    if OUTPUT_LAYER in names:
        lm_head = take(OUTPUT_LAYER, (vocab, d), TABLE_KEYS)
        if config["tie_word_embeddings"]:
            if not np.array_equal(lm_head, E):
                raise CheckpointError(
                    f"{where}: {OUTPUT_LAYER} differs from {EMBEDDING}, which config.json "
                    "says it is (tie_word_embeddings)"
                )
        else:
            weights["output.logits/W"] = np.ascontiguousarray(lm_head.T, dtype=dtype)
    elif not config["tie_word_embeddings"]:
        raise CheckpointError(f"{where}: missing tensor {OUTPUT_LAYER} (tie_word_embeddings is false)")
    # Older files keep each layer's rotary table (inv_freq) as a buffer: the config makes it here.
    for n in range(config["num_hidden_layers"]):
        buffer = f"model.layers.{n}.self_attn.rotary_emb.inv_freq"
        if buffer in names:
            take(buffer, (d_k // 2,))  # its shape checked, its values recomputed from the config
    taker.refuse_unused(config["model_type"])
    check_finite(weights, where)
    return weights


def _generation_eos(folder: Path) -> Any:
    """generation_config.json's ``eos_token_id``, which transformers' ``generate`` stops on when the
    file has it (Qwen2-Instruct: ``<|im_end|>`` and ``<|endoftext|>``, where config.json names one);
    None when there is no such file or key."""
    path = folder / "generation_config.json"
    if not path.exists():  # a FIFO or a device there is refused by read_json, not skipped as absent
        return None
    generation = read_json(path, MAX_CONFIG_BYTES)
    return generation.get("eos_token_id") if isinstance(generation, dict) else None
