"""The ``walkthrough`` command: thin commands over config -> model -> trace -> render / export.

A command parses its options, calls the library and hands what it computed to the views: every
style, table and line printed through Rich is in ``views.stages``, ``tables`` and ``terminal``. The
checkpoint options (--model, --source, --target, --prompt, --dtype) are one group, defined once
(``model_options``) and received as one ``ModelOptions``.

No ``from __future__ import annotations`` here: typer reads every command's annotations at
start-up, and evaluating them from strings would cost more than the rest of ``--help``.

Only typer is imported at start-up; NumPy, YAML and Rich load inside the commands that need
them, so ``walkthrough --help`` stays as fast as typer itself. A ``WalkthroughError`` raised
anywhere below becomes one line on stderr and exit code 2.
"""

import dataclasses
import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, Optional, TypeVar

import typer
from typer.core import TyperGroup

from . import __version__
from .errors import WalkthroughError, printable, short_message, utf8_argument
from .views.terminal import Terminal, status

# Click's usage error (typer ≥ 0.23 vendors Click, so it is reached through the class typer exports).
UsageError: type[Exception] = typer.BadParameter.__base__  # type: ignore[assignment]
# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after every product before they sleep;
# on a machine of two busy cores they take turns from the one thread doing the work. Let them
# sleep at once (2^4 cycles): the issue measured `run` at 0.83x, a base-size .npz export at 0.36x,
# and the base-size forward pass no slower. Set before NumPy is imported (inside the commands),
# and never over the user's own setting.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

if TYPE_CHECKING:
    from .model.backprop import Backward
    from .model.generation import Step
    from .model.sampling import Sampling
    from .model.trace import Stage, Trace
    from .model.transformer import Weights
    from .views.widgets import View


class OneLineUsageError(UsageError):  # type: ignore[misc,valid-type]
    """A Click usage error (bad --seed, unknown option, missing --stage) shown as our one line."""

    def show(self, file: object = None) -> None:
        where = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        message = short_message(printable(self.format_message()).rstrip("."))
        typer.echo(f"error: {message}{where}", err=True)


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
SharedScaleOption = Annotated[
    bool,
    typer.Option(
        "--shared-scale",
        help="One heatmap scale per stage (its largest |value|), not one per matrix; implies --heatmap.",
    ),
]
MapOption = Annotated[
    bool,
    typer.Option(
        "--map/--no-map", help="Above each stage, Figure 1 as a small map: where the stage sits, its inputs."
    ),
]
BackwardOption = Annotated[
    bool,
    typer.Option(
        "--backward", help="Also the gradient dL/d(matrix) of the loss for every matrix but M and PE."
    ),
]

ModelOption = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        help="A real checkpoint instead of the toy: a folder or a hub id (Helsinki-NLP/opus-mt-en-de); "
        "needs the [models] extra.",
        show_default=False,
    ),
]
SourceOption = Annotated[
    Optional[str], typer.Option("--source", help="With --model: the encoder's text.", show_default=False)
]
TargetOption = Annotated[
    Optional[str],
    typer.Option(
        "--target",
        help="With --model: the decoder's text (teacher forcing); default: the model's greedy translation.",
        show_default=False,
    ),
]


PromptOption = Annotated[
    Optional[str],
    typer.Option(
        "--prompt", help="With a decoder-only --model (GPT-2): the decoder's input text.", show_default=False
    ),
]


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


DtypeOption = Annotated[
    Optional[Dtype], typer.Option(help="With --model: float32 (default) or float64.", show_default=False)
]


class Sentence(NamedTuple):
    """The toy's own words from --source and --target, instead of its config's sentence (an
    encoder-only toy's from --source alone: its target is None)."""

    source: str
    target: str | None


class ModelArgs(NamedTuple):
    """What --model, --source, --target (or --prompt) and --dtype ask for."""

    model: str
    source: str | None  # an encoder-decoder model's input (Marian)
    target: str | None
    dtype: str
    prompt: str | None = None  # a decoder-only model's input (GPT-2); then source is None


F = TypeVar("F", bound=Callable[..., None])


class ModelOptions(NamedTuple):
    """--model, --source, --target, --prompt and --dtype as given: one value, checked together by
    ``checked``. ``model_options`` puts the five on a command's command line."""

    model: str | None = None
    source: str | None = None
    target: str | None = None
    prompt: str | None = None
    dtype: Dtype | None = None

    def checked(self) -> "ModelArgs | Sentence | None":
        """The checkpoint to run; for the toy, its own sentence if given, else None.
        Whether a model reads a source or a prompt is checked when its config.json is read
        (``load_checkpoint``)."""
        model, source, target, prompt, dtype = self
        given = [
            name
            for name, v in (
                ("--source", source),
                ("--target", target),
                ("--prompt", prompt),
                ("--dtype", dtype),
            )
            if v is not None
        ]
        if model is None:
            toy_only = [name for name in given if name in ("--prompt", "--dtype")]
            if toy_only:
                why = (
                    "the toy's dtype is in its config"
                    if toy_only[0] == "--dtype"
                    else "a decoder-only checkpoint's input"
                )
                raise WalkthroughError(f"{toy_only[0]} needs --model ({why})")
            if not given:
                return None
            from .config import NEEDS_BOTH, tokenize

            # --source alone is an encoder-only toy's sentence; the config says (``_own_sentence``)
            if source is None or not source.strip() or (target is not None and not target.strip()):
                raise WalkthroughError(NEEDS_BOTH)
            for name, text in (("--source", source), ("--target", target)):
                if text is not None and not tokenize(text):
                    raise WalkthroughError(
                        f"{name}: no words in {printable(text)[:40]!r} (a word is letters, digits and ')"
                    )
            return Sentence(source, target)
        if prompt is not None and (source is not None or target is not None):
            raise WalkthroughError(
                "--prompt is a decoder-only model's input, --source/--target an encoder-decoder model's: "
                "give one"
            )
        if prompt is not None:
            if not prompt:
                raise WalkthroughError("--prompt: give some text")
            return ModelArgs(model, None, None, (dtype or Dtype.float32).value, prompt)
        if source is None or not source.strip():
            raise WalkthroughError(
                "--model needs --source TEXT (a translation model) or --prompt TEXT (a decoder-only model)"
            )
        return ModelArgs(model, source, target, (dtype or Dtype.float32).value)


TOY = ModelOptions()  # none given: the toy (and the default of a command's group, never used)

# Each option of the group as typer reads it, in the order `--help` lists them.
MODEL_OPTIONS = {
    "model": ModelOption,
    "source": SourceOption,
    "target": TargetOption,
    "prompt": PromptOption,
    "dtype": DtypeOption,
}


def model_options(*names: str) -> Callable[[F], F]:
    """Give a command the checkpoint options as one value: its parameter annotated ``ModelOptions``
    is shown to typer as the options ``names`` (default: all five, in ``MODEL_OPTIONS``' order),
    in its place, and the command is called with them gathered into a ``ModelOptions``.

    Typer has no option groups; it reads a command's parameters from ``inspect.signature``, which
    honours ``__signature__``. So the five are defined once, and each command's ``--help`` lists
    them where its signature has the group.
    """
    chosen = names or tuple(MODEL_OPTIONS)

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        group = next(p for p in signature.parameters.values() if p.annotation is ModelOptions)
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter is not group:
                parameters.append(parameter)
                continue
            for name in chosen:
                parameters.append(group.replace(name=name, annotation=MODEL_OPTIONS[name], default=None))

        @functools.wraps(command)
        def with_options(**kwargs: Any) -> None:
            given = ModelOptions(**{name: kwargs.pop(name) for name in chosen})
            command(**kwargs, **{group.name: given})

        with_options.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_options.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return with_options  # type: ignore[return-value]

    return decorate


