"""Every matrix of every stage is explainable: of every shipped config and of a checkpoint of every
family, through ``walkthrough explain`` and through the HTML report's click data (which calls the
same ``views.explain``, and shows its error as a cell's lines when it fails); and every formula
of their reports is typeset in MathML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app, passes
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.session import traced
from transformer_walkthrough.views import clickable
from transformer_walkthrough.views.documents.report import to_html

CONFIGS = sorted(Path(__file__).parent.parent.glob("configs/*.yaml"))


def _cells(trace: Trace) -> list[tuple[str, str, str]]:
    """The last cell of each matrix of each stage: (stage id, matrix, "row,col"); the report has
    every cell it shows. An expert no token was routed to has matrices of no rows: no cell."""
    return [
        (s.id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")
        for s in trace
        for name, m in s.matrices.items()
        if m.values.size
    ]


def _every_cell_in_the_cli(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """``explain`` on the command line, the pass made once (the command's own path from there)."""
    monkeypatch.setattr(passes, "trace", lambda *args, **kw: (trace, None))
    runner = CliRunner()
    for stage_id, name, cell in _cells(trace):
        result = runner.invoke(app, ["explain", "-s", stage_id, "-m", name, "--cell", cell])
        assert result.exit_code == 0, (stage_id, name, cell, result.output)
        assert result.stdout.startswith(f"{stage_id} · {name}["), (stage_id, name, result.stdout)


def _every_cell_in_the_report(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's click data: each cell's first line is its own head, never an error."""
    monkeypatch.setattr(clickable, "BUDGET", 10**9)
    monkeypatch.setattr(clickable, "LINES_BUDGET", 10**12)
    monkeypatch.setattr(clickable, "MAX_READS", 10**9)
    page = to_html(trace, list(trace))
    assert '<pre class="formula">' not in page and page.count('<div class="formula"') == len(trace)
    script = page[page.index("<script>") + len("<script>") : page.index("</script>")]
    data = json.loads(script[len("const EXPLAINED = ") : script.index(";\n")])
    heads = [data["lines"][ids[0]] for figure in data["figures"] for row in figure["x"] for ids in row]
    shown = sum(len(figure["x"]) * len(figure["x"][0]) for figure in data["figures"] if figure["x"])
    assert len(heads) == shown and shown > 0
    wrong = [line for line in heads if " · " not in line.split("=")[0]]
    assert not wrong, wrong[:3]
    figures = sum(len(s.matrices) for s in trace)
    routing = sum(s.kind == "experts" for s in trace)  # the "Expert routing" section's weights, a layer each
    assert len(data["figures"]) == figures + routing and all("x" in f for f in data["figures"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_matrix_of_every_shipped_config(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traced(path, None, None, None, None).trace
    _every_cell_in_the_cli(trace, monkeypatch)
    _every_cell_in_the_report(trace, monkeypatch)


def test_a_learned_position_row_of_bert_style(runner: CliRunner) -> None:
    """The issue's case: P of an encoder-only embedding, whose rows are read as ``position``."""
    result = runner.invoke(
        app,
        ["explain", "-c", "configs/bert-style.yaml", "-s", "encoder.embedding", "-m", "P", "--cell", "4,1"],
    )
    assert result.exit_code == 0, result.output
    assert "row 4 is added to the token at position 4" in " ".join(result.stdout.split())


def _checkpoints(request: pytest.FixtureRequest) -> dict[str, tuple[str, str]]:
    """A checkpoint of every family, and what it is run on: (folder, prompt) or (folder, source)."""
    out: dict[str, tuple[str, str]] = {}
    for name, folder in request.getfixturevalue("llama_family").items():
        out[name] = (str(folder), "The cat is")
    out["gpt2"] = (str(request.getfixturevalue("gpt2")[0]["saved"]), "The cat is")
    bert = request.getfixturevalue("bert_family")
    for name, blank in (("bert", "[MASK]"), ("roberta", "<mask>"), ("distilbert", "[MASK]")):
        out[name] = (str(bert[name]), f"The cat is {blank}")
    out["marian"] = (str(request.getfixturevalue("marian")[0]), "")
    for family in ("gemma_family", "moe_family"):
        for name, folder in request.getfixturevalue(family).items():
            out[name] = (str(folder), "The cat is")
    out["t5"] = (str(request.getfixturevalue("t5_family")["flan-t5"][0]), "")
    return out


def test_every_matrix_of_a_checkpoint_of_every_family(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformer_walkthrough.checkpoints.checkpoint import FAMILIES
    from transformer_walkthrough.session import ModelArgs

    checkpoints = _checkpoints(request)
    families = set()
    for name, (folder, prompt) in checkpoints.items():
        if name in ("marian", "t5"):  # encoder–decoders: a source, translated greedily first
            asked = ModelArgs(folder, "the cat is sleeping", None, "float64")
        else:
            asked = ModelArgs(folder, None, None, "float64", prompt)
        done = traced(None, None, None, None, asked)
        families.add(json.loads((Path(folder) / "config.json").read_text())["model_type"])
        with monkeypatch.context() as patched:
            _every_cell_in_the_cli(done.trace, patched)
            _every_cell_in_the_report(done.trace, patched)
    assert families == {f.model_type for f in FAMILIES}
