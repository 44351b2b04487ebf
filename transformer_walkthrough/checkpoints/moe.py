"""Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE: Llama's layer (``decoder.py``) with a mixture of
experts where the MLP was.

Each sparse layer has a router (``W_router``: a score per expert for each token) and E experts,
each a SwiGLU MLP of its own width; each token goes to its k best experts (``num_experts_per_tok``),
whose outputs are summed weighted by the router's probabilities (renormalised over the k when
``norm_topk_prob`` says, Mixtral always). They differ in their attention and in what surrounds the
experts:

- ``mixtral``: Mistral's attention (``sliding_window``), every layer sparse, each expert as wide as
  ``intermediate_size``;
- ``qwen2_moe``: Qwen2's attention (Q, K, V biases while ``qkv_bias``), experts of
  ``moe_intermediate_size``, and a shared expert of ``shared_expert_intermediate_size`` that every
  token goes through, behind a sigmoid gate; a layer of ``mlp_only_layers`` or off
  ``decoder_sparse_step`` is dense (Qwen2's MLP, of ``intermediate_size``);
- ``qwen3_moe``: Qwen3's attention (QK-norm of each head), no shared expert;
- ``olmoe``: QK-norm over the whole projections, every layer sparse.

The experts' tensors are one row of the name map each (``Param.each_expert``), as save_pretrained
writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..model.architecture import DECODER
from .config_keys import boolean, positive_int, rope, rope_keys
from .decoder import (
    ATTENTION_ROWS,
    COMMON_DEFAULTS,
    FEED_FORWARD_ROWS,
    NAME_MAP,
    NOT_NULL,
    LlamaCheckpoint,
    activation,
    experts_key,
    load,
)
from .errors import CheckpointError
from .family import Block, Param, Tensor, only_in
from .jsonfile import shown
from .llama import LLAMA, MISTRAL, QWEN, QWEN2, qwen_window, sliding_window

# Mixtral: Mistral's layers with a mixture of experts where the MLP was (every layer sparse): the
# router ``gate`` and each expert's SwiGLU, w1 the gate, w3 up, w2 down.
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


def load_moe(path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None) -> LlamaCheckpoint:
    """The Mixtral, Qwen2-MoE, Qwen3-MoE or OLMoE checkpoint in folder ``path``, converted; ``name``
    (a hub id) is used in ``source``."""
    return load(path, dtype, name, FAMILIES, moe_keys)


def moe_keys(config: dict[str, Any], raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys that the mixtures read each in their own way: the attention's (as the
    family they extend reads it), then the experts'."""
    family = config["model_type"]
    keys = {
        "activation": activation(config, path),
        **rope_keys(rope(raw, config, path)),
        "sliding_window": qwen_window(config, path) if family in QWEN else sliding_window(config, path),
        "attention_bias": config["attention_bias"],
    }
    if family == "qwen2_moe":  # Q, K, V biases when qkv_bias says (by default)
        keys["attention_bias"] = "qkv" if boolean(config, "qkv_bias", path) else False
    if config["mlp_bias"]:
        raise CheckpointError(f"{path}: mlp_bias is true; {family}'s MLP has no biases")
    return {**keys, **expert_keys(config, path)}


