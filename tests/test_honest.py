"""Nothing false on screen or in a file (issue 36, points 8–12): the weights' origin as it is, a
size warning that counts what will be written, a prediction header that says what was predicted,
the toy's departures from the article said where they happen, and the smaller wordings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app

WIDE = "model:\n  d_model: 64\n  num_heads: 2\n  d_ff: 256\n"  # wider than a document's 100 columns


def _warned(stderr: str) -> int:
    """The count of numbers in the export's size warning."""
    found = re.search(r"^warning: ([\d,]+) numbers make about", stderr, re.MULTILINE)
    assert found, stderr
    return int(found.group(1).replace(",", ""))


def _markdown_cells(text: str) -> int:
    """The numbers in a Markdown export's matrix tables (a table headed ``| **name** |``), counted
    from the file: every body cell but the row label and the "…" and "⋮" that stand for left-out ones."""
    count, in_matrix = 0, False
    for line in text.splitlines():
        if line.startswith("| **"):
            in_matrix = True
        elif not line.startswith("|"):
            in_matrix = False
        elif in_matrix and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")][1:]
            count += sum(c not in ("…", "⋮") for c in cells)
    return count


def test_the_size_warning_counts_what_the_document_writes(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)
    config = tmp_path / "wide.yaml"
    config.write_text(WIDE)
    counts = {}
    for full in (False, True):
        target = tmp_path / f"full-{full}.md"
        result = runner.invoke(app, ["export", str(target), "-c", str(config), *(["--full"] * full)])
        assert result.exit_code == 0, result.output
        counts[full] = _warned(result.stderr)
        assert counts[full] == _markdown_cells(target.read_text())
    assert counts[False] < counts[True] / 2  # the summarised document is much smaller
    data = runner.invoke(app, ["export", "-", "-c", str(config)])
    assert _warned(data.stderr) == counts[True]  # JSON holds every number


def test_the_size_warning_of_json_counts_the_gradients_it_writes(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)
    result = runner.invoke(app, ["export", "-", "--backward"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)

    def numbers(node: object) -> int:
        if isinstance(node, (int, float)) or node in ("-inf", "inf", "nan"):  # JSON has no −∞: a string
            return 1
        if isinstance(node, list):
            return sum(numbers(v) for v in node)
        return 0

    written = sum(
        numbers(m["values"]) for s in doc["stages"] for part in ("matrices", "gradients")
        for m in s.get(part, {}).values()
    )  # fmt: skip
    assert _warned(result.stderr) == written


def _first_line(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "300"})  # a long path on one line
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[0]


def test_a_checkpoint_is_said_to_be_a_checkpoint_not_trained(runner: CliRunner, marian, gpt2) -> None:
    """The tests' checkpoints are random: "trained" would be false; where they come from is not."""
    folder = marian[0]
    said = f"weights: from the checkpoint {folder} (model.safetensors)"
    source = ("--model", str(folder), "--source", "the cat")
    assert _first_line(runner, "run", *source, "--target", "die Katze") == said
    assert _first_line(runner, "generate", *source, "--max-len", "2") == said
    saved = gpt2[0]["saved"]
    prompt = ("--model", str(saved), "--prompt", "The cat is")
    assert _first_line(runner, "generate", *prompt, "--max-len", "2").startswith(
        f"weights: from the checkpoint {saved}"
    )
    assert _first_line(runner, "step", *prompt, "-s", "embedding").startswith(
        f"weights: from the checkpoint {saved}"
    )
