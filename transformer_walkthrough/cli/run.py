"""``run``, ``step`` and ``stages``: the forward pass on screen, whole, a stage at a time, or listed."""

from typing import TYPE_CHECKING, Annotated

import typer

from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    BackwardOption,
    ConfigOption,
    FullOption,
    HeatmapOption,
    LayerOption,
    MapOption,
    ModelOptions,
    PrecisionOption,
    SeedOption,
    SharedScaleOption,
    WeightsOption,
    complete_stage,
    model_options,
)

if TYPE_CHECKING:
    from ..model.backprop import Backward
    from ..model.trace import Stage, Trace


@app.command()
@user_errors
@model_options()
def run(
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    full: FullOption = False,
    weights: WeightsOption = None,
    backward: BackwardOption = False,
    heatmap: HeatmapOption = False,
    shared_scale: SharedScaleOption = False,
    show_map: MapOption = False,
    checkpoint: ModelOptions = TOY,
) -> None:
    """The whole forward pass: every stage, then the prediction."""
    trace, w = passes.trace(config, seed, precision, weights, checkpoint.checked())
    show(trace, list(trace), full, passes.gradients(trace, w, backward), heatmap, show_map, shared_scale)


@app.command()
@user_errors
@model_options()
def step(
    stage: Annotated[
        list[str],
        typer.Option(
            "--stage",
            "-s",
            autocompletion=complete_stage,
            help="A stage kind (masked-attention) or id (decoder.0.cross-attention); repeatable.",
        ),
    ],
    layer: LayerOption = None,
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    full: FullOption = False,
    weights: WeightsOption = None,
    backward: BackwardOption = False,
    heatmap: HeatmapOption = False,
    shared_scale: SharedScaleOption = False,
    show_map: MapOption = True,
    checkpoint: ModelOptions = TOY,
) -> None:
    """One stage, or all stages of one kind, with every intermediate."""
    trace, w = passes.trace(config, seed, precision, weights, checkpoint.checked())
    chosen = trace.select(stage, layer)
    show(trace, chosen, full, passes.gradients(trace, w, backward), heatmap, show_map, shared_scale)


@app.command()
@user_errors
@model_options()
def stages(
    config: ConfigOption = None,
    seed: SeedOption = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """The stage ids in order, their kinds and matrix shapes."""
    from ..views.tables import stage_list

    trace, _ = passes.trace(config, seed, None, None, checkpoint.checked())
    Terminal().show(stage_list(trace))


def show(
    trace: "Trace",
    stages: "list[Stage]",
    full: bool,
    grads: "Backward | None" = None,
    heatmap: bool = False,
    show_map: bool = False,
    shared_scale: bool = False,
) -> None:
    """Print the stages (with their gradients), and the prediction when the probabilities are among them."""
    from ..views.stages import render_trace

    out = Terminal()
    view = out.view(trace.config.display.precision, full, heatmap, shared_scale)
    # the prediction after the probabilities; after the last stage of a model that has none
    ending = any(s.kind == "probabilities" for s in stages) or (
        trace.config.model.task == "encode" and bool(stages) and stages[-1] is list(trace)[-1]
    )
    out.show_all(
        render_trace(out.console, trace, stages, view, prediction=ending, grads=grads, show_map=show_map)
    )
