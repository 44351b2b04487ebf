"""Our weights in transformers' own ``GemmaForCausalLM``, ``Gemma2ForCausalLM`` and
``Gemma3ForCausalLM``: the canonical implementations of Gemma's conventions — the (1 + gamma)
RMSNorm, embeddings scaled by √d_model, GeGLU, (Gemma 2, 3) a norm on both sides of each sublayer,
(Gemma 3) QK-norm and local and global layers — for the tests.

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
    """A Gemma3ForCausalLM (``norm_placement: both`` with ``qk_norm: head``), a Gemma2ForCausalLM
    (``both``) or a GemmaForCausalLM (``pre``) of the config's sizes holding our weights: the
    family's name map walked backward. Nothing is soft-capped unless the config says so; the
    scores are divided by √(the config's score divisor) (``query_pre_attn_scalar``); every layer
    is global unless the config's ``layer_types`` say otherwise (then Gemma 3's sliding layers
    take ``sliding_window`` and ``local_rope_theta``); a window longer than any input here stands
    for none."""
    import torch
    import transformers

    from ..checkpoints.decoder import sizes
    from ..checkpoints.family import invert, map_rows, model_keys

    m = config.model
    three = m.norm_placement == "both" and m.qk_norm == "head"
    both = m.norm_placement == "both"
    divisor = getattr(m, "score_divisor", None) or m.d_k
    common = dict(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, intermediate_size=m.d_ff,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        max_position_embeddings=4096, tie_word_embeddings=m.tie_embeddings,
        hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", attention_bias=False,
        pad_token_id=None,
    )  # fmt: skip
    types = getattr(m, "layer_types", None) or ["full"] * m.num_decoder_layers
    gemma2 = dict(
        query_pre_attn_scalar=int(divisor) if float(divisor).is_integer() else divisor,
        sliding_window=m.sliding_window or 4096,
        attn_logit_softcapping=getattr(m, "attention_softcap", None),
        final_logit_softcapping=getattr(m, "logit_softcap", None),
        layer_types=[f"{t}_attention" if t == "full" else "sliding_attention" for t in types],
    )
    if three:
        local = getattr(m, "local_rope_theta", None) or m.rope_theta
        rope = {
            "full_attention": rope_parameters(m),
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        }
        hf = transformers.Gemma3TextConfig(**common, **gemma2, rope_parameters=rope)
        cls = transformers.Gemma3ForCausalLM
    elif both:
        hf = transformers.Gemma2Config(**common, **gemma2, rope_parameters=rope_parameters(m))
        cls = transformers.Gemma2ForCausalLM
    else:
        hf = transformers.GemmaConfig(**common, rope_parameters=rope_parameters(m))
        cls = transformers.GemmaForCausalLM
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):  # None given means their default
        if hasattr(hf, key):
            setattr(hf, key, gemma2[key])
    hf._attn_implementation = "eager"
    model = cls(hf).to(dtype).eval()
    # Made in float32 at construction; from_pretrained(dtype=...) makes it in the model's dtype, as here.
    model.model.embed_tokens.embed_scale.fill_(math.sqrt(m.d_model))

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    keys = model_keys(m)
    theirs = invert(map_rows(gemma_map(m), keys, sizes(keys)), w)
    sd = {name: t(a) for name, a in theirs.items()}
    sd["model.embed_tokens.weight"] = t(w["decoder.embedding/E"])
    if not m.tie_embeddings:
        sd["lm_head.weight"] = t(w["output.logits/W"].T)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k or k == "lm_head.weight" for k in missing):
        raise ValueError(f"gemma_with: missing {missing}, unexpected {unexpected}")
    return model


def gemma_map(m: Any) -> tuple[Any, ...]:
    """The name map ``gemma_with`` walks backward for these conventions (the tests walk it forward)."""
    from ..checkpoints.gemma import GEMMA2_MAP, GEMMA3_MAP, GEMMA_MAP

    if m.norm_placement == "both":
        return GEMMA3_MAP if m.qk_norm == "head" else GEMMA2_MAP
    return GEMMA_MAP
