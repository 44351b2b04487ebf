"""A Llama-family checkpoint (Llama 2 and 3, SmolLM, TinyLlama, Mistral, Qwen2, Qwen3), in our terms.

Today's decoder-only models are one architecture, which ``config.json`` spells out and this
converter reads rather than assumes: pre-norm layers with RMSNorm (``input_layernorm`` before the
attention, ``post_attention_layernorm`` before the MLP, ``model.norm`` atop the stack), rotary
positions applied to each head's queries and keys (no position table), SwiGLU
(``down(silu(gate(x)) ⊙ up(x))``), grouped-query attention (``num_key_value_heads`` G key/value
heads for H query heads), no biases — but Qwen2's on Q, K and V, and Llama's where
``attention_bias`` or ``mlp_bias`` says — and an output layer tied to the embedding table or not.
The four ``model_type`` differ only in what their config may say, and Qwen3 in one step:

- ``llama``: ``attention_bias`` (Q, K, V and O), ``mlp_bias``, ``head_dim``;
- ``mistral``: ``sliding_window`` (each position sees the last ``sliding_window`` ones only), no biases;
- ``qwen2``: biases on Q, K, V always, none on O; ``use_sliding_window`` (refused when true);
- ``qwen3``: an RMSNorm of each head's queries and keys before the rotation (``q_norm``, ``k_norm``:
  our ``qk_norm: head``, ``gamma_Q``, ``gamma_K``), ``head_dim`` 128 unless it says, no biases but
  where ``attention_bias`` says (Q, K, V and O); ``use_sliding_window`` refused, as Qwen2's.

Gemma, Gemma 2, Gemma 3 and OLMo 2 are this layer under conventions of their own (their name maps
and why: ``gemma.py``); Gemma 2 and 3 (``gemma2``, ``gemma3_text``) add what their config says of
each layer: ``layer_types`` (sliding over ``sliding_window`` positions, or full), the score scale
``query_pre_attn_scalar``, the soft caps ``attn_logit_softcapping`` and ``final_logit_softcapping``,
and (Gemma 3) a rotary base per kind of layer, the full layers' alone scaled (``_layer_rope``).

Rotary: ``rope_theta`` (or transformers 5's ``rope_parameters``), and ``rope_scaling`` (older
files) or ``rope_parameters`` of type ``default``, ``linear`` or ``llama3`` (Llama 3.1, 3.2); any
other type (yarn, dynamic, longrope) is refused, never approximated.

Their projections are ``nn.Linear``, whose weight is stored ``(out, in)`` and applied as
``x·Wᵀ``: each is transposed into this project's ``(in, out)``, and ``q_proj``, ``k_proj``,
``v_proj`` are set side by side as ``W_QKV = [W_Q | W_K | W_V]``, H query heads' blocks of d_k
columns, then G key heads', then G value heads' (``kinds.attention.columns``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HF_ACTIVATIONS
from ..model.architecture import DECODER
from .bpe import BPETokenizer
from .budget import Budget, out_of_memory
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
    only_in,
    with_defaults,
)
from .gemma import GEMMA2_MAP, GEMMA3_MAP, GEMMA_MAP, OLMO2_MAP
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
# Mixtral: Mistral's layers with a mixture of experts where the MLP was (every layer sparse): the
# router ``gate`` and each expert's SwiGLU, w1 the gate, w3 up, w2 down, as save_pretrained writes them.
ATTENTION_ROWS = tuple(p for p in NAME_MAP[0].params if not p.ours.startswith("feed-forward/"))
FEED_FORWARD_ROWS = tuple(p for p in NAME_MAP[0].params if p.ours.startswith("feed-forward/"))
MIXTRAL_MAP = (
    Block(DECODER, prefix="model.layers.{n}.", layers="layers", params=(
        *ATTENTION_ROWS, *only_in("sparse", (
        Param("experts/W_router", Tensor("block_sparse_moe.gate.weight", "E", "d"), transposed=True),
        Param("experts/expert{e}.W_gate", Tensor("block_sparse_moe.experts.{e}.w1.weight", "eff", "d"),
              transposed=True, each_expert=True),
        Param("experts/expert{e}.W_up", Tensor("block_sparse_moe.experts.{e}.w3.weight", "eff", "d"),
              transposed=True, each_expert=True),
        Param("experts/expert{e}.W_down", Tensor("block_sparse_moe.experts.{e}.w2.weight", "d", "eff"),
              transposed=True, each_expert=True),
    )))),
    NAME_MAP[1],
)  # fmt: skip


def shared_expert(m: Mapping[str, Any]) -> bool:
    """Qwen2-MoE's shared expert, always on, and its sigmoid gate."""
    return bool(m.get("shared_experts"))


