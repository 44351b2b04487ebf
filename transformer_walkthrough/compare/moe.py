"""Our weights in transformers' own ``MixtralForCausalLM``: the canonical mixture of experts (a
router choosing the top k of E SwiGLU experts, their probabilities renormalised), for the tests
(``tests/test_moe_style.py``) and the benchmarks.

A test and benchmark helper: transformers and PyTorch are test dependencies, imported only here.
Mixtral keeps its experts as two 3-D tensors, ``gate_up_proj`` (E, 2·d_ff, d_model: each
expert's W_gate and W_up, ``nn.Linear``'s (out, in), one above the other) and ``down_proj``
(E, d_model, d_ff); its router is ``gate.weight`` (E, d_model).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import Config
from ..model.architecture import DECODER, stage_id
from ..model.kinds.experts import experts_of
from ..model.weights import Weights
from .llama import rope_parameters


def experts_state(w: Weights, layer: int, m: Any) -> dict[str, np.ndarray]:
    """One sparse layer's router and experts as Mixtral stores them (under ``model.layers.N.mlp.``)."""
    stage = stage_id(DECODER, "experts", layer)
    of = [f"{stage}/{prefix}" for prefix in experts_of(m)]
    return {
        "gate.weight": w[f"{stage}/W_router"].T,
        "experts.gate_up_proj": np.stack([np.vstack([w[f"{e}.W_gate"].T, w[f"{e}.W_up"].T]) for e in of]),
        "experts.down_proj": np.stack([w[f"{e}.W_down"].T for e in of]),
    }


def mixtral_with(config: Config, w: Weights, dtype: Any) -> Any:
    """A MixtralForCausalLM of the config's sizes holding our weights: attention and norms by the
    Llama family's name map walked backward, the experts by ``experts_state``."""
    import torch
    import transformers

    from ..checkpoints.family import invert, model_keys
    from ..checkpoints.llama import LLAMA

    m = config.model
    hf = transformers.MixtralConfig(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, intermediate_size=m.d_expert,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        rope_parameters=rope_parameters(m), max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu", num_local_experts=m.experts, num_experts_per_tok=m.experts_per_token,
        sliding_window=m.sliding_window, router_aux_loss_coef=m.router_aux_loss_coef,
    )  # fmt: skip
    hf._attn_implementation = "eager"
    hf._experts_implementation = "eager"
    model = transformers.MixtralForCausalLM(hf).to(dtype).eval()

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    rows = [row for row in LLAMA.rows(model_keys(m)) if "feed-forward/" not in row.ours]
    sd = {name: t(a) for name, a in invert(rows, w).items()}
    for i in range(m.num_decoder_layers):
        sd |= {f"model.layers.{i}.mlp.{name}": t(a) for name, a in experts_state(w, i, m).items()}
    sd |= {
        "model.embed_tokens.weight": t(w["decoder.embedding/E"]),
        "lm_head.weight": t(w["output.logits/W"].T),
    }
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k for k in missing):
        raise ValueError(f"mixtral_with: missing {missing}, unexpected {unexpected}")
    return model
