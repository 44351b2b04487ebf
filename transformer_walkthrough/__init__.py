"""transformer-walkthrough: the original transformer computed on a tiny example, every number shown.

    >>> from transformer_walkthrough import load_config, run_forward
    >>> trace = run_forward(load_config())
    >>> trace["decoder.0.masked-attention"]["A1"]  # the first head's attention weights

In a notebook, ``walk()`` (or ``walk(model="gpt2", prompt="The cat")``) runs a pass in one call;
the trace, a stage and a matrix then show themselves as the HTML report shows them.

The names are imported on first use, so that ``walkthrough --help`` does not load NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Config", "Trace", "WalkthroughError", "init_weights", "load_config", "run_forward", "walk"]

_HOMES = {
    "Config": "config",
    "load_config": "config",
    "Trace": "model.trace",
    "init_weights": "model",
    "run_forward": "model",
    "WalkthroughError": "errors",
    "walk": "notebook",
}

if TYPE_CHECKING:
    from .config import Config, load_config
    from .errors import WalkthroughError
    from .model.trace import Trace
    from .model.transformer import init_weights, run_forward
    from .notebook import walk


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
