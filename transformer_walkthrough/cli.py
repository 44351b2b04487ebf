"""The ``walkthrough`` command: thin commands over config -> model -> trace -> render / export.

No ``from __future__ import annotations`` here: typer reads every command's annotations at
start-up, and evaluating them from strings would cost more than the rest of ``--help``.

Only typer is imported at start-up; NumPy, YAML and Rich load inside the commands that need
them, so ``walkthrough --help`` stays as fast as typer itself. A ``WalkthroughError`` raised
anywhere below becomes one line on stderr and exit code 2.
"""

import functools
import os
import sys
import warnings
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer
from typer.core import TyperGroup

from . import __version__
from .errors import WalkthroughError

# Click's usage error (typer ≥ 0.23 vendors Click, so it is reached through the class typer exports).
UsageError: type[Exception] = typer.BadParameter.__base__  # type: ignore[assignment]
# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after every product before they sleep;
# on a machine of two busy cores they take turns from the one thread doing the work. Let them
# sleep at once (2^4 cycles): the issue measured `run` at 0.83x, a base-size .npz export at 0.36x,
# and the base-size forward pass no slower. Set before NumPy is imported (inside the commands),
# and never over the user's own setting.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

if TYPE_CHECKING:
    from rich.console import Console

    from .backprop import Backward
    from .model import Weights
    from .trace import Stage, Trace

def printable(text: str) -> str:
    """Text safe for a terminal: control characters (ESC, newline, …) shown as escapes, never sent."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class OneLineUsageError(UsageError):  # type: ignore[misc,valid-type]
    """A Click usage error (bad --seed, unknown option, missing --stage) shown as our one line."""

    def show(self, file: object = None) -> None:
        where = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        typer.echo(f"error: {printable(self.format_message()).rstrip('.')}{where}", err=True)


class OneLineErrors(TyperGroup):
    """typer's group, with Click's four lines of usage on bad options turned into one ``error:`` line."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as err:
            raise OneLineUsageError(err.message, err.ctx) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OneLineUsageError:
            raise
        except UsageError as err:
            raise OneLineUsageError(err.format_message(), err.ctx) from None


app = typer.Typer(
    cls=OneLineErrors,
    name="walkthrough",
    help="Compute the original transformer (Vaswani et al., 2017) on a tiny sentence, "
    "stage by stage, and show every matrix with the formula that made it.",
    # Rich-formatted help costs more than everything else `--help` does; plain help is instant.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)

ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="YAML config; default: the article's example.", show_default=False),
]
SeedOption = Annotated[Optional[int], typer.Option(help="Seed for the weights (overrides the config).")]
PrecisionOption = Annotated[
    Optional[int], typer.Option(help="Digits after the decimal point (overrides the config).")
]
FullOption = Annotated[bool, typer.Option("--full", help="Show every row and column of wide matrices.")]
LayerOption = Annotated[Optional[int], typer.Option(help="Only the stages of this layer (0 is the first).")]
WeightsOption = Annotated[
    Optional[Path],
    typer.Option(
        "--weights", "-w", help="Weights .npz from `walkthrough train`; default: random, from the seed."
    ),
]
HeatmapOption = Annotated[
    bool,
    typer.Option("--heatmap", help="Colour every cell by its value (attention weights are always shaded)."),
]
BackwardOption = Annotated[
    bool, typer.Option("--backward", help="Also the gradient dL/d(matrix) of the loss for every matrix.")
]

F = TypeVar("F", bound=Callable[..., None])


