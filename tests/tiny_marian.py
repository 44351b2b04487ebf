"""Tiny random Marian checkpoints and SentencePiece tokenizers, made offline (``build``, ``build_separate``).

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


def marian_config(vocab_size: int, pad: int, **more: object) -> transformers.MarianConfig:
    """opus-mt's architecture at a tiny size: SiLU ("swish"), √d_model scaling, </s> = 0, and the
    decoder starting from pad, as every opus-mt checkpoint does."""
    return transformers.MarianConfig(
        vocab_size=vocab_size, d_model=D_MODEL, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=D_FF,
        decoder_ffn_dim=D_FF, max_position_embeddings=64, activation_function="swish",
        scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, **more,
    )  # fmt: skip


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
    config = marian_config(vocab_size=len(vocab), pad=len(vocab) - 1)
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


# ---------------------------------------------------------------------------------------------
# Separate vocabularies (tokenizer_config.json's separate_vocabs): vocab.json for the encoder,
# target_vocab.json for the decoder, of different sizes.

TARGET_DROPPED = 8  # target pieces left out of target_vocab.json: <unk> on the decoder's side
# share_encoder_decoder_embeddings, tie_word_embeddings of each variant
SEPARATE_VARIANTS = {"untied": (False, False), "tied-decoder": (False, True), "shared": (True, True)}


def _vocab(spm_model: spm.SentencePieceProcessor, dropped: int) -> list[str]:
    """</s>, <unk>, the model's pieces but its last ``dropped``, then <pad>: as opus-mt's vocabularies."""
    pieces = [spm_model.id_to_piece(i) for i in range(spm_model.get_piece_size())]
    return ["</s>", "<unk>", *[p for p in pieces if p not in {"<unk>", "<s>", "</s>"}][:-dropped], "<pad>"]


def build_separate(root: Path) -> dict[str, tuple[Path, transformers.MarianMTModel]]:
    """A Marian checkpoint of two vocabularies in each of ``SEPARATE_VARIANTS``: variant ->
    (folder, its float64 eager transformers model).

    The encoder's table has a row per source piece (vocab_size), the decoder's and lm_head one
    per target piece (decoder_vocab_size), fewer; "shared" is one table of vocab_size rows that
    both vocabularies index. pad and decoder_start are the target's <pad>, banned in generation.
    """
    source = _train_spm(SOURCE_TEXT, root / "source")
    target = _train_spm(TARGET_TEXT, root / "target")
    source_pieces, target_pieces = _vocab(source, DROPPED), _vocab(target, TARGET_DROPPED)
    assert len(source_pieces) > len(target_pieces), "the sizes must differ (and pad fit both tables)"
    out = {}
    for variant, (share, tie) in SEPARATE_VARIANTS.items():
        folder = root / variant
        folder.mkdir()
        pad = len(target_pieces) - 1
        config = marian_config(
            vocab_size=len(source_pieces),
            pad=pad,
            decoder_vocab_size=len(target_pieces),
            share_encoder_decoder_embeddings=share,
            tie_word_embeddings=tie,
            init_std=0.15,  # attention far from uniform, so that a label or a head mixed up shows
        )
        torch.manual_seed(2)
        model = transformers.MarianMTModel(config)
        with torch.no_grad():  # init leaves these at 0 and 1 (and pad's rows at 0): a mix-up would hide
            model.final_logits_bias.normal_()
            for name, p in model.named_parameters():
                if "layer_norm" in name or "embed_tokens" in name or "shared" in name or "lm_head" in name:
                    p.normal_()
        model.save_pretrained(folder)
        generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        generation["bad_words_ids"] = [[pad]]
        (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
        shutil.copy(root / "source.spm", folder / "source.spm")
        shutil.copy(root / "target.spm", folder / "target.spm")
        for name, pieces in (("vocab.json", source_pieces), ("target_vocab.json", target_pieces)):
            vocab = {p: i for i, p in enumerate(pieces)}
            (folder / name).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}), encoding="utf-8")
        reference = transformers.MarianMTModel.from_pretrained(folder, attn_implementation="eager")
        out[variant] = (folder, reference.double().eval())
    return out


def pieces_of(path: Path) -> tuple[str, ...]:
    """A vocabulary file's pieces by id, read by the test itself (the tiny files have no gaps)."""
    vocab = json.loads(path.read_text(encoding="utf-8"))
    assert sorted(vocab.values()) == list(range(len(vocab)))
    return tuple(sorted(vocab, key=vocab.__getitem__))
