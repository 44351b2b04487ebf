"""The documents of a mixture of experts (configs/moe-style.yaml) have an "Expert routing" section
after the prediction: for each sparse layer, each token's k experts with their weights, then each
expert's load. Every number in it is read back and checked against the trace's ``chosen`` and
``routing_weights``; in the HTML report each weight carries its arithmetic (a click shows what
``explain`` prints); the LaTeX compiles."""

from __future__ import annotations

import html
import io
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.test_clickable import ELEMENT, _payload, _said
from tests.test_documents import WebDriver, compile_latex, need, overfull
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.errors import printable, short_words
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.explain import explain

MOE_PATH = Path(__file__).resolve().parents[1] / "configs" / "moe-style.yaml"
MOE = load_config(MOE_PATH)
LAYERS = [0, 1]  # every layer of the toy is sparse


@pytest.fixture(scope="module")
def trace():
    return run_forward(MOE)


def _export(tmp_path: Path, name: str, *more: str) -> str:
    out = tmp_path / name
    result = CliRunner().invoke(app, ["export", str(out), "-c", str(MOE_PATH), *more])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def _shows(text: str, value: float, digits: int = 2) -> bool:
    """A printed number shows ``value`` to its last digit."""
    return len(text.split(".")[1]) == digits and abs(float(text) - value) <= 0.5 * 10.0**-digits + 1e-12


def _check_routing(trace, layer: int, rows: list[tuple[str, list[tuple[int, str]]]]) -> None:
    """Each token's row of a layer's table: its label, and its experts with their printed weights."""
    stage = trace[f"decoder.{layer}.experts"]
    chosen, weights = np.rint(stage["chosen"]).astype(int), stage["routing_weights"]
    assert [token for token, _ in rows] == list(stage.matrices["routing_weights"].rows)
    for i, (_, cells) in enumerate(rows):
        assert [e for e, _ in cells] == list(chosen[i])
        assert all(_shows(text, weights[i, j]) for j, (_, text) in enumerate(cells))


def _check_load(trace, layer: int, load: list[tuple[int, int, str | None]]) -> None:
    stage = trace[f"decoder.{layer}.experts"]
    chosen, weights = np.rint(stage["chosen"]).astype(int), stage["routing_weights"]
    assert [e for e, _, _ in load] == list(range(MOE.model.experts))
    for e, tokens, weight in load:
        assert tokens == int(np.sum(chosen == e))
        assert (weight is None) == (tokens == 0)
        assert weight is None or _shows(weight, float(np.sum(weights[chosen == e])))


def test_the_html_reports_routing_is_the_traces_and_each_weight_explains_itself(
    trace, tmp_path: Path
) -> None:
    page = _export(tmp_path, "report.html")
    section = page[page.index('<section id="routing">') :]
    section = section[: section.index("</section>")]
    assert '<a href="#routing">Expert routing</a>' in page
    assert page.index('id="prediction"') < page.index('id="routing"')
    data = _payload(page)
    for layer, block in zip(LAYERS, section.split("<h3>")[1:], strict=True):
        assert f"<code>decoder.{layer}.experts</code>" in block
        tbody = block[block.index("<tbody>") : block.index("</tbody>")]
        rows = [
            (
                html.unescape(label),
                [(int(e), w) for e, w in re.findall(r'<span class="e">e(\d+)</span>([\d.]+)', cells)],
            )
            for label, cells in re.findall(r'<tr><th class="row">([^<]*)</th>(.*?)</tr>', tbody)
        ]
        _check_routing(trace, layer, rows)
        load = [
            (int(e), int(n), w)
            for e, n, w in re.findall(r"<tr><td>expert (\d+)</td><td>(\d+)</td><td>([\d.]+)</td>", block)
        ]
        idle = [(int(e), 0, None) for e in re.findall(r'<tr><td>expert (\d+)</td><td class="idle"', block)]
        _check_load(trace, layer, sorted(load + idle))
        # The clickable figure: each weight's lines are explain's for routing_weights[i, j].
        x = int(re.search(r'<figure data-x="(\d+)">', block)[1])
        figure = data["figures"][x]
        assert figure["p"] == f"walkthrough explain --stage decoder.{layer}.experts --matrix routing_weights"
        for i, row in enumerate(figure["x"]):
            for j, ids in enumerate(row):
                said = explain(trace, f"decoder.{layer}.experts", "routing_weights", f"{i},{j}")
                assert [data["lines"][k] for k in ids] == [short_words(printable(line)) for line in said]


def test_clicking_a_routing_weight_shows_its_routing_arithmetic(tmp_path: Path) -> None:
    _export(tmp_path, "report.html")
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": (tmp_path / "report.html").as_uri()})

        def js(script: str, *args: object) -> object:
            return driver("POST", "/execute/sync", {"script": script, "args": list(args)})

        cell = js(
            "return document.querySelectorAll('#routing figure[data-x]')[1]"
            ".querySelectorAll('tbody tr')[3].querySelectorAll('td')[1];"
        )
        driver("POST", f"/element/{cell[ELEMENT]}/click", {})
        panel = js(
            "const p = document.querySelector('aside.explained');"
            "return {text: p.querySelector('pre').innerText, command: p.querySelector('code').textContent,"
            " section: p.closest('section').id};"
        )
    finally:
        driver.close()
    args = ["--stage", "decoder.1.experts", "--matrix", "routing_weights", "--cell", "3,1"]
    said = _said(CliRunner(), "-c", str(MOE_PATH), *args)
    assert " ".join(panel["text"].split()) == said and "top-k cut" in said
    assert panel["section"] == "routing"
    assert panel["command"] == f"walkthrough explain {shlex.join(args)} --config {MOE_PATH}"