def user_errors(command: F) -> F:
    """Turn every error that is not a bug of ours into one line on stderr and exit code 2.

    A ``WalkthroughError`` (bad input, said where it was found); output that cannot be written
    (``OSError``); and what no input check can foresee: memory running out, a number too large
    for C, a character the output's encoding lacks, a native library's panic (pyo3's
    ``PanicException`` is a ``BaseException``, past every ``except Exception``). Those name the
    command's input and the cause. Every message is escaped and cut short (``short_message``).
    NumPy's overflow warnings are not printed raw: a value that overflowed is reported once, by
    the stage that produced it (``nonfinite``).
    """

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> None:
        _LATER.clear()
        try:
            if sys.stdout is None:  # started with stdout closed (`>&-`): nothing could be shown
                raise WalkthroughError("standard output is closed; nothing can be written to it")
            check_arguments(kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                command(*args, **kwargs)
            sys.stdout.flush()
            _say_later()
        except typer.Exit:  # verify's exit code 1: numbers that differ, said in full (not an error)
            _say_later()
            raise
        except WalkthroughError as err:
            _fail(str(err))
        except OSError as err:  # a full disk (> /dev/full), a closed pipe, an unreadable folder
            _silence_stdout()
            where = f"{printable(str(err.filename))}: " if err.filename else "cannot write the output: "
            _fail(f"{where}{err.strerror or err}")
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as err:
            cause = _not_a_bug(err)
            if cause is None:
                raise
            _silence_stdout()
            _fail(f"{_input_of(command.__name__, kwargs)}: {cause}")

    return wrapper  # type: ignore[return-value]


# Notes for stderr (a greedy translation beside an export, a warning of overflow), said once the
# command has succeeded: a command that fails says only its error, in one line.
_LATER: list[str] = []


def _say_later() -> None:
    for note in _LATER:
        typer.echo(note, err=True)
    _LATER.clear()


def _fail(message: str) -> None:
    """The one line of an error, and exit code 2."""
    typer.echo(f"error: {short_message(printable(message))}", err=True)
    raise typer.Exit(2) from None


def _not_a_bug(err: BaseException) -> str | None:
    """What went wrong, in words, when it is the input's doing or the machine's; None for a bug."""
    name = type(err).__name__
    said = str(err).strip().splitlines()
    first_line = said[0] if said else "no message"
    if isinstance(err, MemoryError):
        return "out of memory (MemoryError): too large for this machine; try a smaller model or fewer stages"
    if isinstance(err, OverflowError):
        return f"a number too large to compute with (OverflowError: {first_line})"
    if isinstance(err, RecursionError):
        return "nested too deeply to read (RecursionError)"
    if isinstance(err, UnicodeEncodeError):
        bad = err.object[err.start : err.start + 1]
        hint = "" if err.encoding.startswith("utf") else "; set PYTHONIOENCODING=utf-8 or a UTF-8 locale"
        return f"cannot write {bad!a} as {err.encoding} ({err.reason}){hint}"
    if isinstance(err, UnicodeDecodeError):
        return f"cannot read text that is not {err.encoding} ({err.reason} at byte {err.start})"
    if not isinstance(err, Exception):  # a native library's panic (pyo3's PanicException)
        module = type(err).__module__.split(".")[0]
        return f"a native library failed ({module}.{name}: {first_line})"
    return None


def _input_of(command: str, kwargs: dict[str, object]) -> str:
    """The command and what it read, for a message about a failure no check could name:
    ``walkthrough run --model opus-mt``, ``walkthrough diff a.yaml b.yaml``."""
    given = []
    for name, flag in (("model", "--model "), ("config", "-c "), ("configs", ""), ("weights", "-w ")):
        value = kwargs.get(name)
        for item in value if isinstance(value, list) else [value] if value else []:
            given.append(f"{flag}{printable(str(item))}")
    name = command.removeprefix("show_")  # the function behind `walkthrough config`
    return f"walkthrough {name} {' '.join(given) or '(the default config)'}"


# Text arguments that are words, checked for bytes that are not UTF-8; paths (export's PATH,
# --model's folder) are the file system's bytes and are fine as they are.
TEXT_ARGUMENTS = ("source", "target", "prompt", "stage", "matrix", "cell", "cells", "explain", "token")


def check_arguments(kwargs: dict[str, object]) -> None:
    """Refuse, in one line, text that is not UTF-8 and a negative --seed, for every command alike;
    text typed in UTF-8 under a C locale is decoded as such (in ``kwargs``)."""
    for name in TEXT_ARGUMENTS:
        value = kwargs.get(name)
        try:
            if isinstance(value, str):
                kwargs[name] = utf8_argument(value)
            elif isinstance(value, list):
                kwargs[name] = [utf8_argument(v) if isinstance(v, str) else v for v in value]
        except ValueError as err:
            raise WalkthroughError(f"--{name}: {err}") from None
    seed = kwargs.get("seed")
    if isinstance(seed, int) and seed < 0:  # numpy's generators take any integer from 0 up
        raise WalkthroughError(f"--seed: must be 0 or more, got {seed}")


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail a second time."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, AttributeError, ValueError):  # not a real file (CliRunner): nothing to silence
        pass


def _trace(
    config: Path | None,
    seed: int | None,
    precision: int | None,
    weights: Path | None = None,
    model: "ModelArgs | Sentence | None" = None,
    notes_to_stderr: bool = False,
) -> "tuple[Trace, Weights]":
    """The forward pass of the config, with the weights from ``weights`` or drawn from the seed;
    or of a checkpoint (``--model``), on its tokens of ``--source`` and ``--target``."""
    if isinstance(model, ModelArgs):
        return _checkpoint_trace(config, seed, precision, weights, model, notes_to_stderr)
    from .compare.nonfinite import warning
    from .config import load_config
    from .files.weights import load_weights
    from .model.transformer import init_weights, run_forward

    settings = load_config(config, seed=seed, precision=precision, sentence=model)
    w = load_weights(settings, weights) if weights is not None else init_weights(settings)
    trace = run_forward(settings, w)
    trace.weights_source = None if weights is None else printable(str(weights))
    problem = warning(trace)
    if problem:
        _LATER.append(f"warning: {problem}")
    return trace, w


def _no_toy_options(config: Path | None, seed: int | None, weights: Path | None) -> None:
    """--model brings its own config and weights: the toy's options would be silently ignored."""
    toy = (("--config", config), ("--seed", seed), ("--weights", weights))
    clash = [name for name, value in toy if value is not None]
    if clash:
        raise WalkthroughError(f"{clash[0]} does not apply to --model: the checkpoint has its own")


def _checkpoint_trace(
    config: Path | None,
    seed: int | None,
    precision: int | None,
    weights: Path | None,
    model: ModelArgs,
    notes_to_stderr: bool,
) -> "tuple[Trace, Weights]":
    """A checkpoint's pass (``checkpoints.run.walk``, or ``walk_prompt`` for a decoder-only model's
    prompt); the greedy translation said first when it made one."""
    _no_toy_options(config, seed, weights)
    from .checkpoints.run import walk, walk_prompt

    if model.prompt is not None:
        walked = walk_prompt(model.model, model.prompt, model.dtype, precision)
    else:
        walked = walk(model.model, model.source or "", model.target, model.dtype, precision)
    if walked.translation is not None:
        note = f"translation (greedy): {printable(walked.config.target)}"
        if notes_to_stderr:
            _LATER.append(note)
        else:
            typer.echo(note)
    return walked.trace, walked.weights


def _gradients(trace: "Trace", w: "Weights", backward: bool) -> "Backward | None":
    """The backward pass, when asked for (and its module loaded only then)."""
    if not backward:
        return None
    from .model.backprop import backward as backpropagate

    return backpropagate(trace, w)


def _show(
    trace: "Trace",
    stages: "list[Stage]",
    full: bool,
    grads: "Backward | None" = None,
    heatmap: bool = False,
    show_map: bool = False,
    shared_scale: bool = False,
) -> None:
    """Print the stages (with their gradients), and the prediction when the probabilities are among them."""
    from .views.stages import render_trace

    out = Terminal()
    view = out.view(trace.config.display.precision, full, heatmap, shared_scale)
    # the prediction after the probabilities; after the last stage of a model that has none
    ending = any(s.kind == "probabilities" for s in stages) or (
        trace.config.model.task == "encode" and bool(stages) and stages[-1] is list(trace)[-1]
    )
    out.show_all(
        render_trace(out.console, trace, stages, view, prediction=ending, grads=grads, show_map=show_map)
    )


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
    trace, w = _trace(config, seed, precision, weights, checkpoint.checked())
    _show(trace, list(trace), full, _gradients(trace, w, backward), heatmap, show_map, shared_scale)


@app.command()
@user_errors
@model_options()
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
    shared_scale: SharedScaleOption = False,
    show_map: MapOption = True,
    checkpoint: ModelOptions = TOY,
) -> None:
    """One stage, or all stages of one kind, with every intermediate."""
    trace, w = _trace(config, seed, precision, weights, checkpoint.checked())
    chosen = trace.select(stage, layer)
    _show(trace, chosen, full, _gradients(trace, w, backward), heatmap, show_map, shared_scale)


