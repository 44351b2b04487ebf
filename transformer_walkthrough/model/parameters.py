"""Every parameter of the model, read off the walk of Figure 1 and each kind's own specs.

A parameter is named by the stage that uses it (``decoder.0.feed-forward/W_1``); a tied table is
one parameter, named by its first use, that later uses refer to (``architecture.Ref``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .architecture import Ref, side_of, walk
from .kinds import KINDS, Sizes, Spec

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["Ref", "Spec", "parameters"]


def parameters(config: Config) -> tuple[dict[str, Spec], dict[str, Ref]]:
    """Every parameter of the model in a fixed order, and every use of a parameter by a stage.

    Returns ``specs`` (parameter name -> Spec) and ``uses`` ("stage id/local name" -> Ref).
    A parameter specified ``per_stack`` (T5's relative bias table R) is its stack's first layer's,
    which the later layers use. With ``tie_embeddings`` the first stack's E is the only table: the
    other embedding and the output layer's W use it (W as Eᵀ). A table has a row for each piece of
    its side's vocabulary (``config.vocabulary_of``): a checkpoint's encoder may read one of its own.
    """
    m = config.model
    head_in = m.d_model * (len(config.target_tokens) if m.output_head == "flatten" else 1)
    specs: dict[str, Spec] = {}
    uses: dict[str, Ref] = {}
    shared: Ref | None = None  # the tied table: the first embedding's E
    per_stack: dict[tuple[str, str], Ref] = {}  # (stack, local name) -> its first layer's parameter
    for place in walk(m):
        sizes = Sizes(len(config.vocabulary_of(side_of(place.id))), head_in)
        for local, spec in KINDS[place.kind].params(m, sizes).items():
            name = f"{place.id}/{local}"
            if spec.per_stack:  # T5's relative bias table: the first layer's, used by every layer
                first = per_stack.setdefault((side_of(place.id), local), Ref(name))
                if first.name != name:
                    uses[name] = first
                    continue
            if m.tie_embeddings and local in ("E", "W") and shared is not None:
                uses[name] = shared if local == "E" else shared._replace(transposed=True)
                continue
            specs[name], uses[name] = spec, Ref(name)
            if m.tie_embeddings and local == "E":
                shared = Ref(name)
    return specs, uses
