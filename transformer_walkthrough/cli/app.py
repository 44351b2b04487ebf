"""The ``walkthrough`` app and its one edge: every error a command meets becomes one line.

``app`` is the typer group the command modules register on; ``OneLineErrors`` turns Click's
usage errors (a bad --seed, an unknown option) into one ``error:`` line; ``user_errors`` wraps
each command so that a ``WalkthroughError`` raised anywhere below, output that cannot be
written, or a failure no input check can foresee becomes one line on stderr and exit code 2.
``main`` is the entry point.

No ``from __future__ import annotations`` in the command modules: typer reads every command's
annotations at start-up, and evaluating them from strings would cost more than the rest of
``--help``.
"""

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import WalkthroughError, printable, short_message, utf8_argument

# Click's usage error (typer ≥ 0.23 vendors Click, so it is reached through the class typer exports).
UsageError: type[Exception] = typer.BadParameter.__base__  # type: ignore[assignment]
# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after every product before they sleep;
# on a machine of two busy cores they take turns from the one thread doing the work. Let them
# sleep at once (2^4 cycles): the issue measured `run` at 0.83x, a base-size .npz export at 0.36x,
# and the base-size forward pass no slower. Set before NumPy is imported (inside the commands),
# and never over the user's own setting.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

F = TypeVar("F", bound=Callable[..., None])


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
    # `walkthrough --install-completion`: stage ids (`options.complete_stage`) and config paths
    add_completion=True,
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


def main() -> None:
    """Entry point of the ``walkthrough`` script and of ``python -m transformer_walkthrough``.

    A stream whose encoding lacks the symbols we print (``PYTHONIOENCODING=ascii``, a C locale
    without UTF-8 mode) is given ASCII stand-ins first (``views.ascii``): ``-inf`` for ``-∞``,
    ``sqrt`` for ``√``, ``-`` for a rule's ``─``; the output degrades instead of failing.
    """
    from ..views.ascii import degrade

    degrade(sys.stdout)
    degrade(sys.stderr)
    app(prog_name="walkthrough")


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


def say_later(note: str) -> None:
    """Say ``note`` on stderr once the command has succeeded (never beside its error)."""
    _LATER.append(note)


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
