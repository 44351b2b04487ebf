"""The routing of a mixture of experts, at a glance: for each sparse layer, every token's chosen
experts and their weights, and each expert's load (how many tokens, how much weight).

Read from the ``experts`` stages of a trace (``model.kinds.experts``): ``walkthrough experts``
prints it, and ``walkthrough train`` the load of each layer before and after training, with the
load-balancing loss that evens it out; ``walkthrough generate`` the experts of each token it reads
(``generation.Route``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import StageError
from ..model.trace import Stage, Trace

if TYPE_CHECKING:
    from rich.table import Table

    from ..model.generation import Step


class Load(NamedTuple):
    """One expert's share of a layer: the tokens routed to it and the weight they gave it."""

    tokens: int
    weight: float


def sparse_stages(trace: Trace, layer: int | None = None) -> list[Stage]:
    """The ``experts`` stages of the trace (of ``layer`` only, when given)."""
    stages = [s for s in trace if s.kind == "experts"]
    if not stages:
        raise StageError("this model has no experts (model.experts: 0): every layer has one feed-forward")
    if layer is not None:
        chosen = [s for s in stages if s.layer == layer]
        if not chosen:
            layers = ", ".join(str(s.layer) for s in stages)
            raise StageError(f"--layer {layer}: no sparse layer {layer}; the sparse layers are {layers}")
        return chosen
    return stages


def loads(stage: Stage) -> list[Load]:
    """Each expert's load in one layer."""
    chosen, weights = np.rint(stage["chosen"]).astype(int), stage["routing_weights"]
    E = stage["router_probs"].shape[1]
    return [Load(int(np.sum(chosen == e)), float(np.sum(weights[chosen == e]))) for e in range(E)]


def routing_lines(stage: Stage, token: int | None = None, digits: int = 2) -> list[str]:
    """One sparse layer: each token (or ``token`` alone) and the experts it went to, with their
    weights; then each expert's load, an idle one said to be idle."""
    chosen, weights = np.rint(stage["chosen"]).astype(int), stage["routing_weights"]
    rows = stage.matrices["X"].rows
    if token is not None and not 0 <= token < len(rows):
        raise StageError(f"--token {token}: the input has tokens 0 to {len(rows) - 1}")
    width = max(len(r) for r in rows)
    lines = [f"{stage.id}: each token to {chosen.shape[1]} of {stage['router_probs'].shape[1]} experts"]
    for t in range(len(rows)) if token is None else [token]:
        sent = ",  ".join(f"expert {e} × {w:.{digits}f}" for e, w in zip(chosen[t], weights[t], strict=True))
        lines.append(f"  {rows[t]:<{width}}  → {sent}")
    lines.append("  load:")
    for e, load in enumerate(loads(stage)):
        said = f"{load.tokens} token{'' if load.tokens == 1 else 's'}, weight {load.weight:.{digits}f}"
        lines.append(f"    expert {e}: {said if load.tokens else 'no token: it computed nothing'}")
    return lines


def load_change(before: Trace, after: Trace, digits: int = 2) -> list[str]:
    """Each sparse layer's load per expert before and after training: the tokens routed to it, and
    the weight they gave it."""
    lines = ["Expert load before → after training (tokens routed to each expert, the weight they gave it):"]
    for old, new in zip(sparse_stages(before), sparse_stages(after), strict=True):
        lines.append(f"  layer {old.layer}:")
        for e, (a, b) in enumerate(zip(loads(old), loads(new), strict=True)):
            lines.append(
                f"    expert {e}: {a.tokens} token{'' if a.tokens == 1 else 's'}, {a.weight:.{digits}f}"
                f" → {b.tokens} token{'' if b.tokens == 1 else 's'}, {b.weight:.{digits}f}"
            )
    return lines


def generation_routes(steps: Sequence[Step], vocabulary: Sequence[str], digits: int = 2) -> Table:
    """Each generation step's routing of the token it read last (the newest: at step 0 the prompt's
    last): in every sparse layer, the experts it went to, most probable first, with their weights.
    One row per step and layer, so that a model of any depth and k fits 80 columns."""
    from rich.text import Text

    from .widgets import LABEL, label, styled_table

    table = styled_table("The experts of each token read (each sparse layer: expert × weight)")
    for header, justify in (
        ("step", "right"),
        ("token read", "left"),
        ("layer", "right"),
        ("experts", "left"),
    ):
        table.add_column(Text(header), justify=justify, no_wrap=header != "experts")  # type: ignore[arg-type]
    for s in steps:
        for j, route in enumerate(s.routes):
            first = j == 0
            table.add_row(
                Text(str(s.index) if first else ""),
                Text(f"{label(vocabulary[s.ids[-1]])} (pos {s.positions[-1]})" if first else "", style=LABEL),
                Text(str(route.layer)),
                Text(
                    ",  ".join(
                        f"e{e} × {w:.{digits}f}" for e, w in zip(route.experts, route.weights, strict=True)
                    )
                ),
            )
    return table
