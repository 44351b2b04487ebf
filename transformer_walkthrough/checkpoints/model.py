"""A converted checkpoint as this project's ``Config`` and ``Weights``, ready for ``run_forward``.

The toy's Config describes a sentence and builds its vocabulary from it: every word of the
sentence must be in the vocabulary, and ``<start>`` and ``<end>`` too. A checkpoint's vocabulary is
its tokenizer's (GPT-2's 50,257 byte-level tokens, none of them ``<start>``), and its input comes as
ids from that tokenizer. ``CheckpointConfig`` is a Config whose vocabulary is the checkpoint's token
labels by id, and which keeps every check of the model section but drops the sentence's: the
decoder's (and encoder's) input is given as ids, ``run_forward(config, w, target_ids=ids)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..architecture import parameters
from ..config import Config, ModelConfig, _Checked, estimate_size
from ..errors import ConfigError
from ..weights import Weights
from .errors import CheckpointError


class CheckpointConfig(Config):
    """A Config for a checkpoint: ``vocabulary`` is its token labels by id (two tokens may share a
    label: the tokenizer, not the label, says which id a text is), ``sentence`` only a caption."""

    def __post_init__(self) -> None:
        _Checked.__post_init__(self)  # every field's type, and the model section's own checks
        self._require(bool(self.vocabulary), "vocabulary", "a checkpoint's vocabulary is its tokenizer's")
        self._require(
            self.encoder_words == 0 or not self.model.decoder_only,
            "encoder_words",
            "must be 0 for a decoder-only model",
        )
        self._require(self.seed >= 0, "seed", f"must be 0 or more, got {self.seed}")

    @property
    def pairs(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """No sentence to learn: a checkpoint's config has no training pairs."""
        return []


def checkpoint_config(
    model: Mapping[str, Any], labels: Sequence[str], dtype: str = "float32", caption: str = ""
) -> CheckpointConfig:
    """The Config of a converted checkpoint: its model keys (``load_gpt2(...).model``), its token
    labels by id (``tokenizer.labels``), and the dtype to compute in."""
    try:
        m = ModelConfig(**{**model, "dtype": dtype})
        return CheckpointConfig(
            sentence=caption, encoder_words=0 if m.decoder_only else 1, vocabulary=tuple(labels), model=m
        )
    except ConfigError as err:
        raise CheckpointError(f"the checkpoint's config: {err}") from None


def checkpoint_weights(config: Config, arrays: Mapping[str, np.ndarray]) -> Weights:
    """The converted arrays as Weights for ``config``: every parameter present, of its shape and dtype."""
    specs, uses = parameters(config)
    dtype = np.dtype(config.model.dtype)
    missing = [name for name in specs if name not in arrays]
    extra = [name for name in arrays if name not in specs]
    if missing or extra:
        what = f"has no {missing[0]}" if missing else f"has {extra[0]}, which the model does not use"
        raise CheckpointError(f"the converted checkpoint {what}")
    for name, spec in specs.items():
        if arrays[name].shape != spec.shape or arrays[name].dtype != dtype:
            raise CheckpointError(
                f"the converted checkpoint's {name} is {arrays[name].dtype} {list(arrays[name].shape)}, "
                f"the model needs {dtype} {list(spec.shape)}"
            )
    return Weights({name: arrays[name] for name in specs}, uses)


def check_input_size(config: Config, source: int, target: int) -> None:
    """Refuse, before any work, an input whose trace would not fit in memory.

    ``source`` and ``target`` are the encoder's and the decoder's token counts (``config.check_size``
    measures the toy's sentence; a checkpoint's input comes as ids). The number of matrices is not
    limited here: a checkpoint has as many as it has, and ``run`` of a large one is for a file.
    """
    from ..config import MAX_BYTES

    m = config.model
    size = estimate_size(
        m.d_model, m.num_heads, m.d_ff, m.num_encoder_layers, m.num_decoder_layers,
        source, target, len(config.vocabulary or ()),
    )  # fmt: skip
    need = size.numbers * np.dtype(m.dtype).itemsize
    if need > MAX_BYTES:
        raise CheckpointError(
            f"{source + target} tokens would need about {need / 2**30:,.1f} GiB of matrices; "
            f"the limit is {MAX_BYTES / 2**30:g} GiB: use a shorter input"
        )


__all__ = ["CheckpointConfig", "check_input_size", "checkpoint_config", "checkpoint_weights"]
