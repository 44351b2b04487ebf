"""Issue 37, part three: the hostile round on the families added since (Gemma, OLMo 2, Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, T5): each defect the round found, as its reproducer.

Every one ends in a run or in one ``error:`` line and exit code 2: never a traceback, a hang,
gigabytes or a file left behind.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

pytest.importorskip("transformers")  # a test dependency: CI installs it, so this never skips there

from transformer_walkthrough.cli import app
from transformer_walkthrough.model.trace import Matrix
from transformer_walkthrough.views.blocks import matrix_block
from transformer_walkthrough.views.widgets import View

# ---- an expert no token chose: a matrix of no rows ------------------------------------------------


@pytest.mark.parametrize("columns", [3, 16, 200])
def test_a_matrix_of_no_rows_is_its_header_within_the_width(columns):
    """An idle expert's X, gate and hidden have no rows: the block is its title and header, its
    columns summarised to fit 80 cells as any matrix's (it failed: max() of no row labels)."""
    cols = tuple(f"d{j}" for j in range(columns))
    block = matrix_block("expert1.X", Matrix(np.zeros((0, columns)), (), cols), View(width=80))
    console = Console(width=80, no_color=True, record=True, file=io.StringIO())
    console.print(block)
    lines = console.export_text().splitlines()
    assert lines[0].startswith(f"expert1.X  (0×{columns})")
    assert "d0" in lines[1] and f"d{columns - 1}" in lines[1]
    assert ("…" in lines[1]) == (columns > 3) and max(map(len, lines)) <= 80  # 16 take 86 cells


def test_a_mixture_whose_expert_no_token_chose_runs(moe_family):
    """The tiny Mixtral routes this prompt's 13 tokens to three of its four experts in a layer:
    `run` printed every stage up to the idle expert's, then a traceback."""
    args = ["run", "--model", str(moe_family["mixtral"]), "--prompt", "The cat is sleeping comfortably."]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "(0×16)" in result.stdout  # an idle expert's rows are shown: none
