"""Tiny BERT-family checkpoints, made offline with transformers and briefly trained (``build``).

Six folders, each a case the issue names:

- ``bert``: ``BertForMaskedLM`` (d 32, 4 heads, 2 layers, GELU, 2 segment rows), a bert-base-uncased
  style WordPiece tokenizer (tokenizer.json and vocab.txt);
- ``roberta``: ``RobertaForMaskedLM``, one segment row, positions from ``pad_token_id + 1`` = 2, a
  roberta-base style byte-level tokenizer (``<mask>`` with lstrip);
- ``distilbert``: ``DistilBertForMaskedLM`` with ``sinusoidal_pos_embds`` (the table is still saved
  as weights), its tokenizer_config.json distilbert-base-uncased's ``{"do_lower_case": true}``;
- ``bert-untied``: ``bert``'s weights with ``tie_word_embeddings`` false, the output layer's own
  weight and bias (not E's), so that W is a matrix of its own;
- ``bert-pretraining``: ``bert``'s weights as the hub's bert-base-uncased holds them, a
  ``BertForPreTraining`` file: the pooler and the next-sentence head ``cls.seq_relationship`` too,
  the LayerNorms' ``gamma``/``beta`` names of older files, and the ``position_ids`` and
  ``token_type_ids`` buffers;
- ``bert-encoder``: a plain ``BertModel`` (no MLM head: names without the ``bert.`` prefix, the
  pooler), ``hidden_act`` gelu_new.

The three masked-LM models are trained for a few dozen Adam steps on ``SENTENCES``, each word
masked in turn, so that the blank of "the cat is [MASK] comfortably." is filled with "sleeping"
by a margin. Saved with ``save_pretrained`` (float32 safetensors). Imported only by the session
fixture ``bert_family`` of conftest.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import load_file, save_file

from transformer_walkthrough.checkpoints.bert import FAMILIES
from transformer_walkthrough.checkpoints.family import find

from . import tiny_tokenizers

SENTENCES = [
    "The cat is sleeping comfortably.",
    "The dog is barking loudly.",
    "A bird sings in the tree.",
    "The cat sat on the mat.",
    "The dog is running fast.",
]
MASKED = ["The cat is {} comfortably.", "The {} is barking loudly.", "The cat is {} {}."]  # blanks: {}
POSITIONS = 32  # tokens a sentence may have (RoBERTa's table has 2 rows more)
TRAIN_STEPS = 100
MODELS = ("bert", "roberta", "distilbert", "bert-untied", "bert-pretraining", "bert-encoder")
_TOKENIZER_CORPUS = SENTENCES * 8


def _common(vocab_size: int) -> dict[str, Any]:
    return dict(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12,
    )  # fmt: skip


def _bert_config(info: tiny_tokenizers.Tiny) -> transformers.BertConfig:
    return transformers.BertConfig(
        **_common(info.vocab_size), max_position_embeddings=POSITIONS, type_vocab_size=2, pad_token_id=0
    )


def _roberta_config(info: tiny_tokenizers.Tiny) -> transformers.RobertaConfig:
    return transformers.RobertaConfig(
        **_common(info.vocab_size), max_position_embeddings=POSITIONS + 2, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip


def _distilbert_config(info: tiny_tokenizers.Tiny) -> transformers.DistilBertConfig:
    return transformers.DistilBertConfig(
        vocab_size=info.vocab_size, dim=32, n_heads=4, hidden_dim=64, n_layers=2,
        max_position_embeddings=POSITIONS, sinusoidal_pos_embds=True, dropout=0.0,
        attention_dropout=0.0, activation="gelu", pad_token_id=0,
    )  # fmt: skip


TOKENIZERS: dict[str, Callable[[Path], tiny_tokenizers.Tiny]] = {
    "bert": lambda f: tiny_tokenizers.bert_style(f, corpus=_TOKENIZER_CORPUS, vocab_size=200),
    "roberta": lambda f: tiny_tokenizers.roberta_style(f, corpus=_TOKENIZER_CORPUS, vocab_size=340),
    "distilbert": lambda f: tiny_tokenizers.bert_style(
        f, corpus=_TOKENIZER_CORPUS, vocab_size=200, config={"do_lower_case": True}
    ),
}
# The trained checkpoints, one per family (by model_type): each one's config; its model class is
# its family's (the record's ``transformers``).
TRAINED = {"bert": _bert_config, "roberta": _roberta_config, "distilbert": _distilbert_config}


def build_all(root: Path) -> dict[str, Path]:
    """Every checkpoint of ``MODELS`` under ``root``, by name.

    Trained on one thread: such tiny matrices gain nothing from two, and on a machine whose cores
    are busy, torch's second thread waiting for the first makes each step ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folders = {name: _trained(root, name) for name in TRAINED}
        folders["bert-untied"] = _untied(folders["bert"], root / "bert-untied")
        folders["bert-pretraining"] = _pretraining(folders["bert"], root / "bert-pretraining")
        folders["bert-encoder"] = _encoder(folders["bert"], root / "bert-encoder")
    finally:
        torch.set_num_threads(threads)
    return folders


