"""Documents of real models are readable: colours on the terminal's scales, large matrices
summarised as the terminal summarises them (``--full`` keeps them whole), nothing cut by the page."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from tests.test_documents import WebDriver, compile_latex, need, overfull
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model.kinds import KINDS
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.blocks import MAX_ROWS
from transformer_walkthrough.views.documents.formulas import latex_lines
from transformer_walkthrough.views.documents.formulas import mathml as formula_mathml
from transformer_walkthrough.views.documents.latex import to_latex
from transformer_walkthrough.views.documents.markdown import to_markdown
from transformer_walkthrough.views.documents.report import to_html
from transformer_walkthrough.views.documents.shades import STEPS
from transformer_walkthrough.views.documents.text import tex
from transformer_walkthrough.views.palette import diverging, sequential

# The background of cell (i, j) of matrix ``name`` of stage ``id``, as Chromium computes it.
_BACKGROUND = """
const [id, name, i, j] = arguments;
const figure = [...document.getElementById(id).querySelectorAll('figure')]
    .find(f => f.querySelector('figcaption').firstChild.textContent.trim() === name);
return getComputedStyle(figure.querySelectorAll('tbody tr')[i].querySelectorAll('td')[j]).backgroundColor;
"""


def _rgb(rgb: tuple[int, int, int]) -> str:
    return "rgb({}, {}, {})".format(*rgb)


def test_html_shades_weights_on_the_fixed_scale_and_a_constant_not_at_all(tmp_path: Path) -> None:
    trace = run_forward(Config())
    attention = trace["decoder.0.masked-attention"]
    assert attention.matrices["A1"].values[0, 0] == 1.0  # <start> sees only itself
    probabilities = trace["output.probabilities"].matrices["probabilities"].values
    i, j = np.unravel_index(np.argmax(probabilities), probabilities.shape)
    p = float(probabilities[i, j])  # the largest of its matrix: on a scale of its own, the extreme
    assert p < 0.9
    norm = trace["decoder.0.add-norm-1"]
    assert np.all(norm.matrices["gamma"].values == 1.0)  # untrained: one value throughout
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, list(trace), 2), encoding="utf-8")
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": report.as_uri()})

        def background(*cell: object) -> str:
            return driver("POST", "/execute/sync", {"script": _BACKGROUND, "args": list(cell)})

        one = background(attention.id, "A1", 0, 0)
        most = background("output.probabilities", "probabilities", int(i), int(j))
        gamma = background(norm.id, "gamma", 0, 0)
    finally:
        driver.close()
    # The fixed scale, 0 white to 1 green, in steps of 1/STEPS: 1.00 is the deepest green, p its own.
    assert one == _rgb(sequential(1.0))
    assert most == _rgb(sequential(round(p * STEPS) / STEPS)) != one
    # gamma is a weight: a heatmap on its own scale would paint its 1.00s the deepest red.
    assert gamma != _rgb(diverging(1.0, 1.0)) and gamma == "rgba(0, 0, 0, 0)"


def test_html_legend_names_each_scale(trace: Trace) -> None:
    page = to_html(trace, list(trace), 2)
    attention = page[page.index('id="decoder.0.masked-attention"') : page.index('id="decoder.0.add-norm-1"')]
    assert "one fixed scale" in attention and "its own scale" in attention
    norm = page[page.index('id="decoder.0.add-norm-1"') : page.index('id="decoder.0.cross-attention"')]
    assert "not shaded" in norm and "fixed scale" not in norm


def _gpt2_export(runner: CliRunner, gpt2: tuple, path: Path, *more: str) -> str:
    result = runner.invoke(
        app, ["export", str(path), "--model", str(gpt2[0]["saved"]), "--prompt", "The cat is", *more]
    )
    assert result.exit_code == 0, result.output
    return path.read_text(encoding="utf-8")


def _e_matrix(source: str, start: str, end: str) -> str:
    at = source.index(start)
    return source[at : source.index(end, at)]


def test_latex_of_a_checkpoint_summarises_e_and_stays_short(runner: CliRunner, gpt2, tmp_path: Path) -> None:
    doc = _gpt2_export(runner, gpt2, tmp_path / "gpt.tex")
    trace = run_forward_of(gpt2)
    E = trace["decoder.embedding"].matrices["E"]
    rows, cols = E.shape
    assert rows > MAX_ROWS and cols > 8  # too large for a page at its size
    block = _e_matrix(doc, rf"\underset{{{rows}\times{cols}}}{{E}}", "\n")
    assert r"\vdots" in block and r"\cdots" in block
    # the ends kept, numpy-style: the first and the last row and column
    for text in (E.rows[0], E.rows[-1], E.cols[0], E.cols[-1]):
        assert rf"\lab{{{tex(text)}}}" in block
    assert "E is summarised:" in doc
    overfull_log, pdf = compile_latex(doc, tmp_path)
    assert overfull(overfull_log) == []
    info = subprocess.run([need("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(re.search(r"Pages:\s+(\d+)", info)[1])
    # Each matrix at a readable size takes room: a stage in a page and a half at most, not dozens.
    assert pages <= 1.5 * len(trace), pages
    text = subprocess.run([need("pdftotext"), str(pdf), "-"], capture_output=True, text=True).stdout
    said = " ".join(text.split())
    assert E.cols[-1] in text and "E is summarised" in said and "--full" in said


def run_forward_of(gpt2: tuple) -> Trace:
    from transformer_walkthrough.checkpoints.run import walk_prompt

    return walk_prompt(str(gpt2[0]["saved"]), "The cat is").trace


def test_full_keeps_every_row_and_column(runner: CliRunner, gpt2, tmp_path: Path) -> None:
    E = run_forward_of(gpt2)["decoder.embedding"].matrices["E"]
    for suffix in (".tex", ".md", ".html"):
        doc = _gpt2_export(runner, gpt2, tmp_path / f"full{suffix}", "--full")
        assert "is summarised" not in doc and "⋮" not in doc and r"\vdots" not in doc
    md = (tmp_path / "full.md").read_text(encoding="utf-8")
    table = md[md.index(f"**E** ({E.shape[0]}×{E.shape[1]})") :].split("\n\n")[1]
    assert len(table.splitlines()) == 2 + E.shape[0]
    assert table.splitlines()[0].count("|") == E.shape[1] + 2


def test_markdown_summary_keeps_the_terminal_s_rows(runner: CliRunner, gpt2, tmp_path: Path) -> None:
    from transformer_walkthrough.views.blocks import summary
    from transformer_walkthrough.views.widgets import View

    E = run_forward_of(gpt2)["decoder.embedding"].matrices["E"]
    md = _gpt2_export(runner, gpt2, tmp_path / "gpt.md")
    table = md[md.index(f"**E** ({E.shape[0]}×{E.shape[1]})") :].split("\n\n")[1].splitlines()
    rows, _ = summary(E, View(full=False))
    assert len(table) == 2 + len(rows) and table[2 + rows.index(-1)].startswith("| ⋮ |")
    left = E.shape[0] - (len(rows) - 1)
    assert f"{left} of its {E.shape[0]} rows" in md


def test_printed_report_cuts_no_column(tmp_path: Path) -> None:
    """d_model 48: W_O has 48 columns, wider than an A4 page at its size; summarised, its last
    column's label is on the printed page."""
    trace = run_forward(Config(model=ModelConfig(d_model=48, num_heads=2, d_ff=64)))
    stage = trace["decoder.0.feed-forward"]
    wide = next(name for name, m in stage.matrices.items() if m.shape[1] == 48)
    last = stage.matrices[wide].cols[-1]
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, [stage], 2), encoding="utf-8")
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": report.as_uri()})
        pdf = base64.b64decode(driver("POST", "/print", {"background": True}))
    finally:
        driver.close()
    (tmp_path / "report.pdf").write_bytes(pdf)
    text = subprocess.run(
        [need("pdftotext"), str(tmp_path / "report.pdf"), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"\b{last}\b", text) and f"{wide} is summarised" in " ".join(text.split())


def test_printed_prediction_heading_keeps_its_table(tmp_path: Path) -> None:
    trace = run_forward(Config())
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, list(trace), 2), encoding="utf-8")
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": report.as_uri()})
        driver(
            "POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": "print"}}
        )
        kept = driver(
            "POST",
            "/execute/sync",
            {
                "script": "return getComputedStyle(document.querySelector('#prediction')).breakInside",
                "args": [],
            },
        )
        pdf = base64.b64decode(driver("POST", "/print", {"background": True}))
    finally:
        driver.close()
    assert kept == "avoid"
    (tmp_path / "r.pdf").write_bytes(pdf)
    pages = subprocess.run(
        [need("pdftotext"), str(tmp_path / "r.pdf"), "-"], capture_output=True, text=True, check=True
    ).stdout.split("\f")
    heading = [page for page in pages if re.search(r"^Prediction$", page, re.M)]
    assert len(heading) == 1 and "predicted" in heading[0]


def test_header_shows_commands_as_code_not_backticks(trace: Trace) -> None:
    page = to_html(trace, list(trace), 2)
    header = page[page.index("<header>") : page.index("</header>")]
    assert "`" not in header and "<code>walkthrough train</code>" in header
    assert "`" not in to_latex(trace, [], 2).split(r"\maketitle")[1].split(r"\par")[0]
    assert "`walkthrough train`" in to_markdown(trace, [], 2)  # Markdown's own code span, not \`


def test_concat_formula_lists_few_heads_and_elides_many() -> None:
    def concat(heads: int) -> str:
        m = ModelConfig(d_model=8 * heads, num_heads=heads)
        formula = KINDS["masked-attention"].formula(m)
        assert "<msqrt>" in formula_mathml(formula)  # the report typesets it
        return latex_lines(formula)[-1]

    two = concat(2)
    assert "O_{1}, O_{2})" in two and r"\ldots" not in two
    three = concat(3)
    assert all(f"O_{{{k}}}" in three for k in (1, 2, 3)) and r"\ldots" not in three
    eight = concat(8)
    assert r"O_{1}, \ldots, O_{8}" in eight
