"""Tiny random Gemma and OLMo 2 checkpoints, made offline with transformers and briefly trained.

- ``gemma``: ``GemmaForCausalLM``, 4 query heads over 1 key/value head (multi-query, as Gemma 2B),
  a ``head_dim`` (8) that is not hidden_size / num_attention_heads, tied embeddings, GeGLU, a Gemma
  style tokenizer (SentencePiece-style BPE with byte fallback, no prefix space, ``<bos>`` added);
- ``gemma2``: ``Gemma2ForCausalLM``, norms on both sides of each sublayer, sliding and full layers
  alternating over a window of 4 positions, scores divided by √12 (``query_pre_attn_scalar``, not
  head_dim) and soft-capped at 1.5, logits at 5 (caps small enough to change every number);
- ``gemma3_text``: ``Gemma3ForCausalLM``, Gemma 2's layer with each head's queries and keys normed,
  two sliding layers (θ = 10,000, a window of 4) then a full one (θ = 1,000,000, its rotary scaled
  linearly by 8 as Gemma 3 1B's global layers), no soft caps, 4 query heads over 2 key/value heads;
- ``olmo2``: ``Olmo2ForCausalLM``, a norm on each sublayer's output only, the queries and keys
  normed over the whole projection, 4 query heads over 2 key/value heads, untied, a byte-level
  tokenizer with no BOS.

Each is trained for a few steps on the corpus (``tiny_llama._train``), its gammas moved off their
initial values so that a (1 + w) read as w, or a norm on the wrong side, shows; then saved with
``save_pretrained`` (safetensors). Imported only by the session fixture of conftest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

from . import tiny_tokenizers
from .tiny_llama import _ends, _train

MODELS = ("gemma", "gemma2", "gemma3_text", "olmo2")


def _spec(name: str) -> dict[str, Any]:
    common = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, rms_norm_eps=1e-6,
    )  # fmt: skip
    return {
        "gemma": dict(common, model_type="gemma", num_key_value_heads=1, head_dim=8, tie_word_embeddings=True,
                      hidden_act="gelu_pytorch_tanh",
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "gemma2": dict(common, model_type="gemma2", num_hidden_layers=3, num_key_value_heads=2, head_dim=8,
                       tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                       query_pre_attn_scalar=12, sliding_window=4, attn_logit_softcapping=1.5,
                       final_logit_softcapping=5.0,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "gemma3_text": dict(common, model_type="gemma3_text", num_hidden_layers=3, num_key_value_heads=2,
                            head_dim=8, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                            query_pre_attn_scalar=12, sliding_window=4,
                            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                            rope_parameters={
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                            }),
        "olmo2": dict(common, model_type="olmo2", num_key_value_heads=2, tie_word_embeddings=False,
                      hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
    }[name]  # fmt: skip


TOKENIZERS = {
    "gemma": tiny_tokenizers.gemma_style, "gemma2": tiny_tokenizers.gemma_style,
    "gemma3_text": tiny_tokenizers.gemma_style, "olmo2": tiny_tokenizers.qwen2_style,
}  # fmt: skip
CLASSES = {
    "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}  # fmt: skip
SEEDS = {"gemma": 5, "gemma2": 7, "gemma3_text": 8, "olmo2": 6}


def build(root: Path, name: str) -> Path:
    """The checkpoint ``name`` saved in ``root / name``, its tokenizer beside it; returns the folder."""
    folder = root / name
    folder.mkdir(parents=True)
    tokenizer_files = root / f"{name}-tokenizer"
    tokenizer_files.mkdir()
    TOKENIZERS[name](tokenizer_files)
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_files)
    spec = _spec(name)
    kind = spec.pop("model_type")
    eos = [tok.convert_tokens_to_ids(t) for t in _ends(tok)]
    config = transformers.AutoConfig.for_model(
        kind,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos[0],
        pad_token_id=None,
        **spec,
    )
    torch.manual_seed(SEEDS[name])
    config._attn_implementation = "eager"  # the soft cap of the scores is eager's only
    model = getattr(transformers, CLASSES[name])(config)
    with torch.no_grad():  # every RMSNorm's weight off its initial value (Gemma's zeros, OLMo's ones)
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.3 * torch.randn_like(p))
    _train(model, tok, eos[0])
    model.save_pretrained(folder)
    for f in tokenizer_files.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder
