"""``run``, ``step`` and ``stages``: the forward pass on screen, whole, a stage at a time, or listed."""

from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import WalkthroughError
from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    BackwardOption,
    ConfigOption,
    FullOption,
    HeadOption,
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
    asked = checkpoint.checked()
    if backward:  # the backward pass reads every stage again, last to first: all are kept
        trace, w = passes.trace(config, seed, precision, weights, asked)
        show(trace, list(trace), full, passes.gradients(trace, w, True), heatmap, show_map, shared_scale)
        return
    # Each stage printed as soon as it is computed, then dropped: memory holds one stage, not the pass.
    from ..model.trace import Keep

    printer = Printer(full, heatmap, show_map, shared_scale)
    trace, _ = passes.trace(config, seed, precision, weights, asked, keep=Keep(stream=printer))
    printer.end(trace)


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
    head: HeadOption = None,
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
    from ..model.trace import Keep

    if backward and head is not None:
        raise WalkthroughError("--head keeps one head's matrices, --backward reads every head's: give one")
    keep = None if backward else Keep.stages(stage, layer, head)  # the backward reads every stage
    trace, w = passes.trace(config, seed, precision, weights, checkpoint.checked(), keep=keep)
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


class Printer:
    """``run``'s stream: each stage printed the moment the pass completes it (under the weights'
    line, first), and the prediction once the pass is over: what ``show`` prints of a whole trace."""

    def __init__(self, full: bool, heatmap: bool, show_map: bool, shared_scale: bool) -> None:
        self.out = Terminal()
        self.full, self.heatmap, self.show_map, self.shared_scale = full, heatmap, show_map, shared_scale
        self.last: Stage | None = None

    def __call__(self, stage: "Stage") -> None:
        from ..views.stages import render_trace

        trace = stage.owner()
        view = self.out.view(trace.config.display.precision, self.full, self.heatmap, self.shared_scale)
        shown = render_trace(self.out.console, trace, [stage], view, prediction=False, show_map=self.show_map)
        if self.last is not None:
            next(shown)  # the weights' line, said once
        self.out.show_all(shown)
        self.last = stage

    def end(self, trace: "Trace") -> None:
        """The prediction (or why there is none), as ``show`` ends a whole trace."""
        from ..views.stages import ending

        view = self.out.view(trace.config.display.precision, self.full, self.heatmap, self.shared_scale)
        self.out.show_all(ending(trace, view))


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
