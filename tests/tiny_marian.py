"""A tiny random Marian checkpoint and SentencePiece tokenizers, made offline (see ``build``).

Used by the session fixtures of conftest.py; imported only when a test asks for them, so that the
toy's tests never pay for torch, transformers or sentencepiece.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import sentencepiece as spm
import torch
import transformers

SOURCE_TEXT = [
    "the cat is sleeping comfortably.",
    "a dog runs in the park!",
    "it was 42 degrees, said the café owner.",
    "the quick brown fox jumps over the lazy dog",
    "where is the bus stop? near the station.",
]
TARGET_TEXT = [
    "die Katze schläft bequem.",
    "ein Hund läuft im Park!",
    "es waren 42 Grad, sagte der Cafébesitzer.",
    "der schnelle braune Fuchs springt über den faulen Hund",
    "wo ist die Haltestelle? nahe dem Bahnhof.",
]
SENTENCES = [
    "The cat is sleeping comfortably.",
    "the  cat,is sleeping!!",
    "Es waren 1234 Grad — 5,6 % mehr.",
    "naïve café über Straße",
    "数字 and ✓ emoji 🐈 never seen",
    "",
    "   spaces   around   ",
    ">>de<< the cat",
    "the cat </s> is <unk> here",
]
D_MODEL, HEADS, LAYERS, D_FF = 16, 2, 2, 32
DROPPED = 2  # source pieces left out of vocab.json, so that transformers maps them to <unk>


def _train_spm(text: list[str], prefix: Path) -> spm.SentencePieceProcessor:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text * 4),
        model_prefix=str(prefix),
        vocab_size=60,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    shutil.move(f"{prefix}.model", f"{prefix}.spm")
    return spm.SentencePieceProcessor(model_file=f"{prefix}.spm")


def build(root: Path):
    """(safetensors folder, bin folder, the float64 eager transformers model), under ``root``.

    generation_config.json bans ``<pad>`` (``bad_words_ids``), as the hub's opus-mt configs do.
    """
    st, bin_ = root / "safetensors", root / "bin"
    st.mkdir(), bin_.mkdir()
    source = _train_spm(SOURCE_TEXT, root / "source")
    target = _train_spm(TARGET_TEXT, root / "target")
    meta = {"<unk>", "<s>", "</s>"}
    source_pieces = [source.id_to_piece(i) for i in range(source.get_piece_size())]
    pieces = ["</s>", "<unk>", *[p for p in source_pieces if p not in meta][:-DROPPED]]
    pieces += [
        p
        for p in (target.id_to_piece(i) for i in range(target.get_piece_size()))
        if p not in meta and p not in pieces and p not in source_pieces[-DROPPED:]
    ]
    pieces.append("<pad>")
    vocab = {p: i for i, p in enumerate(pieces)}
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        d_model=D_MODEL,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=D_FF,
        decoder_ffn_dim=D_FF,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=len(vocab) - 1,
        decoder_start_token_id=len(vocab) - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    with torch.no_grad():  # init leaves these at 0 and 1, which would hide a mix-up
        model.final_logits_bias.normal_()
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.normal_()
    model.save_pretrained(st)
    generation = json.loads((st / "generation_config.json").read_text(encoding="utf-8"))
    generation["bad_words_ids"] = [[config.pad_token_id]]
    (st / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    torch.save(model.state_dict(), bin_ / "pytorch_model.bin")
    shutil.copy(st / "config.json", bin_ / "config.json")
    for folder in (st, bin_):
        shutil.copy(root / "source.spm", folder / "source.spm")
        shutil.copy(root / "target.spm", folder / "target.spm")
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    reference = transformers.MarianMTModel.from_pretrained(st, attn_implementation="eager").double().eval()
    return st, bin_, reference


def reference_tokenizer(st: Path):
    return transformers.MarianTokenizer(
        str(st / "source.spm"), str(st / "target.spm"), str(st / "vocab.json")
    )
