"""What a command or ``walk()`` asks for, checked once, and the traced pass it asks for.

The toy reads a config (its sentence, or your words), a seed or a trained ``.npz``; a checkpoint
reads a source (a translation model) or a prompt (a decoder-only or fill-mask model) at a
dtype. ``inputs`` checks the words and the checkpoint's options together, ``traced`` runs the
pass. The command line (``cli``) and the notebook's ``walk`` both go through here, so they
accept and refuse the same inputs with the same message; the message names the command line's
options, as the README documents them.

Imports nothing heavy until a pass runs: ``walkthrough --help`` imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .errors import WalkthroughError, printable

if TYPE_CHECKING:
    from .config import Config
    from .model.trace import Keep, Trace
    from .model.transformer import Weights


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


def inputs(
    model: str | None = None,
    source: str | None = None,
    target: str | None = None,
    prompt: str | None = None,
    dtype: str | None = None,
) -> ModelArgs | Sentence | None:
    """The checkpoint to run; for the toy, its own sentence if given, else None (its config's).

    Whether a model reads a source or a prompt is checked when its config.json is read
    (``load_checkpoint``); whether the toy reads a target too, when its config is
    (``config._own_sentence``: an encoder-only toy reads the source alone)."""
    if model is None:
        return _toy_sentence(source, target, prompt, dtype)
    if prompt is not None and (source is not None or target is not None):
        raise WalkthroughError(
            "--prompt is a decoder-only model's input, --source/--target an encoder-decoder model's: give one"
        )
    from .config import DTYPES

    if dtype is not None and dtype not in DTYPES:  # typer checks the command line's; walk()'s here
        raise WalkthroughError(
            f"--dtype: one of {', '.join(sorted(DTYPES))}, got {printable(str(dtype))[:40]!r}"
        )
    if prompt is not None:
        if not prompt:
            raise WalkthroughError("--prompt: give some text")
        return ModelArgs(model, None, None, dtype or "float32", prompt)
    if source is None or not source.strip():
        raise WalkthroughError(
            "--model needs --source TEXT (a translation model) or --prompt TEXT (a decoder-only model)"
        )
    return ModelArgs(model, source, target, dtype or "float32")


def _toy_sentence(
    source: str | None, target: str | None, prompt: str | None, dtype: str | None
) -> Sentence | None:
    """The toy's own words, or None for its config's; a checkpoint's options refused."""
    if prompt is not None:
        raise WalkthroughError("--prompt needs --model (a decoder-only checkpoint's input)")
    if dtype is not None:
        raise WalkthroughError("--dtype needs --model (the toy's dtype is in its config)")
    if source is None and target is None:
        return None
    from .config import NEEDS_BOTH, tokenize

    if source is None or not source.strip() or (target is not None and not target.strip()):
        raise WalkthroughError(NEEDS_BOTH)
    for name, text in (("--source", source), ("--target", target)):
        if text is not None and not tokenize(text):
            raise WalkthroughError(
                f"{name}: no words in {printable(text)[:40]!r} (a word is letters, digits and ')"
            )
    return Sentence(source, target)


def no_toy_options(config: object, seed: int | None, weights: object) -> None:
    """--model brings its own config and weights: the toy's options would be silently ignored."""
    toy = (("--config", config), ("--seed", seed), ("--weights", weights))
    clash = [name for name, value in toy if value is not None]
    if clash:
        raise WalkthroughError(f"{clash[0]} does not apply to --model: the checkpoint has its own")


class Traced(NamedTuple):
    """A forward pass, the weights it ran on, and a checkpoint's greedy translation when it made
    one (its decoder's input, since no --target was given)."""

    trace: Trace
    weights: Weights
    translation: str | None = None


def traced(
    config: str | Path | Config | None,
    seed: int | None,
    precision: int | None,
    weights: str | Path | None,
    asked: ModelArgs | Sentence | None,
    keep: Keep | None = None,
) -> Traced:
    """The forward pass of the config (a path, a ``Config``, or None: the article's example) with
    the weights from ``weights`` or drawn from the seed, on its sentence or ``asked``'s words; or
    of a checkpoint (``asked`` a ``ModelArgs``) on its tokens of the source and target, or of
    the prompt. ``keep`` says which stages the trace keeps (``model.trace.Keep``): every one when
    None; a command that shows one stage keeps that one, and the budget counts what is kept."""
    from .model.trace import EVERYTHING

    keep = EVERYTHING if keep is None else keep
    if isinstance(asked, ModelArgs):
        return _checkpoint(config, seed, precision, weights, asked, keep)
    from .model.transformer import run_forward

    settings, w = toy(config, seed, precision, weights, asked)
    source = None if weights is None else printable(str(weights))
    trace = run_forward(settings, w, keep=keep, weights_source=source)
    return Traced(trace, w)


def toy(
    config: str | Path | Config | None,
    seed: int | None = None,
    precision: int | None = None,
    weights: str | Path | None = None,
    sentence: Sentence | None = None,
) -> tuple[Config, Weights]:
    """The toy's config (a path, a ``Config``, or None: the article's example) with the seed, the
    precision and your words applied, and its weights: from ``weights``, or drawn from the seed."""
    from .config import Config, load_config
    from .config.yaml_io import override
    from .model.transformer import init_weights

    if isinstance(config, Config):
        settings = override(config, None, sentence, seed, precision)
    else:
        settings = load_config(config, seed=seed, precision=precision, sentence=sentence)
    if weights is None:
        return settings, init_weights(settings)
    from .files.weights import load_weights  # an .npz reader, only when there is one to read

    return settings, load_weights(settings, Path(weights))


def _checkpoint(
    config: object, seed: int | None, precision: int | None, weights: object, asked: ModelArgs, keep: Keep
) -> Traced:
    """A checkpoint's pass: ``checkpoints.run.walk``, or ``walk_prompt`` for a prompt."""
    no_toy_options(config, seed, weights)
    from .checkpoints.run import walk, walk_prompt

    if asked.prompt is not None:
        walked = walk_prompt(asked.model, asked.prompt, asked.dtype, precision, keep=keep)
    else:
        walked = walk(asked.model, asked.source or "", asked.target, asked.dtype, precision, keep=keep)
    translation = None if walked.translation is None else walked.config.target
    return Traced(walked.trace, walked.weights, translation)
