"""A trained model's weights, read from the .npz that ``walkthrough train --output`` writes.

The file is read here, every name, shape and dtype checked before any array (``npzfile.read_npz``);
the model receives the arrays (``model.weights.Weights``) and never opens a file. When the file
does not fit the config, the message says why in the config's terms: other words, or another
convention (pre-norm, tied tables, …).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..config import SWITCHES, Config
from ..errors import WalkthroughError
from ..model.parameters import parameters
from ..model.size import check_config
from ..model.weights import Weights
from .npzfile import VOCABULARY, member_names, read_npz, read_vocabulary


def load_weights(config: Config, path: str | Path) -> Weights:
    """Weights for ``config`` from an .npz (as ``walkthrough train --output`` writes): every name,
    shape and dtype checked against the config's parameters before any array is read
    (``read_npz``), and no forward pass needed to know them; a config whose trace would not fit is
    refused before the file is opened."""
    check_config(config)
    specs, uses = parameters(config)
    try:
        stored = read_npz(path, expected={name: spec.shape for name, spec in specs.items()})
    except WalkthroughError as err:
        words = _words_hint(config, path, read_vocabulary(path))
        if words:
            raise WalkthroughError(words) from None
        hint = _convention_hint(config, path)
        raise WalkthroughError(f"{err}{hint}") from None
    # Tables of the same size may hold other words: a row is a word's, never another word's.
    if VOCABULARY in stored:
        words = _words_hint(config, path, tuple(str(w) for w in stored[VOCABULARY]))
        if words:
            raise WalkthroughError(words)
    dtype = np.dtype(config.model.dtype)
    return Weights({name: stored[name].astype(dtype, copy=False) for name in specs}, uses)


def _words_hint(config: Config, path: str | Path, known: tuple[str, ...] | None) -> str:
    """When the file was trained on other words (its ``vocabulary``, ``known``): which words of this
    config it lacks, or that its rows are the same words in another order; "" when it has no
    vocabulary or this config's (then the file is wrong in another way, or right)."""
    vocabulary = tuple(config.vocabulary or ())
    if known is None or tuple(known) == vocabulary:
        return ""
    trained = f"{path}: its embedding tables were trained on {len(known)} words ({', '.join(known[:8])}"
    trained += f"{', …' if len(known) > 8 else ''})"
    new = [w for w in vocabulary if w not in known]
    if not new:
        return f"{trained}, in another order than this config's vocabulary: list them in that order"
    shown = ", ".join(new[:8]) + (f" and {len(new) - 8} more" if len(new) > 8 else "")
    return (
        f"{trained}; {shown} {'is' if len(new) == 1 else 'are'} new to it: train on this sentence "
        "(walkthrough train … --output), or run without --weights"
    )


def _convention_hint(config: Config, path: str | Path) -> str:
    """ "; it fits this config with model.norm_placement: pre" when the file's parameter names are
    those of the config with one convention switched; "" when they are not, or cannot be read. Only
    the zip's directory is read, and only from a regular file (``member_names``): a FIFO or a device
    is never opened for reading, so the hint cannot hang or exhaust memory where ``read_npz`` has
    just refused."""
    names = member_names(path)
    if names is None:
        return ""
    if names == set(parameters(config)[0]):  # the names fit: the file is wrong in another way
        return ""
    m = config.model
    for key, values in SWITCHES.items():
        for value in values:
            if value == getattr(m, key):
                continue
            try:
                other = dataclasses.replace(config, model=dataclasses.replace(m, **{key: value}))
            except WalkthroughError:
                continue
            if set(parameters(other)[0]) == names:
                shown = str(value).lower() if isinstance(value, bool) else value
                return f"; it fits this config with model.{key}: {shown}"
    return ""
