"""Tiny random mixture-of-experts checkpoints, made offline with transformers and briefly trained.

- ``mixtral``: ``MixtralForCausalLM``, 4 experts of width 8, each token to 2, 4 query heads over 2
  key/value heads, untied output, a Llama 2 style tokenizer (``<s>`` added);
- ``qwen2_moe``: ``Qwen2MoeForCausalLM``, 4 experts of width 6, each token to 2, their probabilities
  kept as they are (``norm_topk_prob: false``), a shared expert of width 12 behind its sigmoid gate,
  Q/K/V biases, tied embeddings, a Qwen2 style tokenizer;
- ``qwen3_moe``: ``Qwen3MoeForCausalLM``, 4 experts of width 6, each token to 2, renormalised
  (``norm_topk_prob: true``), QK-norm, a Qwen2 style tokenizer;
- ``olmoe``: ``OlmoeForCausalLM``, 4 experts of width 8, each token to 2, not renormalised, QK-norm
  over the whole projections (``qk_norm: whole``), a Qwen2 style tokenizer;
- ``MIXED``: a Qwen2-MoE and a Qwen3-MoE of three layers, some of them dense (a plain MLP).

Trained for a few steps on ``tiny_llama.CORPUS`` with the end token after each sentence (so that
greedy decoding of a prompt from the corpus ends), then saved with ``save_pretrained``
(safetensors: each expert's w1, w2, w3 as Mixtral's checkpoints keep them). Imported only by the
session fixture of conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from . import tiny_tokenizers
from .tiny_llama import CORPUS

MODELS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")
COMMON = dict(
    hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    num_experts_per_tok=2, max_position_embeddings=64, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)  # fmt: skip
SPECS = {
    "mixtral": dict(COMMON, intermediate_size=8, num_local_experts=4, tie_word_embeddings=False),
    "qwen2_moe": dict(COMMON, intermediate_size=8, moe_intermediate_size=6,
                      shared_expert_intermediate_size=12, num_experts=4, norm_topk_prob=False,
                      tie_word_embeddings=True),
    "qwen3_moe": dict(COMMON, intermediate_size=8, moe_intermediate_size=6, num_experts=4,
                      norm_topk_prob=True, tie_word_embeddings=False),
    "olmoe": dict(COMMON, intermediate_size=8, num_experts=4, norm_topk_prob=False,
                  tie_word_embeddings=False),
}  # fmt: skip
# Checkpoints whose layers are not all sparse, three layers each: Qwen2-MoE's first layer a plain MLP
# (``mlp_only_layers``: layers 1 and 2 sparse), Qwen3-MoE's experts in every second layer only
# (``decoder_sparse_step: 2``: layer 1 sparse, 0 and 2 dense); a dense layer's MLP is
# ``intermediate_size`` (8) wide, each expert ``moe_intermediate_size`` (6).
MIXED = {
    "qwen2_moe_dense_first": ("qwen2_moe", dict(SPECS["qwen2_moe"], num_hidden_layers=3,
                                                mlp_only_layers=[0])),
    "qwen3_moe_every_second": ("qwen3_moe", dict(SPECS["qwen3_moe"], num_hidden_layers=3,
                                                 decoder_sparse_step=2)),
}  # fmt: skip
CLASSES = {
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
}
TRAIN_STEPS = 10


def build(root: Path, name: str) -> Path:
    """The checkpoint ``name`` saved in ``root / name``, its tokenizer beside it; returns the folder."""
    model_type, spec = MIXED.get(name, (name, SPECS.get(name)))
    folder = root / name
    folder.mkdir(parents=True)
    tokenizer_files = root / f"{name}-tokenizer"
    tokenizer_files.mkdir()
    if model_type == "mixtral":
        tiny_tokenizers.llama2_style(tokenizer_files, legacy_layout=False)
    else:
        tiny_tokenizers.qwen2_style(tokenizer_files)
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_files)
    config = transformers.AutoConfig.for_model(
        model_type, vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=None, **spec,
    )  # fmt: skip
    torch.manual_seed([*MODELS, *MIXED].index(name) + 5)
    config._experts_implementation = "eager"  # the grouped kernel wants widths of 16-byte multiples
    model = getattr(transformers, CLASSES[model_type])(config)
    batch = [[*tok(text).input_ids, tok.eos_token_id] for text in CORPUS]
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        loss = sum(model(torch.tensor([ids]), labels=torch.tensor([ids])).loss for ids in batch)
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(folder)
    for f in tokenizer_files.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder
