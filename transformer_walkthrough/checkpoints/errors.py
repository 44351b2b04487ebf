"""The error a checkpoint folder, file or download raises; one line, exit code 2 at the CLI."""

from __future__ import annotations

from ..errors import WalkthroughError


class CheckpointError(WalkthroughError):
    """A checkpoint that cannot be found, downloaded, read safely or converted."""
