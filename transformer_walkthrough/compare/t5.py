"""Our weights in transformers' own ``T5ForConditionalGeneration``: the canonical T5, for the tests
(``tests/test_t5_style.py``) and the benchmark (``benchmarks/bench_t5.py``).

A test and benchmark helper: transformers and PyTorch are test dependencies, imported only here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import Config
from ..model.weights import Weights


def t5_config(config: Config, **more: Any) -> Any:
    """transformers' ``T5Config`` of a ModelConfig under T5's conventions (``positional_encoding:
    relative``, ``score_scale: none``, pre-norm RMSNorm, no biases)."""
    import transformers

    m = config.model
    proj = "gated-gelu" if m.feed_forward == "gated" else "relu"
    if m.activation != ("gelu-tanh" if proj == "gated-gelu" else "relu"):
        raise ValueError(f"T5 has relu or gated-gelu (gelu_new); not {m.feed_forward} {m.activation}")
    hf = transformers.T5Config(
        vocab_size=len(config.vocabulary), d_model=m.d_model, d_kv=m.d_k, d_ff=m.d_ff,
        num_layers=m.num_encoder_layers, num_decoder_layers=m.num_decoder_layers, num_heads=m.num_heads,
        relative_attention_num_buckets=m.relative_buckets,
        relative_attention_max_distance=m.relative_max_distance, layer_norm_epsilon=m.layer_norm_eps,
        feed_forward_proj=proj, dropout_rate=0.0, tie_word_embeddings=m.scale_tied_output, **more,
    )  # fmt: skip
    hf._attn_implementation = "eager"
    return hf


def t5_with(config: Config, w: Weights, dtype: Any) -> Any:
    """A T5ForConditionalGeneration of the config's sizes holding our weights: the family's name
    map walked backward (each weight transposed back to nn.Linear's (out, in), W_QKV cut into q, k,
    v). T5 embeds both stacks with one table (``shared``): with ``tie_embeddings`` ours is it and the
    output layer is its transpose, scaled first (``scale_tied_output``); untied, the decoder gets an
    embedding of its own and the output layer its own weight, unscaled (as Flan-T5's lm_head)."""
    import torch

    from ..checkpoints.family import invert, model_keys
    from ..checkpoints.t5 import T5

    m = config.model
    model = getattr(__import__("transformers"), T5.transformers)(t5_config(config)).to(dtype).eval()

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype)

    sd = {name: t(a) for name, a in invert(T5.rows(model_keys(m)), w).items()}
    sd["shared.weight"] = t(w["encoder.embedding/E"])
    if not m.tie_embeddings:  # T5 ties all three to shared: untie the decoder's table and the head
        decoder_table = torch.nn.Embedding(*w["decoder.embedding/E"].shape, dtype=dtype)
        model.decoder.set_input_embeddings(decoder_table)
        model.lm_head.weight = torch.nn.Parameter(t(w["output.logits/W"].T))
        model.config.scale_decoder_outputs = False
        sd["decoder.embed_tokens.weight"] = t(w["decoder.embedding/E"])
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied = {"encoder.embed_tokens.weight", "lm_head.weight"} | (
        {"decoder.embed_tokens.weight"} if m.tie_embeddings else set()
    )
    if unexpected or set(missing) - tied:
        raise ValueError(f"t5_with: missing {missing}, unexpected {unexpected}")
    return model
