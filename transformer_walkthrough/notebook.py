"""One call from a notebook to a traced forward pass: ``walk()``.

    >>> from transformer_walkthrough import walk
    >>> trace = walk()                                   # the article's example
    >>> trace                                            # in a notebook: the whole report
    >>> trace["decoder.0.masked-attention"]              # one stage's section
    >>> trace["decoder.0.masked-attention"].matrices["A1"]   # one matrix, shaded

A trace, a stage and a matrix show themselves in Jupyter as the HTML report shows them
(``views.fragments``, registered with IPython by the package), and as a short line elsewhere
(``repr``). The module imports nothing heavy until ``walk`` runs: ``import transformer_walkthrough``
stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config
    from .model.trace import Trace


def walk(
    config: str | Path | Config | None = None,
    *,
    model: str | None = None,
    prompt: str | None = None,
    source: str | None = None,
    target: str | None = None,
    seed: int | None = None,
    weights: str | Path | None = None,
    dtype: str = "float32",
    precision: int | None = None,
) -> Trace:
    """The traced forward pass that ``walkthrough run`` shows, with the command's options.

    The toy: ``walk()`` (the article's example), ``walk("mine.yaml")`` or a ``Config``, with
    ``seed``, ``weights`` (a trained ``.npz``) and your own words (``source=`` and ``target=``).
    A checkpoint: ``walk(model="gpt2", prompt="The cat")`` for a decoder-only model,
    ``walk(model="Helsinki-NLP/opus-mt-en-de", source="the cat")`` for a translation model (its
    greedy translation as the decoder's input, unless ``target`` is given). Bad input raises
    ``WalkthroughError`` with the message the command line would print.
    """
    from .errors import WalkthroughError

    if model is not None:
        from .checkpoints.run import walk as walk_checkpoint
        from .checkpoints.run import walk_prompt

        given = (("config", config), ("seed", seed), ("weights", weights))
        toy = [name for name, v in given if v is not None]
        if toy:
            raise WalkthroughError(f"{toy[0]}= does not apply to model=: the checkpoint has its own")
        if prompt is not None and (source is not None or target is not None):
            raise WalkthroughError(
                "prompt= is a decoder-only model's input, source= and target= a translation model's: give one"
            )
        if prompt is not None:
            return walk_prompt(model, prompt, dtype, precision).trace
        if not source or not source.strip():
            raise WalkthroughError("model= needs source= (a translation model) or prompt= (decoder-only)")
        return walk_checkpoint(model, source, target, dtype, precision).trace

    from .config import Config, load_config
    from .config.yaml_io import _override
    from .files.weights import load_weights
    from .model.transformer import init_weights, run_forward

    if prompt is not None or dtype != "float32":
        what = "prompt=" if prompt is not None else "dtype="
        raise WalkthroughError(
            f"{what} needs model= (the toy reads source= and target=; its dtype is in its config)"
        )
    if (source is None) != (target is None):
        raise WalkthroughError("the toy needs both source= (the encoder's words) and target= (the decoder's)")
    sentence = None if source is None or target is None else (source, target)
    if isinstance(config, Config):
        settings = _override(config, None, sentence, seed, precision)
    else:
        settings = load_config(config, seed=seed, precision=precision, sentence=sentence)
    w = init_weights(settings) if weights is None else load_weights(settings, Path(weights))
    trace = run_forward(settings, w)
    if weights is not None:
        trace.weights_source = str(weights)
    return trace
