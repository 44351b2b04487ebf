"""The YAML config: one frozen dataclass per section, built and checked by ``load_config``.

Every key is optional; a missing key takes the default below, which is the article's example.
The dataclasses are the specification: their fields are the only keys a file may use, their
types are checked, and each field's ``doc`` becomes a comment in ``walkthrough config``.
Invariants (``d_model`` divisible by ``num_heads``, every word in the vocabulary, …) are checked
in ``__post_init__``, so a config built in Python is held to the same rules as one read from YAML.

One job per module, each importing only those above it:

- ``conventions``: the switches a model can set and their allowed values, each with its note;
- ``schema``: fields with docs, every value checked against its type, every key against the
  fields (naming the offending one and suggesting the near one);
- ``tokens``: the special tokens, a sentence into words, a fill-mask model's input;
- ``model``, ``display``, ``training``: the file's three sections (``ModelConfig``, …);
- ``size``: what a config costs before any work, and the refusal of one too large;
- ``sentence``: ``Config``, the top level: the toy sentence, its split, vocabulary and blanks;
- ``yaml_io``: ``load_config`` (plain YAML, read safely) and the ``walkthrough config`` dump.

``from transformer_walkthrough.config import X`` is the public path and stays so: nearly every
module of the package, the tests and the benchmarks import the config from here, never from the
module inside that holds it. Importing it loads no YAML and no NumPy (``walkthrough --help``).
"""

from __future__ import annotations

from .conventions import (
    ACTIVATIONS,
    ATTENTION_BIASES,
    BIASED_POSITIONS,
    DTYPES,
    FEED_FORWARDS,
    FINAL_NORMS,
    HF_ACTIVATIONS,
    LAYER_TYPES,
    NORM_PLACEMENTS,
    NORMS,
    OUTPUT_HEADS,
    POSITIONAL_ENCODINGS,
    QK_NORMS,
    ROPE_SCALINGS,
    ROTATED_POSITIONS,
    SCORE_SCALES,
    SWITCHES,
    TASKS,
    TORCH_LAYERS,
)
from .display import DisplayConfig
from .limits import MAX_BYTES, MAX_TABLES
from .model import ModelConfig, sparse_layer
from .schema import quote
from .sentence import Config
from .tokens import (
    CLS,
    END,
    FILL_MASK_TOKENS,
    MASK,
    SEP,
    SPECIAL_TOKENS,
    START,
    answers,
    masked,
    tokenize,
)
from .training import TrainingConfig
from .yaml_io import (
    CONFIG_HEADER,
    NEEDS_BOTH,
    SECTIONS,
    config_from_dict,
    config_to_dict,
    config_to_yaml,
    load_config,
)

__all__ = [
    "ACTIVATIONS",
    "ATTENTION_BIASES",
    "BIASED_POSITIONS",
    "CLS",
    "CONFIG_HEADER",
    "DTYPES",
    "END",
    "FEED_FORWARDS",
    "FILL_MASK_TOKENS",
    "FINAL_NORMS",
    "HF_ACTIVATIONS",
    "LAYER_TYPES",
    "MASK",
    "MAX_BYTES",
    "MAX_TABLES",
    "NEEDS_BOTH",
    "NORMS",
    "NORM_PLACEMENTS",
    "OUTPUT_HEADS",
    "POSITIONAL_ENCODINGS",
    "QK_NORMS",
    "ROPE_SCALINGS",
    "ROTATED_POSITIONS",
    "SCORE_SCALES",
    "SECTIONS",
    "SEP",
    "SPECIAL_TOKENS",
    "START",
    "SWITCHES",
    "TASKS",
    "TORCH_LAYERS",
    "Config",
    "DisplayConfig",
    "ModelConfig",
    "TrainingConfig",
    "answers",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
    "masked",
    "quote",
    "sparse_layer",
    "tokenize",
]
