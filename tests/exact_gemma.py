"""transformers' Gemma, Gemma 2 and OLMo 2 in float64 throughout, for comparisons at 1e-9 and below.

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

MODULES = {
    "Gemma": importlib.import_module("transformers.models.gemma.modeling_gemma"),
    "Gemma2": importlib.import_module("transformers.models.gemma2.modeling_gemma2"),
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
        monkeypatch.setattr(getattr(module, f"{name}RotaryEmbedding"), "forward", rotary)
        monkeypatch.setattr(module, "eager_attention_forward", eager)
