"""The walkthrough as a document: Markdown, a standalone LaTeX file, a self-contained HTML report.

Each reads the same trace as the terminal and writes every stage's title, explanation, formula and
matrices (with their row and column labels), then the prediction. Everything a trace holds is
text from a config — tokens such as <start> included — so every piece is escaped for its format.
"""

from __future__ import annotations

import html
import math
import re

import numpy as np

from .palette import diverging
from .trace import Prediction, Stage, Trace


def _number(v: float, precision: int) -> str:
    """A number for a document: one minus sign, −, for −0.25 as for −∞; never "−0.00"."""
    if math.isinf(v):
        return "−∞" if v < 0 else "∞"
    text = f"{v:.{precision}f}"
    if text.startswith("-"):
        text = "−" + text[1:] if text.strip("-0.") else text[1:]
    return text


def _heading(trace: Trace) -> tuple[str, str]:
    c = trace.config
    m = c.model
    title = f"transformer-walkthrough: {c.sentence}"
    facts = (
        f"encoder input: {' '.join(trace.source_tokens)} · decoder input: {' '.join(trace.target_tokens)} · "
        f"seed {c.seed} · d_model {m.d_model}, {m.num_heads} heads (d_k {m.d_k}), d_ff {m.d_ff}, "
        f"{m.num_encoder_layers} + {m.num_decoder_layers} layers, {m.output_head} output head · "
        f"weights: {trace.weights_origin}"
    )
    return title, facts


def _mark(p: Prediction) -> str:
    """✓ or ✗ for a prediction with a right answer, in plain text: not colour alone."""
    return "" if p.expected is None else ("✓" if p.word == p.expected else "✗")


# ---------------------------------------------------------------------------------------------
# Markdown: tables readable on a code-hosting site.
# ---------------------------------------------------------------------------------------------


def _md_label(label: str) -> str:
    """A token or dimension in backticks, so that <start> shows as itself, not as an HTML tag."""
    return "`" + label.replace("`", "'").replace("|", "\\|") + "`"


def _md_text(text: str) -> str:
    """Prose for Markdown: < > & as entities, so that <start> is not read as an HTML tag."""
    return html.escape(text, quote=False)


def _md_anchor(stage: Stage) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^\w\- ]", "", f"{stage.id} {stage.title}".lower()).replace(" ", "-")


def to_markdown(trace: Trace, stages: list[Stage], precision: int) -> str:
    title, facts = _heading(trace)
    out = [f"# {_md_text(title)}", "", _md_text(facts), "", "## Stages", ""]
    out += [f"- [{s.id} — {s.title}](#{_md_anchor(s)})" for s in stages]
    for stage in stages:
        out += [
            "",
            f"## {stage.id} {stage.title}",
            "",
            stage.explanation,
            "",
            "```text",
            stage.formula,
            "```",
        ]
        for name, m in stage.matrices.items():
            out += ["", f"**{name}** ({m.shape[0]}×{m.shape[1]})", ""]
            out.append("| " + " | ".join([f"**{name}**", *map(_md_label, m.cols)]) + " |")
            out.append("|" + "---|" + "---:|" * len(m.cols))
            for label, row in zip(m.rows, m.values.tolist(), strict=True):
                out.append(
                    "| " + " | ".join([_md_label(label), *(_number(v, precision) for v in row)]) + " |"
                )
    if trace.prediction:
        out += [
            "",
            "## Prediction",
            "",
            "| after | predicted | p | expected | | top 3 |",
            "|---|---|---:|---|---|---|",
        ]
        for p in trace.prediction:
            top = ", ".join(f"{_md_label(w)} {q:.{max(precision, 2)}f}" for w, q in p.top)
            expected = _md_label(p.expected) if p.expected else "—"
            out.append(
                f"| {_md_label(p.after)} | **{_md_label(p.word)}** | {p.probability:.{max(precision, 2)}f} "
                f"| {expected} | {_mark(p)} | {top} |"
            )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# LaTeX: a standalone article; each matrix a labelled bmatrix, each formula an align*.
# ---------------------------------------------------------------------------------------------

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "−": "-", "∞": r"$\infty$", "√": r"$\surd$", "ᵀ": r"$^{T}$", "⊙": r"$\odot$", "·": r"$\cdot$", "…": r"\ldots{}",
    "→": r"$\to$", "Σ": r"$\Sigma$", "×": r"$\times$", "≤": r"$\le$", "—": "---", "–": "--",
}  # fmt: skip


