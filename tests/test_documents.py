"""Markdown, LaTeX and the HTML report: structure, escaping, and the report in a real browser."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, ModelConfig
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.latex import to_latex
from transformer_walkthrough.views.documents.markdown import to_markdown
from transformer_walkthrough.views.documents.report import to_html
from transformer_walkthrough.views.documents.text import tex

IN_CI = bool(os.environ.get("CI"))


def need(program: str) -> str:
    """The program's path; CI installs it (.ci/run), so there a missing one fails instead of skipping."""
    path = shutil.which(program)
    if path is None:
        if IN_CI:
            pytest.fail(f"{program} is not installed; .ci/run installs it")
        pytest.skip(f"{program} is not installed (apt-get install it, as .ci/run does)")
    return path


def test_markdown_tables(trace: Trace) -> None:
    md = to_markdown(trace, list(trace), 2)
    assert md.count("\n## ") == len(trace) + 3  # the stages, the contents, the prediction, the lens
    for stage in trace:
        assert f"## {stage.id} {stage.title}" in md
    # the mask: header, alignment row, and -inf as −∞ in the masked cells
    m = trace["decoder.0.masked-attention"].matrices["M"]
    start = md.index("**M** (4×4)")
    lines = md[start:].splitlines()[2:8]
    assert lines[0] == "| **M** | `<start>` | `sleeping` | `comfortably` | `<end>` |"
    assert lines[1] == "|---|---:|---:|---:|---:|"
    assert lines[2] == "| `<start>` | 0.00 | −∞ | −∞ | −∞ |"
    assert len(lines[2:6]) == m.shape[0]
    # tokens in backticks (`<start>`, `pos 0 · <start>`) or as &lt;start&gt;: no stray tags
    assert "<start>" not in re.sub(r"`[^`]*`", "", md)
    assert "decoder input: &lt;start&gt; sleeping comfortably &lt;end&gt;" in md


def test_latex_writes_large_numbers_as_powers_of_ten() -> None:
    from transformer_walkthrough.views.documents.latex import tex_number

    assert [tex_number(v, 2) for v in (8.3357e199, -2.5e6, -np.inf, np.nan, -0.25, -0.001)] == [
        r"8.34\times10^{199}", r"-2.50\times10^{6}", r"-\infty", r"\mathrm{nan}", "-0.25", "0.00",
    ]  # fmt: skip


def test_latex_structure(trace: Trace) -> None:
    doc = to_latex(trace, list(trace), 2)
    assert doc.startswith("\\documentclass") and doc.rstrip().endswith("\\end{document}")
    assert doc.count("\\section*{") == len(trace) + 2  # the stages, the prediction, the logit lens
    assert doc.count("\\labelled{") == sum(len(s.matrices) for s in trace)
    assert doc.count("\\begin{align*}") == len(trace)
    assert "\\underset{4\\times4}{S_{1}+M}" in doc and "-\\infty" in doc
    assert "\\textless{}start\\textgreater{}" in doc and "<start>" not in doc
    rows = doc[doc.index("\\section*{Prediction}") : doc.index("\\end{tabularx}")].splitlines()[3:]
    assert rows[0].startswith("\\textless{}start\\textgreater{} & \\textbf{") and len(rows) == 4
    flatten = run_forward(Config(model=ModelConfig(output_head="flatten")))
    assert "the article's leak" in to_latex(flatten, [flatten["output.logits"]], 2)
    assert tex("50% of {x} & $y_1 #2") == "50\\% of \\{x\\} \\& \\$y\\_1 \\#2"


def compile_latex(source: str, folder: Path) -> tuple[str, Path]:
    """pdflatex's log and the PDF of a .tex source (the test fails if it does not compile)."""
    pdflatex = need("pdflatex")
    (folder / "walkthrough.tex").write_text(source, encoding="utf-8")
    result = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "walkthrough.tex"],
        cwd=folder, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:]
    return (folder / "walkthrough.log").read_text(encoding="latin-1"), folder / "walkthrough.pdf"


