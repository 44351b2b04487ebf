"""Tiny random Llama-family checkpoints, made offline with transformers and briefly trained (``build``).

Five checkpoints, each the case an issue names:

- ``llama``: ``LlamaForCausalLM``, 4 query heads over 2 key/value heads, untied output, a Llama 3
  style tokenizer (byte-level BPE, ``<|begin_of_text|>`` added) and two end tokens;
- ``qwen2``: ``Qwen2ForCausalLM`` with its Q/K/V biases, one key/value head, tied embeddings, a
  Qwen2 style tokenizer (byte-level, NFC, no BOS);
- ``mistral``: ``MistralForCausalLM`` whose sliding window (4) is shorter than the prompts, a Llama 2
  style tokenizer (SentencePiece-like BPE with byte fallback, ``<s>`` added);
- ``llama3-rope``: a ``LlamaForCausalLM`` with ``rope_parameters`` of type ``llama3`` and a
  ``head_dim`` (6) that is not hidden_size / num_attention_heads;
- ``qwen3``: ``Qwen3ForCausalLM``, each head's queries and keys RMS-normed (``q_norm``, ``k_norm``)
  before the rotation, a ``head_dim`` (8) that is not hidden_size / num_attention_heads (4), 4 query
  heads over 2 key/value heads, no biases, tied embeddings, a Qwen2 style tokenizer.

Each is trained for a few steps on ``CORPUS`` with its end token after each sentence, so that greedy
decoding of a prompt from the corpus ends; then saved with ``save_pretrained`` (safetensors).
Imported only by the session fixtures of conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from transformer_walkthrough.checkpoints.family import find
from transformer_walkthrough.checkpoints.llama import FAMILIES

from . import tiny_tokenizers

CORPUS = [
    "The cat is sleeping comfortably.",
    "The dog is barking loudly.",
    "A bird sings in the tree.",
]
PROMPTS = [
    "The cat is",
    "The cat is sleeping comfortably.",
    "  spaces   around  ",
    "naïve café über Straße — 5,6 %",
    "数字 and ✓ emoji 🐈 never seen",
    "line one\nline two\ttabbed",
]
TRAIN_STEPS = 80


def _spec(name: str) -> dict[str, Any]:
    """The config of checkpoint ``name`` (without the tokenizer's sizes and ids)."""
    common = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu",
    )  # fmt: skip
    return {
        "llama": dict(common, model_type="llama", num_key_value_heads=2, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "qwen2": dict(common, model_type="qwen2", num_key_value_heads=1, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "mistral": dict(common, model_type="mistral", num_key_value_heads=2, tie_word_embeddings=False,
                        sliding_window=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "llama3-rope": dict(common, model_type="llama", num_key_value_heads=2, head_dim=6,
                            tie_word_embeddings=False, rope_parameters={
                                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 16}),
        "qwen3": dict(common, model_type="qwen3", num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    }[name]  # fmt: skip


TOKENIZERS: dict[str, Callable[[Path], Any]] = {
    "llama": tiny_tokenizers.llama3_style,
    "qwen2": tiny_tokenizers.qwen2_style,
    "mistral": lambda folder: tiny_tokenizers.llama2_style(folder, legacy_layout=False),
    "llama3-rope": tiny_tokenizers.llama3_style,
    "qwen3": tiny_tokenizers.qwen2_style,
}
MODELS = tuple(TOKENIZERS)  # the checkpoints' names; each one's model class is its family's


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
        kind, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
        eos_token_id=eos if len(eos) > 1 else eos[0], pad_token_id=None, **spec,
    )  # fmt: skip
    torch.manual_seed({"llama": 0, "qwen2": 1, "mistral": 2, "llama3-rope": 3, "qwen3": 4}[name])
    model = getattr(transformers, find(FAMILIES, kind).transformers)(config)
    _train(model, tok, eos[0])
    model.save_pretrained(folder)
    for f in tokenizer_files.iterdir():  # the tokenizer's files exactly as the builder wrote them
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


def _ends(tok: Any) -> list[str]:
    """The end tokens: Llama 3 stops at either of two."""
    ends = [tok.eos_token]
    if "<|eot_id|>" in tok.get_vocab():
        ends.append("<|eot_id|>")
    return ends


def _train(model: torch.nn.Module, tok: Any, eos: int) -> None:
    """A few steps of Adam on the corpus, each sentence followed by the end token."""
    batch = [[*tok(text).input_ids, eos] for text in CORPUS]
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        loss = sum(model(torch.tensor([ids]), labels=torch.tensor([ids])).loss for ids in batch)
        loss.backward()
        optimizer.step()
    model.eval()
