"""``tour``: the trace one stage at a time, paged in the terminal."""

from typing import Annotated, Optional

import typer

from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    ConfigOption,
    HeatmapOption,
    ModelOptions,
    PrecisionOption,
    SeedOption,
    SharedScaleOption,
    WeightsOption,
    complete_stage,
    model_options,
)


@app.command()
@user_errors
@model_options()
def tour(
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    weights: WeightsOption = None,
    heatmap: HeatmapOption = False,
    shared_scale: SharedScaleOption = False,
    stage: Annotated[
        Optional[str],
        typer.Option(
            "--stage",
            "-s",
            autocompletion=complete_stage,
            help="Start at this stage: its id (decoder.0.cross-attention), a unique prefix, or its number.",
            show_default=False,
        ),
    ] = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """One stage at a time: Enter next, ← back, arrows and j/k scroll, g go to, / search, ? keys, q quit."""
    from ..views.tour import find_stage, run_tour

    trace, _ = passes.trace(config, seed, precision, weights, checkpoint.checked())
    start = 0 if stage is None else find_stage(trace, stage)
    out = Terminal()
    view = out.view(trace.config.display.precision, False, heatmap, shared_scale)
    run_tour(out.console, trace, view, start=start)
