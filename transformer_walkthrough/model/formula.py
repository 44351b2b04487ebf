"""A formula as data: lines of terms and notes, which the views render as plain text, LaTeX and MathML.

A piece of a stage says its arithmetic once, as terms: ``line(sym("S", "h"), "=", sym("Q", "h"),
"·", sym("K", "g", "T"), "/", sqrt(sym("d_k")))``. ``str()`` of a formula is the plain text the
terminal shows (``S_h = Q_h·K_gᵀ / √d_k``); ``views.documents.formulas`` writes the same terms as LaTeX and as
MathML. Nothing reads a rendered formula back: a symbol such as ⌈h / 2⌉ is a term (``ceil``), so
each renderer writes it in its own language (``\\lceil h / 2 \\rceil`` for pdflatex).

Terms: ``Sym`` a named quantity (a matrix of the trace, a size), ``Num`` a number, ``Op`` an
operator or punctuation, ``Word`` upright words inside the formula, ``Call`` a function applied
(``softmax(…)``), ``Root`` and ``Ceil``. A ``Line`` is one equation (or several, side by side,
split by ``Op(",  ")``); a ``Note`` is prose under it, words and terms mixed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Union


class Sym(NamedTuple):
    """A named quantity: ``Q`` with subscript ``h``; ``sup`` "T" is the transpose."""

    name: str  # as the trace names the matrix: "Q", "W_Q", "rot_Q", "S+M"; or a size: "d_k"
    sub: str = ""  # the head: "h", "g", "1"
    sup: str = ""  # "T" (transposed), or an exponent
    tex: str = ""  # the LaTeX symbol when ``views.documents.formulas`` would not derive it from the name


class Num(NamedTuple):
    text: str


class Op(NamedTuple):
    """An operator or punctuation, as the plain text writes it: "=", "+", "·", "⊙", "/", ",  "."""

    text: str


class Word(NamedTuple):
    """Upright words inside a formula: "(row-wise)"."""

    text: str


class Call(NamedTuple):
    """A function applied to its arguments: softmax(S_h + M), rotate_half(Q_h)."""

    name: str
    args: tuple[tuple[Term, ...], ...]


class Root(NamedTuple):
    """√ of its terms."""

    terms: tuple[Term, ...]


class Ceil(NamedTuple):
    """⌈ its terms ⌉."""

    terms: tuple[Term, ...]


Term = Union[Sym, Num, Op, Word, Call, Root, Ceil]


class Line(NamedTuple):
    """One line of a formula: an equation, or a few side by side."""

    terms: tuple[Term, ...]


class Note(NamedTuple):
    """Prose under a line, indented in plain text: words (str) and terms mixed."""

    parts: tuple[str | Term, ...]


class Formula(NamedTuple):
    """The lines and notes of a stage's arithmetic, in order."""

    items: tuple[Line | Note, ...] = ()

    def __str__(self) -> str:
        return "\n".join(plain_item(item) for item in self.items)

    def __add__(self, other: object) -> Formula:  # type: ignore[override]
        if not isinstance(other, Formula):
            return NotImplemented
        return Formula(self.items + other.items)

    @property
    def lines(self) -> list[Line]:
        return [item for item in self.items if isinstance(item, Line)]

    @property
    def notes(self) -> list[Note]:
        return [item for item in self.items if isinstance(item, Note)]


# ---------------------------------------------------------------------------------------------
# Building: strings stand for operators in a line, for words in a note.
# ---------------------------------------------------------------------------------------------

# The operators a line may spell as a bare string; anything else is a symbol's name.
OPERATORS = frozenset(
    {"=", "+", "−", "-", "·", "⊙", "/", ",", ",  ", "    ", "…", "(", ")", "[", "]", "×", ";"}
)


def _term(t: Term | str) -> Term:
    if isinstance(t, str):
        return Op(t) if t in OPERATORS else Sym(t)
    return t


def sym(name: str, sub: str | int = "", sup: str = "", tex: str = "") -> Sym:
    return Sym(name, str(sub), sup, tex)


def line(*terms: Term | str) -> Line:
    return Line(tuple(_term(t) for t in terms))


def note(*parts: str | Term) -> Note:
    return Note(tuple(parts))


def call(name: str, *args: list[Term | str] | Term | str) -> Call:
    """name(arg, …): each argument one term, or a list of terms."""

    def arg(a: list[Term | str] | Term | str) -> tuple[Term, ...]:
        return tuple(_term(t) for t in a) if isinstance(a, list) else (_term(a),)

    return Call(name, tuple(arg(a) for a in args))


def sqrt(*terms: Term | str) -> Root:
    return Root(tuple(_term(t) for t in terms))


def ceil(*terms: Term | str) -> Ceil:
    return Ceil(tuple(_term(t) for t in terms))


def formula(*items: Line | Note) -> Formula:
    return Formula(tuple(items))


# ---------------------------------------------------------------------------------------------
# Plain text: what the terminal shows and the JSON export holds.
# ---------------------------------------------------------------------------------------------

_SPACED = frozenset({"=", "+", "−", "-", "/", "⊙", "×"})
_SUPERSCRIPT = {"T": "ᵀ", "2": "²", "-1": "⁻¹"}


def plain_sym(s: Sym) -> str:
    # W_Q of head h is W_Qh (as the trace names its block), Q of head h is Q_h
    text = s.name + (("" if s.name[:2] in ("W_", "b_") else "_") + s.sub if s.sub else "")
    return text + _SUPERSCRIPT.get(s.sup, f"^{s.sup}" if s.sup else "")


def plain(t: Term) -> str:
    if isinstance(t, Sym):
        return plain_sym(t)
    if isinstance(t, Op):
        return f" {t.text} " if t.text in _SPACED else (t.text + " " if t.text in (",", ";") else t.text)
    if isinstance(t, (Num, Word)):
        return t.text
    if isinstance(t, Call):
        return f"{t.name}(" + ", ".join(plain_terms(a) for a in t.args) + ")"
    if isinstance(t, Root):
        inner = plain_terms(t.terms)
        return "√" + (inner if len(t.terms) == 1 else f"({inner})")
    if isinstance(t, Ceil):
        return f"⌈{plain_terms(t.terms)}⌉"
    raise TypeError(f"not a term: {t!r}")


def plain_terms(terms: Iterable[Term]) -> str:
    return "".join(plain(t) for t in terms)


def plain_item(item: Line | Note) -> str:
    if isinstance(item, Line):
        return plain_terms(item.terms)
    return "    " + "".join(p if isinstance(p, str) else plain(p) for p in item.parts)
