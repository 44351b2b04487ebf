"""transformers' Llama-family models in float64 throughout, for comparisons at 1e-9 and below.

transformers' Llama, Mistral, Qwen2 and Qwen3 compute three things in float32 even when the model is
float64: the RMSNorm (``hidden_states.to(torch.float32)``), the rotary tables (``inv_freq`` made in
float32 at construction, the angles in float32) and the softmax (``dtype=torch.float32``). In float64
they therefore agree with any float64 computation to about 1e-7 only. ``float64`` replaces those
three functions of each family's module with their own lines minus the cast, and ``inv_freq_64``
recomputes the frequencies with transformers' own function (default, linear or llama3) in float64;
everything else — the projections, ``rotate_half``, ``repeat_kv``, the masks (sliding window
included), the gated MLP, the residual wiring, the output layer — is transformers' code as shipped.
In float32 the models run unpatched.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import modeling_rope_utils

from transformer_walkthrough.checkpoints import llama, moe

# Each family's modeling module, by the prefix of its classes (LlamaRMSNorm, Qwen2RotaryEmbedding).
MODULES = {
    f.transformers.removesuffix("ForCausalLM"): importlib.import_module(
        f"transformers.models.{f.model_type}.modeling_{f.model_type}"
    )
    for f in (*llama.FAMILIES, *moe.FAMILIES)
}


def float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' three float32 casts removed, each function otherwise as transformers writes it."""

    def rms_norm(self, hidden_states):
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

        def eager(module_, query, key, value, attention_mask, scaling, dropout=0.0, _m=module, **kwargs):
            key_states = _m.repeat_kv(key, module_.num_key_value_groups)
            value_states = _m.repeat_kv(value, module_.num_key_value_groups)
            attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask
            attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
            return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous(), attn_weights

        monkeypatch.setattr(getattr(module, f"{name}RMSNorm"), "forward", rms_norm)
        monkeypatch.setattr(getattr(module, f"{name}RotaryEmbedding"), "forward", rotary)
        monkeypatch.setattr(module, "eager_attention_forward", eager)


def inv_freq_64(model: torch.nn.Module) -> None:
    """The rotary frequencies of ``model`` recomputed in float64 by transformers' own function for its
    rope type (which writes ``torch.float``: float32, here float64)."""
    rotary = model.model.rotary_emb
    kind = model.config.rope_parameters["rope_type"]
    compute = (
        rotary.compute_default_rope_parameters
        if kind == "default"
        else modeling_rope_utils.ROPE_INIT_FUNCTIONS[kind]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "float", torch.float64)
        inv_freq, scaling = compute(model.config)
    assert inv_freq.dtype == torch.float64 and scaling == 1.0
    rotary.inv_freq = inv_freq
