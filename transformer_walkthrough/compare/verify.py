"""Every stage computed a second, independent way, so a learner can trust what they copy.

The model computes with ``functional`` (vectorised NumPy). Here each stage is recomputed from the
matrices it recorded, differently: products as explicit ``einsum`` sums, softmax, the norms, the
positional encoding and the activations cell by cell with ``math``, one head at a time; each kind
owns that computation (``Kind.second``, beside its forward), and the graph is checked here.
``against_torch`` compares the whole model with PyTorch's own transformer layers (``reference``),
in the config's dtype, when PyTorch is installed.
"""

from __future__ import annotations

import math

from ..config import TORCH_LAYERS
from ..errors import WalkthroughError
from ..model.architecture import ENCODER, stack_output
from ..model.kinds import KINDS
from ..model.trace import Trace
from ..model.weights import Weights
from .checks import TOLERANCE, Check, gap, scale

__all__ = ["TOLERANCE", "Check", "against_torch", "recompute"]


def recompute(trace: Trace) -> list[Check]:
    """Recompute every stage from its own recorded inputs; check each stage reads what it should."""
    m = trace.config.model
    checks: list[Check] = []
    for stage in trace:
        try:
            checks += KINDS[stage.kind].second(stage, trace, m)
        except OverflowError:  # numbers too large for a Python float: no second computation to compare
            checks.append(
                Check(stage.id, "the second computation overflowed: numbers beyond ±1.8e308", math.inf)
            )
    checks.extend(_graph(trace))
    return with_tolerance(checks, trace)


def with_tolerance(checks: list[Check], trace: Trace) -> list[Check]:
    """The checks judged at the tolerance of the trace's dtype, relative to each stage's scale."""
    tolerance = TOLERANCE[trace.config.model.dtype]
    scales = {sid: scale(trace[sid]) for sid in {c.stage for c in checks}}
    return [c._replace(tolerance=tolerance * scales[c.stage]) for c in checks]


def _graph(trace: Trace) -> list[Check]:
    """Each input equals the output of the stage it says it came from, and cross-attention reads
    the encoder's output: the wiring of Figure 1, as the trace recorded it."""
    checks = []
    m = trace.config.model
    for stage in trace:
        for name, source in stage.sources.items():
            given = trace[source]
            verb = "equal" if name.endswith("s") else "equals"  # logits equal the logits of …
            checks.append(Check(stage.id, f"{name} {verb} the {given.output} of {source}",
                                gap(stage[name], given[given.output])))  # fmt: skip
        if "memory" in stage:
            ok = stage.sources.get("memory") == stack_output(ENCODER, m)
            checks.append(Check(stage.id, "memory is the encoder's output", 0.0 if ok else math.inf))
    return checks


def against_torch(trace: Trace, weights: Weights) -> list[Check]:
    """The whole model rebuilt from PyTorch's transformer layers (``reference``), compared stage by stage."""
    try:
        import torch
    except ImportError:
        raise WalkthroughError(
            "--against torch needs PyTorch: pip install torch (CPU build), then run this again"
        ) from None
    m = trace.config.model
    for key, values in TORCH_LAYERS.items():
        if getattr(m, key) not in values:
            shown = ", ".join(str(v).lower() for v in values)
            raise WalkthroughError(
                f"--against torch: PyTorch's transformer layers have no model.{key}: {getattr(m, key)} "
                f"(only {shown}); verify recomputes it a second way without them"
            )
    from .reference import torch_checks

    return with_tolerance(torch_checks(torch, trace, weights), trace)