def _trained(root: Path, name: str) -> Path:
    """A masked-LM checkpoint trained on SENTENCES, its tokenizer's files beside its weights."""
    folder = root / name
    family = find(FAMILIES, name)
    info = TOKENIZERS[name](folder)
    tiny_tokenizers.write_model_type(folder, family.model_type)  # AutoTokenizer picks the family's class
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    torch.manual_seed({"bert": 0, "roberta": 1, "distilbert": 2}[name])
    model = getattr(transformers, family.transformers)(TRAINED[name](info))
    _train(model, tok)
    model.save_pretrained(folder)
    return folder


def _train(model: torch.nn.Module, tok: Any) -> None:
    """Adam on every sentence with each of its words (not [CLS], [SEP]) masked in turn: a batch of
    one row per word, the loss on the masked token only."""
    batches = []
    for text in SENTENCES:
        ids = torch.tensor(tok(text).input_ids)
        inner = torch.arange(1, len(ids) - 1)
        inputs = ids.repeat(len(inner), 1)
        labels = torch.full_like(inputs, -100)
        labels[torch.arange(len(inner)), inner] = ids[inner]
        inputs[torch.arange(len(inner)), inner] = tok.mask_token_id
        batches.append((inputs, labels))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        loss = sum(model(input_ids=inputs, labels=labels).loss for inputs, labels in batches)
        loss.backward()
        optimizer.step()
    model.eval()


def _copy_tokenizer(source: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    for f in source.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, folder / f.name)


def _untied(bert: Path, folder: Path) -> Path:
    """``bert`` with an output layer of its own: W = 1.1·E, b = the head's bias + 0.1, untied."""
    _copy_tokenizer(bert, folder)
    config = transformers.BertConfig.from_pretrained(bert)
    config.tie_word_embeddings = False
    model = transformers.BertForMaskedLM(config)
    model.load_state_dict(transformers.BertForMaskedLM.from_pretrained(bert).state_dict(), strict=False)
    with torch.no_grad():
        E = model.bert.embeddings.word_embeddings.weight
        model.cls.predictions.decoder.weight.copy_(1.1 * E)
        model.cls.predictions.decoder.bias.copy_(model.cls.predictions.bias + 0.1)
    model.eval().save_pretrained(folder)
    return folder


def _pretraining(bert: Path, folder: Path) -> Path:
    """``bert``'s weights in a file as the hub's bert-base-uncased: BertForPreTraining's tensors
    (the pooler and ``cls.seq_relationship``, random), ``LayerNorm.gamma``/``beta``, the buffers."""
    _copy_tokenizer(bert, folder)
    torch.manual_seed(3)  # the pooler and the next-sentence head: random, as they are not read
    transformers.BertForPreTraining.from_pretrained(bert).save_pretrained(folder)
    state = load_file(folder / "model.safetensors")
    state = {_legacy(k): v.contiguous() for k, v in state.items()}
    state["bert.embeddings.position_ids"] = torch.arange(POSITIONS).unsqueeze(0)
    state["bert.embeddings.token_type_ids"] = torch.zeros(1, POSITIONS, dtype=torch.long)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config_json = json.loads((folder / "config.json").read_text())
    config_json["architectures"] = ["BertForPreTraining"]
    (folder / "config.json").write_text(json.dumps(config_json, indent=2))
    return folder


def _legacy(name: str) -> str:
    """Older files' LayerNorm names: ``LayerNorm.gamma`` and ``LayerNorm.beta``."""
    for new, old in ((".LayerNorm.weight", ".LayerNorm.gamma"), (".LayerNorm.bias", ".LayerNorm.beta")):
        if name.endswith(new):
            return name[: -len(new)] + old
    return name


def _encoder(bert: Path, folder: Path) -> Path:
    """A plain BertModel (no head, names without ``bert.``), ``bert``'s body, hidden_act gelu_new."""
    _copy_tokenizer(bert, folder)
    config = transformers.BertConfig.from_pretrained(bert)
    config.hidden_act = "gelu_new"
    torch.manual_seed(4)
    model = transformers.BertModel(config)
    body = {k.removeprefix("bert."): v for k, v in load_file(bert / "model.safetensors").items()}
    model.load_state_dict({k: v for k, v in body.items() if not k.startswith("cls.")}, strict=False)
    model.eval().save_pretrained(folder)
    return folder
