"""A formula's terms (``model.formula``) written as LaTeX and as MathML: the documents' two typesettings.

The plain text is the formula's own ``str()``; here the same terms become an ``align*`` for pdflatex
and a ``<math>`` block the browser typesets itself. Each term has one rule per language, so a symbol
reaches pdflatex as LaTeX (⌈h / 2⌉ as ``\\lceil h / 2 \\rceil``), never as the plain text's character.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from ...model.formula import (
    Call,
    Ceil,
    Formula,
    Frac,
    Index,
    Line,
    Neg,
    Note,
    Num,
    Op,
    Pad,
    Power,
    Root,
    Sym,
    Term,
    Word,
)
from .text import tex

_GREEK = frozenset({"gamma", "beta", "mu", "sigma", "epsilon", "theta", "alpha", "lambda", "pi"})

# ---------------------------------------------------------------------------------------------
# LaTeX
# ---------------------------------------------------------------------------------------------

_TEX_OPS = {"·": r"\,", "⊙": r" \odot ", "…": r"\ldots", "−": " - ", "-": " - ", "×": r" \times ", ",  ": r", \quad ",
            ",": ", ", "=": " = ", "+": " + ", "/": " / ", "    ": r" \quad "}  # fmt: skip


def tex_name(name: str) -> str:
    """A symbol's name as LaTeX: W_Q as W^{Q}, rot_Q as \\tilde{Q}, cap_S as \\bar{S}, gamma as \\gamma, d_k as d_k, a
    longer word upright (\\mathrm{concat})."""
    stem, _, rest = name.partition("_")
    if stem in ("W", "b") and rest:
        return f"{stem}^{{{rest}}}"
    if stem == "rot" and rest:
        return rf"\tilde{{{tex_name(rest)}}}"
    if stem == "norm" and rest:
        return rf"\hat{{{tex_name(rest)}}}"
    if stem == "cap" and rest:  # soft-capped: cap_S as \bar{S}
        return rf"\bar{{{tex_name(rest)}}}"
    if stem in _GREEK:
        return rf"\{stem}" + (f"^{{{rest}}}" if rest else "")
    if stem == "eps":
        return r"\epsilon"
    if name in ("cos", "sin", "exp", "log", "tanh", "max"):
        return rf"\{name}"
    symbol = stem if len(stem) == 1 else rf"\mathrm{{{stem}}}"
    return symbol + (rf"_{{\mathrm{{{rest}}}}}" if len(rest) > 1 else f"_{{{rest}}}" if rest else "")


# Functions LaTeX knows by name (\\max, \\tanh), and the Greek ones the formulas apply (σ(x), Φ(x)).
_TEX_FUNCTIONS = {"max": r"\max", "tanh": r"\tanh", "exp": r"\exp", "sin": r"\sin", "cos": r"\cos",
                  "log": r"\log", "σ": r"\sigma", "Φ": r"\Phi"}  # fmt: skip


def _tex_sub(sub: str) -> str:
    return sub if len(sub) == 1 else rf"\mathrm{{{tex(sub)}}}" if not sub.isdigit() else sub


def tex_term(t: Term) -> str:
    if isinstance(t, Sym):
        symbol = t.tex or tex_name(t.name)
        if t.sub:
            # W^{Q} of head h: W^{Q}_{h}
            symbol += f"_{{{_tex_sub(t.sub)}}}"
        if t.sup:
            symbol += "^{\\top}" if t.sup == "T" else f"^{{{t.sup}}}"
        return symbol
    if isinstance(t, Op):
        return r" \quad " if t.text.isspace() else _TEX_OPS.get(t.text, t.text)
    if isinstance(t, Num):
        return t.text
    if isinstance(t, Word):
        return rf"\text{{{tex(t.text)}}}"
    if isinstance(t, Call):
        name = _TEX_FUNCTIONS.get(t.name) or r"\operatorname{" + t.name.replace("_", r"\_") + "}"
        return name + "(" + ", ".join(tex_terms(a) for a in t.args) + ")"
    if isinstance(t, Root):
        return rf"\sqrt{{{tex_terms(t.terms)}}}"
    if isinstance(t, Ceil):
        return rf"\lceil {tex_terms(t.terms)} \rceil"
    if isinstance(t, Frac):
        return rf"\frac{{{tex_terms(t.num)}}}{{{tex_terms(t.den)}}}"
    if isinstance(t, Power):
        base = tex_terms(t.base)
        return (f"({base})" if len(t.base) > 1 else base) + f"^{{{_tex_inline(t.exp)}}}"
    if isinstance(t, Neg):
        inner = tex_terms(t.terms)
        return "-" + (f"({inner})" if len(t.terms) > 1 else inner)
    if isinstance(t, Index):
        return f"{tex_term(t.base)}[{_tex_inline(t.index)}]"
    if isinstance(t, Pad):
        return ""
    raise TypeError(f"not a term: {t!r}")


def _tex_inline(terms: Iterable[Term]) -> str:
    """Terms on one line, as an exponent or an index reads best: a fraction as a/b (10000^{2i/d_model})."""
    return "".join(
        f"{tex_terms(t.num)}/{tex_terms(t.den)}" if isinstance(t, Frac) else tex_term(t) for t in terms
    )


def tex_terms(terms: Iterable[Term]) -> str:
    return "".join(tex_term(t) for t in terms)


def latex_lines(f: Formula) -> list[str]:
    """The formula's lines as the rows of an align*: each aligned at its first "="."""
    rows = []
    for item in f.lines:
        row = tex_terms(item.terms)
        rows.append(row.replace(" = ", " &= ", 1) if " = " in row else "&" + row)
    return rows


