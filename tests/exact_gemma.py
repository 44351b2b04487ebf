"""transformers' Gemma, Gemma 2, Gemma 3 and OLMo 2 in float64 throughout, for comparisons at 1e-9 and below.

As Llama's (``exact_llama``), their modules compute in float32 inside a float64 model: the RMSNorm
(Gemma's ``x.float()``, ``1.0 + self.weight.float()``; OLMo 2's ``to(torch.float32)``), the rotary
tables and the softmax. ``float64``
replaces those functions with their own lines minus the casts (the soft cap kept, as Gemma 2 writes
it); everything else is transformers' code as shipped. In float32 the models run unpatched.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tests import exact_llama

MODULES = {
    "Gemma": importlib.import_module("transformers.models.gemma.modeling_gemma"),
    "Gemma2": importlib.import_module("transformers.models.gemma2.modeling_gemma2"),
    "Gemma3": importlib.import_module("transformers.models.gemma3.modeling_gemma3"),
    "Olmo2": importlib.import_module("transformers.models.olmo2.modeling_olmo2"),
}


def float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma's float32 casts removed, each function otherwise as transformers writes it."""

    def rms_norm(self, x):
        return self._norm(x) * (1.0 + self.weight)

    def olmo2_norm(self, hidden_states):  # a plain RMSNorm, over the whole projection for q and k
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def rotary(self, x, position_ids):
        inv_freq = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1).to(torch.float64)
        freqs = (inv_freq @ position_ids[:, None, :].to(torch.float64)).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(
            x.dtype
        )

    def layer_rotary(self, x, position_ids, layer_type):  # Gemma 3's: a table per kind of layer
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        freqs = inv_freq[None, :, None].to(torch.float64) @ position_ids[:, None, :].to(torch.float64)
        emb = torch.cat((freqs.transpose(1, 2),) * 2, dim=-1)
        scaling = getattr(self, f"{layer_type}_attention_scaling")
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    for name, module in MODULES.items():

        def eager(module_, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None,
                  _m=module, **kwargs):  # fmt: skip
            key_states = _m.repeat_kv(key, module_.num_key_value_groups)
            value_states = _m.repeat_kv(value, module_.num_key_value_groups)
            attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
            if softcap is not None:
                attn_weights = torch.tanh(attn_weights / softcap) * softcap
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask
            attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
            return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous(), attn_weights

        monkeypatch.setattr(
            getattr(module, f"{name}RMSNorm"), "forward", olmo2_norm if name == "Olmo2" else rms_norm
        )
        monkeypatch.setattr(
            getattr(module, f"{name}RotaryEmbedding"), "forward", layer_rotary if name == "Gemma3" else rotary
        )
        monkeypatch.setattr(module, "eager_attention_forward", eager)


def inv_freq_64(model: torch.nn.Module) -> None:
    """The rotary frequencies recomputed in float64 by transformers' own functions (which write
    ``torch.float``: here float64): Gemma 3's table of each kind of layer by its rope type (the full
    layers' linear scaling included), any other model's as ``exact_llama`` does."""
    rotary = model.model.rotary_emb
    if not isinstance(rotary, MODULES["Gemma3"].Gemma3RotaryEmbedding):
        exact_llama.inv_freq_64(model)
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "float", torch.float64)
        for layer_type in rotary.layer_types:
            kind = rotary.rope_type[layer_type]
            compute = (
                rotary.compute_default_rope_parameters if kind == "default" else ROPE_INIT_FUNCTIONS[kind]
            )
            inv_freq, scaling = compute(rotary.config, layer_type=layer_type)
            assert inv_freq.dtype == torch.float64 and scaling == 1.0
            setattr(rotary, f"{layer_type}_inv_freq", inv_freq)