def user_errors(command: F) -> F:
    """Turn a WalkthroughError, or output that cannot be written, into one line on stderr and exit code 2.

    NumPy's overflow warnings are not printed raw: a value that overflowed is reported once, by
    the stage that produced it (``nonfinite``).
    """

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> None:
        try:
            if sys.stdout is None:  # started with stdout closed (`>&-`): nothing could be shown
                raise WalkthroughError("standard output is closed; nothing can be written to it")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                command(*args, **kwargs)
            sys.stdout.flush()
        except WalkthroughError as err:
            typer.echo(f"error: {printable(str(err))}", err=True)
            raise typer.Exit(2) from None
        except OSError as err:  # a full disk (> /dev/full), a closed pipe, an unreadable folder
            _silence_stdout()
            where = f"{printable(str(err.filename))}: " if err.filename else "cannot write the output: "
            typer.echo(f"error: {where}{err.strerror or err}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail a second time."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, AttributeError, ValueError):  # not a real file (CliRunner): nothing to silence
        pass


def _trace(
    config: Path | None, seed: int | None, precision: int | None, weights: Path | None = None
) -> "tuple[Trace, Weights]":
    """The forward pass of the config, with the weights from ``weights`` or drawn from the seed."""
    from .config import load_config
    from .model import init_weights, load_weights, run_forward
    from .nonfinite import warning

    settings = load_config(config, seed=seed, precision=precision)
    w = load_weights(settings, weights) if weights is not None else init_weights(settings)
    trace = run_forward(settings, w)
    trace.weights_source = None if weights is None else printable(str(weights))
    problem = warning(trace)
    if problem:
        typer.echo(f"warning: {problem}", err=True)
    return trace, w


def _gradients(trace: "Trace", w: "Weights", backward: bool) -> "Backward | None":
    """The backward pass, when asked for (and its module loaded only then)."""
    if not backward:
        return None
    from .backprop import backward as backpropagate

    return backpropagate(trace, w)


def _console() -> "Console":
    from .render import TrimmedConsole

    return TrimmedConsole(highlight=False)


def _show(
    trace: "Trace", stages: "list[Stage]", full: bool, grads: "Backward | None" = None, heatmap: bool = False
) -> None:
    """Print the stages (with their gradients), and the prediction when the probabilities are among them."""
    from .render import View, print_all, render_trace

    console = _console()
    view = View(precision=trace.config.display.precision, width=console.width, full=full, heatmap=heatmap)
    ending = any(s.kind == "probabilities" for s in stages)
    print_all(console, render_trace(console, trace, stages, view, prediction=ending, grads=grads))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"transformer-walkthrough {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def main_options(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Compute the original transformer on a tiny sentence and show every matrix."""
    if ctx.invoked_subcommand is None:  # plain `walkthrough`: say what it can do
        typer.echo(ctx.get_help())


@app.command()
@user_errors
def run(
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    full: FullOption = False,
    weights: WeightsOption = None,
    backward: BackwardOption = False,
    heatmap: HeatmapOption = False,
) -> None:
    """The whole forward pass: every stage, then the prediction."""
    trace, w = _trace(config, seed, precision, weights)
    _show(trace, list(trace), full, _gradients(trace, w, backward), heatmap)