def expert_keys(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys of a mixture, checked: E experts, each token to k ≤ E, renormalised or not
    (Mixtral always; Qwen's and OLMoE's say so in ``norm_topk_prob``), the widths and the dense
    layers; the load-balancing loss's weight."""
    family, count = config["model_type"], experts_key(config)
    experts = positive_int(config, count, path)
    norm_topk = True if family == "mixtral" else boolean(config, "norm_topk_prob", path)
    if family == "olmoe" and config["clip_qkv"] is not None:
        raise CheckpointError(
            f"{path}: clip_qkv is {shown(config['clip_qkv'])}: clamping Q, K and V is not supported"
        )
    if family in ("qwen2_moe", "qwen3_moe"):
        positive_int(config, "moe_intermediate_size", path)
        if family == "qwen2_moe":
            positive_int(config, "shared_expert_intermediate_size", path)
        positive_int(config, "decoder_sparse_step", path)
        dense = config["mlp_only_layers"]
        if type(dense) is not list or any(type(i) is not int or i < 0 for i in dense):
            raise CheckpointError(f"{path}: mlp_only_layers is {shown(dense)}, not a list of layer numbers")
    k = positive_int(config, "num_experts_per_tok", path)
    if k > experts:
        raise CheckpointError(
            f"{path}: num_experts_per_tok is {k}, more than the {experts} experts ({count})"
        )
    coef = config["router_aux_loss_coef"]
    if isinstance(coef, bool) or not isinstance(coef, int | float) or not 0 <= coef < float("inf"):
        raise CheckpointError(f"{path}: router_aux_loss_coef is {shown(coef)}, not a number ≥ 0")
    keys = {"experts": experts, "experts_per_token": k, "norm_topk": norm_topk,
            "router_aux_loss_coef": float(coef)}  # fmt: skip
    if family in ("mixtral", "olmoe"):  # each expert as wide as intermediate_size
        return keys
    shared = family == "qwen2_moe"
    # transformers ignores a layer of mlp_only_layers that the model does not have
    dense_layers = sorted({i for i in config["mlp_only_layers"] if i < config["num_hidden_layers"]})
    return {**keys, "expert_d_ff": config["moe_intermediate_size"], "shared_experts": int(shared),
            "shared_expert_d_ff": config["shared_expert_intermediate_size"] if shared else None,
            "sparse_step": config["decoder_sparse_step"], "dense_layers": tuple(dense_layers)}  # fmt: skip


# The experts' keys whose null transformers refuses: the count (Mixtral's num_local_experts; Qwen's
# and OLMoE's num_experts, of which transformers 5 makes num_local_experts an alias), k, the loss's
# weight; and Qwen's widths and pattern of sparse layers.
EXPERT_KEYS = ("num_experts_per_tok", "router_aux_loss_coef")
COUNT_KEYS = ("num_experts", "num_local_experts")
QWEN_EXPERT_KEYS = (*COUNT_KEYS, "moe_intermediate_size", "decoder_sparse_step", "norm_topk_prob")
# Mixtral: Mistral's attention, a mixture of experts in every layer (transformers 5's MixtralConfig).
MIXTRAL = dataclasses.replace(
    LLAMA, model_type="mixtral", name="Mixtral", transformers="MixtralForCausalLM",
    defaults={
        **MISTRAL.defaults, "sliding_window": None, "num_local_experts": 8, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.001, "rope_theta": 1_000_000.0,  # MixtralConfig.default_theta
    },
    name_map=MIXTRAL_MAP, load=load_moe,
    not_null=(*NOT_NULL, "hidden_act", "num_key_value_heads", "num_local_experts", *EXPERT_KEYS),
)  # fmt: skip
_QWEN_MOE_DEFAULTS = {
    **QWEN2.defaults, "decoder_sparse_step": 1, "num_experts_per_tok": 4, "num_experts": 60,
    "norm_topk_prob": False, "router_aux_loss_coef": 0.001, "mlp_only_layers": [],
}  # fmt: skip
# Qwen2-MoE: Qwen2's attention (Q, K, V biases when qkv_bias), experts of moe_intermediate_size and
# a shared expert of shared_expert_intermediate_size behind a sigmoid gate.
QWEN2_MOE = dataclasses.replace(
    MIXTRAL, model_type="qwen2_moe", name="Qwen2-MoE", transformers="Qwen2MoeForCausalLM",
    defaults={**_QWEN_MOE_DEFAULTS, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "qkv_bias": True, "intermediate_size": 5632},
    name_map=QWEN_MOE_MAP,
    not_null=(*NOT_NULL, "hidden_act", "use_sliding_window", "head_dim", *EXPERT_KEYS, *QWEN_EXPERT_KEYS,
              "shared_expert_intermediate_size", "qkv_bias"),
)  # fmt: skip
# Qwen3-MoE: Qwen3's attention (QK-norm), 128 experts, 8 a token, no shared expert.
QWEN3_MOE = dataclasses.replace(
    MIXTRAL, model_type="qwen3_moe", name="Qwen3-MoE", transformers="Qwen3MoeForCausalLM",
    defaults={**_QWEN_MOE_DEFAULTS, "num_key_value_heads": 4, "moe_intermediate_size": 768,
              "num_experts_per_tok": 8, "num_experts": 128, "intermediate_size": 6144},
    name_map=QWEN_MOE_MAP, conventions={"qk_norm": "head"},
    not_null=(*NOT_NULL, "hidden_act", "use_sliding_window", "head_dim", "num_key_value_heads",
              "attention_bias", *EXPERT_KEYS, *QWEN_EXPERT_KEYS),
)  # fmt: skip
# OLMoE: QK-norm over the whole projections, 64 experts, 8 a token, their probabilities as they are.
OLMOE = dataclasses.replace(
    MIXTRAL, model_type="olmoe", name="OLMoE", transformers="OlmoeForCausalLM",
    defaults={
        **COMMON_DEFAULTS, "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": None,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "eos_token_id": 50279, "bos_token_id": None,
        "pad_token_id": 1, "sliding_window": None, "clip_qkv": None, "num_experts_per_tok": 8,
        "num_experts": 64, "router_aux_loss_coef": 0.01, "norm_topk_prob": False,
    },
    name_map=OLMOE_MAP, conventions={"qk_norm": "whole"},
    not_null=(*NOT_NULL, "hidden_act", "head_dim", "attention_bias", *EXPERT_KEYS, *COUNT_KEYS,
              "norm_topk_prob"),
)  # fmt: skip
FAMILIES = (MIXTRAL, QWEN2_MOE, QWEN3_MOE, OLMOE)  # one module of transformers each
