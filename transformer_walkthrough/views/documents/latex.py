"""The walkthrough in LaTeX: a standalone article that reads like a textbook page.

Each matrix is set with its row and column labels on it (plain TeX's \\bordermatrix, with
brackets); small ones side by side; anything wider than the line or taller than the page is
shrunk to fit (\\fit measures it). Each stage's formula is its terms written as LaTeX
(``formulas``), its notes below it; a worksheet's answers are ``explain``'s lines with their
arithmetic typeset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np

from ...errors import ExportError
from ...model.numbers import text_widths
from ...model.trace import Stage, Trace
from ..lens import lens_latex
from ..widgets import label
from .formulas import latex_lines, latex_notes
from .routing import Routing, has_routing
from .shown import (
    Contents,
    Options,
    Shown,
    closing,
    contents_of,
    heading,
    mark,
    probability,
    row_values,
    units,
)  # fmt: skip
from .text import number, tex
from .worksheet import Worksheet, hole_label

TEX_PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[T1]{fontenc}
\usepackage{lmodern}
\usepackage{amsmath, amssymb, graphicx, tabularx}
\usepackage[a4paper, margin=2cm]{geometry}
\allowdisplaybreaks
\setlength{\parindent}{0pt}
\setlength{\parskip}{.5\baselineskip}
\makeatletter
% \bordermatrix (plain TeX: a matrix with its row and column labels), with brackets, numbers right.
\def\labelled#1{\begingroup \m@th
  \@tempdima 8.75\p@
  \setbox\z@\vbox{%
    \def\cr{\crcr\noalign{\kern2\p@\global\let\cr\endline}}%
    \ialign{$##$\hfil\kern2\p@\kern\@tempdima&\thinspace\hfil$##$
      &&\quad\hfil$##$\crcr
      \omit\strut\hfil\crcr\noalign{\kern-\baselineskip}%
      #1\crcr\omit\strut\cr}}%
  \setbox\tw@\vbox{\unvcopy\z@\global\setbox\@ne\lastbox}%
  \setbox\tw@\hbox{\unhbox\@ne\unskip\global\setbox\@ne\lastbox}%
  \setbox\tw@\hbox{$\kern\wd\@ne\kern-\@tempdima\left[\kern-\wd\@ne
    \global\setbox\@ne\vbox{\box\@ne\kern2\p@}%
    \vcenter{\kern-\ht\@ne\unvbox\z@\kern-\baselineskip}\,\right]$}%
  \null\;\vbox{\kern\ht\@ne\box\tw@}\endgroup}
\makeatother
\newsavebox\fitbox
% A row of matrices, centred; shrunk to the line's width and to the page's height if it must be.
\newcommand\fit[1]{\sbox\fitbox{#1}%
  \ifdim\wd\fitbox>\linewidth \sbox\fitbox{\resizebox{\linewidth}{!}{\usebox\fitbox}}\fi
  \ifdim\dimexpr\ht\fitbox+\dp\fitbox\relax>.8\textheight
    \sbox\fitbox{\resizebox*{!}{.8\textheight}{\usebox\fitbox}}\fi
  \par\noindent\makebox[\linewidth][c]{\usebox\fitbox}\par}
\newcommand\lab[1]{\text{\scriptsize\sffamily #1}}
"""


def tex_formula(stage: Stage) -> list[str]:
    """The stage's formula as the lines of an align*: its terms written as LaTeX."""
    return latex_lines(stage.formula)


def _tex_matrix(s: Shown) -> Iterator[str]:
    """The matrix under its name and shape, its labels on it; a row at a time."""
    m = s.matrix
    shape = rf"\underset{{{m.shape[0]}\times{m.shape[1]}}}{{{s.tex}}}"
    yield f"{shape} = \\labelled{{& " + " & ".join(
        "" if j < 0 else rf"\lab{{{tex(m.cols[j])}}}" for j in s.cols
    )
    for i in s.rows:
        if i < 0:
            yield r" \cr \vdots & " + " & ".join(r"\ddots" if j < 0 else r"\vdots" for j in s.cols)
            continue
        cells = [
            r"\cdots" if v is None
            else (rf"\boxed{{?_{{{s.holes[i, j]}}}}}" if s.holes[i, j] else r"\boxed{?}") if (i, j) in s.holes
            else tex_number(v, s.precision)
            for j, v in zip(s.cols, row_values(s, i), strict=True)
        ]  # fmt: skip
        yield rf" \cr \lab{{{tex(m.rows[i])}}} & " + " & ".join(cells)
    yield "}"


LINE = 76  # characters of numbers and labels that fit a line, roughly: \fit shrinks what does not


def tex_number(v: float, precision: int) -> str:
    """A number in math mode: 8.34e+199 as 8.34 × 10¹⁹⁹, −∞ as -\\infty, nan upright."""
    text = number(v, precision).replace("−", "-")
    if "e" in text:
        mantissa, exponent = text.split("e")
        return rf"{mantissa}\times10^{{{int(exponent)}}}"
    return text.replace("∞", r"\infty").replace("nan", r"\mathrm{nan}")


