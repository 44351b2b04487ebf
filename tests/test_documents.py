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
from transformer_walkthrough.documents import tex, to_html, to_latex, to_markdown
from transformer_walkthrough.model import run_forward
from transformer_walkthrough.trace import Trace

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
    assert md.count("\n## ") == len(trace) + 2  # the stages, the contents and the prediction
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


def test_latex_structure(trace: Trace) -> None:
    doc = to_latex(trace, list(trace), 2)
    assert doc.startswith("\\documentclass") and doc.rstrip().endswith("\\end{document}")
    assert doc.count("\\section*{") == len(trace) + 1
    assert doc.count("\\labelled{") == sum(len(s.matrices) for s in trace)
    assert doc.count("\\begin{align*}") == len(trace)
    assert "\\underset{4\\times4}{S_{1}+M}" in doc and "-\\infty" in doc
    assert "\\textless{}start\\textgreater{}" in doc and "<start>" not in doc
    assert tex("50% of {x} & $y_1 #2") == "50\\% of \\{x\\} \\& \\$y\\_1 \\#2"


def test_latex_compiles(trace: Trace, tmp_path: Path) -> None:
    pdflatex = need("pdflatex")
    for config in (
        Config(),
        Config(model=ModelConfig(output_head="flatten", attention_bias=True, scale_embeddings=True)),
    ):
        t = run_forward(config)
        source = tmp_path / "walkthrough.tex"
        source.write_text(to_latex(t, list(t), 2), encoding="utf-8")
        result = subprocess.run(
            [pdflatex, "-interaction=nonstopmode", "-halt-on-error", source.name],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-2000:]
        assert (tmp_path / "walkthrough.pdf").stat().st_size > 10_000


def test_html_is_self_contained_and_escaped(trace: Trace) -> None:
    page = to_html(trace, list(trace), 2)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert "<script" not in page and "@import" not in page
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
    assert ids == [s.id for s in trace] + ["prediction"]  # every stage, rendered, in order
    assert "<start> sleeping comfortably <end>" in text  # escaped tokens read as text
    assert masked == 18
    assert [entry for entry in logs if entry["level"] in ("SEVERE", "ERROR")] == []
    (Path(os.environ.get("SCREENSHOT_DIR", tmp_path)) / "report.png").write_bytes(shot)
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1280, 900) or width > 800
    assert len(set(pixels)) > 50  # a blank page compresses to a handful of byte values
