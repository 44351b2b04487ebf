"""``verify`` and ``explain``: every stage recomputed a second way, and one cell's arithmetic
with its numbers."""

from enum import Enum
from typing import Annotated, Optional

import typer

from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    ConfigOption,
    ExplainPrecision,
    HeadOption,
    ModelOptions,
    SeedOption,
    WeightsOption,
    complete_stage,
    model_options,
)


class Reference(str, Enum):
    torch = "torch"


@app.command()
@user_errors
@model_options()
def verify(
    config: ConfigOption = None,
    seed: SeedOption = None,
    against: Annotated[
        Optional[Reference], typer.Option(help="Also compare with torch.nn.Transformer (needs PyTorch).")
    ] = None,
    weights: WeightsOption = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """Recompute every stage a second way; exit 1 if any number differs."""
    from ..compare.verify import TOLERANCE, against_torch, recompute
    from ..views.tables import verify_table

    trace, w = passes.trace(config, seed, None, weights, checkpoint.checked())
    settings = trace.config
    checks = recompute(trace)
    if against is Reference.torch:
        checks += against_torch(trace, w)
    order = {stage_id: k for k, stage_id in enumerate(trace.stages)}
    checks.sort(key=lambda c: order[c.stage])  # stable: per stage, in the order they were made
    out = Terminal()
    out.show(verify_table(checks))
    failed = [c for c in checks if not c.ok]
    dtype = settings.model.dtype
    out.line(
        f"{len(checks) - len(failed)} of {len(checks)} checks agree to {TOLERANCE[dtype]:g} of their stage's "
        f"largest value ({dtype})."
    )
    if failed:
        raise typer.Exit(1)


@app.command()
@user_errors
@model_options()
def explain(
    stage: Annotated[
        str,
        typer.Option(
            "--stage",
            "-s",
            autocompletion=complete_stage,
            help="A stage id (decoder.0.masked-attention), or a kind with one stage.",
        ),
    ],
    matrix: Annotated[
        str,
        typer.Option(
            "--matrix",
            "-m",
            help="A matrix of that stage: A1, S1, output, …; dL/dA1 for its gradient (the chain rule).",
        ),
    ],
    cell: Annotated[
        str, typer.Option("--cell", help="Row,column by index (1,0) or by label (sleeping,<start>).")
    ],
    config: ConfigOption = None,
    seed: SeedOption = None,
    weights: WeightsOption = None,
    precision: ExplainPrecision = 4,
    checkpoint: ModelOptions = TOY,
    all_terms: Annotated[
        bool, typer.Option("--all-terms", help="Every term of a long sum, not the first and last few.")
    ] = False,
    head: HeadOption = None,
) -> None:
    """The arithmetic of one cell, with the actual numbers."""
    from ..errors import StageError, WalkthroughError
    from ..model.trace import Keep
    from ..views.explain import explain as explain_cell

    gradient = matrix.startswith("dL/d")  # a gradient, as --backward shows it: the chain rule of its cell
    if gradient and head is not None:
        raise WalkthroughError("--head keeps one head's matrices, a gradient reads every head's: give one")
    keep = None if gradient else Keep.stages([stage], head=head)  # the backward reads every stage
    trace, w = passes.trace(config, seed, None, weights, checkpoint.checked(), keep=keep)
    chosen = trace.select([stage])
    if len(chosen) > 1:
        raise StageError(
            f"--stage {stage} names {len(chosen)} stages; give one id: {', '.join(s.id for s in chosen)}"
        )
    if gradient:
        from ..views.gradients import explain_gradient

        grads = passes.gradients(trace, w, True)
        lines = explain_gradient(trace, grads, chosen[0].id, matrix, cell, precision, all_terms)
    else:
        lines = explain_cell(trace, chosen[0].id, matrix, cell, precision, all_terms)
    Terminal().explanation(lines)