@app.command()
@user_errors
@model_options()
def stages(
    config: ConfigOption = None,
    seed: SeedOption = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """The stage ids in order, their kinds and matrix shapes."""
    from .views.tables import stage_list

    trace, _ = _trace(config, seed, None, None, checkpoint.checked())
    Terminal().show(stage_list(trace))


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
    from .files.export import DOCUMENTS, check_target, size_warning
    from .files.export import export as write

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
    trace, w = _trace(config, seed, None, weights, model, notes_to_stderr=True)
    stages = trace.select(stage or (), layer)
    sheet = None
    if exercise is not None or cells or kinds is not None or pick_seed is not None:
        from .views.documents.worksheet import worksheet

        sheet = worksheet(
            trace, stages, exercise, cells or (), include_weights, kinds=kinds, pick_seed=pick_seed,
            separate_key=key is not None,
        )  # fmt: skip
    warning = size_warning(stages, include_weights, trace.config.model.dtype, suffix)
    grads = _gradients(trace, w, backward)
    # The size warning is said once the export is written, beside "wrote": an export that fails
    # (a full disk, a .tex of Cyrillic) says only its error, in one line. On a terminal it shows
    # meanwhile as a status line, erased when the export ends: a long wait has its reason on screen.
    with status(f"writing: {warning}" if warning else None):
        text = write(
            trace, target, stages, include_weights, grads, force=force, worksheet=sheet, full=full,
            rerun=_rerun(config, seed, weights, model),
        )  # fmt: skip
    if text is not None:
        typer.echo(text, nl=False)
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if text is None:
        typer.echo(f"wrote {printable(str(target))}", err=True)
    if key is not None and sheet is not None:
        from .files.export import write_key

        write_key(trace, key, sheet, force)
        typer.echo(f"wrote {printable(str(key))}: the answer key", err=True)


def _rerun(
    config: Path | None, seed: int | None, weights: Path | None, model: "ModelArgs | Sentence | None"
) -> str:
    """The options that make this trace again, quoted for a shell: the HTML report's cells past
    its budget show ``walkthrough explain`` with them."""
    import shlex

    given: list[tuple[str, object]] = [("--config", config), ("--seed", seed), ("--weights", weights)]
    if isinstance(model, Sentence):
        given += [("--source", model.source), ("--target", model.target)]
    elif isinstance(model, ModelArgs):
        given += [("--model", model.model), ("--source", model.source), ("--target", model.target)]
        given += [("--prompt", model.prompt), ("--dtype", None if model.dtype == "float32" else model.dtype)]
    return " ".join(f"{name} {shlex.quote(printable(str(v)))}" for name, v in given if v is not None)


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
    from .compare.verify import TOLERANCE, against_torch, recompute
    from .views.tables import verify_table

    trace, w = _trace(config, seed, None, weights, checkpoint.checked())
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
            "--stage", "-s", help="A stage id (decoder.0.masked-attention), or a kind with one stage."
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
    digits: Annotated[int, typer.Option(help="Digits after the decimal point.")] = 4,
    checkpoint: ModelOptions = TOY,
    all_terms: Annotated[
        bool, typer.Option("--all-terms", help="Every term of a long sum, not the first and last few.")
    ] = False,
) -> None:
    """The arithmetic of one cell, with the actual numbers."""
    from .errors import StageError
    from .views.explain import explain as explain_cell

    trace, w = _trace(config, seed, None, weights, checkpoint.checked())
    chosen = trace.select([stage])
    if len(chosen) > 1:
        raise StageError(
            f"--stage {stage} names {len(chosen)} stages; give one id: {', '.join(s.id for s in chosen)}"
        )
    if matrix.startswith("dL/d"):  # a gradient, as --backward shows it: the chain rule of its cell
        from .views.gradients import explain_gradient

        grads = _gradients(trace, w, True)
        lines = explain_gradient(trace, grads, chosen[0].id, matrix, cell, digits, all_terms)
    else:
        lines = explain_cell(trace, chosen[0].id, matrix, cell, digits, all_terms)
    Terminal().explanation(lines)


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
    digits: Annotated[int, typer.Option(help="With --explain: digits after the decimal point.")] = 4,
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
    from .model.lens import logit_lens
    from .views import lens as shown

    trace, _ = _trace(config, seed, precision, weights, checkpoint.checked())
    found = logit_lens(trace)
    vocab = len(found.vocabulary)
    if top_k is not None and top_k > vocab:
        raise WalkthroughError(f"--top-k: the vocabulary has {vocab} tokens, got {top_k}")
    if position is not None:
        shown.check_position(position, found)
    out = Terminal()
    if explain is not None:
        layer, at = shown.parse_lens_cell(explain, found)
        chosen = None if token is None else shown.token_id(token, found)
        out.explanation(shown.explain_lens(trace, found, layer, at, chosen, digits))
        return
    view = out.view(trace.config.display.precision, full)
    out.note(f"weights: {trace.weights_origin}")
    if position is not None:
        out.show(shown.position_table(found, position, top_k or 5, view))
    else:
        table, columns = shown.lens_table(found, view, top_k or 1)
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
    from .views.overview import attention_stages, overview

    trace, _ = _trace(config, seed, None, weights, checkpoint.checked())
    chosen = attention_stages(trace, stage or (), layer, head)
    out = Terminal()
    view = out.view(trace.config.display.precision)
    coloured = out.console.color_system is not None and not out.console.no_color
    out.note(f"weights: {trace.weights_origin}")
    out.show_all(overview(trace, chosen, head, view, coloured))


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

    from .files.export import check_target, write_atomic
    from .files.npzfile import VOCABULARY
    from .model.training import train as fit
    from .model.training import training_notes
    from .model.transformer import run_forward
    from .views.tables import loss_curve, training_table
    from .views.widgets import View

    # Both paths checked before the work: a bad one costs nothing.
    target = None if output is None else check_target(output, force, formats=(".npz",))
    initial = None if save_initial is None else check_target(save_initial, force, formats=(".npz",))
    if target is not None and initial is not None and os.path.abspath(target) == os.path.abspath(initial):
        raise WalkthroughError(
            f"--save-initial and --output are one file, {printable(str(target))}; give two"
        )
    before, w = _trace(config, seed, None, weights)
    settings = before.config
    start = {name: a.copy() for name, a in w.arrays.items()} if initial is not None else None
    out = Terminal()
    with out.training_progress(steps if steps is not None else settings.training.steps) as on_step:
        losses = fit(settings, w, steps, lr, on_step=on_step)
    after = run_forward(settings, w)
    if len(losses) > 1:
        out.show(loss_curve(losses, width=min(60, out.width - 12)))
        out.show(training_table(before, after, View(precision=settings.display.precision)))
        for line in training_notes(
            losses, lr if lr is not None else settings.training.learning_rate, settings, after
        ):
            out.line(line)
    else:
        out.line(f"0 steps: the weights are as they were, the loss {losses[0]:.4g}.")
    # the words of the tables too, so that a sentence with other words is told which are new
    words = {VOCABULARY: np.array(settings.vocabulary)} if settings.vocabulary else {}
    # Written only once training has succeeded: a run that diverges leaves neither file behind.
    if initial is not None:
        write_atomic(initial, lambda f: np.savez(f, **start, **words), force)
        out.say(f"wrote {printable(str(initial))}: the weights before training")
    if target is not None:
        write_atomic(target, lambda f: np.savez(f, **w.arrays, **words), force)
        shown = printable(str(target))
        # what to do with them, quoted for a shell: a fill-mask model fills its blanks (run); every
        # other model generates
        again = "run" if settings.model.encoder_only else "generate"
        out.say(f"wrote {shown}: walkthrough {again} {_rerun(config, None, target, None)}")
        if initial is not None:
            out.say(f"what training changed: walkthrough diff -w {printable(str(initial))} -w {shown}")
    else:
        out.line("(the trained weights were not kept: add --output weights.npz)")