def tex(text: str) -> str:
    """Plain text as LaTeX source: specials escaped, the few symbols the walkthrough uses as math."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def tex_formula(stage: Stage, trace: Trace) -> list[str]:
    """The stage's formula as align* lines, as its kind writes it under the trace's config."""
    from .kinds import KINDS

    return KINDS[stage.kind].latex(trace.config.model)


def _tex_mark(p: Prediction) -> str:
    return {"✓": r"$\checkmark$", "✗": r"$\times$", "": ""}[_mark(p)]


def _tex_name(name: str) -> str:
    """S1+M -> S_{1}+M, W_Q1 -> W^{Q}_{1}, concat -> \\mathrm{concat}."""
    if match := re.fullmatch(r"([WB]|b)_([QKV])(\d+)", name):
        return f"{match[1]}^{{{match[2]}}}_{{{match[3]}}}"
    if match := re.fullmatch(r"([QKVSAO])(\d+)(\+M)?", name):
        return f"{match[1]}_{{{match[2]}}}{match[3] or ''}"
    if name in ("W_O", "b_O"):
        return f"{name[0]}^{{O}}"
    if name in ("W_1", "W_2", "b_1", "b_2"):
        return name
    if name in ("gamma", "beta"):
        return f"\\{name}"
    if len(name) == 1 or name == "PE":
        return name
    return rf"\mathrm{{{name}}}"


def to_latex(trace: Trace, stages: list[Stage], precision: int) -> str:
    title, facts = _heading(trace)
    widest = max((m.shape[1] for s in stages for m in s.matrices.values()), default=1)
    out = [
        r"\documentclass[10pt]{article}",
        r"\usepackage{amsmath, amssymb}",
        r"\usepackage[T1]{fontenc}",
        rf"\setcounter{{MaxMatrixCols}}{{{max(widest, 10)}}}",
        r"\allowdisplaybreaks",
        rf"\title{{{tex(title)}}}",
        r"\date{}",
        r"\begin{document}",
        r"\maketitle",
        tex(facts) + r"\par",
    ]
    for stage in stages:
        out += [
            "",
            rf"\section*{{{tex(stage.id)}: {tex(stage.title)}}}",
            rf"\label{{{stage.id}}}",
            tex(stage.explanation),
        ]
        out += [r"\begin{align*}", " \\\\\n".join(tex_formula(stage, trace)), r"\end{align*}"]
        for name, m in stage.matrices.items():
            rows = ", ".join(tex(r) for r in m.rows)
            cols = ", ".join(tex(c) for c in m.cols)
            body = " \\\\\n".join(
                " & ".join(
                    _number(v, precision).replace("∞", r"\infty").replace("−", "-") for v in row
                )
                for row in m.values.tolist()
            )
            out += [
                r"\begin{equation*}",
                rf"\underset{{{m.shape[0]}\times{m.shape[1]}}}{{{_tex_name(name)}}} = \begin{{bmatrix}}",
                body,
                r"\end{bmatrix}",
                rf"\label{{{stage.id}:{name}}}",
                r"\end{equation*}",
                rf"{{\small rows: {rows}; columns: {cols}}}\par",
            ]
    if trace.prediction:
        out += [
            "",
            r"\section*{Prediction}",
            r"\begin{tabular}{lllrll}",
            r"after & predicted & p & expected & & top 3 \\ \hline",
        ]
        for p in trace.prediction:
            top = ", ".join(f"{tex(w)} {q:.2f}" for w, q in p.top)
            out.append(
                rf"{tex(p.after)} & \textbf{{{tex(p.word)}}} & {p.probability:.2f} & {tex(p.expected or '---')} & {_tex_mark(p)} & {top} \\"
            )
        out.append(r"\end{tabular}")
    out.append(r"\end{document}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# HTML: one self-contained file, no network; matrices as heatmaps.
# ---------------------------------------------------------------------------------------------

_CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #d8dce4; --accent: #2f5fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: #fbfbfd; }
header { padding: 1.2rem 2rem; background: #fff; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 .3rem; font-size: 1.4rem; }
header p { margin: 0; color: var(--muted); }
.layout { display: flex; align-items: flex-start; }
nav { position: sticky; top: 0; width: 19rem; max-height: 100vh; overflow: auto; padding: 1rem;
      border-right: 1px solid var(--line); background: #fff; flex: none; }
nav ol { margin: 0; padding-left: 1.4rem; font-size: .85rem; }
nav a { color: var(--accent); text-decoration: none; }
main { padding: 1rem 2rem 4rem; min-width: 0; }
section { margin-bottom: 2.5rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .3rem; }
h2 code { color: var(--muted); font-weight: normal; font-size: .9rem; margin-left: .5rem; }
pre.formula { background: #fff7e0; border-left: 3px solid #e0b400; padding: .5rem .8rem; overflow-x: auto; }
.matrices { display: flex; flex-wrap: wrap; gap: 1.2rem 1.8rem; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-weight: 600; margin-bottom: .2rem; }
figcaption span { color: var(--muted); font-weight: normal; }
table.m { border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; }
table.m th { color: var(--accent); font-weight: 600; padding: 2px 6px; text-align: right; }
table.m th.row { text-align: left; }
table.m td { padding: 2px 6px; text-align: right; border: 1px solid #fff; }
table.m td.ninf { background: #3a3f4b; color: #fff; }
table.pred { border-collapse: collapse; }
table.pred th, table.pred td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; }
tr.right td.word { color: #0b7a32; font-weight: 700; }
.best { background: #e8f5ec; }
"""


