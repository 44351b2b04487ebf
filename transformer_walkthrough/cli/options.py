"""The options the commands share, each defined once as an ``Annotated`` type typer reads.

The checkpoint's five (--model, --source, --target, --prompt, --dtype) are one group: a command
receives them as one ``ModelOptions`` (``model_options`` puts them on its command line), checked
together by ``session.inputs`` as ``walk()`` checks them in a notebook.
"""

import functools
import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Optional

import typer

from ..session import ModelArgs, Sentence, inputs
from .app import F


def complete_stage(ctx: typer.Context, incomplete: str) -> list[str]:
    """What `--stage` completes to in a shell (``walkthrough --install-completion``): the kinds and
    ids of the stages of the config given (-c) or the article's example, read from the walk of
    Figure 1 (``model.architecture.walk``), nothing computed. A config that does not load
    completes to nothing; its error is said when the command runs."""
    from ..config import load_config
    from ..errors import WalkthroughError
    from ..model.architecture import walk

    try:
        places = list(walk(load_config(ctx.params.get("config")).model))
    except (WalkthroughError, OSError, ValueError):
        return []
    names = dict.fromkeys([*(place.kind for place in places), *(place.id for place in places)])
    return [name for name in names if name.startswith(incomplete)]


def complete_config(incomplete: str) -> list[str]:
    """What `-c` completes to in a shell: the YAML files and the folders whose path starts with what
    was typed; where only one folder matches, the YAML files inside it (a shell would end a lone
    folder with a space)."""
    found: list[str] = []
    typed = incomplete
    for _ in range(8):  # folders within folders, as deep as a path is typed
        folder, slash, start = typed.rpartition("/")
        prefix = folder + slash
        try:
            entries = sorted(Path(prefix or ".").iterdir())
        except OSError:
            return []
        found = [
            f"{prefix}{e.name}/" if e.is_dir() else prefix + e.name
            for e in entries
            if e.name.startswith(start)
            and not e.name.startswith(".")
            and (e.is_dir() or e.suffix.lower() in (".yaml", ".yml"))
        ]
        if len(found) != 1 or not found[0].endswith("/"):
            return found
        typed = found[0]
    return found


ConfigOption = Annotated[
    Optional[Path],
    typer.Option(
        "--config",
        "-c",
        help="YAML config; default: the article's example.",
        show_default=False,
        autocompletion=complete_config,
    ),
]
SeedOption = Annotated[Optional[int], typer.Option(help="Seed for the weights (overrides the config).")]
PrecisionOption = Annotated[
    Optional[int], typer.Option(help="Digits after the decimal point (overrides the config).")
]
# explain's digits: of its results, more where a value is small (``model.cell``); --digits, its old name
ExplainPrecision = Annotated[
    int,
    typer.Option(
        "--precision",
        "--digits",
        help="Digits after the decimal point of a result (more for a small one, so that it shows this "
        "many significant digits); its operands show two more.",
    ),
]
FullOption = Annotated[bool, typer.Option("--full", help="Show every row and column of wide matrices.")]
LayerOption = Annotated[Optional[int], typer.Option(help="Only the stages of this layer (0 is the first).")]
HeadOption = Annotated[
    Optional[int],
    typer.Option(
        help="Attention of this head alone (1 is A1): the other heads' scores and weights are computed, "
        "not kept (a long prompt's stage in a fraction of the memory).",
        show_default=False,
    ),
]
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
        "--backward",
        help="Also the gradient dL/d(matrix) of the loss for every matrix but M and PE: it keeps every "
        "stage, a gradient as large as each, and one per parameter (too much is refused, part by part).",
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


class ModelOptions(NamedTuple):
    """--model, --source, --target, --prompt and --dtype as given: one value, checked together by
    ``checked``. ``model_options`` puts the five on a command's command line."""

    model: str | None = None
    source: str | None = None
    target: str | None = None
    prompt: str | None = None
    dtype: Dtype | None = None

    def checked(self) -> ModelArgs | Sentence | None:
        """The checkpoint to run; for the toy, its own sentence if given, else None (``session.inputs``)."""
        model, source, target, prompt, dtype = self
        return inputs(model, source, target, prompt, None if dtype is None else dtype.value)


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
