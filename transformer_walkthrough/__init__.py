"""transformer-walkthrough: the original transformer computed on a tiny example, every number shown.

    >>> from transformer_walkthrough import load_config, run_forward
    >>> trace = run_forward(load_config())
    >>> trace["decoder.0.masked-attention"]["A1"]  # the first head's attention weights

In a notebook, ``walk()`` (or ``walk(model="gpt2", prompt="The cat")``) runs a pass in one call;
the trace, a stage and a matrix then show themselves as the HTML report shows them.

The names are imported on first use, so that ``walkthrough --help`` does not load NumPy.
"""

from __future__ import annotations

import sys
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


def _shown_in_notebooks() -> None:
    """In Jupyter, a trace, a stage and a matrix show themselves as the HTML report shows them.

    The views are registered here, at the top of the package, with IPython's HTML formatter under
    their types' dotted names: neither the model (which defines the types and imports no view) nor
    this import loads anything until a cell shows one. Outside IPython there is nothing to do.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["text/html"]
    for type_name in ("Trace", "Stage", "Matrix"):
        formatter.for_type_by_name(f"{__name__}.model.trace", type_name, _html)


def _html(shown: Any) -> str:
    from .views.fragments import notebook_html

    return notebook_html(shown)


_shown_in_notebooks()