def _cell_colour(v: float, scale: float) -> str:
    return "rgb({},{},{})".format(*diverging(v, scale))


def _html_matrix(
    name: str, values: np.ndarray, rows: tuple[str, ...], cols: tuple[str, ...], precision: int
) -> str:
    e = html.escape
    finite = values[np.isfinite(values)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = []
    for label, row in zip(rows, values.tolist(), strict=True):
        cells = []
        for v in row:
            if math.isinf(v):
                cells.append(f'<td class="ninf" title="masked">{_number(v, precision)}</td>')
            else:
                cells.append(f'<td style="background:{_cell_colour(v, scale)}">{_number(v, precision)}</td>')
        body.append(f'<tr><th class="row">{e(label)}</th>{"".join(cells)}</tr>')
    shape = f"{values.shape[0]}×{values.shape[1]}"
    return (
        f"<figure><figcaption>{e(name)} <span>({shape})</span></figcaption>"
        f'<table class="m"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></figure>'
    )


def to_html(trace: Trace, stages: list[Stage], precision: int) -> str:
    e = html.escape
    title, facts = _heading(trace)
    nav = "".join(f'<li><a href="#{e(s.id)}">{e(s.title)}</a></li>' for s in stages)
    sections = []
    for stage in stages:
        matrices = "".join(
            _html_matrix(n, m.values, m.rows, m.cols, precision) for n, m in stage.matrices.items()
        )
        sections.append(
            f'<section id="{e(stage.id)}"><h2>{e(stage.title)}<code>{e(stage.id)}</code></h2>'
            f'<p>{e(stage.explanation)}</p><pre class="formula">{e(stage.formula)}</pre>'
            f'<div class="matrices">{matrices}</div></section>'
        )
    if trace.prediction:
        rows = []
        for p in trace.prediction:
            right = " right" if p.expected is not None and p.word == p.expected else ""
            top = ", ".join(f"{e(w)} {q:.2f}" for w, q in p.top)
            rows.append(
                f'<tr class="best{right}"><td>{e(p.after)}</td><td class="word">{e(p.word)}</td>'
                f"<td>{p.probability:.3f}</td><td>{e(p.expected or '—')}</td><td>{_mark(p)}</td><td>{top}</td></tr>"
            )
        sections.append(
            '<section id="prediction"><h2>Prediction</h2><p>The most likely next word after each decoder position.</p>'
            '<table class="pred"><thead><tr><th>after</th><th>predicted</th><th>p</th><th>expected</th><th></th>'
            f"<th>top 3</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
        )
        nav += '<li><a href="#prediction">Prediction</a></li>'
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
        f"<style>{_CSS}</style></head><body><header><h1>{e(title)}</h1><p>{e(facts)}</p></header>"
        f'<div class="layout"><nav><strong>Stages</strong><ol>{nav}</ol></nav><main>{"".join(sections)}</main></div>'
        "</body></html>\n"
    )


WRITERS = {".md": to_markdown, ".tex": to_latex, ".html": to_html}
