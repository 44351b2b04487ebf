"""``lens`` and ``attention``: what the model would predict after each layer, and every head's
attention weights at a glance."""

from typing import Annotated, Optional

import typer

from ..errors import WalkthroughError
from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    ConfigOption,
    LayerOption,
    ModelOptions,
    PrecisionOption,
    SeedOption,
    WeightsOption,
    complete_stage,
    model_options,
)


@app.command()
@user_errors
@model_options()
def lens(
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    weights: WeightsOption = None,
    position: Annotated[
        Optional[int],
        typer.Option(help="One position (0 is the first): its top k after every layer.", show_default=False),
    ] = None,
    top_k: Annotated[
        Optional[int],
        typer.Option(
            "--top-k",
            help="Tokens per cell: default 1 in the table, 5 with --position.",
            show_default=False,
        ),
    ] = None,
    explain: Annotated[
        Optional[str],
        typer.Option(
            "--explain",
            help="The arithmetic of one cell, LAYER,POSITION (1,2): which stage's output, which norm, "
            "which column of W.",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        Optional[str],
        typer.Option(
            help="With --explain: this token's probability (default: the cell's top one).", show_default=False
        ),
    ] = None,
    at: Annotated[
        Optional[list[int]],
        typer.Option(
            "--at",
            help="A position whose column the table keeps when the terminal is too narrow for every "
            "one (0 is the first); repeatable. The blanks of a fill-mask model are always kept.",
            show_default=False,
        ),
    ] = None,
    digits: Annotated[
        Optional[int], typer.Option("--digits", hidden=True, help="--precision's old name for --explain.")
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Every position, however wide the table.")] = False,
    checkpoint: ModelOptions = TOY,
) -> None:
    """The logit lens: what the model would predict after each layer (the decoder's; BERT's encoder's), at
    every position."""
    if top_k is not None and top_k < 1:
        raise WalkthroughError(f"--top-k: must be 1 or more, got {top_k}")
    if position is not None and position < 0:
        raise WalkthroughError(f"--position: must be 0 or more, got {position}")
    if token is not None and explain is None:
        raise WalkthroughError(
            "--token says which token --explain explains: give --explain LAYER,POSITION too"
        )
    if explain is not None and (position is not None or top_k is not None):
        raise WalkthroughError(
            "--explain shows one cell's arithmetic: --position and --top-k are for the tables"
        )
    from ..model.lens import TOP, lens_stages, logit_lens
    from ..model.trace import Keep
    from ..views import lens as shown

    # The tables read each layer's output and keep the top k of each cell; --explain runs one cell's top
    # again and sets it beside the model's own probabilities: the whole trace.
    keep = Keep(lens_stages) if explain is None else None
    trace, w = passes.trace(config, seed, precision, weights, checkpoint.checked(), keep=keep)
    vocab = len(trace.vocabulary)
    if top_k is not None and top_k > vocab:
        raise WalkthroughError(f"--top-k: the vocabulary has {vocab} tokens, got {top_k}")
    found = logit_lens(trace, top=max(TOP, top_k or 0), weights=w)
    if position is not None:
        shown.check_position(position, found)
    for asked in at or ():
        shown.check_position(asked, found, "--at")
    out = Terminal()
    if explain is not None:
        layer, cell_position = shown.parse_lens_cell(explain, found)
        chosen = None if token is None else shown.token_id(token, found)
        # one name for digits across commands: --precision (4 for the arithmetic unless given)
        places = digits if digits is not None else 4 if precision is None else precision
        out.explanation(shown.explain_lens(trace, found, layer, cell_position, chosen, places))
        return
    view = out.view(trace.config.display.precision, full)
    out.note(f"weights: {trace.weights_origin}")
    if position is not None:
        out.show(shown.position_table(found, position, top_k or 5, view))
    else:
        table, columns = shown.lens_table(found, view, top_k or 1, at or ())
        out.show_all([table])
        note = shown.left_out(found, columns)
        if note:
            out.line(f"({note})")
    out.line(f"The lens: {shown.where(found)}. {shown.reading(trace, found)}")


@app.command()
@user_errors
@model_options()
def attention(
    config: ConfigOption = None,
    seed: SeedOption = None,
    weights: WeightsOption = None,
    stage: Annotated[
        Optional[list[str]],
        typer.Option(
            "--stage",
            "-s",
            autocompletion=complete_stage,
            help="Only these attention stages: a kind (cross-attention) or an id; repeatable.",
            show_default=False,
        ),
    ] = None,
    layer: LayerOption = None,
    head: Annotated[Optional[int], typer.Option(help="Only this head (1 is A1).", show_default=False)] = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """Every layer's and head's attention weights at a glance: rows the queries, columns the keys,
    and each row's strongest link named."""
    from ..model.trace import Keep
    from ..views.overview import attention_places, attention_stages, overview

    keep = Keep(lambda m: attention_places(m, stage or (), layer))  # only the attention stages shown
    trace, _ = passes.trace(config, seed, None, weights, checkpoint.checked(), keep=keep)
    chosen = attention_stages(trace, stage or (), layer, head)
    out = Terminal()
    view = out.view(trace.config.display.precision)
    coloured = out.console.color_system is not None and not out.console.no_color
    out.note(f"weights: {trace.weights_origin}")
    out.show_all(overview(trace, chosen, head, view, coloured))


@app.command()
@user_errors
@model_options()
def experts(
    config: ConfigOption = None,
    seed: SeedOption = None,
    weights: WeightsOption = None,
    layer: LayerOption = None,
    token: Annotated[
        Optional[int], typer.Option(help="Only this token (0 is the first).", show_default=False)
    ] = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """A mixture of experts' routing: for each sparse layer, every token's chosen experts and their
    weights, and each expert's load."""
    from ..views.experts import routing_lines, sparse_stages

    trace, _ = passes.trace(config, seed, None, weights, checkpoint.checked())
    out = Terminal()
    out.note(f"weights: {trace.weights_origin}")
    for stage in sparse_stages(trace, layer):
        for line in routing_lines(stage, token):
            out.line(line)
