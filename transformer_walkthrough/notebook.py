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
    dtype: str | None = None,
    precision: int | None = None,
) -> Trace:
    """The traced forward pass that ``walkthrough run`` shows, with the command's options.

    The toy: ``walk()`` (the article's example), ``walk("mine.yaml")`` or a ``Config``, with
    ``seed``, ``weights`` (a trained ``.npz``) and your own words (``source=`` and ``target=``;
    an encoder-only toy's ``source=`` alone). A checkpoint: ``walk(model="gpt2", prompt="The
    cat")`` for a decoder-only model, ``walk(model="Helsinki-NLP/opus-mt-en-de", source="the
    cat")`` for a translation model (its greedy translation as the decoder's input, unless
    ``target`` is given), ``dtype="float64"`` for its weights in float64. The inputs are checked
    by the same code as the command's (``session``): bad input raises ``WalkthroughError`` with
    the message the command line prints.
    """
    from .session import inputs, traced

    asked = inputs(model, source, target, prompt, dtype)
    return traced(config, seed, precision, weights, asked).trace