# Qwen2-MoE and Qwen3-MoE: Qwen2's or Qwen3's attention, and in each sparse layer the router
# ``mlp.gate`` and each expert's gate_proj, up_proj, down_proj, Qwen2-MoE's shared expert and its gate
# besides; in a dense layer (``mlp_only_layers``, or off ``decoder_sparse_step``) Qwen2's MLP, of
# ``intermediate_size``.
QWEN_MOE_MAP = (
    Block(DECODER, prefix="model.layers.{n}.", layers="layers", params=(
        *ATTENTION_ROWS, *only_in("dense", FEED_FORWARD_ROWS), *only_in("sparse", (
        Param("experts/W_router", Tensor("mlp.gate.weight", "E", "d"), transposed=True),
        Param("experts/expert{e}.W_gate", Tensor("mlp.experts.{e}.gate_proj.weight", "eff", "d"),
              transposed=True, each_expert=True),
        Param("experts/expert{e}.W_up", Tensor("mlp.experts.{e}.up_proj.weight", "eff", "d"),
              transposed=True, each_expert=True),
        Param("experts/expert{e}.W_down", Tensor("mlp.experts.{e}.down_proj.weight", "d", "eff"),
              transposed=True, each_expert=True),
        Param("experts/shared.W_gate", Tensor("mlp.shared_expert.gate_proj.weight", "sff", "d"),
              transposed=True, when=shared_expert),
        Param("experts/shared.W_up", Tensor("mlp.shared_expert.up_proj.weight", "sff", "d"),
              transposed=True, when=shared_expert),
        Param("experts/shared.W_down", Tensor("mlp.shared_expert.down_proj.weight", "d", "sff"),
              transposed=True, when=shared_expert),
        Param("experts/W_shared_gate", Tensor("mlp.shared_expert_gate.weight", "one", "d"),
              transposed=True, when=shared_expert),
    )))),
    NAME_MAP[1],
)  # fmt: skip


def qk_norm_whole(m: Mapping[str, Any]) -> bool:
    """OLMoE's RMSNorm of the whole query and key projections, every head at once."""
    return m.get("qk_norm") == "whole"


# OLMoE: Llama's attention with QK-norm over the whole projections (q_norm: num_heads·d_k wide,
# k_norm: num_kv_heads·d_k), and in every layer the router ``mlp.gate`` and experts as Qwen's.
OLMOE_MAP = (
    Block(DECODER, prefix="model.layers.{n}.", layers="layers", params=(
        *QWEN_MOE_MAP[0].params[:4],  # norm-1, W_QKV, b_QKV, (Qwen3's per-head norms: off)
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "q"), when=qk_norm_whole),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "kv"), when=qk_norm_whole),
        *(p for p in QWEN_MOE_MAP[0].params[4:] if p.in_layers != "dense"
          and not p.ours.startswith("experts/shared") and p.ours != "experts/W_shared_gate"),
    )),
    NAME_MAP[1],
)  # fmt: skip
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
_COMMON_DEFAULTS: dict[str, Any] = {
    "head_dim": None, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1, "use_sliding_window": False,
    "pad_token_id": None,
}  # fmt: skip
ROPE_TYPES = ("default", "linear", "llama3")
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass
class LlamaCheckpoint:
    """A Llama-family checkpoint: model config keys, named weights, tokenizer (``checkpoint.Checkpoint``).

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


def load_llama(
    path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None
) -> LlamaCheckpoint:
    """The Llama-family checkpoint in folder ``path``, converted; ``name`` (a hub id) is used in ``source``.

    What reading and converting allocate is charged to one ``Budget`` before it is allocated."""
    folder = Path(path)
    with out_of_memory(folder):
        return _load(folder, float_dtype(dtype), name)


def _load(folder: Path, dtype: np.dtype, name: str | None) -> LlamaCheckpoint:
    config = read_config(folder)
    model = _model(config)
    budget = Budget()
    tensors, file = read_weights(folder, budget)
    weights = _convert(tensors, config, model, dtype, f"{folder / file}", budget)
    tokenizer = BPETokenizer(folder, size=config["vocab_size"])
    return LlamaCheckpoint(
        family=config["family"],
        model=model,
        weights=weights,
        tokenizer=tokenizer,
        bos_token_id=config["bos_token_id"],
        eos_token_id=config["eos_token_id"],
        pad_token_id=config["pad_token_id"],
        source=f"{name or folder} ({file})",
    )


def _model(config: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's keys of a checked config.json."""
    rope = config["rope"]
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
        "rope_theta": float(rope["rope_theta"]),
        "rope_scaling": rope["rope_type"],
        **_scaling(rope),
        "sliding_window": config["window"],
        "feed_forward": "gated",
        "activation": HF_ACTIVATIONS[config["hidden_act"]],
        "ffn_bias": config["mlp_bias"],
        "attention_bias": config["biases"],
        "qk_norm": "head" if config["model_type"] in ("qwen3", "qwen3_moe")
        else "whole" if config["model_type"] == "olmoe" else False,
        "tie_embeddings": config["tie_word_embeddings"],
        "output_bias": False,
        "scale_embeddings": False,
        **_experts(config),
        **config["layers"],
        **config["family"].conventions,
    }  # fmt: skip


