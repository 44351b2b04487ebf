"""Real checkpoints: weights read into NumPy, hub downloads, SentencePiece tokenizers, converters.

    >>> from transformer_walkthrough.checkpoints import load_marian, resolve
    >>> ckpt = load_marian(resolve("Helsinki-NLP/opus-mt-en-de"))
    >>> ckpt.weights["encoder.0.self-attention/W_QKV"].shape
    (512, 1536)

Needs the optional extra ``[models]`` (safetensors, sentencepiece, tokenizers, huggingface_hub);
torch is never imported. The extra's packages are only looked up here (``find_spec`` imports
nothing), and imported inside the functions that use them, so the toy never pays for them.
"""

from __future__ import annotations

import importlib.util

from ..errors import WalkthroughError


def _missing(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
            found = False
        if not found:
            missing.append(name)
    return missing


_absent = _missing(("safetensors", "sentencepiece", "huggingface_hub"))
if _absent:
    raise WalkthroughError(
        f"real checkpoints need {', '.join(_absent)}: pip install 'transformer-walkthrough[models]'"
    )

from .bpe import BPETokenizer, ByteLevelBPETokenizer  # noqa: E402
from .errors import CheckpointError  # noqa: E402
from .gpt2 import GPT2Checkpoint, load_gpt2  # noqa: E402
from .hub import resolve  # noqa: E402
from .marian import MarianCheckpoint, load_marian  # noqa: E402
from .run import CheckpointConfig, check_size, checkpoint_config, checkpoint_weights  # noqa: E402
from .safetensors_file import read_safetensors  # noqa: E402
from .tensors import read_weights  # noqa: E402
from .tokenizer import MarianTokenizer  # noqa: E402
from .torch_bin import read_torch_bin  # noqa: E402
from .wordpiece import WordPieceTokenizer  # noqa: E402

__all__ = [
    "BPETokenizer",
    "ByteLevelBPETokenizer",
    "CheckpointConfig",
    "CheckpointError",
    "GPT2Checkpoint",
    "MarianCheckpoint",
    "MarianTokenizer",
    "WordPieceTokenizer",
    "check_size",
    "checkpoint_config",
    "checkpoint_weights",
    "load_gpt2",
    "load_marian",
    "read_safetensors",
    "read_torch_bin",
    "read_weights",
    "resolve",
]
