"""The model's parameters, by name: drawn from the seed, loaded from or saved to an .npz.

A parameter is named by the stage that uses it (``decoder.0.feed-forward/W_1``), independently of
any trace, as ``architecture.parameters`` lists them. Each array is held once: a tied embedding
table is one parameter, used by both embeddings and (as Eᵀ) by the output layer, so its gradient
is the sum of its uses, Adam moves it once and the .npz stores it once.

Each parameter is drawn from its own stream, keyed by the seed and the parameter's name: changing
a convention of the config (pre-norm, say) leaves every other weight as it was, so that
``walkthrough diff`` shows the convention's effect alone. Each row of an embedding table is drawn
from a stream of its own, keyed by the seed, the table and the word: a word keeps its vector
whatever the vocabulary around it ("dog" in "the dog is" is not cat's old row).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from ..config import SWITCHES, Config
from ..errors import WalkthroughError
from .architecture import Ref, side_of
from .parameters import Spec, parameters


class Weights(Mapping[str, np.ndarray]):
    """Every parameter of the model: a mapping from its name to its array, each array once."""

    def __init__(self, arrays: dict[str, np.ndarray], uses: dict[str, Ref]) -> None:
        self.arrays, self.uses = arrays, uses

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def ref(self, stage_id: str, local: str) -> Ref:
        """The parameter that stage ``stage_id`` uses under the name ``local``."""
        return self.uses[f"{stage_id}/{local}"]

    def resolve(self, ref: Ref) -> np.ndarray:
        a = self.arrays[ref.name]
        return a.T if ref.transposed else a

    def take(self, stage: object, local: str) -> np.ndarray:
        """The array that ``stage`` uses as ``local``, noted in the stage's ``params``."""
        ref = self.ref(stage.id, local)  # type: ignore[attr-defined]
        stage.params[local] = ref  # type: ignore[attr-defined]
        return self.resolve(ref)

    def get_local(self, stage_id: str, local: str) -> np.ndarray | None:
        """The array a stage uses as ``local``, or None when the model has no such parameter."""
        ref = self.uses.get(f"{stage_id}/{local}")
        return None if ref is None else self.resolve(ref)

    def like(self, arrays: dict[str, np.ndarray]) -> Weights:
        """Other arrays (gradients, say) under the same names and ties."""
        return Weights(arrays, self.uses)


def _draw(spec: Spec, rng: np.random.Generator) -> np.ndarray:
    """A parameter's first values, as PyTorch would draw them (the article for the embeddings)."""

    def xavier(fan_in: int, fan_out: int) -> np.ndarray:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, size=(fan_in, fan_out))

    if spec.init == "embedding":  # the article: uniform in [0, 1)
        return rng.random(spec.shape)
    if spec.init == "xavier":  # Glorot/Xavier uniform, as nn.Transformer
        return xavier(*spec.shape)
    if spec.init == "xavier-qkv":  # [W_Q | W_K | W_V]: each its own Glorot draw
        d = spec.shape[0]
        return np.hstack([xavier(d, width) for width in spec.blocks])
    if spec.init == "bias":  # nn.Linear: uniform in ±1/√fan_in
        a = 1.0 / math.sqrt(spec.fan_in)
        return rng.uniform(-a, a, size=spec.shape)
    if spec.init == "positions":  # a learned position table, as GPT-2 draws wpe: N(0, 0.02²)
        return rng.normal(0.0, 0.02, size=spec.shape)
    if spec.init == "ones":
        return np.ones(spec.shape)
    return np.zeros(spec.shape)


def stream(seed: int, name: str) -> np.random.Generator:
    """The random stream of one parameter: keyed by the seed and the name, the same on every machine."""
    return np.random.default_rng(np.random.SeedSequence([seed, *name.encode()]))


def _table(spec: Spec, seed: int, name: str, vocabulary: tuple[str, ...]) -> np.ndarray:
    """An embedding table, uniform in [0, 1) (the article), each word's row from its own stream."""
    rows, width = spec.shape
    if rows != len(vocabulary):  # cannot happen: parameters() sizes each table by its vocabulary
        raise ValueError(f"{name}: {rows} rows for {len(vocabulary)} words")
    table = np.empty(spec.shape)
    for i, word in enumerate(vocabulary):
        table[i] = stream(seed, f"{name}[{word}]").random(width)
    return table


def init_weights(config: Config) -> Weights:
    """Every parameter drawn from the seed: embeddings uniform in [0, 1) (the article), row by word, weight
    matrices Glorot/Xavier uniform (nn.Transformer), feed-forward and output biases uniform in
    ±1/√fan_in (nn.Linear), attention biases 0 (nn.MultiheadAttention), LayerNorm gamma 1 and beta
    0, learned positions N(0, 0.02²) (GPT-2). Drawn in float64, then rounded to the config's dtype,
    so float32 weights are float64's rounded."""
    specs, uses = parameters(config)
    dtype = np.dtype(config.model.dtype)
    arrays = {
        name: (
            _table(spec, config.seed, name, config.vocabulary_of(side_of(name)))
            if spec.init == "embedding"
            else _draw(spec, stream(config.seed, name))
        ).astype(dtype, copy=False)
        for name, spec in specs.items()
    }
    return Weights(arrays, uses)


def load_weights(config: Config, path: str | Path) -> Weights:
    """Weights for ``config`` from an .npz (as ``walkthrough train --output`` writes): every name,
    shape and dtype checked against the config's parameters before any array is read
    (``npzfile.read_npz``), and no forward pass needed to know them."""
    from ..files.npzfile import VOCABULARY, read_npz, read_vocabulary

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
    """ "; it fits norm_first: true" when the file's parameter names are those of the config with
    one convention switched; "" when they are not, or cannot be read. Only the zip's directory is
    read, and only from a regular file (``member_names``): a FIFO or a device is never opened for
    reading, so the hint cannot hang or exhaust memory where ``read_npz`` has just refused."""
    import dataclasses

    from ..files.npzfile import member_names

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
