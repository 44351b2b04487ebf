"""Gemma, Gemma 2, Gemma 3 and OLMo 2: Llama's layer (``decoder.py``) under conventions of their own,
their name maps, and what they read of config.json their own way.

Gemma is Llama's layer with Gemma's conventions: an RMSNorm whose weight is stored as its offset
from 1 (``norm: rmsnorm-plus-one``), embeddings scaled by √d_model in the model's dtype
(``scale_embeddings``), GeGLU (``feed_forward: gated``, ``activation: gelu-tanh``), a tied output
layer. Gemma 2 (and Gemma 3) put a second norm on each sublayer's output, before the residual sum
(``norm_placement: both``): ``post_attention_layernorm`` is the attention's output norm there,
where in Gemma and Llama it is the norm before the MLP. Gemma 3 adds an RMSNorm of each head's
queries and keys (``qk_norm: head``, its weight 1 + gamma too), a score scale of its own
(``query_pre_attn_scalar``), and local and global layers: what config.json says of each layer
(``layer_types``: sliding over ``sliding_window`` positions, or full), the soft caps
``attn_logit_softcapping`` and ``final_logit_softcapping``, and (Gemma 3) a rotary base per kind of
layer, the full layers' alone scaled (``layer_rope``). OLMo 2 is Llama's layer with a norm on each
sublayer's output only, and the queries and keys normed over the whole projection.

They are converted as Llama's layer is (``decoder.load``), with what they read their own way
(``gemma_keys``). Each map is read forward by the converter and backward by the tests' reference
(``compare.gemma``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from ..model.architecture import DECODER
from .config_keys import number, rope, rope_keys
from .decoder import COMMON_DEFAULTS, NOT_NULL, LlamaCheckpoint, activation, load
from .errors import CheckpointError
from .family import Block, Param, Tensor
from .jsonfile import shown
from .llama import LLAMA

_ATTENTION = (
    Param("masked-attention/W_QKV", Tensor("self_attn.q_proj.weight", "q", "d"),
          Tensor("self_attn.k_proj.weight", "kv", "d"), Tensor("self_attn.v_proj.weight", "kv", "d"),
          transposed=True),
    Param("masked-attention/W_O", Tensor("self_attn.o_proj.weight", "d", "q"), transposed=True),
)  # fmt: skip
_MLP = (
    Param("feed-forward/W_gate", Tensor("mlp.gate_proj.weight", "ff", "d"), transposed=True),
    Param("feed-forward/W_up", Tensor("mlp.up_proj.weight", "ff", "d"), transposed=True),
    Param("feed-forward/W_down", Tensor("mlp.down_proj.weight", "d", "ff"), transposed=True),
)
_FINAL = Block(DECODER, (Param("final-norm/gamma", Tensor("model.norm.weight", "d")),))
_LAYERS = "model.layers.{n}."

# Gemma: pre-norm, as Llama (input_layernorm before the attention, post_attention_layernorm before
# the MLP).
GEMMA_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("norm-2/gamma", Tensor("post_attention_layernorm.weight", "d")),
        *_MLP,
    )),
    _FINAL,
)  # fmt: skip

# Gemma 2: a norm on both sides of each sublayer, x + Norm(Sublayer(Norm(x))).
GEMMA2_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        Param("norm-2/gamma", Tensor("pre_feedforward_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip

# Gemma 3: Gemma 2's layer with each head's queries and keys normed (q_norm, k_norm).
GEMMA3_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "d_k")),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "d_k")),
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        Param("norm-2/gamma", Tensor("pre_feedforward_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip

# OLMo 2: no norm before a sublayer, one on its output (``norm_placement: output``), and the
# queries and keys normed over the whole projection (``qk_norm: whole``: q_norm over every query
# head's columns, k_norm over every key head's).
OLMO2_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        *_ATTENTION,
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "q")),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "kv")),
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip


def load_gemma(
    path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None
) -> LlamaCheckpoint:
    """The Gemma, Gemma 2, Gemma 3 or OLMo 2 checkpoint in folder ``path``, converted; ``name`` (a
    hub id) is used in ``source``."""
    return load(path, dtype, name, FAMILIES, gemma_keys)


# Gemma 2 and 3: sliding and full layers in a pattern, and the keys of their attention and logits.
LAYERED = ("gemma2", "gemma3_text")
LAYER_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}  # transformers' -> ours
CAPS = {"attn_logit_softcapping": "attention_softcap", "final_logit_softcapping": "logit_softcap"}


def gemma_keys(config: dict[str, Any], raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys that Gemma, Gemma 2, Gemma 3 and OLMo 2 read each in their own way: the
    MLP's activation (GeGLU but OLMo 2's), the rotation, each layer's kind and window, the score
    scale and the soft caps. None has biases."""
    family = config["model_type"]
    if family == "olmo2":
        act = activation(config, path)
    else:
        if family == "gemma" and config["hidden_act"] == "gelu":  # as transformers reads Gemma's legacy value
            config["hidden_act"] = "gelu_pytorch_tanh"
        key = "hidden_activation" if family in LAYERED else "hidden_act"  # the key Gemma 2 and 3's MLP reads
        act = activation(config, path, key, "GeGLU", ("gelu_pytorch_tanh",))
    found = rope(raw, config, path) if family != "gemma3_text" else layer_rope(raw, config, path)
    keys = {"activation": act, **rope_keys(found)}
    if "local_theta" in found:
        keys["local_rope_theta"] = found["local_theta"]
    if family in LAYERED:
        keys.update(layer_keys(config, raw, path))
        keys["sliding_window"] = _window(config, keys["layer_types"], path)
    if config["mlp_bias"]:
        raise CheckpointError(f"{path}: mlp_bias is true; {family}'s MLP has no biases")
    if config["attention_bias"]:
        name = config["family"].name
        raise CheckpointError(f"{path}: attention_bias is true; {name}'s attention has no biases")
    return keys


