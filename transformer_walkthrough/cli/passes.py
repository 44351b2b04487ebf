"""A command's pass: the session's trace with its notes, the backward pass when asked, and the
options that make the same trace again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import decoded, printable
from ..session import ModelArgs, Sentence, traced
from .app import say_later

if TYPE_CHECKING:
    from ..model.backprop import Backward
    from ..model.trace import Keep, Stage, Trace
    from ..model.transformer import Weights


def trace(
    config: Path | None,
    seed: int | None,
    precision: int | None,
    weights: Path | None = None,
    asked: ModelArgs | Sentence | None = None,
    notes_to_stderr: bool = False,
    keep: Keep | None = None,
) -> tuple[Trace, Weights]:
    """The session's pass (``session.traced``) keeping what ``keep`` keeps (every stage when None),
    with what a reader should know said beside it: a checkpoint's greedy translation first (on
    stderr beside an export's data), and a warning when the toy's numbers overflowed."""
    watched = None
    if keep is not None and keep.stream is not None and not isinstance(asked, ModelArgs):
        import dataclasses

        from ..compare.nonfinite import Watch

        watched = Watch(keep.stream)  # the toy's stages checked for overflow as they go by
        keep = dataclasses.replace(keep, stream=watched)
    said: list[str] = []
    translates = isinstance(asked, ModelArgs) and asked.source is not None and asked.target is None
    if keep is not None and keep.stream is not None and translates:
        keep = _translation_first(keep, said, notes_to_stderr)
    done = traced(config, seed, precision, weights, asked, keep)
    if done.translation is not None and not said:
        note = translation_note(done.translation)
        if notes_to_stderr:
            say_later(note)
        else:
            typer.echo(note)
    if not isinstance(asked, ModelArgs):
        from ..compare.nonfinite import warning

        problem = warning(done.trace, watched)
        if problem:
            say_later(f"warning: {problem}")
    return done.trace, done.weights


def translation_note(translation: str) -> str:
    """A checkpoint's greedy translation, said before its stages (cut when long): it is then the
    target, the model's own choice, so the prediction's ✓ compares the model with itself."""
    return (
        f"translation (greedy): {decoded(translation)}\n"
        "(the target is this translation: a ✓ compares the model with itself)"
    )


def _translation_first(keep: Keep, said: list[str], notes_to_stderr: bool) -> Keep:
    """A stream that says the greedy translation before the first stage it hands on: a streamed
    pass shows its stages before ``traced`` returns, and the translation is what they read."""
    import dataclasses

    show = keep.stream
    assert show is not None

    def first_the_translation(stage: Stage) -> None:
        if not said:
            said.append(translation_note(stage.owner().config.target))
            if notes_to_stderr:
                say_later(said[0])
            else:
                typer.echo(said[0])
        show(stage)

    return dataclasses.replace(keep, stream=first_the_translation)


def gradients(trace: Trace, w: Weights, backward: bool) -> Backward | None:
    """The backward pass, when asked for (and its module loaded only then)."""
    if not backward:
        return None
    from ..model.backprop import backward as backpropagate

    return backpropagate(trace, w)


def rerun(
    config: Path | None, seed: int | None, weights: Path | None, asked: ModelArgs | Sentence | None
) -> str:
    """The options that make this trace again, quoted for a shell: the HTML report's cells past
    its budget show ``walkthrough explain`` with them; ``train`` says what to run next."""
    import shlex

    given: list[tuple[str, object]] = [("--config", config), ("--seed", seed), ("--weights", weights)]
    if isinstance(asked, Sentence):
        given += [("--source", asked.source), ("--target", asked.target)]
    elif isinstance(asked, ModelArgs):
        given += [("--model", asked.model), ("--source", asked.source), ("--target", asked.target)]
        given += [("--prompt", asked.prompt), ("--dtype", None if asked.dtype == "float32" else asked.dtype)]
    return " ".join(f"{name} {shlex.quote(printable(str(v)))}" for name, v in given if v is not None)
