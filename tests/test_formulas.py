"""Formulas as data (``model.formula``): one set of terms, three renderings, nothing parsed back.

The renderers are held against hand-written LaTeX and MathML; then every formula of every shipped
config (and of QK-norm) typesets: the HTML report has MathML for every stage and no plain-text
fallback, and the ``.tex`` export compiles in pdflatex — grouped-query attention's ⌈h / 2⌉ among
them, which reached pdflatex as a character (refused) when the LaTeX notes were parsed from the
plain formula. The tiny Llama, Mistral and Qwen2 checkpoints' ``.tex`` compile too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.formula import Formula, Num, ceil, formula, line, note, sqrt, sym
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.formulas import latex_lines, latex_notes, mathml
from transformer_walkthrough.views.documents.latex import to_latex
from transformer_walkthrough.views.documents.report import to_html

from .test_documents import compile_latex

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SHIPPED = sorted(p.stem for p in CONFIGS.glob("*.yaml"))

SCORES = formula(
    line(sym("S", "h"), "=", sym("rot_Q", "h"), "·", sym("K", "g", "T"), "/", sqrt(sym("d_k"))),
    note("query head h reads key/value head ", sym("g"), " = ", ceil("h", "/", Num("2"))),
)


def test_plain_text_is_what_the_terminal_shows() -> None:
    assert str(SCORES) == "S_h = rot_Q_h·K_gᵀ / √d_k\n    query head h reads key/value head g = ⌈h / 2⌉"
    assert str(formula(line(sym("Q", "h"), "=", "X", "·", sym("W_Q", "h")))) == "Q_h = X·W_Qh"


def test_latex_writes_each_term_in_latex() -> None:
    assert latex_lines(SCORES) == [r"S_{h} &= \tilde{Q}_{h}\,K_{g}^{\top} / \sqrt{d_{k}}"]
    # the ceiling reaches pdflatex as \lceil, not as the plain text's character
    assert latex_notes(SCORES) == r"query head h reads key/value head $g$ = $\lceil h / 2 \rceil$"


def test_mathml_writes_each_term_as_an_element() -> None:
    assert mathml(SCORES) == (
        '<math display="block"><mtable><mtr><mtd><msub><mi>S</mi><mi>h</mi></msub></mtd><mtd><mo>=</mo>'
        '<msub><mover accent="true"><mi>Q</mi><mo>~</mo></mover><mi>h</mi></msub><mo>·</mo>'
        "<msubsup><mi>K</mi><mi>g</mi><mi>⊤</mi></msubsup><mo>/</mo><msqrt><msub><mi>d</mi><mi>k</mi></msub>"
        "</msqrt></mtd></mtr></mtable></math>"
    )


def _traces():
    for name in SHIPPED:
        yield name, load_config(CONFIGS / f"{name}.yaml")
    llama = load_config(CONFIGS / "llama-style.yaml")
    yield "qk-norm", dataclasses.replace(llama, model=dataclasses.replace(llama.model, qk_norm="head"))


@pytest.mark.parametrize(("name", "config"), list(_traces()), ids=[n for n, _ in _traces()])
def test_every_stage_typesets_in_mathml_and_compiles_in_latex(name: str, config, tmp_path: Path) -> None:
    trace = run_forward(config)
    page = to_html(trace, list(trace), 2)
    assert '<pre class="formula">' not in page  # no stage fell back to its plain text
    assert page.count('<div class="formula"') == len(trace)
    attention = [s for s in trace if s.kind.endswith("attention")]
    assert all(isinstance(s.formula, Formula) for s in attention)
    compile_latex(to_latex(trace, list(trace), 2), tmp_path)


def test_the_grouped_query_tex_export_is_written_and_compiles(runner, tmp_path: Path) -> None:
    out = tmp_path / "llama.tex"
    result = runner.invoke(app, ["export", str(out), "-c", str(CONFIGS / "llama-style.yaml")])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert r"\lceil h / 2 \rceil" in text and "⌈" not in text
    compile_latex(text, tmp_path)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_a_grouped_query_checkpoint_exports_tex_that_compiles(
    runner, llama_family, family, tmp_path: Path
) -> None:
    out = tmp_path / f"{family}.tex"
    args = [
        "export",
        str(out),
        "--model",
        str(llama_family[family]),
        "--prompt",
        "The cat is",
        "--layer",
        "0",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    compile_latex(out.read_text(encoding="utf-8"), tmp_path)
