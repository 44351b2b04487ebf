"""The error a checkpoint folder, file or download raises; one line, exit code 2 at the CLI."""

from __future__ import annotations

from ..errors import WalkthroughError


class CheckpointError(WalkthroughError):
    """A checkpoint that cannot be found, downloaded, read safely or converted."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message (its class name if it has none): one line for the user."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