def layer_rope(raw: dict[str, Any], config: dict[str, Any], path: Path) -> dict[str, Any]:
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
    found = rope({"rope_parameters": full}, config, path, "rope_parameters.full_attention")
    kind = local.get("rope_type", local.get("type", "default"))
    if kind != "default":
        raise CheckpointError(
            f"{path}: rope_parameters.sliding_attention's rope type is {shown(kind)}: the sliding layers "
            "turn by their own base, unscaled (default)"
        )
    theta = local.get("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
    if number(theta, "rope_parameters.sliding_attention.rope_theta", path) <= 1:
        raise CheckpointError(
            f"{path}: rope_parameters.sliding_attention.rope_theta is {shown(theta)}, not more than 1"
        )
    return {**found, "local_theta": float(theta)}


def layer_keys(config: dict[str, Any], raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys of Gemma 2 and 3's attention and logits: each layer's kind
    (``layer_types``; older files: Gemma 2 alternates sliding and full, Gemma 3 has every
    ``sliding_window_pattern``-th layer full, 6 by default), the score scale
    (``query_pre_attn_scalar``), the soft caps of the scores and of the logits (null: none)."""
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
        caps[ours] = None if config[key] is None else number(config[key], key, path)
    return {
        "layer_types": tuple(LAYER_KINDS[kind] for kind in types),
        "score_scale": number(config["query_pre_attn_scalar"], "query_pre_attn_scalar", path),
        **caps,
    }


def _window(config: dict[str, Any], layer_types: tuple[str, ...], path: Path) -> int | None:
    """The window of the sliding layers of ``layer_types``, however long; None when there are none."""
    if "sliding" not in layer_types:
        return None
    window = config["sliding_window"]
    if type(window) is not int or window < 1:
        raise CheckpointError(
            f"{path}: sliding_window is {shown(window)}, but layer_types has sliding layers: "
            "it must be a positive integer"
        )
    return window


# Gemma: Llama's layer under Gemma's conventions (the (1 + gamma) RMSNorm, embeddings scaled by
# √d_model, GeGLU), tied, with multi-query attention in the 2B (transformers 5's GemmaConfig).
GEMMA = dataclasses.replace(
    LLAMA, model_type="gemma", name="Gemma", transformers="GemmaForCausalLM", name_map=GEMMA_MAP,
    defaults={
        **COMMON_DEFAULTS, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "eos_token_id": 1,
        "bos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True, "sliding_window": None,
    },
    conventions={"norm": "rmsnorm-plus-one", "scale_embeddings": True}, load=load_gemma,
    not_null=(*NOT_NULL, "hidden_act", "head_dim", "num_key_value_heads", "attention_bias"),
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
    not_null=(*NOT_NULL, "hidden_activation", "head_dim", "num_key_value_heads", "attention_bias",
              "query_pre_attn_scalar"),
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
        **COMMON_DEFAULTS, "vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
        "max_position_embeddings": 2048, "eos_token_id": 50279, "bos_token_id": None, "pad_token_id": 1,
        "rms_norm_eps": 1e-5, "sliding_window": None,
    },
    conventions={"norm_placement": "output", "qk_norm": "whole"}, load=load_gemma,
    not_null=(*NOT_NULL, "hidden_act", "head_dim", "attention_bias"),  # head_dim: None ** -0.5
)  # fmt: skip
FAMILIES = (GEMMA, GEMMA2, GEMMA3_TEXT, OLMO2)  # one module of transformers each