def test_the_markdown_routing_is_the_traces(trace, tmp_path: Path) -> None:
    text = _export(tmp_path, "doc.md")
    section = text[text.index("\n## Expert routing\n") :]
    section = section[: section.index("\n## ", 1)]
    for layer, block in zip(LAYERS, section.split("\n### ")[1:], strict=True):
        assert block.startswith(f"Layer {layer} (`decoder.{layer}.experts`)")
        rows = [
            (label, [(int(e), w) for e, w in re.findall(r"e(\d+) ([\d.]+)", cells)])
            for label, cells in re.findall(r"^\| `([^`]*)` \|(.*)\|$", block, re.MULTILINE)
        ]
        _check_routing(trace, layer, rows)
        load = re.findall(r"^\| expert (\d+) \| (\d+) \| ([\d.]+|no token) \|$", block, re.MULTILINE)
        _check_load(trace, layer, [(int(e), int(n), None if w == "no token" else w) for e, n, w in load])


def test_the_latex_routing_is_the_traces_and_compiles(trace, tmp_path: Path) -> None:
    source = _export(tmp_path, "doc.tex")
    section = source[source.index("\\section*{Expert routing}") :]
    section = section[: section.index("\\section*", 1)]
    for layer, block in zip(LAYERS, section.split("\\subsection*")[1:], strict=True):
        assert block.startswith(f"{{Layer {layer}}}")
        rows = [
            (label.replace("\\textless{}", "<").replace("\\textgreater{}", ">"),
             [(int(e), w) for e, w in re.findall(r"\$e_\{(\d+)\}\$ ([\d.]+)", cells)])
            for label, cells in re.findall(r"^\\texttt\{(.*?)\}( & .*) \\\\$", block, re.MULTILINE)
        ]  # fmt: skip
        _check_routing(trace, layer, rows)
        load = re.findall(r"^expert (\d+) & (\d+) & ([\d.]+|---) \\\\$", block, re.MULTILINE)
        _check_load(trace, layer, [(int(e), int(n), None if w == "---" else w) for e, n, w in load])
    log, pdf = compile_latex(source, tmp_path)
    assert pdf.exists() and overfull(log) == []


def test_no_routing_section_without_experts_nor_in_a_selection(tmp_path: Path) -> None:
    llama = MOE_PATH.with_name("llama-style.yaml")
    result = CliRunner().invoke(app, ["export", str(tmp_path / "l.md"), "-c", str(llama)])
    assert result.exit_code == 0 and "Expert routing" not in (tmp_path / "l.md").read_text()
    one = _export(tmp_path, "one.html", "--stage", "decoder.0.experts")
    assert 'id="routing"' not in one


def test_the_chosen_experts_are_shown_as_whole_numbers(trace, tmp_path: Path) -> None:
    """``chosen`` holds expert ids: "2", not "2.00", in the terminal and in the documents; the
    routing weights keep their decimals."""
    chosen = np.rint(trace["decoder.0.experts"]["chosen"]).astype(int)
    result = CliRunner().invoke(app, ["step", "-c", str(MOE_PATH), "--stage", "experts", "--layer", "0"])
    assert result.exit_code == 0, result.output
    for i, label in enumerate(trace["decoder.0.experts"].matrices["chosen"].rows):
        line = next(
            x for x in result.stdout.splitlines() if f"{label} " in x and re.search(r"\s\d+\s+\d+$", x)
        )
        assert [int(e) for e in line.split()[-2:]] == list(chosen[i])
    text = _export(tmp_path, "doc.md")
    table = text[text.index("**chosen** (7×2)") :].split("\n\n")[1]
    rows = [line.split(" | ")[1:] for line in table.splitlines()[2:]]
    assert [[int(c.strip(" |")) for c in row] for row in rows] == chosen.tolist()
    weights = text[text.index("**routing_weights** (7×2)") :].split("\n\n")[1]
    assert re.search(r"\| \d\.\d\d \| \d\.\d\d \|", weights)


def test_an_idle_experts_matrices_of_no_rows_are_shown_in_the_terminal() -> None:
    """An expert no token chose records matrices of 0 rows: the terminal shows each as its title and
    column labels, and the step of that layer prints (it raised on the empty label column)."""
    from rich.console import Console

    from tests.test_moe_style import _unchosen
    from transformer_walkthrough.views.stages import render_trace
    from transformer_walkthrough.views.widgets import View

    config, w = _unchosen(MOE)
    trace = run_forward(config, w)
    stage = trace["decoder.0.experts"]
    idle = [e for e in range(MOE.model.experts) if not np.any(np.rint(stage["chosen"]) == e)]
    assert idle
    console = Console(width=100, no_color=True, record=True, file=io.StringIO())
    for block in render_trace(console, trace, [stage], View(), prediction=False):
        console.print(block)
    text = console.export_text()
    for e in idle:
        assert f"expert{e}.X  (0×8)" in text and f"expert{e}.output  (0×8)" in text
