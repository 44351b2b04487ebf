"""Llama 2 and 3 (SmolLM, TinyLlama), Mistral, Qwen2 and Qwen3: Llama's layer (``decoder.py``) as
each ``model_type`` configures it.

The four differ only in what their config may say, and Qwen3 in one step:

- ``llama``: ``attention_bias`` (Q, K, V and O), ``mlp_bias``, ``head_dim``;
- ``mistral``: ``sliding_window`` (each position sees the last ``sliding_window`` ones only), no biases;
- ``qwen2``: biases on Q, K, V always, none on O; ``use_sliding_window`` (refused when true);
- ``qwen3``: an RMSNorm of each head's queries and keys before the rotation (``q_norm``, ``k_norm``:
  our ``qk_norm: head``, ``gamma_Q``, ``gamma_K``), ``head_dim`` 128 unless it says, no biases but
  where ``attention_bias`` says (Q, K, V and O); ``use_sliding_window`` refused, as Qwen2's.

Rotary: ``rope_theta`` (or transformers 5's ``rope_parameters``), and ``rope_scaling`` (older
files) or ``rope_parameters`` of type ``default``, ``linear`` or ``llama3`` (Llama 3.1, 3.2); any
other type (yarn, dynamic, longrope) is refused, never approximated (``config_keys.rope``).

Their mixtures of experts (Mixtral, Qwen-MoE) are in ``moe.py``, and the families of Llama's
layer under conventions of their own (Gemma, OLMo 2) in ``gemma.py``; both read their windows as
here (``sliding_window``, ``qwen_window``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from .bpe import BPETokenizer
from .config_keys import rope, rope_keys
from .decoder import (
    COMMON_DEFAULTS,
    NAME_MAP,
    NOT_NULL,
    SIZE_KEYS,
    LlamaCheckpoint,
    activation,
    load,
    sizes,
)
from .errors import CheckpointError
from .family import Family
from .jsonfile import shown

QWEN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")  # the families whose window is use_sliding_window's


def load_llama(
    path: str | Path, dtype: str | np.dtype = "float32", name: str | None = None
) -> LlamaCheckpoint:
    """The Llama, Mistral, Qwen2 or Qwen3 checkpoint in folder ``path``, converted; ``name`` (a hub
    id) is used in ``source``."""
    return load(path, dtype, name, FAMILIES, llama_keys)


def llama_keys(config: dict[str, Any], raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """ModelConfig's keys that Llama, Mistral, Qwen2 and Qwen3 read each in their own way: the
    MLP's activation, the rotation, the window, the biases."""
    family = config["model_type"]
    keys = {
        "activation": activation(config, path),
        **rope_keys(rope(raw, config, path)),
        "sliding_window": sliding_window(config, path) if family == "mistral"
        else qwen_window(config, path) if family in QWEN else None,
    }  # fmt: skip
    if family == "qwen2" and raw.get("attention_bias") not in (None, True):
        raise CheckpointError(
            f"{path}: attention_bias is {shown(raw['attention_bias'])}; Qwen2 always has Q, K, V biases"
        )
    if family != "llama" and config["mlp_bias"]:
        raise CheckpointError(f"{path}: mlp_bias is true; {family}'s MLP has no biases")
    if family == "mistral" and config["attention_bias"]:
        raise CheckpointError(f"{path}: attention_bias is true; Mistral's attention has no biases")
    return {**keys, "attention_bias": "qkv" if family == "qwen2" else config["attention_bias"]}


def sliding_window(config: dict[str, Any], path: Path) -> int | None:
    """Mistral's window, which every layer uses (``sliding_window``), or None: null, or a window at
    least as long as the context (every position then sees all those before it, as with none)."""
    window = config["sliding_window"]
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
        return None
    return window


def qwen_window(config: dict[str, Any], path: Path) -> None:
    """Qwen's window: none. Qwen uses one only with ``use_sliding_window``, on some layers (refused:
    one window for all layers here); its ``layer_types``, when given, must say so."""
    if config["use_sliding_window"]:
        raise CheckpointError(
            f"{path}: use_sliding_window is true: {config['family'].name}'s window on some layers only "
            "is not supported"
        )
    if config["model_type"] != "qwen3_moe":  # transformers masks each layer as layer_types says
        _full_layers(config, path)


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


# One record per model_type: they differ in their config's defaults (transformers 5's LlamaConfig,
# MistralConfig, Qwen2Config, Qwen3Config) and in what llama_keys accepts of them.
LLAMA = Family(
    model_type="llama", name="Llama", architecture="decoder-only", transformers="LlamaForCausalLM",
    tokenizer=BPETokenizer,
    defaults={
        **COMMON_DEFAULTS, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
        "max_position_embeddings": 2048, "eos_token_id": 2, "bos_token_id": 1, "sliding_window": None,
    },
    name_map=NAME_MAP, sizes=sizes, size_keys=SIZE_KEYS, load=load_llama,
    not_null=(*NOT_NULL, "hidden_act", "attention_bias", "mlp_bias"),
)  # fmt: skip
MISTRAL = dataclasses.replace(
    LLAMA, model_type="mistral", name="Mistral", transformers="MistralForCausalLM",
    defaults={
        **COMMON_DEFAULTS, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32, "eos_token_id": 2, "bos_token_id": 1, "sliding_window": 4096,
    },
    not_null=(*NOT_NULL, "hidden_act", "num_key_value_heads"),
)  # fmt: skip
QWEN2 = dataclasses.replace(
    LLAMA, model_type="qwen2", name="Qwen2", transformers="Qwen2ForCausalLM",
    defaults={
        **COMMON_DEFAULTS, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 32768, "eos_token_id": None, "bos_token_id": None, "sliding_window": None,
    },
    not_null=(*NOT_NULL, "hidden_act", "use_sliding_window", "head_dim"),  # head_dim: None ** -0.5
)  # fmt: skip
# Qwen3: Qwen2 with an RMSNorm of each head's queries and keys (q_norm, k_norm), a head_dim of its
# own (128 when config.json does not say), and no Q/K/V biases unless attention_bias (then O's too).
QWEN3 = dataclasses.replace(
    LLAMA, model_type="qwen3", name="Qwen3", transformers="Qwen3ForCausalLM",
    defaults={**QWEN2.defaults, "head_dim": 128, "sliding_window": 4096},
    conventions={"qk_norm": "head"},
    not_null=(*NOT_NULL, "hidden_act", "use_sliding_window", "head_dim", "attention_bias"),
)  # fmt: skip
FAMILIES = (LLAMA, MISTRAL, QWEN2, QWEN3)  # one module of transformers each