@app.command()
@user_errors
def step(
    stage: Annotated[
        list[str],
        typer.Option(
            "--stage",
            "-s",
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
) -> None:
    """One stage, or all stages of one kind, with every intermediate."""
    trace, w = _trace(config, seed, precision, weights)
    chosen = trace.select(stage, layer)
    _show(trace, chosen, full, _gradients(trace, w, backward), heatmap)


@app.command()
@user_errors
def stages(config: ConfigOption = None, seed: SeedOption = None) -> None:
    """The stage ids in order, their kinds and matrix shapes."""
    from .render import stage_list

    _console().print(stage_list(_trace(config, seed, None)[0]))


@app.command()
@user_errors
def export(
    path: Annotated[
        str, typer.Argument(help="Output file: .json or .npz by its suffix; - writes JSON to stdout.")
    ],
    stage: Annotated[
        Optional[list[str]], typer.Option("--stage", "-s", help="Only these stages (kind or id); repeatable.")
    ] = None,
    layer: LayerOption = None,
    config: ConfigOption = None,
    seed: SeedOption = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite the file if it exists.")] = False,
    include_weights: Annotated[
        bool, typer.Option("--include-weights/--no-weights", help="Include the learned weights (E, W_Q1, …).")
    ] = True,
    weights: WeightsOption = None,
    backward: BackwardOption = False,
) -> None:
    """Write every matrix, weights included, to JSON or .npz."""
    from .export import check_target, size_warning
    from .export import export as write

    target = check_target(path, force)  # before any work: a bad path costs nothing
    trace, w = _trace(config, seed, None, weights)
    stages = trace.select(stage or (), layer)
    if target is None or target.suffix.lower() == ".json":
        warning = size_warning(stages, include_weights, trace.config.model.dtype)
        if warning:
            typer.echo(f"warning: {warning}", err=True)
    text = write(trace, target, stages, include_weights, _gradients(trace, w, backward), force=force)
    if text is not None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"wrote {printable(str(target))}", err=True)


class Reference(str, Enum):
    torch = "torch"


@app.command()
@user_errors
def verify(
    config: ConfigOption = None,
    seed: SeedOption = None,
    against: Annotated[
        Optional[Reference], typer.Option(help="Also compare with torch.nn.Transformer (needs PyTorch).")
    ] = None,
    weights: WeightsOption = None,
) -> None:
    """Recompute every stage a second way; exit 1 if any number differs."""
    from .render import verify_table
    from .verify import TOLERANCE, against_torch, recompute

    trace, w = _trace(config, seed, None, weights)
    settings = trace.config
    checks = recompute(trace)
    if against is Reference.torch:
        checks += against_torch(trace, w)
    order = {stage_id: k for k, stage_id in enumerate(trace.stages)}
    checks.sort(key=lambda c: order[c.stage])  # stable: per stage, in the order they were made
    console = _console()
    console.print(verify_table(checks))
    failed = [c for c in checks if not c.ok]
    dtype = settings.model.dtype
    console.print(
        f"{len(checks) - len(failed)} of {len(checks)} checks agree to {TOLERANCE[dtype]:g} of their stage's "
        f"largest value ({dtype})."
    )
    if failed:
        raise typer.Exit(1)


@app.command()
@user_errors
def explain(
    stage: Annotated[
        str,
        typer.Option(
            "--stage", "-s", help="A stage id (decoder.0.masked-attention), or a kind with one stage."
        ),
    ],
    matrix: Annotated[str, typer.Option("--matrix", "-m", help="A matrix of that stage: A1, S1, output, …")],
    cell: Annotated[
        str, typer.Option("--cell", help="Row,column by index (1,0) or by label (sleeping,<start>).")
    ],
    config: ConfigOption = None,
    seed: SeedOption = None,
    weights: WeightsOption = None,
    digits: Annotated[int, typer.Option(help="Digits after the decimal point.")] = 4,
    all_terms: Annotated[
        bool, typer.Option("--all-terms", help="Every term of a long sum, not the first and last few.")
    ] = False,
) -> None:
    """The arithmetic of one cell, with the actual numbers."""
    from rich.text import Text

    from .errors import StageError
    from .explain import explain as explain_cell

    trace, _ = _trace(config, seed, None, weights)
    chosen = trace.select([stage])
    if len(chosen) > 1:
        raise StageError(
            f"--stage {stage} names {len(chosen)} stages; give one id: {', '.join(s.id for s in chosen)}"
        )
    head, *lines = explain_cell(trace, chosen[0].id, matrix, cell, digits, all_terms)
    console = _console()
    console.print(Text(head, style="bold"))
    for line in lines:
        console.print(Text(line))


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
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Save the trained weights to this .npz.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite the output if it exists.")] = False,
    weights: WeightsOption = None,
) -> None:
    """Teach the model its sentence: backpropagation and Adam."""
    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .export import check_target, write_atomic
    from .model import run_forward
    from .render import View, loss_curve, training_table
    from .training import train as fit
    from .training import training_notes

    target = None
    if output is not None:
        target = check_target(str(output), force, formats=(".npz",))  # before the work
    before, w = _trace(config, seed, None, weights)
    settings = before.config
    console = _console()
    loss = TextColumn("loss {task.fields[loss]}")
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), loss, TimeElapsedColumn())
    total = steps if steps is not None else settings.training.steps
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("train", total=total, loss="…")
        losses = fit(
            settings,
            w,
            steps,
            lr,
            on_step=lambda i, loss: progress.update(task, advance=1, loss=f"{loss:.4f}"),
        )
    after = run_forward(settings, w)
    console.print(loss_curve(losses, width=min(60, console.width - 12)))
    console.print(training_table(before, after, View(precision=settings.display.precision)))
    for line in training_notes(losses, lr if lr is not None else settings.training.learning_rate, settings):
        console.print(line)
    if target is not None:
        write_atomic(target, lambda f: np.savez(f, **w.arrays), force)
        shown = printable(str(target))
        console.print(f"wrote {shown}: walkthrough generate --weights {shown}")
    else:
        console.print("(the weights were not kept: add --output weights.npz)")