def _tex_width(s: Shown) -> int:
    m = s.matrix
    rows, cols = s.kept()
    widest = max((len(m.rows[i]) for i in rows), default=0) * 0.7  # labels are set small
    shown = m.values[np.ix_(rows, cols)] if not s.whole else m.values
    numbers = sum(max(int(w) + 2, s.precision + 4) for w in text_widths(shown, s.precision))
    return int(widest + numbers + 8 + 3 * (len(cols) < len(s.cols)))


# TeX's largest dimension is 16,383.99 pt (5.76 m): a wider box stops pdflatex ("Dimension too large").
TEX_LIMIT = 16_000
_LABEL_PT, _DIGIT_PT = 3.5, 5.1  # a character of a label (\lab: 7 pt sans; 3.3–3.4 measured) and of a number


def _tex_points(s: Shown) -> float:
    """How wide a matrix is as typeset, roughly and generously, in points: its row labels, and each
    column's label or widest number with the gaps beside it."""
    m = s.matrix
    rows, cols = s.kept()
    labels = max((len(m.rows[i]) for i in rows), default=0) * _LABEL_PT
    shown = m.values[np.ix_(rows, cols)] if not s.whole else m.values
    numbers = text_widths(shown, s.precision)
    cells = sum(
        max(len(m.cols[j]) * _LABEL_PT, w * _DIGIT_PT) + 10 for j, w in zip(cols, numbers, strict=True)
    )
    return labels + cells + 40


def _check_width(stage: Stage, line: list[list[Shown]]) -> None:
    """Refuse a line of matrices wider than TeX can hold, with why (a matrix shown whole, its columns
    labelled with long tokens), before pdflatex stops on it."""
    width = sum(_tex_points(s) for unit in line for s in unit)
    if width <= TEX_LIMIT:
        return
    widest = max((s for unit in line for s in unit), key=_tex_points)
    metres = width / 72.27 * 0.0254
    raise ExportError(
        f"{stage.id}: {widest.name} would be about {metres:.1f} m wide as typeset ({len(widest.kept()[1])} "
        f"columns labelled {label(widest.matrix.cols[0])}, …), more than pdflatex can hold (5.76 m); "
        "a worksheet shows whole the matrices it asks cells of: ask for cells of narrower ones "
        "(--cells, --kinds), or export .html or .md"
    )


def _tex_lines(group: list[list[Shown]]) -> Iterator[list[list[Shown]]]:
    """The units of a group in lines that fit the page, roughly (``\\fit`` shrinks what does not)."""
    line: list[list[Shown]] = []
    used = 0
    for unit in group:
        width = sum(_tex_width(s) for s in unit)
        if line and used + width > LINE:
            yield line
            line, used = [], 0
        line.append(unit)
        used += width
    if line:
        yield line


def iter_latex(
    trace: Trace, stages: Iterable[Stage], o: Options, contents: Contents | None = None
) -> Iterator[str]:
    """The document in LaTeX, a piece at a time; ``stages`` may be computed as they are read (a
    streamed pass: ``contents`` then says what they are beforehand)."""
    if contents is None:
        stages = list(stages)
        contents = contents_of(trace, stages)
    sections = closing(trace, contents, o)
    routing = Routing(trace, "tex", o.precision, o.full) if has_routing(trace, contents, o) else None
    title, facts = heading(trace, o)
    yield TEX_PREAMBLE
    # a checkpoint's folder may be longer than the line: it may break after any "/" of it
    folder = tex(trace.weights_source or "\0")
    line = "".join(
        rf"\texttt{{{tex(text)}}}"
        if code
        else tex(text).replace(folder, folder.replace("/", r"/\allowbreak{}"))
        for text, code in facts
    )
    yield f"\\title{{{tex(title)}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n{{\\sloppy {line}\\par}}\n"
    for stage in stages:
        yield (
            f"\n\\section*{{{tex(stage.title)}}}\n\\label{{{stage.id}}}\n"
            f"{{\\small\\ttfamily {tex(stage.id)}}}\\par\n{tex(stage.explanation)}\n"
            "\\begin{align*}\n" + " \\\\\n".join(tex_formula(stage)) + "\n\\end{align*}\n"
        )
        if said := latex_notes(stage.formula):  # the flatten head's leak, a tied table, the heads' range
            yield f"{{\\small {said}}}\\par\n"
        for group in units(stage, o, LINE):
            for line in _tex_lines(group):
                _check_width(stage, line)
                yield "\\fit{$\\displaystyle "
                for k, unit in enumerate(line):
                    for n, shown in enumerate(unit):
                        yield r" \qquad " if k and not n else r" \quad " if n else ""
                        yield from _tex_matrix(shown)
                yield "$}\n"
                for unit in line:
                    if note := unit[0].left_out():
                        # "-{}-": two hyphens, as typed, not TeX's en dash
                        yield f"{{\\small {tex(note).replace('--', '-{}-')}}}\\par\n"
        if sections is not None:
            sections.see(stage)
        if routing is not None:
            routing.see(stage)
    if contents.predicts and trace.prediction:
        yield (
            "\n\\section*{Prediction}\n"
            "\\begin{tabularx}{\\linewidth}{>{\\raggedright\\arraybackslash}X l r l l >{\\raggedright\\arraybackslash}X}\n"
            "after & predicted & p & expected & & top 3 \\\\ \\hline\n"
        )
        for p in trace.prediction:
            top = ", ".join(f"{tex(w)} {tex(probability(q, 2, o))}" for w, q in p.top)
            yield (
                f"{tex(p.after)} & \\textbf{{{tex(p.word)}}} & {tex(probability(p.probability, 2, o))} & "
                f"{tex(p.expected or '—')} & {tex(mark(p))} & {top} \\\\\n"
            )
        yield "\\end{tabularx}\n"
    if routing is not None:
        yield routing.section()
    if sections is not None and (lens := sections.lens()):
        yield lens_latex(lens, o.precision, o.full)
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield "\n\\clearpage\n"
        yield from _tex_key(trace, o.worksheet)
    yield "\\end{document}\n"