def overfull(log: str) -> list[str]:
    """The "Overfull \\hbox (12.3pt too wide)" lines of a log wider than 1 pt."""
    return [
        line
        for line in log.splitlines()
        if (m := re.match(r"Overfull \\hbox \(([\d.]+)pt too wide", line)) and float(m[1]) > 1
    ]


CONVENTIONS = ["article", "article-flatten", "pre-norm", "gpt-style", "marian-style"]


@pytest.mark.parametrize("name", CONVENTIONS)
def test_latex_compiles_to_a_textbook_page(name: str, tmp_path: Path) -> None:
    """Every convention compiles, with and without gradients; nothing sticks out into the margin;
    every font is an outline font (no Type 3 bitmaps); the pages render and are not too many."""
    from transformer_walkthrough.config import load_config
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights

    config = load_config(Path(__file__).parents[1] / "configs" / f"{name}.yaml")
    t = run_forward(config)
    grads = backward(t, init_weights(config)).stages if name in ("article", "gpt-style") else None
    log, pdf = compile_latex(to_latex(t, list(t), 2, grads=grads), tmp_path)
    assert overfull(log) == []
    fonts = subprocess.run([need("pdffonts"), str(pdf)], capture_output=True, text=True, check=True).stdout
    types = {" ".join(line.split()[1:3]) for line in fonts.splitlines()[2:]}  # name, "Type 1", …
    assert types == {"Type 1"}, fonts
    subprocess.run([need("pdftoppm"), "-r", "30", "-png", str(pdf), str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.png"))
    # A stage takes under a page (two with its gradients), and a third of one at least.
    assert len(t) / 3 <= len(pages) <= (2 if grads else 1) * len(t) + 2, len(pages)
    for page in pages:
        width, height, pixels = png_pixels(page.read_bytes())
        assert height > width and len(set(pixels)) > 20  # portrait, and not blank


def test_overfull_lines_are_found() -> None:
    log = (
        "Overfull \\hbox (0.6pt too wide) in paragraph\n"
        "Overfull \\hbox (12.25pt too wide) detected at line 3\n"
    )
    assert overfull(log) == ["Overfull \\hbox (12.25pt too wide) detected at line 3"]


def test_latex_of_a_wide_matrix_is_shrunk_to_the_page(tmp_path: Path) -> None:
    """d_model 48 makes a 48-column W_O: kept whole (``full``), at its size it would run off the page."""
    t = run_forward(Config(model=ModelConfig(d_model=48, num_heads=2, d_ff=64)))
    log, _ = compile_latex(to_latex(t, [t["decoder.0.feed-forward"]], 2, full=True), tmp_path)
    assert overfull(log) == []


def test_html_is_self_contained_and_escaped(trace: Trace) -> None:
    page = to_html(trace, list(trace), 2)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    # one script, inline, its own (click a cell for its arithmetic), and it fetches nothing either
    assert page.count("<script") == 1 and page.count("</script>") == 1 and "@import" not in page
    script = page[page.index("<script>") : page.index("</script>")]
    assert not re.search(r"fetch|XMLHttpRequest|import\(|src|href|WebSocket|eval", script)
    assert "&lt;start&gt;" in page and "<start>" not in page
    for stage in trace:
        assert f'id="{stage.id}"' in page and f'href="#{stage.id}"' in page
    masked_cells = sum(int(np.isinf(m.values).sum()) for s in trace for m in s.matrices.values())
    assert page.count('class="ninf"') == masked_cells == 18


def test_cli_exports_every_document_format(runner: CliRunner, tmp_path: Path) -> None:
    for suffix in (".html", ".md", ".tex"):
        path = tmp_path / f"walkthrough{suffix}"
        result = runner.invoke(app, ["export", str(path), "--stage", "masked-attention"])
        assert result.exit_code == 0, result.stderr
        text = path.read_text(encoding="utf-8")
        assert "decoder.0.masked-attention" in text and "encoder.0.self-attention" not in text


# ---------------------------------------------------------------------------------------------
# The report in headless Chromium, driven through chromedriver's WebDriver HTTP API.
# ---------------------------------------------------------------------------------------------


class WebDriver:
    def __init__(self, chromedriver: str, chromium: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.process = subprocess.Popen(
            [chromedriver, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
        ]
        caps = {"browserName": "chrome", "goog:chromeOptions": {"binary": chromium, "args": args},
                "goog:loggingPrefs": {"browser": "ALL"}}  # fmt: skip
        self.session = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["value"]

    def __call__(self, method: str, path: str, body: dict | None = None) -> object:
        return self.call(method, f"/session/{self.session}{path}", body)

    def close(self) -> None:
        try:
            self.call("DELETE", f"/session/{self.session}")
        finally:
            self.process.terminate()
            self.process.wait(timeout=10)


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of an 8-bit PNG (enough to see it is not blank)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_report_in_a_real_browser(tmp_path: Path) -> None:
    chromium, chromedriver = need("chromium"), need("chromedriver")
    trace = run_forward(Config())
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, list(trace), 2), encoding="utf-8")
    driver = WebDriver(chromedriver, chromium)
    try:
        driver("POST", "/url", {"url": report.as_uri()})
        ids = driver(
            "POST",
            "/execute/sync",
            {"script": "return [...document.querySelectorAll('section[id]')].map(e => e.id)", "args": []},
        )
        text = driver("POST", "/execute/sync", {"script": "return document.body.innerText", "args": []})
        masked = driver(
            "POST",
            "/execute/sync",
            {"script": "return document.querySelectorAll('td.ninf').length", "args": []},
        )
        logs = driver("POST", "/se/log", {"type": "browser"})
        shot = base64.b64decode(driver("GET", "/screenshot"))
    finally:
        driver.close()
    assert ids == [s.id for s in trace] + ["prediction", "lens", "attention"]  # every stage, in order
    assert "<start> sleeping comfortably <end>" in text  # escaped tokens read as text
    assert masked == 18
    assert [entry for entry in logs if entry["level"] in ("SEVERE", "ERROR")] == []
    (Path(os.environ.get("SCREENSHOT_DIR", tmp_path)) / "report.png").write_bytes(shot)
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1280, 900) or width > 800
    assert len(set(pixels)) > 50  # a blank page compresses to a handful of byte values


# ---------------------------------------------------------------------------------------------
# --backward and --no-weights in every document; the formats listed in `export --help`.
# ---------------------------------------------------------------------------------------------


def test_export_help_lists_every_format(runner: CliRunner) -> None:
    result = runner.invoke(app, ["export", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for suffix in (".json", ".npz", ".html", ".md", ".tex"):
        assert suffix in text


def _md_tables(md: str) -> list[str]:
    """The names of the matrix tables of a Markdown document, in order."""
    return re.findall(r"^\| \*\*(.+?)\*\* \|", md, flags=re.M)


def test_documents_show_each_gradient_beside_its_matrix(runner: CliRunner, tmp_path: Path) -> None:
    stage = "decoder.0.masked-attention"
    for suffix in (".md", ".html", ".tex"):
        path = tmp_path / f"b{suffix}"
        result = runner.invoke(app, ["export", str(path), "--stage", stage, "--backward"])
        assert result.exit_code == 0, result.stderr
        text = path.read_text(encoding="utf-8")
        assert "gradient dL/d(matrix) beside it" in text
        if suffix == ".md":
            names = _md_tables(text)
        elif suffix == ".html":
            names = [html_unescape(n) for n in re.findall(r"<figcaption>(.+?) <span>", text)]
        else:
            names = re.findall(r"\\underset\{\d+\\times\d+\}\{(.+?)\} = \\labelled", text)
        trace = run_forward(Config())
        expected = []
        for name in trace[stage].matrices:
            expected.append(name)
            if name != "M":  # a constant: nothing learns it, it has no gradient
                expected.append(f"dL/d{name}")
        if suffix == ".tex":
            from transformer_walkthrough.views.documents.text import tex_symbol

            st = trace[stage]

            def symbol(n: str, st=st) -> str:
                return (
                    (
                        rf"\partial L/\partial ({tex_symbol(st, n[4:])})"
                        if "+" in n
                        else rf"\partial L/\partial {tex_symbol(st, n[4:])}"
                    )
                    if n.startswith("dL/d")
                    else tex_symbol(st, n)
                )

            expected = [symbol(n) for n in expected]
            # the gradient of a sum is in parentheses: ∂L/∂(S₁ + M), not (∂L/∂S₁) + M
            assert r"\partial L/\partial (S_{1}+M)" in names
        assert names == expected, suffix


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_gradients_in_a_document_are_the_backward_pass(tmp_path: Path) -> None:
    """The numbers under dL/dA1 are the backward pass's, with two more digits than the matrices."""
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights

    config = Config()
    trace = run_forward(config)
    grads = backward(trace, init_weights(config)).stages
    md = to_markdown(trace, [trace["decoder.0.masked-attention"]], 2, grads=grads)
    lines = md[md.index("| **dL/dA1** |") :].splitlines()
    g = grads["decoder.0.masked-attention"]["A1"]
    first = [cell.strip() for cell in lines[2].split("|")[2:-1]]
    assert first == [f"{v:.4f}".replace("-", "−") if round(v, 4) else "0.0000" for v in g[0]]


def test_documents_leave_the_weights_out(runner: CliRunner, tmp_path: Path) -> None:
    for suffix in (".md", ".html", ".tex"):
        path = tmp_path / f"n{suffix}"
        result = runner.invoke(app, ["export", str(path), "--no-weights", "--backward"])
        assert result.exit_code == 0, result.stderr
        text = path.read_text(encoding="utf-8")
        assert "the learned weights are left out" in text
        for weight in ("W_Q1", "W^{Q}_{1}", "dL/dW_O", "gamma</", "**E**"):
            assert weight not in text, (suffix, weight)
        assert ("A1" in text) or ("A_{1}" in text)


# ---------------------------------------------------------------------------------------------
# Formulas in MathML; the report printed.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CONVENTIONS)
def test_every_formula_is_typeset_in_mathml(name: str) -> None:
    """No stage of any convention falls back to the plain-text formula."""
    from transformer_walkthrough.config import load_config

    t = run_forward(load_config(Path(__file__).parents[1] / "configs" / f"{name}.yaml"))
    page = to_html(t, list(t), 2)
    assert page.count('<math display="block">') == len(t)
    assert '<pre class="formula">' not in page


def test_report_prints_well(tmp_path: Path) -> None:
    """Printed (Chromium's print media and its PDF): no navigation column, no formula clipped, no
    matrix split across pages, and a sensible number of pages."""
    chromium, chromedriver = need("chromium"), need("chromedriver")
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights

    config = Config()
    trace = run_forward(config)
    grads = backward(trace, init_weights(config)).stages
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, list(trace), 2, grads=grads), encoding="utf-8")
    driver = WebDriver(chromedriver, chromium)

    def js(script: str) -> object:
        return driver("POST", "/execute/sync", {"script": script, "args": []})

    try:
        driver("POST", "/url", {"url": report.as_uri()})
        math_heights = js(
            "return [...document.querySelectorAll('math[display=block]')]"
            ".map(m => m.getBoundingClientRect().height)"
        )
        driver(
            "POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": {"media": "print"}}
        )
        nav = js("return getComputedStyle(document.querySelector('nav')).display")
        clipped = js(
            "return [...document.querySelectorAll('.formula')]"
            ".filter(f => f.scrollWidth > f.clientWidth + 1).map(f => f.closest('section').id)"
        )
        breaks = js(
            "return [...new Set([...document.querySelectorAll('figure, .unit, .formula')]"
            ".map(f => getComputedStyle(f).breakInside))]"
        )
        pdf = base64.b64decode(driver("POST", "/print", {"background": True}))
    finally:
        driver.close()
    # a typeset formula of five lines stands taller than one line of text (the notes' symbols are
    # inline math, in the line of their words)
    assert len(math_heights) == len(trace) and min(math_heights) > 20
    assert nav == "none" and clipped == [] and breaks == ["avoid"]
    (tmp_path / "report.pdf").write_bytes(pdf)
    info = subprocess.run([need("pdfinfo"), str(tmp_path / "report.pdf")], capture_output=True, text=True)
    pages = int(re.search(r"Pages:\s+(\d+)", info.stdout)[1])
    assert len(trace) / 3 <= pages <= 3 * len(trace), pages
    text = subprocess.run(
        [need("pdftotext"), str(tmp_path / "report.pdf"), "-"], capture_output=True, text=True
    ).stdout
    assert "dL/dA1" in text and "Prediction" in text


