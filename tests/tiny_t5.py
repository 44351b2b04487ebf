"""Tiny random T5 and Flan-T5 checkpoints with a SentencePiece unigram tokenizer, made offline.

``build(root, name)``: a folder holding config.json, model.safetensors, spiece.model and the
tokenizer.json that transformers' own ``T5Tokenizer`` writes for the same pieces (what
``AutoTokenizer`` reads: it cannot read spiece.model without protobuf), and the float64 eager
transformers model. "t5": ReLU, the output layer tied to ``shared`` and scaled by d_model^-0.5;
"flan-t5": gated GELU and an ``lm_head`` of its own (``tie_word_embeddings: false``), which
transformers 5 would tie on load: the reference gets it back by hand, as the file holds it.

The SentencePiece model is trained with the identity normalization (no charsmap): transformers'
T5Tokenizer built from the pieces then has no normalizer either, so the two agree by construction
on every text; T5's own nmt_nfkc is SentencePiece's to apply, not ours.
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm
import torch
import transformers
from safetensors.torch import save_file

TEXT = [
    "translate English to German: The cat is sleeping comfortably.",
    "die Katze schläft bequem.",
    "a dog runs in the park!",
    "it was 42 degrees, said the café owner.",
    "summarize: the quick brown fox jumps over the lazy dog",
]
SENTENCES = [
    "translate English to German: The cat is sleeping comfortably.",
    "the  cat,is sleeping!!",
    "naïve café über Straße",
    "数字 and ✓ emoji 🐈 never seen",
    "   spaces   around   ",
    "the cat </s> is <extra_id_0> here <extra_id_2>",
]
EXTRA = 3  # sentinels <extra_id_0> … <extra_id_2>
MODELS = ("t5", "flan-t5")


def _tokenizer(root: Path) -> tuple[spm.SentencePieceProcessor, transformers.PreTrainedTokenizerBase]:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT * 4), model_prefix=str(root / "spiece"), vocab_size=64,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        num_threads=1, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="identity",
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(root / "spiece.model"))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    vocab += [(f"<extra_id_{EXTRA - 1 - k}>", 0.0) for k in range(EXTRA)]
    return sp, transformers.T5Tokenizer(vocab=vocab, extra_ids=EXTRA)


def build(root: Path, name: str) -> tuple[Path, torch.nn.Module]:
    """(the checkpoint's folder, its float64 eager transformers model)."""
    folder = root / name
    folder.mkdir()
    sp, tokenizer = _tokenizer(folder)
    tokenizer.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": EXTRA})
    )
    flan = name == "flan-t5"
    rows = sp.get_piece_size() + EXTRA + 5  # padded past the pieces, as t5-small's 32,128 rows for 32,100
    config = transformers.T5Config(
        vocab_size=rows, d_model=16, d_kv=6, d_ff=24, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0,
        feed_forward_proj="gated-gelu" if flan else "relu", tie_word_embeddings=not flan,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(1 if flan else 0)
    model = transformers.T5ForConditionalGeneration(config)
    tensors = {}
    with torch.no_grad():  # init leaves the norms at 1, which would hide a mix-up
        for key, p in model.state_dict().items():
            if "layer_norm" in key:
                p.uniform_(0.5, 1.5)
            tensors[key] = p.detach().clone().contiguous()
    tensors = {
        k: v for k, v in tensors.items() if k in ("shared.weight",) or not k.endswith("embed_tokens.weight")
    }
    if flan:  # an output layer of its own, as Flan-T5's files hold it
        tensors["lm_head.weight"] = torch.randn(rows, 16) * 0.3
    else:
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(folder / "model.safetensors"))
    hf = config.to_dict()
    hf["tie_word_embeddings"] = not flan
    (folder / "config.json").write_text(json.dumps(hf))
    reference = transformers.T5ForConditionalGeneration.from_pretrained(folder, attn_implementation="eager")
    reference = reference.double().eval()
    if flan:  # transformers 5 ties lm_head to shared whatever the file says: untie it, unscaled
        reference.lm_head.weight = torch.nn.Parameter(tensors["lm_head.weight"].double())
        reference.config.scale_decoder_outputs = False
    return folder, reference


# --- T5's real normalisation, and a folder with tokenizer.json alone -----------------------------
# T5's spiece.model is trained with SentencePiece's nmt_nfkc rule (NFKC, control characters to
# spaces, whitespace collapsed and stripped); the hub's tokenizer.json holds the same rule as a
# ``Precompiled`` charsmap, then WhitespaceSplit and Metaspace, and the ``$A </s>`` template.
NORMALISED = [
    *SENTENCES,
    "\tTab\nnew  line ",
    "ｆｕｌｌｗｉｄｔｈ ① ﬁ ㎏",
    "  leading and trailing  ",
    "café\u0301 e\u0301 Å",
    "digits 12345, 3.14 and ２０２６",
    "unknown ☃ ∰ \u200b zero-width",
]


def _fields(buf: bytes):
    """A protobuf message's (field number, value) pairs: varints and length-delimited only (a
    ModelProto holds nothing else at the levels read here; floats are skipped)."""
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            byte = buf[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < len(buf):
        key = varint()
        kind = key & 7
        if kind == 0:
            yield key >> 3, varint()
        elif kind == 2:
            n = varint()
            yield key >> 3, buf[i : i + n]
            i += n
        else:  # 32- or 64-bit: a float
            i += 4 if kind == 5 else 8


def precompiled_charsmap(model: Path) -> bytes:
    """ModelProto.normalizer_spec (3).precompiled_charsmap (2): read without protobuf."""
    spec = next(v for n, v in _fields(model.read_bytes()) if n == 3)
    return next(v for n, v in _fields(spec) if n == 2)


def nfkc_tokenizer(root: Path) -> dict[str, Path]:
    """Folders by layout, tokenizer_config.json in each: "spiece.model", trained under nmt_nfkc, with
    the hub's tokenizer.json for it; "tokenizer.json", that file alone; "converted", the file alone
    as transformers' SentencePiece converter writes it today (the charsmap, then Strip and Replace
    of `` {2,}``, a Metaspace pre-tokenizer without WhitespaceSplit)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    both, alone, converted = root / "nfkc", root / "json-only", root / "converted"
    for folder in (both, alone, converted):
        folder.mkdir()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT * 4), model_prefix=str(both / "spiece"), vocab_size=64,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        num_threads=1, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc",
    )  # fmt: skip
    (both / "spiece.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(both / "spiece.model"))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    vocab += [(f"<extra_id_{EXTRA - 1 - k}>", 0.0) for k in range(EXTRA)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Precompiled(precompiled_charsmap(both / "spiece.model"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", 1)]
    )
    specials = ["<pad>", "</s>", "<unk>", *(f"<extra_id_{k}>" for k in range(EXTRA))]
    tok.add_special_tokens([AddedToken(t, normalized=False) for t in specials])
    tok.save(str(both / "tokenizer.json"))
    tok.save(str(alone / "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([
        tok.normalizer, normalizers.Strip(left=False, right=True), normalizers.Replace(Regex(" {2,}"), "▁")
    ])  # fmt: skip
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.save(str(converted / "tokenizer.json"))
    for folder in (both, alone, converted):
        (folder / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": EXTRA})
        )
    return {"spiece.model": both, "tokenizer.json": alone, "converted": converted}