def _tex_key(trace: Trace, sheet: Worksheet) -> Iterator[str]:
    """The answer key, its arithmetic typeset: numbers and operators in math (−0.32 with a minus
    sign, not a hyphen; 1e-05 as 1\\times10^{-5}; e^(x) as a power)."""
    yield "\\section*{Answer key}\n\\begin{description}\\raggedright\n"
    for h, lines in zip(sheet.holes, sheet.answers, strict=True):
        yield f"\\item[?{h.number}] {tex(hole_label(trace, h))}\\\\\n"
        yield "{\\small " + "\\\\\n".join(tex_arithmetic(line) for line in lines) + "}\n"
    yield "\\end{description}\n"


# In explain's lines: a power of e, e^x or e^(x); a number, with its sign and exponent; an infinity.
_ARITHMETIC = re.compile(r"e\^\(([^()]*)\)|e\^(−?\d+(?:\.\d+)?)|(−?)(\d+(?:\.\d+)?(?:e[+\-−]?\d+)?|∞)|(−)")


def _tex_amount(sign: str, number: str) -> str:
    """A number of explain's as math: −1.2e-05 as -1.2\\times10^{-5}, −∞ as -\\infty."""
    if number == "∞":
        body = r"\infty"
    elif "e" in number:
        mantissa, exponent = re.split("e", number.replace("−", "-"))
        body = rf"{mantissa}\times10^{{{int(exponent)}}}"
    else:
        body = number
    return ("-" if sign else "") + body


def _tex_inner(text: str) -> str:
    """The math of an exponent's parentheses: numbers, operators, names as text."""
    out, last = [], 0
    for match in _ARITHMETIC.finditer(text):
        out.append(
            rf"\text{{{tex(text[last : match.start()])}}}"
            if text[last : match.start()].strip()
            else text[last : match.start()]
        )
        _, _, sign, number, _ = match.groups()
        out.append(_tex_amount(sign, number) if number else "-")
        last = match.end()
    rest = text[last:]
    out.append(rf"\text{{{tex(rest)}}}" if rest.strip() else rest)
    return "".join(out)


def tex_arithmetic(line: str) -> str:
    """A line of ``explain`` as LaTeX: prose as text, each number, minus sign and power as math."""
    out, last = [], 0
    for match in _ARITHMETIC.finditer(line):
        before = line[last : match.start()]
        number_like = match.group(4)
        # a digit inside a word (d0, k1, h2.k0, W_Q1, add-norm-1) is part of the word, not a number
        if number_like and not match.group(3) and (before[-1:].isalnum() or before[-1:] in "_.-@"):
            out.append(tex(before + match.group(0)))
            last = match.end()
            continue
        out.append(tex(before))
        paren, power, sign, number, _ = match.groups()
        if paren is not None:
            out.append(f"$e^{{{_tex_inner(paren)}}}$")
        elif power is not None:
            out.append(f"$e^{{{_tex_amount(power[:1] == '−', power.lstrip('−'))}}}$")
        elif number is not None:
            out.append(f"${_tex_amount(sign, number_like)}$")
        else:
            out.append("$-$")
        last = match.end()
    out.append(tex(line[last:]))
    return "".join(out)


def to_latex(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_latex(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]


def iter_key(trace: Trace, sheet: Worksheet, title: str) -> Iterator[str]:
    """A worksheet's answer key as a LaTeX article of its own, under ``title``."""
    yield TEX_PREAMBLE
    yield f"\\title{{{tex(title)}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n"
    yield from _tex_key(trace, sheet)
    yield "\\end{document}\n"
