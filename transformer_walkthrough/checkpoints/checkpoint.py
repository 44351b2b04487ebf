"""Any checkpoint family in one shape, and the one place that picks the family: config.json's model_type.

``FAMILIES`` is every family's record (``family.Family``), gathered from their modules. A family's
converter (``load_marian``, ``load_gpt2``) returns an object with the fields of
``Checkpoint``: the model's keys of our ``ModelConfig``, the weights under our parameter names,
a tokenizer, and what generation needs. Everything after loading (``run.walk``) reads only these.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from . import bert, gemma, gpt2, llama, marian, moe, t5
from .errors import CheckpointError
from .family import Family, find
from .hub import expanded, resolve
from .jsonfile import shown
from .tensors import read_config_json


class Tokenizer(Protocol):
    """Text -> ids and ids -> text, and each id's piece (the labels of rows and columns)."""

    source_vocabulary: tuple[str, ...]
    target_vocabulary: tuple[str, ...]

    def encode_source(self, text: str) -> list[int]: ...

    def encode_target(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


class Checkpoint(Protocol):
    """A converted checkpoint, whatever its family."""

    family: Family  # the record of config.json's model_type
    model: dict[str, Any]  # keys of ModelConfig
    weights: dict[str, np.ndarray]  # our parameter names (architecture.parameters)
    tokenizer: Tokenizer
    decoder_start_token_id: int | None  # None: the decoder reads its input (GPT-2's prompt) as it is
    eos_token_id: int | tuple[int, ...] | None  # one id, or several (Llama 3)
    pad_token_id: int | None
    bad_words_ids: tuple[tuple[int, ...], ...]  # generation never picks these (opus-mt: <pad>)
    forced_eos_token_id: int | None  # the token forced at the length limit
    source: str  # where the weights came from: "Helsinki-NLP/opus-mt-en-de (model.safetensors)"


# Every family this project converts, each a record of its own module (a new model_type: a new
# record there). The order is the one messages list them in.
FAMILIES: tuple[Family, ...] = (
    *marian.FAMILIES, *gpt2.FAMILIES, *llama.FAMILIES, *moe.FAMILIES, *gemma.FAMILIES, *bert.FAMILIES,
    *t5.FAMILIES,
)  # fmt: skip


def family_of(folder: Path) -> Family:
    """The family of config.json's ``model_type``, read before anything else of the folder."""
    path = folder / "config.json"
    kind = read_config_json(folder).get("model_type")
    family = find(FAMILIES, kind)  # compared, never hashed: a list or a dict is no model_type
    if family is None:
        supported = ", ".join(repr(f.model_type) for f in FAMILIES)
        raise CheckpointError(f"{path}: model_type is {shown(kind)}; supported: {supported}")
    return family


def load_checkpoint(path_or_id: str, dtype: str = "float32", prompt: bool | None = None) -> Checkpoint:
    """The checkpoint in a folder or under a hub id, converted by its family's loader.

    ``prompt`` says which input the user gave: True for ``--prompt`` (a decoder-only model's),
    False for ``--source`` (an encoder-decoder model's); the wrong one is refused before any
    weight is read, with the option to use instead.
    """
    folder = resolve(path_or_id)
    name = None if expanded(path_or_id).is_dir() else path_or_id
    family = family_of(folder)
    kind = family.model_type
    if prompt is not None and prompt == family.encoder_decoder:
        if prompt:
            raise CheckpointError(
                f"{path_or_id} is an encoder-decoder model ({kind}): give --source TEXT (and --target), "
                "not --prompt"
            )
        only = "an encoder-only" if family.architecture == "encoder-only" else "a decoder-only"
        raise CheckpointError(
            f"{path_or_id} is {only} model ({kind}): give --prompt TEXT, not --source/--target"
        )
    return check_special_ids(family.load(folder, dtype, name), folder)


def check_special_ids(ckpt: Checkpoint, folder: Path) -> Checkpoint:
    """``ckpt``, once every token id that generation indexes with is one of the decoder's pieces: the
    start token (a row of E), the forced end and each banned word's last token (columns of the
    logits). One past them would fail, or choose at random, in the middle of a translation.

    The end token is only compared with what was chosen: one past the pieces is never chosen, and
    generation runs to its length limit, as in transformers (GPT2Config's default eos, 50256, is
    past a small model's vocabulary)."""
    rows = len(ckpt.tokenizer.target_vocabulary)
    ids = {
        "decoder_start_token_id": ckpt.decoder_start_token_id,
        "forced_eos_token_id": ckpt.forced_eos_token_id,
        **{f"bad_words_ids[{k}][{len(w) - 1}]": w[-1] for k, w in enumerate(ckpt.bad_words_ids)},
    }
    for key, i in ids.items():
        if i is not None and not 0 <= i < rows:
            raise CheckpointError(
                f"{folder}: {key} is {i}, but the decoder's vocabulary has ids 0 to {rows - 1}"
            )
    return ckpt