def _experts(config: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's mixture-of-experts keys of a checked config.json (none for a dense family)."""
    if "experts" not in config:
        return {}
    moe = {
        "experts": config["experts"],
        "experts_per_token": config["num_experts_per_tok"],
        "norm_topk": config["norm_topk"],
        "router_aux_loss_coef": float(config["router_aux_loss_coef"]),
    }
    if config["model_type"] in ("mixtral", "olmoe"):  # each expert as wide as intermediate_size
        return moe
    shared = config["model_type"] == "qwen2_moe"
    # transformers ignores a layer of mlp_only_layers that the model does not have
    dense = sorted({i for i in config["mlp_only_layers"] if i < config["num_hidden_layers"]})
    return {**moe, "expert_d_ff": config["moe_intermediate_size"], "shared_experts": int(shared),
            "shared_expert_d_ff": config["shared_expert_intermediate_size"] if shared else None,
            "sparse_step": config["decoder_sparse_step"], "dense_layers": tuple(dense)}  # fmt: skip


def _scaling(rope: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's rope_* keys of a checked ``rope_parameters``."""
    if rope["rope_type"] == "linear":
        return {"rope_factor": float(rope["factor"])}
    if rope["rope_type"] == "llama3":
        return {
            "rope_factor": float(rope["factor"]),
            "rope_low_freq_factor": float(rope["low_freq_factor"]),
            "rope_high_freq_factor": float(rope["high_freq_factor"]),
            "rope_original_max_positions": rope["original_max_position_embeddings"],
        }
    return {}


def _positive_int(config: dict[str, Any], key: str, path: Path) -> int:
    value = config[key]
    if type(value) is not int or value < 1:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a positive integer")
    return value


def _number(value: Any, key: str, path: Path, low: float = 0.0) -> float:
    """config.json's ``key``, a finite number above ``low``: JSON's integers have no bound, and
    one of 400 digits is no float (its conversion would overflow far from here, naming no key)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > low:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a number above {low:g}")
    try:
        number = float(value)
    except OverflowError:  # an int past the largest float
        number = math.inf
    if number == math.inf:
        raise CheckpointError(f"{path}: {key} is {shown(value)}, not a finite number")
    return number


def read_config(folder: Path) -> dict[str, Any]:
    """config.json with its family's defaults filled in, every value this converter uses checked.

    Adds ``family`` (the record of its model_type), ``rope`` (the rotary parameters, standardised
    as transformers does: ``rope_scaling`` or ``rope_parameters``, ``rope_theta`` inside or beside
    it), ``biases`` (ModelConfig's attention_bias) and ``window`` (the sliding window, None for none)."""
    path = folder / "config.json"
    raw = read_config_json(folder)
    family = raw.get("model_type")
    record = find(READ, family)
    if record is None:
        raise CheckpointError(
            f"{path}: model_type is {shown(family)}; this converter reads "
            f"{', '.join(f.model_type for f in READ)}"
        )
    keep_none = {
        "num_key_value_heads",
        "head_dim",
        "eos_token_id",
        "bos_token_id",
        "pad_token_id",
        "sliding_window",
        "layer_types",  # Gemma 2 and 3: null, the pattern of sliding_window_pattern
        "attn_logit_softcapping",  # null: no cap
        "final_logit_softcapping",
    }
    config = with_defaults(record, raw, keep_none)
    config["family"] = record
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "max_position_embeddings"):  # fmt: skip
        _positive_int(config, key, path)
    heads = config["num_attention_heads"]
    if config["num_key_value_heads"] is None:
        config["num_key_value_heads"] = heads
    groups = _positive_int(config, "num_key_value_heads", path)
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
    if _positive_int(config, "head_dim", path) % 2:
        raise CheckpointError(
            f"{path}: head_dim is {config['head_dim']}: rotary turns pairs, so it must be even"
        )
    _number(config["rms_norm_eps"], "rms_norm_eps", path)
    if config["rms_norm_eps"] >= 1:
        raise CheckpointError(
            f"{path}: rms_norm_eps is {shown(config['rms_norm_eps'])}, not a small positive number"
        )
    if family == "gemma" and config["hidden_act"] == "gelu":  # as transformers reads Gemma's legacy value
        config["hidden_act"] = "gelu_pytorch_tanh"
    act = "hidden_activation" if family in LAYERED else "hidden_act"  # the key Gemma 2 and 3's MLP reads
    config["hidden_act"] = config[act]
    gemma = family in ("gemma", *LAYERED)
    mlp, acts = ("GeGLU", ("gelu_pytorch_tanh",)) if gemma else ("SwiGLU", ("silu", "swish"))
    if config["hidden_act"] not in acts:  # a list is not hashable: `in` on a tuple is safe
        raise CheckpointError(
            f"{path}: {act} is {shown(config['hidden_act'])}; the family's MLP is {mlp} ({acts[0]})"
        )
    for key in ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window"):
        if type(config[key]) is not bool:
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not true or false")
    if config["pretraining_tp"] not in (1, None):
        raise CheckpointError(
            f"{path}: pretraining_tp is {shown(config['pretraining_tp'])}: "
            "only 1 (projections not split) is read"
        )
    for key in ("bos_token_id", "pad_token_id"):
        if config[key] is not None and (type(config[key]) is not int or config[key] < 0):
            raise CheckpointError(f"{path}: {key} is {shown(config[key])}, not a token id")
    config["eos_token_id"] = _eos(config["eos_token_id"], path)
    config["rope"] = _rope(raw, config, path) if family != "gemma3_text" else _layer_rope(raw, config, path)
    config["layers"] = _layers(config, raw, path) if family in LAYERED else {}
    config["window"] = _window(family, config, path)
    config["biases"] = "qkv" if family == "qwen2" else config["attention_bias"]
    if family == "qwen2_moe":  # Q, K, V biases when qkv_bias says (by default)
        if type(config["qkv_bias"]) is not bool:
            raise CheckpointError(f"{path}: qkv_bias is {shown(config['qkv_bias'])}, not true or false")
        config["biases"] = "qkv" if config["qkv_bias"] else False
    if family == "qwen2" and raw.get("attention_bias") not in (None, True):
        raise CheckpointError(
            f"{path}: attention_bias is {shown(raw['attention_bias'])}; Qwen2 always has Q, K, V biases"
        )
    if family != "llama" and config["mlp_bias"]:
        raise CheckpointError(f"{path}: mlp_bias is true; {family}'s MLP has no biases")
    if family in ("mistral", "gemma", *LAYERED, "olmo2") and config["attention_bias"]:
        raise CheckpointError(f"{path}: attention_bias is true; {record.name}'s attention has no biases")
    if family in MOE_TYPES:
        _check_experts(config, path)
    generation = _generation_eos(folder)  # what generate stops on, as transformers reads it
    if generation is not None:
        config["eos_token_id"] = _eos(generation, folder / "generation_config.json")
    return config


MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")


def _check_experts(config: dict[str, Any], path: Path) -> None:
    """A mixture's experts: E of them, each token to k ≤ E, the dense layers' numbers; adds ``experts``
    (E) and ``norm_topk`` (Mixtral always renormalises; Qwen's say so in ``norm_topk_prob``)."""
    mixtral = config["model_type"] == "mixtral"
    # transformers 5 writes num_local_experts for every family (Qwen's num_experts is its alias)
    count = "num_local_experts" if "num_local_experts" in config else "num_experts"
    config["experts"] = _positive_int(config, count, path)
    config["experts_key"] = count
    config["norm_topk"] = True if mixtral else config["norm_topk_prob"]
    if type(config["norm_topk"]) is not bool:
        raise CheckpointError(f"{path}: norm_topk_prob is {shown(config['norm_topk'])}, not true or false")
    if config["model_type"] == "olmoe" and config["clip_qkv"] is not None:
        raise CheckpointError(
            f"{path}: clip_qkv is {shown(config['clip_qkv'])}: clamping Q, K and V is not supported"
        )
    if config["model_type"] in ("qwen2_moe", "qwen3_moe"):
        _positive_int(config, "moe_intermediate_size", path)
        if config["model_type"] == "qwen2_moe":
            _positive_int(config, "shared_expert_intermediate_size", path)
        _positive_int(config, "decoder_sparse_step", path)
        dense = config["mlp_only_layers"]
        if type(dense) is not list or any(type(i) is not int or i < 0 for i in dense):
            raise CheckpointError(f"{path}: mlp_only_layers is {shown(dense)}, not a list of layer numbers")
    k = _positive_int(config, "num_experts_per_tok", path)
    if k > config["experts"]:
        raise CheckpointError(
            f"{path}: num_experts_per_tok is {k}, more than the {config['experts']} experts ({count})"
        )
    coef = config["router_aux_loss_coef"]
    if isinstance(coef, bool) or not isinstance(coef, int | float) or not 0 <= coef < float("inf"):
        raise CheckpointError(f"{path}: router_aux_loss_coef is {shown(coef)}, not a number ≥ 0")


def _generation_eos(folder: Path) -> Any:
    """generation_config.json's ``eos_token_id``, which transformers' ``generate`` stops on when the
    file has it (Qwen2-Instruct: ``<|im_end|>`` and ``<|endoftext|>``, where config.json names one);
    None when there is no such file or key."""
    path = folder / "generation_config.json"
    if not path.exists():  # a FIFO or a device there is refused by read_json, not skipped as absent
        return None
    generation = read_json(path, MAX_CONFIG_BYTES)
    return generation.get("eos_token_id") if isinstance(generation, dict) else None


def _eos(value: Any, path: Path) -> int | tuple[int, ...] | None:
    """``eos_token_id``: one id, a list of them (Llama 3), or null."""
    if value is None:
        return None
    ids = value if isinstance(value, list) else [value]
    if not 0 < len(ids) <= 64 or any(type(i) is not int or i < 0 for i in ids):
        raise CheckpointError(f"{path}: eos_token_id is {shown(value)}, not a token id or a list of them")
    return tuple(ids) if isinstance(value, list) else value


def _rope(raw: dict[str, Any], config: dict[str, Any], path: Path, name: str | None = None) -> dict[str, Any]:
    """The rotary parameters as transformers 5 standardises them (``convert_rope_params_to_dict``):
    ``rope_scaling`` (older files) or ``rope_parameters``, its ``type`` or ``rope_type`` (default
    "default"), its ``rope_theta`` or the top-level one (default 10,000); llama3's
    ``original_max_position_embeddings`` defaults to max_position_embeddings. ``name``: the key a
    refusal names, when not the file's own (Gemma 3's ``rope_parameters.full_attention``)."""
    parameters = raw.get("rope_parameters")  # [] or false: transformers refuses them (rope_scaling's: none)
    if parameters is not None and not isinstance(parameters, dict):
        raise CheckpointError(f"{path}: {name or 'rope_parameters'} is {shown(parameters)}, not an object")
    given = raw.get("rope_scaling") or parameters or {}
    key = name or ("rope_scaling" if raw.get("rope_scaling") else "rope_parameters")
    if not isinstance(given, dict):
        raise CheckpointError(f"{path}: {key} is {shown(given)}, not an object")
    rope = dict(given)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{path}: {key}'s rope type {shown(kind)} is not supported (supported: {', '.join(ROPE_TYPES)})"
        )
    if rope.get("partial_rotary_factor", 1.0) != 1.0 or raw.get("partial_rotary_factor", 1.0) != 1.0:
        raise CheckpointError(f"{path}: partial_rotary_factor is not 1: only whole heads are rotated here")
    rope["rope_type"] = kind
    rope["rope_theta"] = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
    if _number(rope["rope_theta"], "rope_theta", path) <= 1:
        raise CheckpointError(f"{path}: rope_theta is {shown(rope['rope_theta'])}, not more than 1")
    if kind in ("linear", "llama3"):
        _number(rope.get("factor"), f"{key}.factor", path)
    if kind == "llama3":
        rope.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
        low = _number(rope.get("low_freq_factor"), f"{key}.low_freq_factor", path)
        high = _number(rope.get("high_freq_factor"), f"{key}.high_freq_factor", path)
        if not low < high:
            raise CheckpointError(
                f"{path}: {key}: low_freq_factor ({low:g}) must be below high_freq_factor ({high:g})"
            )
        original = rope["original_max_position_embeddings"]
        if type(original) is not int or original < 1:
            raise CheckpointError(
                f"{path}: {key}.original_max_position_embeddings is {shown(original)}, not a positive integer"
            )
    return rope


# Gemma 2 and 3: sliding and full layers in a pattern, and the keys of their attention and logits.
LAYERED = ("gemma2", "gemma3_text")
LAYER_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}  # transformers' -> ours
CAPS = {"attn_logit_softcapping": "attention_softcap", "final_logit_softcapping": "logit_softcap"}


