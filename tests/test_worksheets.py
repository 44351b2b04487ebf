"""Worksheets: cells hidden as numbered "?" boxes, chosen from the seed or named, answered at the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.markdown import to_markdown
from transformer_walkthrough.views.documents.worksheet import worksheet
from transformer_walkthrough.views.explain import explain


def table_cell(md: str, stage: str, name: str, row: int, col: int) -> str:
    """The text of one cell of a matrix's table in a Markdown document, counted from 0."""
    section = md[md.index(f"\n## {stage} ") :]
    lines = section[section.index(f"| **{name}** |") :].splitlines()
    return lines[2 + row].split(" | ")[1 + col].strip(" |")


def test_exercise_hides_cells_across_stages_and_answers_them(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "sheet.md"
    result = runner.invoke(app, ["export", str(path), "--exercise", "6"])
    assert result.exit_code == 0, result.stderr
    md = path.read_text(encoding="utf-8")
    trace = run_forward(Config())
    sheet = worksheet(trace, list(trace), 6)
    assert [h.number for h in sheet.holes] == [1, 2, 3, 4, 5, 6]
    # one choice a stage (a softmax's or a norm's row gives two cells together), spread over the walkthrough
    assert len({h.stage for h in sheet.holes}) >= 4
    order = list(trace.stages)
    places = [order.index(h.stage) for h in sheet.holes]
    assert max(places) - min(places) >= 8  # from the encoder into the decoder
    body, key = md.split("\n## Answer key\n")
    for h in sheet.holes:
        assert table_cell(body, h.stage, h.name, h.i, h.j) == f"**?{h.number}**"
        # the key computes at the sheet's digits (2 here) from the numbers the sheet shows
        assert "\n".join(explain(trace, h.stage, h.name, f"{h.i},{h.j}", 2, fixed=True)) in key
    assert key.count("**?") == 6


def test_same_seed_same_worksheet(runner: CliRunner, tmp_path: Path) -> None:
    texts = []
    for k, seed in enumerate(("42", "42", "7")):
        path = tmp_path / f"sheet{k}.html"
        assert runner.invoke(app, ["export", str(path), "--exercise", "6", "--seed", seed]).exit_code == 0
        texts.append(path.read_text(encoding="utf-8"))
    assert texts[0] == texts[1] != texts[2]


def test_cells_by_label_hide_the_cell_and_every_copy_of_it(runner: CliRunner, tmp_path: Path) -> None:
    trace = run_forward(Config())
    path = tmp_path / "sheet.md"
    spec = "decoder.0.masked-attention/output[sleeping,d2]"
    result = runner.invoke(
        app, ["export", str(path), "--cells", spec, "--cells", "encoder.0.self-attention/A1[1,0]"]
    )
    assert result.exit_code == 0, result.stderr
    md = path.read_text(encoding="utf-8").split("\n## Answer key\n")[0]
    assert table_cell(md, "decoder.0.masked-attention", "output", 1, 2) == "**?1**"
    assert table_cell(md, "encoder.0.self-attention", "A1", 1, 0) == "**?2**"
    # the masked attention's output is the next stage's sublayer input: hidden there too
    assert trace["decoder.0.add-norm-1"].sources["sublayer"] == "decoder.0.masked-attention"
    assert table_cell(md, "decoder.0.add-norm-1", "sublayer", 1, 2) == "**?1**"
    assert table_cell(md, "decoder.0.add-norm-1", "sublayer", 1, 1) != "**?1**"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cells", "decoder.0.masked-attention/A1[9,0]"], "row 9 is out of range"),
        (["--cells", "decoder.0.masked-attention/A9[1,0]"], "has no matrix 'A9'"),
        (["--cells", "decoder.9.masked-attention/A1[1,0]"], "is no stage"),
        (["--cells", "A1 1,0"], "give stage/matrix[row,col]"),
        (["--cells", "decoder.0.masked-attention/A1[cat,0]"], "'cat' is not a row of A1"),
        (["--cells", "decoder.0.masked-attention/A1[1,0]", "-s", "embedding"], "is not in this export"),
        (["--exercise", "0"], "hide 1 to 100 cells"),
        (["--exercise", "2", "--cells", "decoder.0.masked-attention/A1[1,0]"], "not both"),
        (["--exercise", "100000", "-s", "output.probabilities"], "hide 1 to 100 cells"),
    ],
)
def test_a_bad_worksheet_is_one_line_and_nothing_written(
    runner: CliRunner, tmp_path: Path, args: list[str], message: str
) -> None:
    path = tmp_path / "sheet.html"
    result = runner.invoke(app, ["export", str(path), *args])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_worksheet_is_a_document(runner: CliRunner, tmp_path: Path) -> None:
    for name in ("sheet.json", "sheet.npz"):
        result = runner.invoke(app, ["export", str(tmp_path / name), "--exercise", "3"])
        assert result.exit_code == 2 and "a document" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_more_cells_than_the_export_has(trace: Trace) -> None:
    from transformer_walkthrough.errors import StageError

    stages = [trace["output.probabilities"]]  # 4 × 7 probabilities, all above 0
    assert len(worksheet(trace, stages, 28).holes) == 28
    with pytest.raises(StageError, match="has 28 cells worth asking"):
        worksheet(trace, stages, 29)


def test_every_format_writes_the_boxes_and_the_key(tmp_path: Path) -> None:
    from transformer_walkthrough.views.documents.latex import to_latex
    from transformer_walkthrough.views.documents.report import to_html

    trace = run_forward(Config())
    sheet = worksheet(trace, list(trace), 6)
    html = to_html(trace, list(trace), 2, worksheet=sheet)
    assert len(re.findall(r'<td class="hole">\?\d</td>', html)) >= 6
    assert html.count('<li value="') == 6 and 'id="answers"' in html
    tex = to_latex(trace, list(trace), 2, worksheet=sheet)
    assert len(re.findall(r"\\boxed\{\?_\{\d\}\}", tex)) >= 6 and "\\section*{Answer key}" in tex
    assert "**?6**" in to_markdown(trace, list(trace), 2, worksheet=sheet)


def test_a_worksheet_compiles(tmp_path: Path) -> None:
    from tests.test_documents import compile_latex, overfull
    from transformer_walkthrough.views.documents.latex import to_latex

    trace = run_forward(Config())
    log, _ = compile_latex(
        to_latex(trace, list(trace), 2, worksheet=worksheet(trace, list(trace), 12)), tmp_path
    )
    assert overfull(log) == []
