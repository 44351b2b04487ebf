"""Our weights in transformers' own ``LlamaForCausalLM``: the canonical implementation of the
Llama-style conventions (RMSNorm, rotary, SwiGLU, grouped-query attention), for the tests
(``tests/test_llama_style.py``) and the benchmarks (``bench_forward --convention llama``).

A test and benchmark helper: transformers and PyTorch are test dependencies, imported only here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import Config
from ..model.weights import Weights


def rope_parameters(m: Any) -> dict[str, Any]:
    """transformers 5's ``rope_parameters`` of a ModelConfig's rope_* keys."""
    rope: dict[str, Any] = {"rope_type": m.rope_scaling, "rope_theta": m.rope_theta}
    if m.rope_scaling in ("linear", "llama3"):
        rope["factor"] = m.rope_factor
    if m.rope_scaling == "llama3":
        rope |= {"low_freq_factor": m.rope_low_freq_factor, "high_freq_factor": m.rope_high_freq_factor,
                 "original_max_position_embeddings": m.rope_original_max_positions}  # fmt: skip
    return rope


def llama_with(config: Config, w: Weights, dtype: Any) -> Any:
    """A LlamaForCausalLM of the config's sizes holding our weights: the family's name map walked
    backward (each weight transposed back to nn.Linear's (out, in), W_QKV cut into q, k, v); a
    MistralForCausalLM, the same model with a sliding window, when the config has one; a
    Qwen3ForCausalLM, the same with each head's queries and keys normed, under ``qk_norm: head``;
    with a convention of Gemma 2, Gemma 3 or OLMo 2 (``gemma_conventions``), their attention in it."""
    import torch
    import transformers

    from ..checkpoints.family import invert, model_keys
    from ..checkpoints.llama import LLAMA, MISTRAL, QWEN3

    m = config.model
    family = (
        QWEN3 if m.qk_norm == "head"
        else LLAMA if m.sliding_window is None
        else MISTRAL
    )  # fmt: skip
    sizes = dict(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, intermediate_size=m.d_ff,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        rope_parameters=rope_parameters(m), max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu",
    )  # fmt: skip
    if family is LLAMA:
        hf = transformers.LlamaConfig(**sizes, attention_bias=False, mlp_bias=False)
    elif family is QWEN3:
        hf = transformers.Qwen3Config(**sizes, attention_bias=False)
    else:
        hf = transformers.MistralConfig(**sizes, sliding_window=m.sliding_window)
    hf._attn_implementation = "eager"
    model = getattr(transformers, family.transformers)(hf).to(dtype).eval()

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    theirs = invert(family.rows(model_keys(m)), w)
    sd = {name: t(a) for name, a in theirs.items()}
    sd |= {
        "model.embed_tokens.weight": t(w["decoder.embedding/E"]),
        "lm_head.weight": t(w["output.logits/W"].T),
    }
    if gemma_conventions(m):
        _gemma_attention(model, config, dtype)
        for i, layer in enumerate(model.model.layers):  # OLMo 2's q_norm spans every head's columns
            if hasattr(layer.self_attn, "q_norm") and m.qk_norm == "whole":
                sd[f"model.layers.{i}.self_attn.q_norm.weight"] = t(
                    w[f"decoder.{i}.masked-attention/gamma_Q"]
                )
                sd[f"model.layers.{i}.self_attn.k_norm.weight"] = t(
                    w[f"decoder.{i}.masked-attention/gamma_K"]
                )
            elif m.qk_norm == "head":  # Gemma 3's norm multiplies by (1 + w): w = gamma − 1
                for x in "qk":
                    name = f"model.layers.{i}.self_attn.{x}_norm.weight"
                    sd[name] = sd[name] - 1
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k for k in missing):  # only the rotary tables are not ours
        raise ValueError(f"llama_with: missing {missing}, unexpected {unexpected}")
    return model


def gemma_conventions(m: Any) -> bool:
    """Whether the config has an attention convention transformers' Llama lacks: a score scale
    other than √d_k, soft caps, QK-norm over the whole projection, or sliding and full layers."""
    return (
        m.score_scale != "d_k" or m.qk_norm == "whole"
    )  # fmt: skip


def _gemma_attention(model: Any, config: Config, dtype: Any) -> None:
    """``model``'s attention made transformers' own for the conventions Llama lacks, in place:
    each layer's ``self_attn`` Gemma 2's (its query_pre_attn_scalar and attn_logit_softcapping),
    Gemma 3's (the same with QK-norm per head; it takes no soft cap) or OLMo 2's (QK-norm over the
    whole projection; its ``scaling`` set to the score scale, it takes no soft cap); with
    ``layer_types``, the model's forward Gemma 3's, which gives each layer the mask of its type
    (``create_sliding_window_causal_mask`` or ``create_causal_mask``) and the rotary tables of its
    type (``Gemma3RotaryEmbedding``: local_rope_theta, rope_theta); with ``logit_softcap``, the
    causal model's forward Gemma 3's, which caps the logits (final_logit_softcapping)."""
    import transformers
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gemma3 import modeling_gemma3
    from transformers.models.olmo2 import modeling_olmo2

    m = config.model
    hf = model.config
    divisor = 1.0 if m.score_divisor is None else m.score_divisor  # 1**-0.5: not divided
    types_ = ["full_attention"] * m.num_decoder_layers
    window = m.sliding_window or 4096
    theirs = dict(
        vocab_size=hf.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        max_position_embeddings=4096, attention_bias=False,
    )  # fmt: skip
    gemma = dict(
        query_pre_attn_scalar=int(divisor) if divisor.is_integer() else 1,  # an integer in their config
        sliding_window=window, layer_types=types_,
    )  # fmt: skip
    local = {"rope_type": "default", "rope_theta": m.rope_theta}
    rope = {"full_attention": rope_parameters(m), "sliding_attention": local}
    gemma3 = transformers.Gemma3TextConfig(**theirs, **gemma, rope_parameters=rope)
    gemma2 = transformers.Gemma2Config(**theirs, **gemma)
    olmo2 = transformers.Olmo2Config(**theirs, rope_parameters=rope_parameters(m))
    for c in (gemma3, gemma2, olmo2):
        c._attn_implementation = "eager"
    for c in (gemma3, gemma2):  # None given is their default (Gemma 2: 50 and 30): None set is none
        c.attn_logit_softcapping, c.final_logit_softcapping = None, None
    for i, layer in enumerate(model.model.layers):
        if m.qk_norm == "whole":
            attention = modeling_olmo2.Olmo2Attention(olmo2, i)
            attention.scaling = divisor**-0.5  # OLMo 2 has no query_pre_attn_scalar
        elif m.qk_norm == "head":
            attention = modeling_gemma3.Gemma3Attention(gemma3, i)
        else:
            attention = modeling_gemma2.Gemma2Attention(gemma2, i)
        if not divisor.is_integer():  # their query_pre_attn_scalar**-0.5, of a number their config refuses
            attention.scaling = divisor**-0.5
        layer.self_attn = attention.to(dtype)
