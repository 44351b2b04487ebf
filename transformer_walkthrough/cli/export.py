"""``export``: every matrix written to a file, as data (.json, .npz) or as a document (.html,
.md, .tex); a worksheet that hides cells, and its answer key."""

import os
from typing import Annotated, Optional

import typer

from ..errors import WalkthroughError, printable
from ..views.terminal import status
from . import passes
from .app import app, user_errors
from .options import (
    TOY,
    BackwardOption,
    ConfigOption,
    HeadOption,
    LayerOption,
    ModelOptions,
    SeedOption,
    WeightsOption,
    complete_stage,
    model_options,
)


@app.command()
@user_errors
@model_options()
def export(
    path: Annotated[
        str,
        typer.Argument(
            help="Output file, its format by its suffix: .json, .npz, .html (a report), .md or .tex "
            "(a LaTeX article); - writes JSON to stdout."
        ),
    ],
    stage: Annotated[
        Optional[list[str]],
        typer.Option(
            "--stage", "-s", autocompletion=complete_stage, help="Only these stages (kind or id); repeatable."
        ),
    ] = None,
    layer: LayerOption = None,
    head: HeadOption = None,
    config: ConfigOption = None,
    seed: SeedOption = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite the file if it exists.")] = False,
    include_weights: Annotated[
        bool, typer.Option("--include-weights/--no-weights", help="Include the learned weights (E, W_Q1, …).")
    ] = True,
    weights: WeightsOption = None,
    backward: BackwardOption = False,
    exercise: Annotated[
        Optional[int],
        typer.Option(
            help="A worksheet (.html, .md, .tex): hide this many cells, chosen across the stages from "
            "the seed, as ?1, ?2, … boxes; the answers at the end.",
            show_default=False,
        ),
    ] = None,
    cells: Annotated[
        Optional[list[str]],
        typer.Option(
            "--cells",
            help="A worksheet hiding these cells: 'decoder.0.masked-attention/A1[1,0]' (indices or "
            "labels); repeatable.",
            show_default=False,
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="A document (.html, .md, .tex): every row and column of large matrices, not the "
            "terminal's summary (.json and .npz always hold every number).",
        ),
    ] = False,
    kinds: Annotated[
        Optional[list[str]],
        typer.Option(
            "--kinds",
            help="With --exercise: the kinds of step to ask for, comma-separated or repeated: dot, "
            "softmax, norm, rotation (the default), activation, sinusoid, sum, lookup, copy.",
            show_default=False,
        ),
    ] = None,
    pick_seed: Annotated[
        Optional[int],
        typer.Option(
            "--pick-seed",
            help="With --exercise: choose other cells on the same numbers (default: the seed).",
            show_default=False,
        ),
    ] = None,
    answers: Annotated[
        Optional[str],
        typer.Option(
            "--answers",
            help="Write the worksheet's answer key to this file (.html, .md, .tex) instead of at its end.",
            show_default=False,
        ),
    ] = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """Write every matrix to a file: data (.json, .npz) or a document (.html, .md, .tex)."""
    from ..files.export import DOCUMENTS, check_target
    from ..files.export import export as write

    model = checkpoint.checked()
    target = check_target(path, force)  # before any work: a bad path costs nothing
    suffix = ".json" if target is None else target.suffix.lower()
    if (exercise is not None or cells) and suffix not in DOCUMENTS:
        raise WalkthroughError(
            f"--exercise and --cells make a worksheet, a document: export .html, .md or .tex, not {suffix}"
        )
    key = None
    if answers is not None:
        if exercise is None and not cells:
            raise WalkthroughError("--answers writes a worksheet's key: give --exercise N or --cells")
        key = check_target(answers, force, formats=DOCUMENTS)
        if target is not None and os.path.abspath(key) == os.path.abspath(target):
            raise WalkthroughError(
                f"--answers {printable(answers)} is the worksheet itself; give another file"
            )
    asks = exercise is not None or bool(cells) or kinds is not None or pick_seed is not None
    if head is not None and (backward or asks):
        raise WalkthroughError(
            "--head keeps one head's matrices; --backward and a worksheet read every head's: give one"
        )
    if backward or asks:
        # The backward reads every stage (the gradients of each are written beside it); a
        # worksheet chooses its cells across the stages: the whole trace is kept.
        _export_kept(
            target, key, config, seed, weights, model, stage, layer, include_weights, backward,
            exercise, cells, kinds, pick_seed, full, force,
        )  # fmt: skip
        return
    from ..files.export import Tally, document_options
    from ..model.stream import Stages
    from ..model.trace import Keep
    from ..views.documents.shown import streamed_contents

    # Each stage written as soon as it is computed, then dropped: memory holds one stage, not the pass.
    keep = Keep.stages(stage or (), layer, head)
    stages = Stages(lambda keep: passes.trace(config, seed, None, weights, model, True, keep)[0], keep)
    trace = stages.trace  # the pass's first stage is computed (or its input refused) here
    tally = Tally(trace, stages, suffix, document_options(trace, include_weights, None, None, full))
    with status(f"writing {printable(path)}" if target is not None else None):
        text = write(
            trace, target, tally, include_weights, force=force, full=full,
            rerun=passes.rerun(config, seed, weights, model), contents=streamed_contents(trace, keep),
        )  # fmt: skip
        if text is not None:
            for piece in text:
                typer.echo(piece, nl=False)
    said(target, tally.warning())


def said(target: object, warning: str | None) -> None:
    """After the export is written: its size warning, and "wrote" with the file's name."""
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if target is not None:
        typer.echo(f"wrote {printable(str(target))}", err=True)


def _export_kept(
    target, key, config, seed, weights, model, stage, layer, include_weights, backward,
    exercise, cells, kinds, pick_seed, full, force,
) -> None:  # fmt: skip
    """An export that reads the whole trace before writing: with its gradients, or a worksheet."""
    from ..files.export import export as write
    from ..files.export import key_writer, size_warning

    suffix = ".json" if target is None else target.suffix.lower()
    from ..model.trace import Keep

    chosen = stage is not None or layer is not None  # a worksheet of some stages keeps those
    keep = Keep.stages(stage or (), layer) if chosen and not backward else None
    trace, w = passes.trace(config, seed, None, weights, model, notes_to_stderr=True, keep=keep)
    stages = trace.select(stage or (), layer)
    sheet = None
    if exercise is not None or cells or kinds is not None or pick_seed is not None:
        from ..views.documents.worksheet import worksheet

        sheet = worksheet(
            trace, stages, exercise, cells or (), include_weights, kinds=kinds, pick_seed=pick_seed,
            separate_key=key is not None,
        )  # fmt: skip
    grads = passes.gradients(trace, w, backward)
    warning = size_warning(trace, stages, include_weights, suffix, grads, sheet, full)
    # The size warning is said once the export is written, beside "wrote": an export that fails
    # (a full disk, a .tex of Cyrillic) says only its error, in one line. On a terminal it shows
    # meanwhile as a status line, erased when the export ends: a long wait has its reason on screen.
    # The answer key is written with the worksheet, all or none: never a worksheet without its key.
    also = [(key, key_writer(trace, key, sheet))] if key is not None and sheet is not None else []
    with status(f"writing: {warning}" if warning else None):
        text = write(
            trace, target, stages, include_weights, grads, force=force, worksheet=sheet, full=full,
            rerun=passes.rerun(config, seed, weights, model), also=also,
        )  # fmt: skip
        if text is not None:
            for piece in text:
                typer.echo(piece, nl=False)
    said(target, warning)
    if also:
        typer.echo(f"wrote {printable(str(key))}: the answer key", err=True)
