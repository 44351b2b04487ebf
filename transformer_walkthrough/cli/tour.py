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
    from ..model.stream import Stages, outline
    from ..views.tour import find_stage, run_tour

    # Each stage laid out as the pass reaches it, then dropped: memory holds one stage and the
    # pages' lines, not the pass (a resized terminal lays them out again from a new pass).
    asked = checkpoint.checked()

    def streamed() -> Stages:
        return Stages(lambda keep: passes.trace(config, seed, precision, weights, asked, keep=keep)[0])

    first = streamed()
    trace = first.trace  # the pass's first stage is computed (or its input refused) here
    ids = [sid for sid, _ in outline(trace.config.model)]
    start = 0 if stage is None else find_stage(ids, stage)
    out = Terminal()
    view = out.view(trace.config.display.precision, False, heatmap, shared_scale)
    again = iter([first])  # the first pass is the one read already; a resize makes another
    run_tour(out.console, trace, view, start=start, streamed=lambda: next(again, None) or streamed())
