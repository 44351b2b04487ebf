"""The report explains itself: a click on any cell (or the keyboard) shows the arithmetic that
``walkthrough explain`` prints for it, beside its matrix; past the budget, the command that does."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.test_documents import WebDriver, need
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.errors import printable, short_words
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views import clickable
from transformer_walkthrough.views.documents.report import to_html
from transformer_walkthrough.views.explain import explain

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # WebDriver's key for an element reference

# The cell (row i, column j) of matrix ``name`` in stage ``id``: the report's own table cell.
_CELL = """
const [id, name, i, j] = arguments;
const figure = [...document.getElementById(id).querySelectorAll('figure')]
    .find(f => f.querySelector('figcaption').firstChild.textContent.trim() === name);
return figure.querySelectorAll('tbody tr')[i].querySelectorAll('td')[j];
"""
_PANEL = """
const panel = document.querySelector('aside.explained');
if (!panel || panel.hidden) return null;
return {text: panel.querySelector('pre').innerText, command: panel.querySelector('code').textContent,
        beside: panel.previousElementSibling.querySelector('figcaption').firstChild.textContent.trim(),
        section: panel.closest('section').id, focused: document.activeElement.textContent};
"""


def _export(runner: CliRunner, path: Path, *more: str) -> str:
    result = runner.invoke(app, ["export", str(path), *more])
    assert result.exit_code == 0, result.output
    return path.read_text(encoding="utf-8")


def _payload(page: str) -> dict:
    script = page[page.index("<script>") + len("<script>") : page.index("</script>")]
    return json.loads(script[len("const EXPLAINED = ") : script.index(";\n")])


def _said(runner: CliRunner, *args: str) -> str:
    """What ``walkthrough explain`` prints, its wrapping undone (the panel wraps as its width does)."""
    result = runner.invoke(app, ["explain", *args])
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_every_cell_of_the_toy_carries_its_own_arithmetic(runner: CliRunner, tmp_path: Path) -> None:
    page = _export(runner, tmp_path / "report.html")
    assert len(page.encode()) <= 10_000_000  # the budget for the default config
    data = _payload(page)
    trace = run_forward(Config())
    figures = re.findall(r'<section id="([^"]+)"|<figure data-x="(\d+)"><figcaption>([^ ]+) ', page)
    stage, checked = None, 0
    for section, x, name in figures:
        if section:
            stage = section
            continue
        figure = data["figures"][int(x)]
        m = trace[stage].matrices[name.replace("&lt;", "<")]
        assert figure["r"] == list(range(m.shape[0])) and figure["c"] == list(range(m.shape[1]))
        assert figure["p"] == f"walkthrough explain --stage {stage} --matrix {name}"
        for i, row in enumerate(figure["x"]):
            for j, ids in enumerate(row):
                lines = [short_words(printable(line)) for line in explain(trace, stage, name, f"{i},{j}")]
                assert [data["lines"][k] for k in ids] == lines
                checked += 1
    every = sum(m.values.size for s in trace for m in s.matrices.values())
    assert checked == every == 1651
    # A line many cells share is stored once: a softmax row's exps, a weight's origin.
    referenced = sum(len(ids) for f in data["figures"] for row in f["x"] for ids in row)
    assert len(data["lines"]) < 0.7 * referenced
    assert data["rerun"] == ""  # the article's example: the command needs no option


def test_clicking_a_cell_shows_what_explain_prints(runner: CliRunner, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    _export(runner, page, "--backward")
    cells = [
        ("decoder.0.masked-attention", "A1", 1, 0),  # a softmax
        ("decoder.0.masked-attention", "S1+M", 0, 2),  # −∞ by the mask
        ("encoder.0.self-attention", "S2", 2, 1),  # a scaled dot product
        ("encoder.0.self-attention", "W_Q1", 3, 1),  # a weight: where it was drawn from
        ("decoder.0.cross-attention", "concat", 2, 3),  # a copy of head 2's O
        ("encoder.positional-encoding", "PE", 2, 1),  # a sinusoid
        ("decoder.0.add-norm-2", "output", 1, 2),  # a LayerNorm
        ("output.probabilities", "probabilities", 3, 4),
        ("decoder.0.masked-attention", "dL/dA1", 2, 1),  # a gradient, by the chain rule
        ("output.logits", "dL/dX", 1, 3),
    ]
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": page.as_uri()})

        def js(script: str, *args: object) -> object:
            return driver("POST", "/execute/sync", {"script": script, "args": list(args)})

        assert js(_PANEL) is None  # nothing shown until a cell is chosen
        shown = []
        for cell in cells:
            element = js(_CELL, *cell)
            driver("POST", f"/element/{element[ELEMENT]}/click", {})
            shown.append(js(_PANEL))
        # The keyboard: from A1[1, 0], → then ↓ reach A1[1, 1] and A1[2, 1].
        driver("POST", f"/element/{js(_CELL, *cells[0])[ELEMENT]}/click", {})
        keys = []
        for key in ("\ue014", "\ue015"):  # WebDriver's ArrowRight, ArrowDown
            press = [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
            driver("POST", "/actions", {"actions": [{"type": "key", "id": "keys", "actions": press}]})
            keys.append(js(_PANEL))
        # One Tab stop per matrix (a roving tabindex), not one per cell.
        stops = js(
            "return [...document.querySelectorAll('figure[data-x] table')]"
            ".map(t => t.querySelectorAll('td[tabindex=\"0\"]').length)"
        )
        logs = driver("POST", "/se/log", {"type": "browser"})
    finally:
        driver.close()
    for (stage, name, i, j), panel in zip(cells, shown, strict=True):
        args = ["--stage", stage, "--matrix", name, "--cell", f"{i},{j}"]
        assert " ".join(panel["text"].split()) == _said(runner, *args), (stage, name)
        assert panel["command"] == f"walkthrough explain {shlex.join(args)}"
        assert panel["section"] == stage and panel["beside"] == name  # beside its own matrix
    for (i, j), panel in zip(((1, 1), (2, 1)), keys, strict=True):
        args = ["--stage", "decoder.0.masked-attention", "--matrix", "A1", "--cell", f"{i},{j}"]
        assert " ".join(panel["text"].split()) == _said(runner, *args)
        assert panel["command"].endswith(f"--cell {i},{j}")
    assert stops and set(stops) == {1}
    assert [entry for entry in logs if entry["level"] in ("SEVERE", "ERROR")] == []


def test_past_the_budget_a_cell_shows_the_command_that_explains_it(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clickable, "BUDGET", 40)  # the first matrices' cells only
    page = tmp_path / "report.html"
    sentence = ["--source", "the dog's bowl", "--target", "sleeping soundly"]  # a quote for the shell
    data = _payload(_export(runner, page, *sentence))
    carried = [f for f in data["figures"] if "x" in f]
    cells = sum(len(f["r"]) * len(f["c"]) for f in carried)
    assert carried and cells <= 40
    assert data["figures"][: len(carried)] == carried  # in reading order, then none
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": page.as_uri()})

        def js(script: str, *args: object) -> object:
            return driver("POST", "/execute/sync", {"script": script, "args": list(args)})

        element = js(_CELL, "output.probabilities", "probabilities", 2, 3)
        driver("POST", f"/element/{element[ELEMENT]}/click", {})
        panel = js(_PANEL)
    finally:
        driver.close()
    assert f"the arithmetic of its first {cells} cells" in panel["text"] and "past them" in panel["text"]
    # The command it shows runs, on the report's own sentence: the same number as the report's.
    command = shlex.split(panel["command"])
    assert command[:2] == ["walkthrough", "explain"]
    trace = run_forward(load_config(sentence=("the dog's bowl", "sleeping soundly")))
    p = trace["output.probabilities"].matrices["probabilities"]
    head = f"output.probabilities · probabilities[{p.rows[2]}, {p.cols[3]}] = probabilities[2, 3] = "
    said = _said(runner, *command[2:])
    assert said.startswith(head) and said == " ".join(
        " ".join(explain(trace, "output.probabilities", "probabilities", "2,3")).split()
    )
    assert not np.isclose(
        p.values[2, 3], run_forward(Config())["output.probabilities"]["probabilities"][2, 3]
    )


def test_a_cell_that_reads_too_many_numbers_is_left_to_the_command_line(monkeypatch) -> None:
    trace = run_forward(Config())
    vocabulary = len(trace.vocabulary)
    monkeypatch.setattr(clickable, "MAX_READS", vocabulary - 1)  # a softmax reads its whole row
    data = _payload(to_html(trace, [trace["output.probabilities"]], 2))
    (logits, probabilities) = data["figures"]
    assert "x" in logits  # a copy of an input: it reads nothing
    assert "x" not in probabilities
    assert (
        probabilities["why"]
        == f"A cell of probabilities reads {vocabulary} numbers: too many to carry in the report."
    )


def test_with_scripts_off_the_report_reads_as_before(tmp_path: Path) -> None:
    """The script only adds: without it, and without the attributes it reads and the styles of its
    panel, the report is the one written without click-to-explain; Chromium with scripts off shows
    the same text, and no cell waits for a click."""
    trace = run_forward(Config())
    page, plain = to_html(trace, list(trace), 2), to_html(trace, list(trace), 2, clickable=False)
    assert page.count("<script>") == 1
    stripped = re.sub(r"<script>.*?</script>", "", page, flags=re.S).replace(clickable.CSS, "")
    assert re.sub(r' data-x="\d+"', "", stripped) == plain
    (tmp_path / "r.html").write_text(page, encoding="utf-8")
    (tmp_path / "plain.html").write_text(plain, encoding="utf-8")
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver(
            "POST",
            "/goog/cdp/execute",
            {"cmd": "Emulation.setScriptExecutionDisabled", "params": {"value": True}},
        )

        def read(path: Path) -> list:
            driver("POST", "/url", {"url": path.as_uri()})
            script = "return [document.body.innerText, document.querySelectorAll('[tabindex]').length]"
            return driver("POST", "/execute/sync", {"script": script, "args": []})

        # (execute/sync runs even so: it is the driver's, not the page's)
        off, plain_text = read(tmp_path / "r.html"), read(tmp_path / "plain.html")
    finally:
        driver.close()
    assert off == plain_text and off[1] == 0 and "0.42" in off[0]


def test_worksheets_and_reports_without_weights_carry_no_arithmetic(
    runner: CliRunner, tmp_path: Path
) -> None:
    sheet = _export(runner, tmp_path / "sheet.html", "--exercise", "3")
    assert "<script" not in sheet and "data-x" not in sheet  # the arithmetic would give answers away
    data = _payload(_export(runner, tmp_path / "n.html", "--no-weights"))
    assert data["lines"] == [] and all("x" not in f and "weights out" in f["why"] for f in data["figures"])


def test_a_summarised_matrix_s_cells_past_its_gap_are_the_right_ones(
    runner: CliRunner, gpt2, tmp_path: Path
) -> None:
    """A checkpoint's E is summarised around a "⋮" row and a "…" column: its last shown cell is
    its last row's last column, and the command shown carries the report's --model and --prompt."""
    from transformer_walkthrough.checkpoints.run import walk_prompt

    model, prompt = str(gpt2[0]["saved"]), "The cat is"
    page = tmp_path / "gpt.html"
    _export(runner, page, "--model", model, "--prompt", prompt)
    E = walk_prompt(model, prompt).trace["decoder.embedding"].matrices["E"]
    last = """
