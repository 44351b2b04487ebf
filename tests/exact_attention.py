"""transformers' Gemma 2, Gemma 3 and OLMo 2 attention in float64 throughout, for comparisons at
1e-12 (``compare.llama.llama_with`` puts them in a Llama holding our weights).

As ``exact_llama`` does for the Llama family, ``float64`` replaces each function that casts to
float32 with its own lines minus the cast: the eager attention (its softmax; Gemma 2's and 3's
with their soft cap), the RMSNorms (Gemma 3's (1 + w), OLMo 2's over the whole projection) and
Gemma 3's rotary tables, whose frequencies ``inv_freq_64`` recomputes per layer type in float64.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.olmo2 import modeling_olmo2

from . import exact_llama

MODULES = (modeling_gemma2, modeling_gemma3, modeling_olmo2)


def float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Llama family's casts and Gemma's and OLMo 2's removed, each function otherwise as written."""
    exact_llama.float64(monkeypatch)

    for module in MODULES:

        def eager(
            module_,
            query,
            key,
            value,
            attention_mask,
            dropout=0.0,
            scaling=None,
            softcap=None,
            _m=module,
            **kw,
        ):
            key_states = _m.repeat_kv(key, module_.num_key_value_groups)
            value_states = _m.repeat_kv(value, module_.num_key_value_groups)
            attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
            if softcap is not None:
                attn_weights = attn_weights / softcap
                attn_weights = torch.tanh(attn_weights)
                attn_weights = attn_weights * softcap
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask
            attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
            return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous(), attn_weights

        monkeypatch.setattr(module, "eager_attention_forward", eager)

    def gemma_norm(self, x):
        return self._norm(x) * (1.0 + self.weight)

    def olmo2_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def rotary(self, x, position_ids, layer_type):
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        freqs = (
            inv_freq[None, :, None].to(torch.float64) @ position_ids[:, None, :].to(torch.float64)
        ).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    monkeypatch.setattr(modeling_gemma3.Gemma3RMSNorm, "forward", gemma_norm)
    monkeypatch.setattr(modeling_olmo2.Olmo2RMSNorm, "forward", olmo2_norm)
    monkeypatch.setattr(modeling_gemma3.Gemma3RotaryEmbedding, "forward", rotary)


def inv_freq_64(model: torch.nn.Module) -> None:
    """The rotary frequencies recomputed in float64: the Llama's, or each layer type's of Gemma 3's
    tables, by transformers' own function (which writes ``torch.float``: here float64)."""
    rotary = model.model.rotary_emb
    if not isinstance(rotary, modeling_gemma3.Gemma3RotaryEmbedding):
        exact_llama.inv_freq_64(model)
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "float", torch.float64)
        for layer_type in rotary.layer_types:
            inv_freq, _ = rotary.compute_default_rope_parameters(rotary.config, layer_type=layer_type)
            assert inv_freq.dtype == torch.float64
            setattr(rotary, f"{layer_type}_inv_freq", inv_freq)


def attention_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """Each layer's attention weights A, (1, heads, n, n), filled by the next forward: the swapped
    attention classes are not the ones transformers' Llama records for ``output_attentions``."""
    weights: list[torch.Tensor] = []
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(lambda mod, args, out: weights.append(out[1]))
    return weights
