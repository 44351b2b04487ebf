"""transformers' mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) in float64 throughout, for
comparisons at 1e-9 and below.

As ``exact_llama`` does for the Llama family: their RMSNorm, rotary tables and eager softmax
compute in float32 even in a float64 model, and so do their routers (the softmax in float32) and
the load-balancing loss (summed in float32). ``float64`` replaces those five functions of each
module with their own lines minus the cast; everything else, the top-k choice, the
renormalisation, the experts' loop and the shared expert included, is transformers' code as shipped.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mixtral import modeling_mixtral
from transformers.models.olmoe import modeling_olmoe
from transformers.models.qwen2_moe import modeling_qwen2_moe
from transformers.models.qwen3_moe import modeling_qwen3_moe

from . import exact_llama

# Each mixture's modeling module, by the prefix of its classes (MixtralRMSNorm, Qwen2MoeTopKRouter).
MODULES = {
    "Mixtral": modeling_mixtral, "Qwen2Moe": modeling_qwen2_moe, "Qwen3Moe": modeling_qwen3_moe,
    "Olmoe": modeling_olmoe,
}  # fmt: skip


def float64(monkeypatch: pytest.MonkeyPatch) -> None:
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

    def eager(module_, query, key, value, attention_mask, scaling, dropout=0.0, _m=None, **kwargs):
        key_states = _m.repeat_kv(key, module_.num_key_value_groups)
        value_states = _m.repeat_kv(value, module_.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous(), attn_weights

    def router(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight)
        router_probs = torch.nn.functional.softmax(router_logits, dim=-1)
        router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
        if getattr(self, "norm_topk_prob", True):  # Mixtral's router always renormalises
            router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        return router_logits, router_top_value, router_indices

    def load_balancing(gate_logits, num_experts=None, top_k=2, attention_mask=None):
        tokens_per_expert_sum = torch.zeros(num_experts, dtype=torch.float64)
        router_prob_sum = torch.zeros(num_experts, dtype=torch.float64)
        total_rows = 0.0
        for layer_gate in gate_logits:
            routing_weights = torch.nn.functional.softmax(layer_gate, dim=-1)
            _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
            tokens_per_expert_sum = (
                tokens_per_expert_sum
                + torch.bincount(selected_experts.reshape(-1), minlength=num_experts).double()
            )
            router_prob_sum = router_prob_sum + routing_weights.sum(dim=0)
            total_rows = total_rows + routing_weights.shape[0]
        tokens_per_expert = tokens_per_expert_sum / total_rows
        router_prob_per_expert = router_prob_sum / total_rows
        return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts

    for name, module in MODULES.items():
        monkeypatch.setattr(module, "load_balancing_loss_func", load_balancing)
        monkeypatch.setattr(getattr(module, f"{name}RMSNorm"), "forward", rms_norm)
        monkeypatch.setattr(getattr(module, f"{name}RotaryEmbedding"), "forward", rotary)
        monkeypatch.setattr(module, "eager_attention_forward", functools.partial(eager, _m=module))
        monkeypatch.setattr(getattr(module, f"{name}TopKRouter"), "forward", router)


inv_freq_64 = exact_llama.inv_freq_64