MAX_GENERATED = 512  # tokens: a model that never says <end> stops here
GenerateSeedOption = Annotated[
    Optional[int],
    typer.Option(
        help="Seed for the draw of --temperature, --top-k, --top-p; for the toy also of its weights.",
        show_default=False,
    ),
]


def _sampling(
    temperature: float | None, top_k: int | None, top_p: float | None, seed: int | None
) -> "Sampling | None":
    """The draw that --temperature, --top-k and --top-p ask for (None: greedy, the default); an
    option that would change nothing is refused, so that no one believes it did something."""
    from .model.sampling import Sampling

    if temperature is None and top_k is None and top_p is None:
        return None
    sampling = Sampling(1.0 if temperature is None else temperature, top_k, top_p, seed or 0)
    cuts = [name for name, value in (("--top-k", top_k), ("--top-p", top_p)) if value is not None]
    if sampling.greedy and cuts:
        raise WalkthroughError(
            f"{cuts[0]} does nothing at --temperature 0: greedy takes the most likely token; drop one"
        )
    return sampling


def _draw_seed(sampling: "Sampling | None", seed: int | None) -> None:
    """A checkpoint's --seed seeds the draw alone: refused when nothing is drawn."""
    if seed is not None and (sampling is None or sampling.greedy):
        raise WalkthroughError(
            "--seed with --model seeds the draw: give --temperature T (above 0), --top-k K or --top-p P too"
        )


