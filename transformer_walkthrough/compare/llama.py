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
    Qwen3ForCausalLM, the same with each head's queries and keys normed, under ``qk_norm: head``."""
    import torch
    import transformers

    from ..checkpoints.family import invert, model_keys
    from ..checkpoints.llama import LLAMA, MISTRAL, QWEN3

    m = config.model
    family = QWEN3 if m.qk_norm == "head" else LLAMA if m.sliding_window is None else MISTRAL
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
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k for k in missing):  # only the rotary tables are not ours
        raise ValueError(f"llama_with: missing {missing}, unexpected {unexpected}")
    return model
