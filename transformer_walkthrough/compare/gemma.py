"""Our weights in transformers' own ``GemmaForCausalLM`` and ``Gemma2ForCausalLM``: the canonical
implementations of Gemma's conventions — the (1 + gamma) RMSNorm, embeddings scaled by √d_model,
GeGLU, and (Gemma 2) a norm on both sides of each sublayer — for the tests.

A test helper: transformers and PyTorch are test dependencies, imported only here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..config import Config
from ..model.weights import Weights
from .llama import rope_parameters


def gemma_with(config: Config, w: Weights, dtype: Any) -> Any:
    """A Gemma2ForCausalLM (``norm_placement: both``) or a GemmaForCausalLM (``pre``) of the
    config's sizes holding our weights: the family's name map walked backward. Every attention
    layer sees every position (Gemma 2's sliding layers get a window longer than any input here),
    and nothing is soft-capped; the scores are divided by √d_k (``query_pre_attn_scalar`` = d_k)."""
    import torch
    import transformers

    from ..checkpoints.family import invert, map_rows, model_keys
    from ..checkpoints.gemma import GEMMA2_MAP, GEMMA_MAP
    from ..checkpoints.llama import sizes

    m = config.model
    both = m.norm_placement == "both"
    common = dict(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, intermediate_size=m.d_ff,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        rope_parameters=rope_parameters(m), max_position_embeddings=4096,
        tie_word_embeddings=m.tie_embeddings, hidden_activation="gelu_pytorch_tanh",
        hidden_act="gelu_pytorch_tanh", attention_bias=False, pad_token_id=None,
    )  # fmt: skip
    if both:
        hf = transformers.Gemma2Config(**common, query_pre_attn_scalar=m.d_k, sliding_window=4096,
                                       attn_logit_softcapping=None, final_logit_softcapping=None)  # fmt: skip
    else:
        hf = transformers.GemmaConfig(**common)
    hf._attn_implementation = "eager"
    model = (transformers.Gemma2ForCausalLM if both else transformers.GemmaForCausalLM)(hf).to(dtype).eval()
    # Made in float32 at construction; from_pretrained(dtype=...) makes it in the model's dtype, as here.
    model.model.embed_tokens.embed_scale.fill_(math.sqrt(m.d_model))

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    keys = model_keys(m)
    theirs = invert(map_rows(GEMMA2_MAP if both else GEMMA_MAP, keys, sizes(keys)), w)
    sd = {name: t(a) for name, a in theirs.items()}
    sd["model.embed_tokens.weight"] = t(w["decoder.embedding/E"])
    if not m.tie_embeddings:
        sd["lm_head.weight"] = t(w["output.logits/W"].T)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k or k == "lm_head.weight" for k in missing):
        raise ValueError(f"gemma_with: missing {missing}, unexpected {unexpected}")
    return model
