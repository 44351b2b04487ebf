"""How a document writes what a trace holds in its markup: a number with one minus sign, a token
or prose in Markdown, plain text and a matrix's symbol in LaTeX.

Everything a trace holds is text from a config or a checkpoint's vocabulary (a token such as
<start>, ``![x](https://…)`` or ``\\input``), so each is escaped for its format before it is
written; the logit lens's sections (``views.lens``) write their tokens with these too.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from ...model.kinds import KINDS
from ...model.numbers import format_value

if TYPE_CHECKING:
    from ...model.trace import Stage


def number(v: float, precision: int) -> str:
    """A number for a document: one minus sign, −, for −0.25 as for −∞; never "−0.00"."""
    return format_value(v, precision, minus="−")


def md_label(label: str, table: bool = True) -> str:
    """A token or dimension in backticks, so that <start> shows as itself, not as an HTML tag (a
    "|" escaped in a table's cell, where GFM reads it before the code span; elsewhere it is not)."""
    label = label.replace("`", "'")
    return "`" + (label.replace("|", "\\|") if table else label) + "`"


# What Markdown reads as markup in prose: emphasis, code, links and images ([ and ]), strikethrough,
# and the backslash itself; each is backslash-escaped (CommonMark), as < > & are made entities.
_MD_ACTIVE = re.compile(r"([\\`*_\[\]~])")


def md_text(text: str) -> str:
    """Prose for Markdown — a title, the input's tokens, which a checkpoint's vocabulary spells:
    < > & as entities, so that <start> is not read as an HTML tag, and every other character
    Markdown acts on escaped, so that a token ``![x](https://…)`` is not an image fetched."""
    return _MD_ACTIVE.sub(r"\\\1", html.escape(text, quote=False)).replace("\n", " ")


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "[": "{[}", "]": "{]}", "*": "{*}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "−": "-", "∞": r"$\infty$", "√": r"$\surd$", "ᵀ": r"$^{T}$", "⊙": r"$\odot$", "·": r"$\cdot$", "…": r"\ldots{}",
    "→": r"$\to$", "Σ": r"$\Sigma$", "×": r"$\times$", "≤": r"$\le$", "⋮": r"$\vdots$", "—": "---", "–": "--", "±": r"$\pm$",
    "²": r"$^{2}$", "✓": r"$\checkmark$", "✗": r"$\times$", "π": r"$\pi$", "σ": r"$\sigma$", "θ": r"$\theta$",
    # The marks of real checkpoints' tokens: SentencePiece's word start, GPT-2's shown tab and newline.
    "▁": r"\textvisiblespace{}", "⇥": r"$\rightarrowtail$", "↵": r"$\hookleftarrow$",
}  # fmt: skip


def tex(text: str) -> str:
    """Plain text as LaTeX source: specials escaped, the few symbols the walkthrough uses as math."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def tex_symbol(stage: Stage, name: str) -> str:
    """A matrix's symbol in LaTeX, as its kind typesets it (head 1's W_Q: W^{Q}_{1}; S1+M:
    S_{1}+M; gamma: \\gamma); otherwise a one-letter name as itself, a longer one upright
    (\\mathrm{concat}), and a head's number as a subscript."""
    m = stage.matrices[name]
    base = m.base or name
    given = KINDS[stage.kind].tex.get(base)
    if given is not None:
        return given.format(h=m.head)
    stem, _, rest = base.partition("_")
    symbol = stem if len(stem) == 1 else rf"\mathrm{{{stem}}}"
    if rest:
        symbol += rf"_{{\mathrm{{{rest}}}}}"
    return symbol if m.head is None else f"{symbol}_{{{m.head}}}"
