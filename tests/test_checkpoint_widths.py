"""``walkthrough run --model`` to a pipe: every line fits 80 columns, for every decoder family.

A pipe is no terminal: Rich lays the output out at 80 columns unless COLUMNS says otherwise, and
every part of ``run`` (the stage rules and titles, the matrices, the experts' routing, the
prediction) must keep to that width, as a file read in an 80-column editor or a diff would show
it. Each checkpoint runs in a child process whose standard output is a real pipe, with COLUMNS
unset, and each line is measured in terminal cells (``rich.cells.cell_len``: a wide character is
two), not in characters.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there
from rich.cells import cell_len

PROMPT = "The cat is sleeping comfortably. The dog is"
# The mixtures (whose experts' routing only they print) and every other decoder family: a run of a
# tiny checkpoint takes under a second.
CHECKPOINTS = {
    "moe_family": ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"),
    "llama_family": ("llama", "mistral", "qwen2", "qwen3", "llama3-rope"),
    "gemma_family": ("gemma", "gemma2", "gemma3_text", "olmo2"),
}
CASES = [pytest.param(fixture, name, id=name) for fixture, names in CHECKPOINTS.items() for name in names]


@pytest.mark.parametrize(("fixture", "name"), CASES)
def test_run_to_a_pipe_keeps_every_line_within_80_columns(request, fixture, name):
    folder = request.getfixturevalue(fixture)[name]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-m", "transformer_walkthrough", "run", "--model", str(folder), "--prompt", PROMPT],
        capture_output=True, text=True, encoding="utf-8", env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) > 100  # the whole pass was printed, every stage's matrices
    wide = [(cell_len(line), line) for line in lines if cell_len(line) > 80]
    assert not wide, wide[:5]
    assert max(cell_len(line) for line in lines) >= 70  # the matrices use the width they are given
