"""Our weights in transformers' own ``LlamaForCausalLM``: the canonical implementation of the
Llama-style conventions (RMSNorm, rotary, SwiGLU, grouped-query attention), for the tests
(``tests/test_llama_style.py``) and the benchmarks (``bench_forward --convention llama``).

A test and benchmark helper: transformers and PyTorch are test dependencies, imported only here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import Config
from ..model import architecture
from ..model.architecture import DECODER
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
    """A LlamaForCausalLM of the config's sizes holding our weights (transposed: nn.Linear is (out, in));
    a MistralForCausalLM, the same model with a sliding window, when the config has one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    m = config.model
    sizes = dict(
        vocab_size=len(config.vocabulary), hidden_size=m.d_model, intermediate_size=m.d_ff,
        num_hidden_layers=m.num_decoder_layers, num_attention_heads=m.num_heads,
        num_key_value_heads=m.kv_heads, head_dim=m.d_k, rms_norm_eps=m.layer_norm_eps,
        rope_parameters=rope_parameters(m), max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu",
    )  # fmt: skip
    if m.sliding_window is None:
        hf, kind = LlamaConfig(**sizes, attention_bias=False, mlp_bias=False), LlamaForCausalLM
    else:
        hf, kind = MistralConfig(**sizes, sliding_window=m.sliding_window), MistralForCausalLM
    hf._attn_implementation = "eager"
    model = kind(hf).to(dtype).eval()
    q, kv = m.num_heads * m.d_k, m.kv_heads * m.d_k

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    # Our stage names, from the walk: the embedding, each layer's two blocks (norm-1, attention;
    # norm-2, feed-forward), the final norm and the output layer.
    embedding = architecture.bottom(DECODER, m)[0].id
    final_norm = architecture.final_norm(DECODER, m)[0].id
    logits = next(p.id for p in architecture.head(m) if p.kind == "logits")
    sd = {
        "model.embed_tokens.weight": t(w[f"{embedding}/E"]),
        "lm_head.weight": t(w[f"{logits}/W"].T),
        "model.norm.weight": t(w[f"{final_norm}/gamma"]),
    }
    for i in range(m.num_decoder_layers):
        attention, ffn = architecture.layer(DECODER, i, m)
        a, f = attention.stage.id, ffn.stage.id
        W = w[f"{a}/W_QKV"]
        p = f"model.layers.{i}."
        sd |= {
            p + "self_attn.q_proj.weight": t(W[:, :q].T),
            p + "self_attn.k_proj.weight": t(W[:, q : q + kv].T),
            p + "self_attn.v_proj.weight": t(W[:, q + kv :].T),
            p + "self_attn.o_proj.weight": t(w[f"{a}/W_O"].T),
            p + "mlp.gate_proj.weight": t(w[f"{f}/W_gate"].T),
            p + "mlp.up_proj.weight": t(w[f"{f}/W_up"].T),
            p + "mlp.down_proj.weight": t(w[f"{f}/W_down"].T),
            p + "input_layernorm.weight": t(w[f"{attention.norm.id}/gamma"]),  # type: ignore[union-attr]
            p + "post_attention_layernorm.weight": t(w[f"{ffn.norm.id}/gamma"]),  # type: ignore[union-attr]
        }  # fmt: skip
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or not all("rotary" in k for k in missing):  # only the rotary tables are not ours
        raise ValueError(f"llama_with: missing {missing}, unexpected {unexpected}")
    return model
