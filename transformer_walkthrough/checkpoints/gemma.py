"""Gemma, Gemma 2, Gemma 3 and OLMo 2's tensors in our terms: the name maps of their decoder layers.

Gemma is Llama's layer with Gemma's conventions: an RMSNorm whose weight is stored as its offset
from 1 (``norm: rmsnorm-plus-one``), embeddings scaled by √d_model in the model's dtype
(``scale_embeddings``), GeGLU (``feed_forward: gated``, ``activation: gelu-tanh``), a tied output
layer. Gemma 2 (and Gemma 3) put a second norm on each sublayer's output, before the residual sum
(``norm_placement: both``): ``post_attention_layernorm`` is the attention's output norm there,
where in Gemma and Llama it is the norm before the MLP. Gemma 3 adds an RMSNorm of each head's
queries and keys (``qk_norm: head``, its weight 1 + gamma too), a score scale of its own
(``query_pre_attn_scalar``), and local and global layers. Each map is read forward by a converter
and backward by the tests' reference (``compare.gemma``).
"""

from __future__ import annotations

from ..model.architecture import DECODER
from .family import Block, Param, Tensor

_ATTENTION = (
    Param("masked-attention/W_QKV", Tensor("self_attn.q_proj.weight", "q", "d"),
          Tensor("self_attn.k_proj.weight", "kv", "d"), Tensor("self_attn.v_proj.weight", "kv", "d"),
          transposed=True),
    Param("masked-attention/W_O", Tensor("self_attn.o_proj.weight", "d", "q"), transposed=True),
)  # fmt: skip
_MLP = (
    Param("feed-forward/W_gate", Tensor("mlp.gate_proj.weight", "ff", "d"), transposed=True),
    Param("feed-forward/W_up", Tensor("mlp.up_proj.weight", "ff", "d"), transposed=True),
    Param("feed-forward/W_down", Tensor("mlp.down_proj.weight", "d", "ff"), transposed=True),
)
_FINAL = Block(DECODER, (Param("final-norm/gamma", Tensor("model.norm.weight", "d")),))
_LAYERS = "model.layers.{n}."

# Gemma: pre-norm, as Llama (input_layernorm before the attention, post_attention_layernorm before
# the MLP).
GEMMA_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("norm-2/gamma", Tensor("post_attention_layernorm.weight", "d")),
        *_MLP,
    )),
    _FINAL,
)  # fmt: skip

# Gemma 2: a norm on both sides of each sublayer, x + Norm(Sublayer(Norm(x))).
GEMMA2_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        Param("norm-2/gamma", Tensor("pre_feedforward_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip

# Gemma 3: Gemma 2's layer with each head's queries and keys normed (q_norm, k_norm).
GEMMA3_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        Param("norm-1/gamma", Tensor("input_layernorm.weight", "d")),
        *_ATTENTION,
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "d_k")),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "d_k")),
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        Param("norm-2/gamma", Tensor("pre_feedforward_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip

# OLMo 2: no norm before a sublayer, one on its output (``norm_placement: output``), and the
# queries and keys normed over the whole projection (``qk_norm: whole``: q_norm over every query
# head's columns, k_norm over every key head's).
OLMO2_MAP = (
    Block(DECODER, prefix=_LAYERS, layers="layers", params=(
        *_ATTENTION,
        Param("masked-attention/gamma_Q", Tensor("self_attn.q_norm.weight", "q")),
        Param("masked-attention/gamma_K", Tensor("self_attn.k_norm.weight", "kv")),
        Param("output-norm-1/gamma", Tensor("post_attention_layernorm.weight", "d")),
        *_MLP,
        Param("output-norm-2/gamma", Tensor("post_feedforward_layernorm.weight", "d")),
    )),
    _FINAL,
)  # fmt: skip