@app.command()
@user_errors
@model_options("model", "source", "dtype", "prompt")  # no --target: generation makes its own
def generate(
    config: ConfigOption = None,
    seed: GenerateSeedOption = None,
    weights: WeightsOption = None,
    max_len: Annotated[int, typer.Option(help="Stop after this many tokens if <end> never comes.")] = 20,
    compare: Annotated[
        bool, typer.Option("--compare", help="Show each step beside the same row of one teacher-forced pass.")
    ] = False,
    checkpoint: ModelOptions = TOY,
    temperature: Annotated[
        Optional[float],
        typer.Option(
            help="Draw each token from softmax(logits / T): below 1 sharper, above 1 flatter; 0 is greedy.",
            show_default=False,
        ),
    ] = None,
    top_k: Annotated[
        Optional[int],
        typer.Option(
            "--top-k",
            help="Draw from the K most likely tokens (and any tied with the K-th).",
            show_default=False,
        ),
    ] = None,
    top_p: Annotated[
        Optional[float],
        typer.Option(
            "--top-p",
            help="Draw from the fewest most likely tokens whose probabilities add up to P or more.",
            show_default=False,
        ),
    ] = None,
    layer: Annotated[
        Optional[int],
        typer.Option(help="With --prompt: the layer whose attention over the cache is shown (default: last)"),
    ] = None,
    head: Annotated[
        int, typer.Option(help="With --prompt: the head whose attention over the cache is shown (1 is A1).")
    ] = 1,
) -> None:
    """Greedy decoding from <start>, one token at a time, until <end> (or a seeded draw: --temperature,
    --top-k, --top-p); with --prompt, a decoder-only checkpoint's continuation, its key/value cache
    growing by one row a step."""
    from .compare.checks import TOLERANCE
    from .config import END, load_config
    from .files.weights import load_weights
    from .model.generation import repeated
    from .model.trace import weights_origin
    from .model.training import UNTRAINED_REPEATS, generation_limit
    from .model.training import generate as decode
    from .model.transformer import init_weights
    from .views.tables import comparison_table, generation_table
    from .views.widgets import View, label

    if max_len > MAX_GENERATED:
        raise WalkthroughError(f"--max-len: at most {MAX_GENERATED}, got {max_len}")
    if max_len <= 0:
        raise WalkthroughError(f"--max-len: must be a positive integer, got {max_len}")
    sampling = _sampling(temperature, top_k, top_p, seed)
    model = checkpoint.checked() if checkpoint.model or checkpoint.prompt or checkpoint.dtype else None
    if checkpoint.model is None and checkpoint.source is not None:
        raise WalkthroughError(
            "--source on generate needs --model; the toy generates from its config's source "
            "(walkthrough config > mine.yaml, edit the sentence, generate -c mine.yaml)"
        )
    if model is not None and model.prompt is not None:
        _no_toy_options(config, None, weights)
        _draw_seed(sampling, seed)
        _continue(model, max_len, sampling, layer, head, compare)
        return
    if layer is not None or head != 1:
        option = "--layer" if layer is not None else "--head"
        raise WalkthroughError(f"{option} is for --model with --prompt (the key/value cache)")
    if model is not None:
        from .checkpoints.run import translate

        _no_toy_options(config, None, weights)
        _draw_seed(sampling, seed)
        translation = translate(model.model, model.source, model.dtype, max_len, sampling)
        steps, teacher_forced = translation.steps, translation.teacher_forced
        settings = teacher_forced.config
        said = f"{printable(translation.source)} → {printable(translation.text)}"
    else:
        settings = load_config(config, seed=seed)
        w = load_weights(settings, weights) if weights is not None else init_weights(settings)
        repeats = UNTRAINED_REPEATS if weights is None else None  # the seed's random weights only
        if sampling is not None:  # the toy's one seed: its weights' (unless --weights) and the draw's
            sampling = dataclasses.replace(sampling, seed=settings.seed)
        steps, teacher_forced = decode(settings, w, max_len, repeats, sampling)
        words = teacher_forced.vocabulary
        prompt = " ".join(settings.source_tokens) or words[steps[0].ids[0]]  # decoder-only: <start>
        said = f"{prompt} → {' '.join(words[s.chosen] for s in steps)}"
    vocabulary = teacher_forced.vocabulary
    out = Terminal()
    view = View(precision=settings.display.precision)
    if model is not None:
        origin = weights_origin(settings.seed, printable(settings.checkpoint))  # type: ignore[attr-defined]
    else:
        origin = weights_origin(settings.seed, None if weights is None else printable(str(weights)))
    out.note(f"weights: {origin}")
    out.show(generation_table(steps, vocabulary, view))
    _show_sampling(out, steps, vocabulary, sampling, view)
    out.paragraph(said)
    limit = generation_limit(settings, max_len)
    if model is None and weights is None and repeated(steps) == UNTRAINED_REPEATS and len(steps) < limit:
        out.line(
            f"(stopped after {len(steps)} tokens: {label(vocabulary[steps[-1].chosen])} was chosen "
            f"{UNTRAINED_REPEATS} times in a row, and untrained weights repeat themselves: random ones stop "
            "there, trained ones (--weights) run to <end> or --max-len)"
        )
    elif model is None and vocabulary[steps[-1].chosen] != END and len(steps) == limit < max_len:
        out.line(
            f"(stopped after {len(steps)} tokens: the learned position table has "
            f"{settings.model.max_positions} rows, model.max_positions)"
        )
    table, worst = comparison_table(steps, teacher_forced)
    if compare:
        out.show(table)
    # float32 sums in a different order for a longer input: rows agree to float32's rounding
    tolerance = 1e-9 if settings.model.dtype == "float64" else TOLERANCE["float32"]
    if not worst <= tolerance:  # NaN included: a comparison with NaN is a failure, not agreement
        raise WalkthroughError(
            f"generation differs from the teacher-forced pass (max |diff| {worst:.1e}): "
            "the numbers overflowed; try smaller weights"
        )
    out.paragraph(
        f"Step i equals row i of one teacher-forced pass over the final input (max |diff| {worst:.1e}): "
        "the causal mask keeps row i from seeing anything after position i."
    )