MAX_GENERATED = 512  # tokens: a model that never says <end> stops here


@app.command()
@user_errors
def generate(
    config: ConfigOption = None,
    seed: SeedOption = None,
    weights: WeightsOption = None,
    max_len: Annotated[int, typer.Option(help="Stop after this many tokens if <end> never comes.")] = 20,
    compare: Annotated[
        bool, typer.Option("--compare", help="Show each step beside the same row of one teacher-forced pass.")
    ] = False,
) -> None:
    """Greedy decoding from <start>, one token at a time, until <end>."""
    from rich.text import Text

    from .config import load_config
    from .model import init_weights, load_weights
    from .render import View, comparison_table, generation_table
    from .trace import weights_origin
    from .training import generate as decode

    if max_len > MAX_GENERATED:
        raise WalkthroughError(f"--max-len: at most {MAX_GENERATED}, got {max_len}")
    settings = load_config(config, seed=seed)
    w = load_weights(settings, weights) if weights is not None else init_weights(settings)
    steps, teacher_forced = decode(settings, w, max_len)
    console = _console()
    view = View(precision=settings.display.precision)
    source = None if weights is None else printable(str(weights))
    console.print(Text(f"weights: {weights_origin(settings.seed, source)}", style="dim"))
    console.print(generation_table(steps, view))
    console.print(f"{' '.join(settings.source_tokens)} → {' '.join(s.chosen for s in steps)}")
    table, worst = comparison_table(steps, teacher_forced)
    if compare:
        console.print(table)
    if not worst <= 1e-9:  # NaN included: a comparison with NaN is a failure, not agreement
        raise WalkthroughError(
            f"generation differs from the teacher-forced pass (max |diff| {worst:.1e}): "
            "the numbers overflowed; try smaller weights"
        )
    console.print(
        f"Step i equals row i of one teacher-forced pass over the final input (max |diff| {worst:.1e}): "
        "the causal mask keeps row i from seeing anything after position i."
    )


@app.command()
@user_errors
def tour(
    config: ConfigOption = None,
    seed: SeedOption = None,
    precision: PrecisionOption = None,
    weights: WeightsOption = None,
    heatmap: HeatmapOption = False,
) -> None:
    """One stage at a time: Enter next, b back, arrows and j/k scroll, q quit."""
    from .render import View
    from .tour import run_tour

    trace, _ = _trace(config, seed, precision, weights)
    console = _console()
    run_tour(
        console, trace, View(precision=trace.config.display.precision, width=console.width, heatmap=heatmap)
    )


@app.command("config")
@user_errors
def show_config(
    config: ConfigOption = None, seed: SeedOption = None, precision: PrecisionOption = None
) -> None:
    """Print the effective config as YAML (save it, edit it)."""
    from .config import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(config, seed=seed, precision=precision)), nl=False)


def main() -> None:
    """Entry point of the ``walkthrough`` script and of ``python -m transformer_walkthrough``."""
    app(prog_name="walkthrough")