def _layer_rope(raw: dict[str, Any], config: dict[str, Any], path: Path) -> dict[str, Any]:
    """Gemma 3's rotary parameters, one set per kind of layer, as transformers 5 standardises them
    (``Gemma3TextConfig.convert_rope_params_to_dict``): ``rope_parameters`` of ``full_attention``
    and ``sliding_attention``, or (older files) ``rope_theta`` (default 1,000,000) and
    ``rope_scaling`` for the full layers, ``rope_local_base_freq`` (default 10,000) for the sliding
    ones. The full layers' are returned (scaled as any model's may be: a linear factor of 8 where
    config.json says so), with ``local_theta``, the sliding layers' base: never scaled here."""
    given = raw.get("rope_parameters") or {}
    if not isinstance(given, dict) or any(k not in LAYER_KINDS for k in given):
        raise CheckpointError(
            f"{path}: rope_parameters is {shown(given)}: Gemma 3's has one object per kind of layer "
            "(full_attention, sliding_attention)"
        )
    full, local = given.get("full_attention") or {}, given.get("sliding_attention") or {}
    for key, part in (("full_attention", full), ("sliding_attention", local)):
        if not isinstance(part, dict):
            raise CheckpointError(f"{path}: rope_parameters.{key} is {shown(part)}, not an object")
    scaling = raw.get("rope_scaling") or {}
    if not isinstance(scaling, dict):
        raise CheckpointError(f"{path}: rope_scaling is {shown(scaling)}, not an object")
    full = {**full, **scaling, "rope_theta": full.get("rope_theta", raw.get("rope_theta", 1_000_000.0))}
    rope = _rope({"rope_parameters": full}, config, path, "rope_parameters.full_attention")
    kind = local.get("rope_type", local.get("type", "default"))
    if kind != "default":
        raise CheckpointError(
            f"{path}: rope_parameters.sliding_attention's rope type is {shown(kind)}: the sliding layers "
            "turn by their own base, unscaled (default)"
        )
    theta = local.get("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
    if _number(theta, "rope_parameters.sliding_attention.rope_theta", path) <= 1:
        raise CheckpointError(
            f"{path}: rope_parameters.sliding_attention.rope_theta is {shown(theta)}, not more than 1"
        )
    return {**rope, "local_theta": float(theta)}


def _layers(config: dict[str, Any], raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys of Gemma 2 and 3's attention and logits: each layer's kind
    (``layer_types``; older files: Gemma 2 alternates sliding and full, Gemma 3 has every
    ``sliding_window_pattern``-th layer full, 6 by default), the score scale
    (``query_pre_attn_scalar``), the soft caps of the scores and of the logits (null: none), and
    Gemma 3's rotary base of its sliding layers."""
    n = config["num_hidden_layers"]
    types = config["layer_types"]
    if types is None:
        every = 2 if config["model_type"] == "gemma2" else raw.get("sliding_window_pattern", 6)
        if type(every) is not int or every < 1:
            raise CheckpointError(f"{path}: sliding_window_pattern is {shown(every)}, not a positive integer")
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
    if not isinstance(types, list):
        raise CheckpointError(f"{path}: layer_types is {shown(types)}, not a list")
    if len(types) != n:
        raise CheckpointError(
            f"{path}: layer_types has {len(types)} entries for num_hidden_layers {n}: one per layer"
        )
    for i, kind in enumerate(types):
        if not isinstance(kind, str) or kind not in LAYER_KINDS:
            raise CheckpointError(
                f"{path}: layer_types[{i}] is {shown(kind)}; supported: {', '.join(LAYER_KINDS)}"
            )
    if config["use_bidirectional_attention"]:
        raise CheckpointError(
            f"{path}: use_bidirectional_attention is {shown(config['use_bidirectional_attention'])}: "
            "only causal (decoder) attention is read"
        )
    caps = {}  # c·tanh(s / c) of the scores and of the logits; null: none
    for key, ours in CAPS.items():
        caps[ours] = None if config[key] is None else _number(config[key], key, path)
    rope = config["rope"]
    return {
        "layer_types": tuple(LAYER_KINDS[kind] for kind in types),
        "score_scale": _number(config["query_pre_attn_scalar"], "query_pre_attn_scalar", path),
        **caps,
        **({"local_rope_theta": rope["local_theta"]} if "local_theta" in rope else {}),
    }


def _full_layers(config: dict[str, Any], path: Path) -> None:
    """Qwen's ``layer_types``, when config.json gives them: one ``full_attention`` a layer (what
    transformers derives without a window); a sliding layer, a missing one or another value is
    refused (transformers would mask by it, or fail on it)."""
    types, n = config.get("layer_types"), config["num_hidden_layers"]
    if types is not None and (
        not isinstance(types, list) or len(types) != n or any(t != "full_attention" for t in types)
    ):
        raise CheckpointError(
            f'{path}: layer_types is {shown(types)}; only "full_attention" for each of the {n} layers '
            f"is read ({config['family'].name}'s sliding layers are not supported)"
        )


def _window(family: str, config: dict[str, Any], path: Path) -> int | None:
    """The sliding window every layer uses, or None: Mistral's ``sliding_window``; Qwen2 uses one
    only with ``use_sliding_window``, on some layers (refused: one window for all layers here)."""
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if config["use_sliding_window"]:
            raise CheckpointError(
                f"{path}: use_sliding_window is true: {config['family'].name}'s window on some layers only "
                "is not supported"
            )
        if family != "qwen3_moe":  # transformers masks each layer as layer_types says
            _full_layers(config, path)
        return None
    if family in ("llama", "gemma", "olmo2"):
        return None
    window = config["sliding_window"]
    if family in LAYERED:  # the window of the sliding layers of layer_types, however long
        if "sliding" not in config["layers"]["layer_types"]:
            return None
        if type(window) is not int or window < 1:
            raise CheckpointError(
                f"{path}: sliding_window is {shown(window)}, but layer_types has sliding layers: "
                "it must be a positive integer"
            )
        return window
    if window is not None and (type(window) is not int or window < 1):
        raise CheckpointError(f"{path}: sliding_window is {shown(window)}, not a positive integer or null")
    if window is not None and window >= 2**63:  # transformers: "Overflow when unpacking long long"
        context = config["max_position_embeddings"]
        raise CheckpointError(
            f"{path}: sliding_window is {shown(window)}, past what transformers runs (2⁶³ − 1); a window "
            f"at least as long as the context (max_position_embeddings, {context:,}) is no window: "
            "null says so"
        )
    if window is not None and window >= config["max_position_embeddings"]:
        return None  # every position sees all those before it, as with no window
    return window


def _convert(
    tensors: Mapping[str, np.ndarray], config: dict[str, Any], model: dict[str, Any], dtype: np.dtype,
    where: str, budget: Budget,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Our named weights from the checkpoint's tensors (``NAME_MAP`` walked forward, then the table
    and the output layer), every shape checked against config.json first, and the layers and the
    memory counted before the first is made."""
    d, vocab, d_k = config["hidden_size"], config["vocab_size"], config["head_dim"]
    names = set(tensors)
    check_layers(
        names,
        first_tensor(config["family"].stacks[0]),
        "num_hidden_layers",
        config["num_hidden_layers"],
        where,
    )
    if config["model_type"] in MOE_TYPES:  # as many experts as config.json says, before their rows
        expert = next(p.theirs[0].name for b in config["family"].stacks for p in b.params if p.each_expert)
        check_experts(names, expert, config["experts_key"], config["experts"], where)
    taker = Taker(tensors, where)
    taker.charge(budget, dtype)
    take = taker.take
    weights = convert(config["family"].rows(model), taker, dtype)

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


# One record per model_type: they differ in their config's defaults (transformers 5's LlamaConfig,
# MistralConfig, Qwen2Config) and in what read_config accepts of them.
LLAMA = Family(
    model_type="llama", name="Llama", architecture="decoder-only", transformers="LlamaForCausalLM",
    tokenizer=BPETokenizer,
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
        "max_position_embeddings": 2048, "eos_token_id": 2, "bos_token_id": 1, "sliding_window": None,
    },
    name_map=NAME_MAP, sizes=sizes, size_keys=SIZE_KEYS, load=load_llama,
)  # fmt: skip
MISTRAL = dataclasses.replace(
    LLAMA, model_type="mistral", name="Mistral", transformers="MistralForCausalLM",
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32, "eos_token_id": 2, "bos_token_id": 1, "sliding_window": 4096,
    },
)  # fmt: skip
QWEN2 = dataclasses.replace(
    LLAMA, model_type="qwen2", name="Qwen2", transformers="Qwen2ForCausalLM",
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 32768, "eos_token_id": None, "bos_token_id": None, "sliding_window": None,
    },
)  # fmt: skip
# Qwen3: Qwen2 with an RMSNorm of each head's queries and keys (q_norm, k_norm), a head_dim of its
# own (128 when config.json does not say), and no Q/K/V biases unless attention_bias (then O's too).
QWEN3 = dataclasses.replace(
    LLAMA, model_type="qwen3", name="Qwen3", transformers="Qwen3ForCausalLM",
    defaults={**QWEN2.defaults, "head_dim": 128, "sliding_window": 4096},
)  # fmt: skip
# Mixtral: Mistral's attention, a mixture of experts in every layer (transformers 5's MixtralConfig).
MIXTRAL = dataclasses.replace(
    LLAMA, model_type="mixtral", name="Mixtral", transformers="MixtralForCausalLM",
    defaults={
        **MISTRAL.defaults, "sliding_window": None, "num_local_experts": 8, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.001,
    },
    name_map=MIXTRAL_MAP,
)  # fmt: skip
_QWEN_MOE_DEFAULTS = {
    **QWEN2.defaults, "decoder_sparse_step": 1, "num_experts_per_tok": 4, "num_experts": 60,
    "norm_topk_prob": False, "router_aux_loss_coef": 0.001, "mlp_only_layers": [],
}  # fmt: skip
# Qwen2-MoE: Qwen2's attention (Q, K, V biases when qkv_bias), experts of moe_intermediate_size and
# a shared expert of shared_expert_intermediate_size behind a sigmoid gate.
QWEN2_MOE = dataclasses.replace(
    LLAMA, model_type="qwen2_moe", name="Qwen2-MoE", transformers="Qwen2MoeForCausalLM",
    defaults={**_QWEN_MOE_DEFAULTS, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "qkv_bias": True, "intermediate_size": 5632},
    name_map=QWEN_MOE_MAP,
)  # fmt: skip
# Qwen3-MoE: Qwen3's attention (QK-norm), 128 experts, 8 a token, no shared expert.
QWEN3_MOE = dataclasses.replace(
    LLAMA, model_type="qwen3_moe", name="Qwen3-MoE", transformers="Qwen3MoeForCausalLM",
    defaults={**_QWEN_MOE_DEFAULTS, "num_key_value_heads": 4, "moe_intermediate_size": 768,
              "num_experts_per_tok": 8, "num_experts": 128, "intermediate_size": 6144},
    name_map=QWEN_MOE_MAP,
)  # fmt: skip
# OLMoE: QK-norm over the whole projections, 64 experts, 8 a token, their probabilities as they are.
OLMOE = dataclasses.replace(
    LLAMA, model_type="olmoe", name="OLMoE", transformers="OlmoeForCausalLM",
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": None,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "eos_token_id": 50279, "bos_token_id": None,
        "pad_token_id": 1, "sliding_window": None, "clip_qkv": None, "num_experts_per_tok": 8,
        "num_experts": 64, "router_aux_loss_coef": 0.01, "norm_topk_prob": False,
    },
    name_map=OLMOE_MAP,
)  # fmt: skip
# Gemma: Llama's layer under Gemma's conventions (the (1 + gamma) RMSNorm, embeddings scaled by
# √d_model, GeGLU), tied, with multi-query attention in the 2B (transformers 5's GemmaConfig).
GEMMA = dataclasses.replace(
    LLAMA, model_type="gemma", name="Gemma", transformers="GemmaForCausalLM", name_map=GEMMA_MAP,
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "eos_token_id": 1,
        "bos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True, "sliding_window": None,
    },
    conventions={"norm": "rmsnorm-plus-one", "scale_embeddings": True},
)  # fmt: skip
# Gemma 2: Gemma's layer with a norm on both sides of each sublayer, sliding and full layers
# alternating, the scores divided by √query_pre_attn_scalar and soft-capped at 50, the logits at 30
# (transformers 5's Gemma2Config).
_GEMMA2_DEFAULTS = {
    **GEMMA.defaults, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "layer_types": None, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
    "use_bidirectional_attention": None,
}  # fmt: skip
GEMMA2 = dataclasses.replace(
    GEMMA, model_type="gemma2", name="Gemma 2", transformers="Gemma2ForCausalLM", name_map=GEMMA2_MAP,
    defaults=_GEMMA2_DEFAULTS,
    conventions={"norm": "rmsnorm-plus-one", "scale_embeddings": True, "norm_placement": "both"},
)  # fmt: skip
# Gemma 3 (text: Gemma3ForCausalLM, 270M and 1B): Gemma 2's layer with each head's queries and keys
# normed, five sliding layers to a full one, two rotary bases, no soft caps (Gemma3TextConfig).
GEMMA3_TEXT = dataclasses.replace(
    GEMMA2, model_type="gemma3_text", name="Gemma 3", transformers="Gemma3ForCausalLM", name_map=GEMMA3_MAP,
    defaults={
        **_GEMMA2_DEFAULTS, "vocab_size": 262208, "max_position_embeddings": 131072,
        "attn_logit_softcapping": None, "final_logit_softcapping": None, "use_bidirectional_attention": False,
    },
    conventions={**GEMMA2.conventions, "qk_norm": "head"},
)  # fmt: skip
# OLMo 2: a norm on each sublayer's output only, and QK-norm over the whole projection.
OLMO2 = dataclasses.replace(
    LLAMA, model_type="olmo2", name="OLMo 2", transformers="Olmo2ForCausalLM", name_map=OLMO2_MAP,
    defaults={
        **_COMMON_DEFAULTS, "vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
        "max_position_embeddings": 2048, "eos_token_id": 50279, "bos_token_id": None, "pad_token_id": 1,
        "rms_norm_eps": 1e-5, "sliding_window": None,
    },
    conventions={"norm_placement": "output", "qk_norm": "whole"},
)  # fmt: skip
FAMILIES = (
    LLAMA,
    MISTRAL,
    QWEN2,
    QWEN3,
    MIXTRAL,
    QWEN2_MOE,
    QWEN3_MOE,
    OLMOE,
)  # one module of transformers each
READ = (*FAMILIES, GEMMA, GEMMA2, GEMMA3_TEXT, OLMO2)  # every model_type this converter reads