def _show_sampling(
    out: Terminal, steps: "list[Step]", vocabulary: tuple[str, ...], sampling: "Sampling | None", view: "View"
) -> None:
    """After the generation table: each draw's arithmetic, or why --temperature 0 drew nothing."""
    from .views.tables import sampling_note, sampling_table

    if sampling is None:
        return
    if sampling.greedy:
        out.line(
            "--temperature 0 is greedy: as T → 0, softmax(logits / T) puts all the probability on the "
            "largest logit, so each step takes the most likely token and nothing is drawn."
        )
        return
    out.show(sampling_table(steps, vocabulary, sampling, view))
    out.line(sampling_note(sampling))


def _continue(
    checkpoint: ModelArgs,
    max_len: int,
    sampling: "Sampling | None",
    layer: int | None,
    head: int,
    compare: bool,
) -> None:
    """``generate --prompt``: the continuation step by step, and with ``compare`` each step against
    the same row of one full pass (``generation.compare``)."""
    from .checkpoints.run import continue_prompt, load
    from .compare.checks import TOLERANCE
    from .model.generation import compare as against_full_pass
    from .model.generation import generated_ids
    from .model.trace import token_labels, weights_origin
    from .views.tables import cache_comparison_table, cached_generation_table, how_drawn
    from .views.widgets import View

    loaded = load(checkpoint.model, checkpoint.prompt or "", checkpoint.dtype, prompt=True)
    m = loaded.config.model
    if m.encoder_only:  # said before --layer is checked: it counts decoder layers, of which BERT has none
        from .model.generation import no_next_token

        raise no_next_token(loaded.config)
    layer = m.num_decoder_layers - 1 if layer is None else layer
    if not 0 <= layer < m.num_decoder_layers:
        raise WalkthroughError(f"--layer: this model has layers 0 to {m.num_decoder_layers - 1}, got {layer}")
    if not 1 <= head <= m.num_heads:
        raise WalkthroughError(f"--head: this model has heads 1 to {m.num_heads}, got {head}")
    done = continue_prompt(loaded, max_len, sampling)
    vocabulary = done.config.vocabulary or ()
    ids = generated_ids(done.steps)
    rows = token_labels([vocabulary[i] for i in ids])
    out = Terminal()
    out.note(f"weights: {weights_origin(done.config.seed, printable(done.checkpoint.source))}")
    view = View(precision=done.config.display.precision)
    drawn = sampling is not None and not sampling.greedy
    out.show(cached_generation_table(done.steps, vocabulary, rows, layer, head, view, drawn))
    _show_sampling(out, done.steps, vocabulary, sampling, view)
    n, fed = len(done.prompt_ids), len(ids) - 1
    continuation = done.checkpoint.tokenizer.decode(ids[n:])
    out.continuation(checkpoint.prompt or "", continuation)
    how = "greedy" if sampling is None else how_drawn(sampling)
    heads = (
        "head" if m.kv_heads == m.num_heads
        else f"key/value head ({m.kv_heads}, each read by {m.num_heads // m.kv_heads} query heads)"
    )  # fmt: skip
    out.line(
        f"{len(done.steps)} tokens after a prompt of {n}, {how}; the cache holds {fed} keys and values "
        f"per {heads} and layer, d_k = {m.d_k}."
    )
    if done.cut:
        if m.adds_positions:
            out.line(f"(stopped: the learned position table has {m.max_positions} rows: max_positions)")
        else:
            out.line(
                f"(stopped: this model reads at most {m.max_positions} positions: max_position_embeddings)"
            )
    if not compare:
        return
    gaps = against_full_pass(done.config, done.weights, done.steps)
    out.show(cache_comparison_table(gaps))
    scale = max(1.0, max(float(abs(s.logits).max()) for s in done.steps))
    tolerance = 1e-9 if m.dtype == "float64" else TOLERANCE["float32"] * scale
    worst = max(gaps)
    if not worst <= tolerance:  # NaN included
        raise WalkthroughError(f"the cached steps differ from the full pass (max |diff| {worst:.1e})")
    out.line(
        f"Step t equals row n + t − 1 of one full pass over the {fed} tokens fed (max |diff| {worst:.1e}): "
        "the causal mask keeps row i from seeing anything after position i, so the cached keys and "
        "values are all a new row needs."
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
            help="Start at this stage: its id (decoder.0.cross-attention), a unique prefix, or its number.",
            show_default=False,
        ),
    ] = None,
    checkpoint: ModelOptions = TOY,
) -> None:
    """One stage at a time: Enter next, ← back, arrows and j/k scroll, g go to, / search, ? keys, q quit."""
    from .views.tour import find_stage, run_tour

    trace, _ = _trace(config, seed, precision, weights, checkpoint.checked())
    start = 0 if stage is None else find_stage(trace, stage)
    out = Terminal()
    view = out.view(trace.config.display.precision, False, heatmap, shared_scale)
    run_tour(out.console, trace, view, start=start)


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
        Optional[str], typer.Option("--stage", "-s", help="Show this stage's matrices: A, B and A − B.")
    ] = None,
    precision: PrecisionOption = None,
    full: FullOption = False,
) -> None:
    """Two forward passes compared stage by stage: what a convention, or training, changes."""
    from .compare.diff import compare, first_divergence
    from .config import load_config
    from .files.weights import load_weights
    from .model.transformer import init_weights, run_forward
    from .views.tables import diff_stage, diff_table
    from .views.widgets import View

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
        settings = load_config(path, seed=seed, precision=precision)
        w = load_weights(settings, file) if file is not None else init_weights(settings)
        traces.append(run_forward(settings, w))
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


@app.command("config")
@user_errors
def show_config(
    config: ConfigOption = None, seed: SeedOption = None, precision: PrecisionOption = None
) -> None:
    """Print the effective config as YAML (save it, edit it)."""
    from .config import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(config, seed=seed, precision=precision)), nl=False)


def main() -> None:
    """Entry point of the ``walkthrough`` script and of ``python -m transformer_walkthrough``.

    A stream whose encoding lacks the symbols we print (``PYTHONIOENCODING=ascii``, a C locale
    without UTF-8 mode) is given ASCII stand-ins first (``views.ascii``): ``-inf`` for ``-∞``,
    ``sqrt`` for ``√``, ``-`` for a rule's ``─``; the output degrades instead of failing.
    """
    from .views.ascii import degrade

    degrade(sys.stdout)
    degrade(sys.stderr)
    app(prog_name="walkthrough")