# ---------------------------------------------------------------------------------------------
# Streamed to the file: a piece at a time, atomically, with a warning before a huge document.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".html", ".md", ".tex"])
def test_documents_are_written_a_row_at_a_time(suffix: str) -> None:
    """No piece is much more than a matrix row: memory stays bounded however large the model."""
    from transformer_walkthrough.model.backprop import backward
    from transformer_walkthrough.model.transformer import init_weights
    from transformer_walkthrough.views.documents.shown import Options
    from transformer_walkthrough.views.documents.writers import WRITERS

    config = Config(model=ModelConfig(d_model=64, num_heads=2, d_ff=256))
    trace = run_forward(config)
    options = Options(2, True, backward(trace, init_weights(config)).stages)
    pieces = [len(p) for p in WRITERS[suffix](trace, list(trace), options)]
    assert max(pieces) < 12_000 and sum(pieces) > 40 * max(pieces)


def test_a_document_that_fails_midway_leaves_nothing(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformer_walkthrough.errors import ExportError
    from transformer_walkthrough.views.documents import writers

    def failing(trace: Trace, stages: list, options: object, contents: object = None):
        yield "<!DOCTYPE html>"
        raise ExportError("the disk is full")

    monkeypatch.setitem(writers.WRITERS, ".html", failing)
    result = runner.invoke(app, ["export", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and result.stderr == "error: the disk is full\n"
    assert list(tmp_path.iterdir()) == []


def test_a_large_document_warns(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)
    numbers = export.size(list(run_forward(Config())))
    for suffix, name, size in ((".html", "HTML", 25), (".md", "Markdown", 8), (".tex", "LaTeX", 9)):
        result = runner.invoke(app, ["export", str(tmp_path / f"r{suffix}")])
        assert result.exit_code == 0
        assert result.stderr.splitlines()[0] == (
            f"warning: {numbers:,} numbers make about {numbers * size / 1e6:,.0f} MB of {name}; "
            f"--no-weights leaves the weights out; as .npz, {numbers * 8 / 1e6:,.0f} MB"
        )


def test_a_formula_bug_is_not_hidden_by_the_html_fallback(runner: CliRunner, tmp_path: Path, monkeypatch):
    """No formula falls back to plain text: one the views cannot typeset is a bug, and the report
    must not quietly degrade around it."""
    from transformer_walkthrough.views.documents import report

    def broken(formula: object) -> str:
        raise KeyError("a term without its MathML")

    monkeypatch.setattr(report, "formula_mathml", broken)
    result = runner.invoke(app, ["export", str(tmp_path / "r.html")])
    assert isinstance(result.exception, KeyError), (result.exit_code, result.stderr[-500:])
    assert not (tmp_path / "r.html").exists()


def test_tex_symbols_come_from_each_matrix_s_kind_base_and_head() -> None:
    # Written by hand: what a reader of the .tex expects each name to look like.
    trace = run_forward(Config())
    attention, norm = trace["decoder.0.masked-attention"], trace["decoder.0.add-norm-1"]
    from transformer_walkthrough.views.documents.text import tex_symbol

    expected = {
        "W_Q1": "W^{Q}_{1}", "W_V2": "W^{V}_{2}", "Q2": "Q_{2}", "S1+M": "S_{1}+M", "A2": "A_{2}",
        "concat": r"\mathrm{concat}", "W_O": "W^{O}", "M": "M", "X": "X",
    }  # fmt: skip
    assert {name: tex_symbol(attention, name) for name in expected} == expected
    assert [tex_symbol(norm, n) for n in ("sum", "gamma", "beta")] == [r"\mathrm{sum}", r"\gamma", r"\beta"]