const [id, name] = arguments;
const figure = [...document.getElementById(id).querySelectorAll('figure')]
    .find(f => f.querySelector('figcaption').firstChild.textContent.trim() === name);
const rows = figure.querySelectorAll('tbody tr');
return [rows.length, [...rows].map(r => r.querySelector('th').textContent).includes('⋮'),
        [...rows[rows.length - 1].querySelectorAll('td')].pop()];
"""
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": page.as_uri()})

        def js(script: str, *args: object) -> object:
            return driver("POST", "/execute/sync", {"script": script, "args": list(args)})

        shown_rows, gap, cell = js(last, "decoder.embedding", "E")
        driver("POST", f"/element/{cell[ELEMENT]}/click", {})
        panel = js(_PANEL)
    finally:
        driver.close()
    assert gap and shown_rows < E.shape[0]  # summarised: the cell clicked is past the "⋮"
    i, j = E.shape[0] - 1, E.shape[1] - 1
    command = shlex.split(panel["command"])
    assert command == [
        "walkthrough", "explain", "--stage", "decoder.embedding", "--matrix", "E", "--cell", f"{i},{j}",
        "--model", model, "--prompt", prompt,
    ]  # fmt: skip
    said = _said(runner, *command[2:])
    assert said.startswith(f"decoder.embedding · E[{E.rows[i]}, {E.cols[j]}] = E[{i}, {j}] = ")
    assert " ".join(panel["text"].split()) == said