def latex_note(note: Note) -> str:
    """A note as LaTeX: its words as text, its terms as inline math."""
    return "".join(tex(p) if isinstance(p, str) else f"${tex_term(p)}$" for p in note.parts)


def latex_notes(f: Formula) -> str:
    return " ".join(latex_note(n) for n in f.notes)


# ---------------------------------------------------------------------------------------------
# MathML Core: what every current browser typesets without a script.
# ---------------------------------------------------------------------------------------------

_MATHML_OPS = {",  ": ",", "    ": ""}
_MATHML_NAMES = {"gamma": "γ", "beta": "β", "mu": "μ", "sigma": "σ", "epsilon": "ϵ", "eps": "ϵ", "theta": "θ"}


def _mi(text: str, upright: bool = False) -> str:
    variant = ' mathvariant="normal"' if upright and len(text) == 1 else ""
    return f"<mi{variant}>{html.escape(text)}</mi>"


def _mathml_name(name: str) -> str:
    stem, _, rest = name.partition("_")
    if stem in ("W", "b") and rest:
        return f"<msup>{_mi(stem)}{_mi(rest)}</msup>"
    if stem in ("rot", "norm", "cap") and rest:
        accent = {"rot": "~", "norm": "^", "cap": "¯"}[stem]
        return f'<mover accent="true">{_mathml_name(rest)}<mo>{accent}</mo></mover>'
    if stem in _MATHML_NAMES:
        symbol = _mi(_MATHML_NAMES[stem])
        return f"<msup>{symbol}{_mi(rest)}</msup>" if rest else symbol
    symbol = _mi(stem)
    return f"<msub>{symbol}{_mi(rest)}</msub>" if rest else symbol


def mathml_term(t: Term) -> str:
    if isinstance(t, Sym):
        base = _mathml_name(t.name)
        sub = _mi(t.sub) if t.sub and not t.sub.isdigit() else f"<mn>{t.sub}</mn>" if t.sub else ""
        sup = "<mi>⊤</mi>" if t.sup == "T" else f"<mn>{html.escape(t.sup)}</mn>" if t.sup else ""
        if sub and sup:
            return f"<msubsup>{base}{sub}{sup}</msubsup>"
        if sub:
            return f"<msub>{base}{sub}</msub>"
        return f"<msup>{base}{sup}</msup>" if sup else base
    if isinstance(t, Op):
        text = "" if t.text.isspace() else _MATHML_OPS.get(t.text, t.text)
        spaced = ' lspace="0" rspace="1em"' if t.text == ",  " else ""
        return f"<mo{spaced}>{html.escape(text)}</mo>" if text else '<mspace width="1em"/>'
    if isinstance(t, Num):
        return f"<mn>{html.escape(t.text)}</mn>"
    if isinstance(t, Word):
        return f"<mtext>{html.escape(t.text)}</mtext>"
    if isinstance(t, Call):
        args = "<mo>,</mo>".join(f"<mrow>{mathml_terms(a)}</mrow>" for a in t.args)
        return f"{_mi(t.name, upright=t.name != 'σ')}<mo>(</mo>{args}<mo>)</mo>"
    if isinstance(t, Root):
        return f"<msqrt>{mathml_terms(t.terms)}</msqrt>"
    if isinstance(t, Ceil):
        return f"<mo>⌈</mo>{mathml_terms(t.terms)}<mo>⌉</mo>"
    if isinstance(t, Frac):
        return f"<mfrac><mrow>{mathml_terms(t.num)}</mrow><mrow>{mathml_terms(t.den)}</mrow></mfrac>"
    if isinstance(t, Power):
        base = mathml_terms(t.base)
        base = f"<mo>(</mo>{base}<mo>)</mo>" if len(t.base) > 1 else base
        return f"<msup><mrow>{base}</mrow><mrow>{mathml_terms(t.exp)}</mrow></msup>"
    if isinstance(t, Neg):
        inner = mathml_terms(t.terms)
        return "<mo>−</mo>" + (f"<mo>(</mo>{inner}<mo>)</mo>" if len(t.terms) > 1 else inner)
    if isinstance(t, Index):
        return f"{mathml_term(t.base)}<mo>[</mo>{mathml_terms(t.index)}<mo>]</mo>"
    if isinstance(t, Pad):
        return ""
    raise TypeError(f"not a term: {t!r}")


def mathml_terms(terms: Iterable[Term]) -> str:
    return "".join(mathml_term(t) for t in terms)


def _row(item: Line) -> str:
    terms = item.terms
    eq = next((k for k, t in enumerate(terms) if t == Op("=")), None)
    if eq is None:
        return f"<mtr><mtd></mtd><mtd>{mathml_terms(terms)}</mtd></mtr>"
    left, right = mathml_terms(terms[:eq]), mathml_terms(terms[eq:])
    return f"<mtr><mtd>{left}</mtd><mtd>{right}</mtd></mtr>"


def mathml(f: Formula) -> str:
    """The formula's lines as one block of MathML, aligned at each line's first "="."""
    return f'<math display="block"><mtable>{"".join(_row(item) for item in f.lines)}</mtable></math>'


def html_note(note: Note) -> str:
    """A note as HTML: its words escaped, its terms as inline MathML."""
    return "".join(
        html.escape(p) if isinstance(p, str) else f"<math>{mathml_term(p)}</math>" for p in note.parts
    )


def html_notes(f: Formula) -> str:
    return " ".join(html_note(n) for n in f.notes)
