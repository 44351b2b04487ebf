"""``train``: backpropagation and Adam teach the toy its sentence; the weights saved to an .npz."""

import os
from typing import Annotated, Optional

import typer

from ..errors import WalkthroughError, printable
from ..views.terminal import Terminal
from . import passes
from .app import app, user_errors
from .options import ConfigOption, SeedOption, WeightsOption


@app.command()
@user_errors
def train(
    config: ConfigOption = None,
    seed: SeedOption = None,
    steps: Annotated[
        Optional[int], typer.Option(help="Adam steps (default: the config's training.steps).")
    ] = None,
    lr: Annotated[
        Optional[float], typer.Option("--lr", help="Learning rate (default: training.learning_rate).")
    ] = None,
    output: Annotated[  # a str, as export's PATH: a Path would drop the slash of "x.npz/"
        Optional[str], typer.Option("--output", "-o", help="Save the trained weights to this .npz.")
    ] = None,
    save_initial: Annotated[
        Optional[str],
        typer.Option(
            "--save-initial",
            help="Also save the weights before training to this .npz: then `walkthrough diff -w "
            "BEFORE -w AFTER` shows what training changed.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite the output if it exists.")] = False,
    weights: WeightsOption = None,
) -> None:
    """Teach the model its sentence: backpropagation and Adam."""
    import numpy as np

    from ..files.export import check_target, write_together
    from ..files.npzfile import VOCABULARY
    from ..model.training import train as fit
    from ..model.training import training_notes
    from ..model.transformer import run_forward
    from ..views.tables import loss_curve, training_table
    from ..views.widgets import View

    # Both paths checked before the work: a bad one costs nothing.
    target = None if output is None else check_target(output, force, formats=(".npz",))
    initial = None if save_initial is None else check_target(save_initial, force, formats=(".npz",))
    if target is not None and initial is not None and os.path.abspath(target) == os.path.abspath(initial):
        raise WalkthroughError(
            f"--save-initial and --output are one file, {printable(str(target))}; give two"
        )
    before, w = passes.trace(config, seed, None, weights)
    settings = before.config
    start = {name: a.copy() for name, a in w.arrays.items()} if initial is not None else None
    out = Terminal()
    with out.training_progress(steps if steps is not None else settings.training.steps) as on_step:
        losses = fit(settings, w, steps, lr, on_step=on_step)
    after = run_forward(settings, w)
    if len(losses) > 1:
        experts = settings.model.experts > 0
        curve = [t.cross_entropy for t in losses.terms] if experts else losses
        aux_curve = [t.aux or 0.0 for t in losses.terms] if experts else None
        out.show(loss_curve(curve, width=min(60, out.width - 12), aux=aux_curve))
        out.show(training_table(before, after, View(precision=settings.display.precision)))
        if settings.model.experts:
            from ..model.backprop import backward
            from ..views.experts import load_change

            aux = [backward(t, w).aux for t in (before, after)]
            coef, k = settings.model.router_aux_loss_coef, settings.model.experts_per_token
            out.line(
                f"The loss includes {coef:g} × the load-balancing loss E·Σ fᵢ·Pᵢ ({k} "
                f"when every expert gets as many tokens and as much probability): {aux[0]:.4f} before, "
                f"{aux[1]:.4f} after; in the loss, {coef * aux[0]:.4g} and {coef * aux[1]:.4g}."
            )
            for line in load_change(before, after):
                out.line(line)
        for line in training_notes(
            losses, lr if lr is not None else settings.training.learning_rate, settings, after
        ):
            out.line(line)
    else:
        out.line(f"0 steps: the weights are as they were, the loss {losses[0]:.4g}.")
    # the words of the tables too, so that a sentence with other words is told which are new
    words = {VOCABULARY: np.array(settings.vocabulary)} if settings.vocabulary else {}
    # Written only once training has succeeded, and together, all or none: a run that diverges, or
    # a disk that fills before the second file is whole, leaves neither file behind.
    outputs = [(initial, lambda f: np.savez(f, **start, **words))] if initial is not None else []
    outputs += [(target, lambda f: np.savez(f, **w.arrays, **words))] if target is not None else []
    write_together(outputs, force)
    if initial is not None:
        out.say(f"wrote {printable(str(initial))}: the weights before training")
    if target is not None:
        shown = printable(str(target))
        # what to do with them, quoted for a shell: a fill-mask model fills its blanks (run); every
        # other model generates
        again = "run" if settings.model.encoder_only else "generate"
        out.say(f"wrote {shown}: walkthrough {again} {passes.rerun(config, None, target, None)}")
        if initial is not None:
            out.say(f"what training changed: walkthrough diff -w {printable(str(initial))} -w {shown}")
    else:
        out.line("(the trained weights were not kept: add --output weights.npz)")
