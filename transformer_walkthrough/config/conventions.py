"""The conventions: every switch a model can set, and its allowed values, each with its note.

``ModelConfig``'s fields (``model.py``) take their types and comments from these tables; the checks
that a weights file was made under other switches (``SWITCHES``) and that PyTorch's layers have a
counterpart (``TORCH_LAYERS``) read them, as every converter reads ``HF_ACTIVATIONS``.
"""

from __future__ import annotations

from typing import Any

# Each convention's values, defined here once, each with its note in `walkthrough config`. The
# field's type in ModelConfig (so its check and its message) is made from them. The export schema,
# the converters, the test strategies and every dispatch on a value (functional, kinds, verify,
# explain, the torch reference) are tested against them (test_conventions.py, test_export.py): a
# value added here and forgotten there fails a test, and a dispatch given a value it lacks raises.
OUTPUT_HEADS = {"per-position": "(the paper)", "flatten": "(the article's literal step)"}
FINAL_NORMS = ("auto", True, False)
ATTENTION_BIASES = (False, True, "qkv")  # qkv: on the projections only, none on W_O (Qwen2)
# head: an RMSNorm of each head's queries and keys (Qwen3, Gemma 3); whole: one RMSNorm over the
# whole projection, every head's columns at once, before the split into heads (OLMo 2, OLMoE)
QK_NORMS = (False, "head", "whole")
# What the scores are divided by before the softmax, by name; a positive number n instead divides
# them by √n (Gemma's query_pre_attn_scalar, which need not be d_k).
SCORE_SCALES = {"d_k": "scores / √d_k (the paper)", "none": "not divided (T5)"}
# What each decoder layer's self-attention sees (``layer_types``, one entry per layer): the last
# sliding_window positions, or every one before it (Gemma 2 alternates them, Gemma 3 has five
# sliding layers to one full).
LAYER_TYPES = {"sliding": "the last sliding_window positions", "full": "every earlier position"}
ACTIVATIONS = {"relu": "(the paper)", "gelu": "(erf)", "gelu-tanh": "(GPT-2)", "silu": "= x·σ(x) (Marian)"}
FEED_FORWARDS = {
    "standard": "act(X·W_1)·W_2 (the paper)",
    "gated": "(act(X·W_gate) ⊙ X·W_up)·W_down (silu: SwiGLU, Llama)",
}
NORMS = {
    "layernorm": "(the paper)",
    "rmsnorm": "= gamma ⊙ x / √(mean(x²) + eps), no beta (T5, Llama)",
    "rmsnorm-plus-one": "= (1 + gamma) ⊙ x / √(mean(x²) + eps): gamma stored as its offset from 1 (Gemma)",
}
# Where each sublayer's norm sits in its residual connection.
NORM_PLACEMENTS = {
    "post": "Norm(x + Sublayer(x)) (the paper)",
    "pre": "x + Sublayer(Norm(x)) (GPT-2, Llama)",
    "both": "x + Norm(Sublayer(Norm(x))), a norm on each side (Gemma 2, Gemma 3)",
    "output": "x + Norm(Sublayer(x)), the sublayer's output normed (OLMo 2)",
}
POSITIONAL_ENCODINGS = {
    "sinusoidal": "(the paper)",
    "sinusoidal-halves": "(Marian)",
    "learned": "table P (GPT-2)",
    "rotary": "each head's Q, K turned by pos (Llama)",
    "relative": "a learned bias on each head's scores, by the bucket of key − query (T5)",
}
# transformers' rope_type: how rotary's frequencies are stretched past the length a model was
# trained on (rope_factor and, for llama3, the three rope_* fields below).
ROPE_SCALINGS = {
    "default": "(none)",
    "linear": "every θ_i / rope_factor",
    "llama3": "the slow pairs' θ_i / rope_factor, the fast ones kept, a blend between (Llama 3.1)",
}
# What the model is trained to do, so what its output layer predicts and for which rows.
TASKS = {
    "next-token": "each decoder position predicts the token after it (the paper, GPT)",
    "fill-mask": "encoder-only: each [MASK] predicts the word hidden there (BERT)",
    "encode": "encoder-only, no output layer: the vectors alone (a checkpoint without its MLM head)",
}
DTYPES = {"float64": "(exact to print)", "float32": "(fast when large)"}
# Positions applied inside attention, to the queries and keys, rather than added to the embedding:
# such a model has no positional-encoding stage.
ROTATED_POSITIONS: tuple[str, ...] = ("rotary",)
# Positions as a learned bias added to every head's scores, read by the bucket of the distance
# between key and query (T5): no positional-encoding stage either.
BIASED_POSITIONS: tuple[str, ...] = ("relative",)

# The switches whose parameters have other names or shapes, with their values: a --weights file
# made under another setting of one of them is recognised, and the message says which.
SWITCHES: dict[str, tuple[Any, ...]] = {
    "norm_placement": tuple(NORM_PLACEMENTS),
    "norm": tuple(NORMS),
    "final_norm": FINAL_NORMS,
    "positional_encoding": tuple(POSITIONAL_ENCODINGS),
    "tie_embeddings": (False, True),
    "attention_bias": ATTENTION_BIASES,
    "qk_norm": QK_NORMS,
    "output_bias": (True, False),
    "feed_forward": tuple(FEED_FORWARDS),
    "ffn_bias": (True, False),
    "segments": (0, 2),
    "embedding_norm": (False, True),
    "output_transform": (False, True),
}

# What PyTorch's own transformer layers can be (``verify --against torch``), by field: any other
# value has no counterpart there, and is compared with transformers' models in the tests instead.
TORCH_LAYERS: dict[str, tuple[Any, ...]] = {
    "output_head": ("per-position",),
    "num_kv_heads": (None,),  # nn.MultiheadAttention: as many key/value heads as query heads
    "head_dim": (None,),  # and d_model / num_heads dimensions each
    "sliding_window": (None,),
    "attention_bias": (False, True),
    "qk_norm": (False,),
    "experts": (0,),
    "score_scale": ("d_k",),
    "attention_softcap": (None,),
    "logit_softcap": (None,),
    "layer_types": (None,),
    "positional_encoding": tuple(
        p for p in POSITIONAL_ENCODINGS if p not in ROTATED_POSITIONS + BIASED_POSITIONS
    ),
    "scale_tied_output": (False,),
    "feed_forward": ("standard",),
    "ffn_bias": (True,),  # nn.TransformerEncoderLayer's bias=False drops the LayerNorms' too
    "norm": ("layernorm",),
    "norm_placement": ("post", "pre"),  # norm_first: false or true
    "task": ("next-token",),  # encoder-only models are compared with transformers' BERT instead
    "segments": (0,),
    "embedding_norm": (False,),
    "output_transform": (False,),
    "position_offset": (0,),
}

# Hugging Face's names for our activations (config.json's activation_function), read by every
# checkpoint converter; any other name is refused, never approximated.
HF_ACTIVATIONS = {
    "gelu_new": "gelu-tanh",
    "gelu_pytorch_tanh": "gelu-tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
