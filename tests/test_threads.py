"""The CLI's BLAS thread policy: OpenBLAS's idle threads sleep at once, unless the user says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import os, sys; import transformer_walkthrough.cli; "
    "print(os.environ['OPENBLAS_THREAD_TIMEOUT'], 'numpy' in sys.modules)"
)


def probe(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    return subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_cli_sets_the_timeout_before_numpy_loads_and_keeps_the_users_own() -> None:
    assert probe() == "4 False"  # set, and NumPy (which reads it once) not yet loaded
    assert probe(OPENBLAS_THREAD_TIMEOUT="12") == "12 False"
