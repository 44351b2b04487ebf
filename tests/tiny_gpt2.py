"""A tiny random GPT-2 checkpoint and a byte-level BPE tokenizer, made offline (see ``build``).

Used by the session fixture ``gpt2`` of conftest.py; imported only when a test asks for it, so that
the toy's tests never pay for torch, transformers or tokenizers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import transformers
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CORPUS = [
    "The cat is sleeping comfortably.",
    "A dog runs in the park! It was 42 degrees, said the café owner.",
    "the quick brown fox jumps over the lazy dog",
    "Where is the bus stop? Near the station, über the bridge.",
    "Hello, world: 1234 + 5678 = 6912",
]
PROMPTS = [
    "The cat is sleeping comfortably.",
    "the  cat,is sleeping!!",
    "   spaces   around   ",
    "naïve café über Straße — 5,6 %",
    "数字 and ✓ emoji 🐈‍⬛ never seen",
    "line one\nline two\ttabbed",
    "<|endoftext|>The cat<|endoftext|>",
]
D_MODEL, HEADS, LAYERS, POSITIONS = 16, 2, 2, 64
EOS = "<|endoftext|>"


def _train_tokenizer(path: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.save(str(path))
    return tok


def hub_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The hub's names for a save_pretrained state dict: no prefix, no lm_head, the mask buffers."""
    hub = {k.removeprefix("transformer."): v for k, v in state.items() if k != "lm_head.weight"}
    for n in range(LAYERS):
        hub[f"h.{n}.attn.bias"] = torch.tril(torch.ones(POSITIONS, POSITIONS)).view(
            1, 1, POSITIONS, POSITIONS
        )
        hub[f"h.{n}.attn.masked_bias"] = torch.tensor(-1e4)
    return hub


def build(root: Path):
    """Folders {"saved", "hub", "hub-bin"} under ``root``, and the float64 eager transformers model.

    "saved" is ``save_pretrained``'s layout (``transformer.``-prefixed names, no buffers); "hub" and
    "hub-bin" hold the same tensors in the hub's (no prefix, no ``lm_head``, the causal-mask buffers
    ``h.N.attn.bias`` and ``h.N.attn.masked_bias``), as safetensors and as a torch zip.
    """
    saved = root / "saved"
    saved.mkdir()
    tok = _train_tokenizer(saved / "tokenizer.json")
    eos = tok.token_to_id(EOS)
    config = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_embd=D_MODEL,
        n_head=HEADS,
        n_layer=LAYERS,
        n_positions=POSITIONS,
        initializer_range=0.4,  # GPT-2's 0.02 makes every prediction near uniform: a weak test
        bos_token_id=eos,
        eos_token_id=eos,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():  # init leaves these at 1 and 0, which would hide a mix-up
        for name, p in model.named_parameters():
            if ".ln_" in name and name.endswith("weight"):
                p.normal_(1.0, 0.2)
            elif "bias" in name:
                p.normal_(0.0, 0.2)
    model.save_pretrained(saved)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    hub = hub_layout(state)
    folders = {"saved": saved}
    for name, write in (
        ("hub", lambda f: save_file({k: v.numpy() for k, v in hub.items()}, f / "model.safetensors")),
        ("hub-bin", lambda f: torch.save(hub, f / "pytorch_model.bin")),
    ):
        folder = root / name
        folder.mkdir()
        write(folder)
        for file in ("config.json", "tokenizer.json"):
            shutil.copy(saved / file, folder / file)
        folders[name] = folder
    reference = (
        transformers.GPT2LMHeadModel.from_pretrained(saved, attn_implementation="eager").double().eval()
    )
    return folders, reference
