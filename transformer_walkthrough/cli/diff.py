"""``diff``: two forward passes compared stage by stage: two configs, or two weights files."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import WalkthroughError, printable
from ..session import toy
from ..views.terminal import Terminal
from .app import app, user_errors
from .options import FullOption, PrecisionOption, SeedOption, complete_stage


@app.command()
@user_errors
def diff(
    configs: Annotated[
        Optional[list[Path]],
        typer.Argument(
            help="Two configs A and B; or one (or none: the default) with two --weights.", show_default=False
        ),
    ] = None,
    weights: Annotated[
        Optional[list[Path]],
        typer.Option("--weights", "-w", help="Weights .npz for A, then for B; give two to compare training."),
    ] = None,
    seed: SeedOption = None,
    stage: Annotated[
        Optional[str],
        typer.Option(
            "--stage", "-s", autocompletion=complete_stage, help="Show this stage's matrices: A, B and A − B."
        ),
    ] = None,
    precision: PrecisionOption = None,
    full: FullOption = False,
) -> None:
    """Two forward passes compared stage by stage: what a convention, or training, changes."""
    from ..compare.diff import compare, first_divergence
    from ..model.transformer import run_forward
    from ..views.tables import diff_stage, diff_table
    from ..views.widgets import View

    paths, files = list(configs or []), list(weights or [])
    if len(paths) > 2 or len(files) not in (0, 2) or not (len(paths) == 2 or len(files) == 2):
        raise WalkthroughError(
            "diff compares two runs: give two configs (walkthrough diff a.yaml b.yaml), or one config "
            "and two weights files (walkthrough diff -w before.npz -w after.npz)"
        )
    if len(paths) < 2:
        paths = [paths[0] if paths else None] * 2
    traces = []
    for path, file in zip(paths, files or [None, None], strict=True):
        traces.append(run_forward(*toy(path, seed, precision, file)))
    a, b = traces
    diffs = compare(a, b)
    out = Terminal()
    if stage is not None:
        chosen = a.select([stage]) if stage in a.stages or stage in {s.kind for s in a} else b.select([stage])
        if len(chosen) > 1:
            raise WalkthroughError(f"--stage {stage} names {len(chosen)} stages; give one id: "
                                   f"{', '.join(s.id for s in chosen)}")  # fmt: skip
        sid = chosen[0].id
        if sid not in a.stages or sid not in b.stages:
            raise WalkthroughError(f"--stage {sid}: only {'A' if sid in a.stages else 'B'} has this stage")
        view = View(precision=a.config.display.precision, width=out.width, full=full, ascii=out.ascii)
        out.show_all(diff_stage(a[sid], b[sid], view))
        return
    first = first_divergence(a, diffs)
    names = [str(f) for f in files] if len(files) == 2 else [str(p or "the default config") for p in paths]
    out.say(f"A = {printable(names[0])}, B = {printable(names[1])}")
    out.show(diff_table(diffs, first))
    out.line(f"The outputs first differ at {first} (◀)." if first else "Every output is the same in A and B.")
