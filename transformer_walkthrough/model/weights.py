"""The model's parameters, by name: drawn from the seed (``init_weights``), or read from an .npz by
``files.weights.load_weights``, which hands its arrays to ``Weights``.

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

import numpy as np

from ..config import Config
from .architecture import Ref, side_of
from .parameters import Spec, parameters
from .size import check_config


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
    if spec.init == "normal":  # N(0, 1/fan_in), as T5 draws its relative bias table
        return rng.normal(0.0, 1.0 / math.sqrt(spec.fan_in), size=spec.shape)
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
    so float32 weights are float64's rounded. A config whose trace would not fit is refused first."""
    check_config(config)
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
