"""The ``walkthrough`` command: thin commands over session -> trace -> views / files.

A command parses its options, asks the session (``transformer_walkthrough.session``) for a
trace, and hands what it computed to the views: every style, table and line printed through Rich
is in ``views.stages``, ``views.tables`` and ``views.terminal``. The package is laid out by job:

- ``app``: the typer app, Click's usage errors as one line, the ``user_errors`` edge, ``main``;
- ``options``: the options commands share, each defined once; the checkpoint's five as one group;
- ``passes``: a command's trace from the session, with its notes; the backward pass; the
  options that make the same trace again;
- one module per command or close pair: ``run`` (run, step, stages), ``export``, ``verify``
  (verify, explain), ``lens`` (lens, attention), ``train``, ``generate``, ``tour``, ``diff``,
  ``config``.

Importing this package registers every command on ``app``, in the order ``--help`` lists them.
Only typer is imported at start-up; NumPy, YAML and Rich load inside the commands that need
them, so ``walkthrough --help`` stays as fast as typer itself.
"""

from .app import app, main

# Each module registers its commands as it is imported: this order is `--help`'s.
# isort: off
from . import run, export, verify, lens, train, generate, tour, diff, config
# isort: on

__all__ = ["app", "config", "diff", "export", "generate", "lens", "main", "run", "tour", "train", "verify"]
