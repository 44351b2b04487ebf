"""A formula as data: lines of terms and notes, which the views render as plain text, LaTeX and MathML.

A piece of a stage says its arithmetic once, as terms: ``line(sym("S", "h"), "=", sym("Q", "h"),
"·", sym("K", "g", "T"), "/", sqrt(sym("d_k")))``. ``str()`` of a formula is the plain text the
terminal shows (``S_h = Q_h·K_gᵀ / √d_k``); ``views.documents.formulas`` writes the same terms as LaTeX and as
MathML. Nothing reads a rendered formula back: a symbol such as ⌈h / 2⌉ is a term (``ceil``), so
each renderer writes it in its own language (``\\lceil h / 2 \\rceil`` for pdflatex).

Terms: ``Sym`` a named quantity (a matrix of the trace, a size), ``Num`` a number, ``Op`` an
operator or punctuation, ``Word`` upright words inside the formula, ``Call`` a function applied
(``softmax(…)``), ``Root``, ``Ceil``, ``Frac`` (a/b), ``Power`` (10000^(2i/d_model)), ``Neg`` (−x),
``Index`` (a row or cell of a table: E[token_i]) and ``Pad`` (spaces that line up the plain text's
columns; a typeset formula aligns by itself). A ``Line`` is one equation (or several, side by side,
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


class Frac(NamedTuple):
    """A fraction: a/b in plain text, (1 + erf(x/√2))/2 with its parts in brackets when they need them."""

    num: tuple[Term, ...]
    den: tuple[Term, ...]


class Power(NamedTuple):
    """base^exponent: 10000^(2i/d_model), e^(−x)."""

    base: tuple[Term, ...]
    exp: tuple[Term, ...]


class Neg(NamedTuple):
    """−x: a minus sign on its terms, with no space (the operator − between two terms has one)."""

    terms: tuple[Term, ...]


class Index(NamedTuple):
    """A row or a cell of a table: E[token_i], PE[pos, 2i]."""

    base: Term
    index: tuple[Term, ...]


class Pad(NamedTuple):
    """Spaces that line up the plain text's columns (PE[pos, i]'s "=" under the next line's)."""

    width: int


Term = Union[Sym, Num, Op, Word, Call, Root, Ceil, Frac, Power, Neg, Index, Pad]


class Line(NamedTuple):
    """One line of a formula: an equation, or a few side by side."""

    terms: tuple[Term, ...]


class Note(NamedTuple):
    """Prose under a line, indented in plain text: words (str) and terms mixed. A note ``beside``
    its line is short enough for the plain text to write it at the line's end; LaTeX and MathML
    write every note under the formula."""

    parts: tuple[str | Term, ...]
    beside: bool = False


class Formula(NamedTuple):
    """The lines and notes of a stage's arithmetic, in order."""

    items: tuple[Line | Note, ...] = ()

    def __str__(self) -> str:
        lines: list[str] = []
        for item in self.items:
            if isinstance(item, Note) and item.beside and lines:
                lines[-1] += plain_item(item)
            else:
                lines.append(plain_item(item))
        return "\n".join(lines)

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

# The operators a line may spell as a bare string (and spaces: a gap before an aside); anything else
# is a symbol's name.
OPERATORS = frozenset(
    {"=", "+", "−", "-", "·", "⊙", "/", ",", ",  ", "    ", "…", "(", ")", "[", "]", "×", ";", "<"}
)


def _term(t: Term | str) -> Term:
    if isinstance(t, str):
        return Op(t) if t in OPERATORS or t.isspace() else Sym(t)
    return t


def sym(name: str, sub: str | int = "", sup: str = "", tex: str = "") -> Sym:
    return Sym(name, str(sub), sup, tex)


def line(*terms: Term | str) -> Line:
    return Line(tuple(_term(t) for t in terms))


def note(*parts: str | Term, beside: bool = False) -> Note:
    return Note(tuple(parts), beside)


def call(name: str, *args: list[Term | str] | Term | str) -> Call:
    """name(arg, …): each argument one term, or a list of terms."""

    def arg(a: list[Term | str] | Term | str) -> tuple[Term, ...]:
        return tuple(_term(t) for t in a) if isinstance(a, list) else (_term(a),)

    return Call(name, tuple(arg(a) for a in args))


def sqrt(*terms: Term | str) -> Root:
    return Root(tuple(_term(t) for t in terms))


def ceil(*terms: Term | str) -> Ceil:
    return Ceil(tuple(_term(t) for t in terms))


def _terms(a: list[Term | str] | Term | str) -> tuple[Term, ...]:
    return tuple(_term(t) for t in a) if isinstance(a, list) else (_term(a),)


def frac(num: list[Term | str] | Term | str, den: list[Term | str] | Term | str) -> Frac:
    return Frac(_terms(num), _terms(den))


def power(base: list[Term | str] | Term | str, exp: list[Term | str] | Term | str) -> Power:
    return Power(_terms(base), _terms(exp))


def neg(*terms: Term | str) -> Neg:
    return Neg(tuple(_term(t) for t in terms))


def index(base: Term | str, *terms: Term | str) -> Index:
    return Index(_term(base), tuple(_term(t) for t in terms))


def pad(width: int) -> Pad:
    return Pad(width)


def word(text: str) -> Word:
    return Word(text)


def num(value: object) -> Num:
    return Num(str(value))


def formula(*items: Line | Note) -> Formula:
    return Formula(tuple(items))


# ---------------------------------------------------------------------------------------------
# Plain text: what the terminal shows and the JSON export holds.
# ---------------------------------------------------------------------------------------------

_SPACED = frozenset({"=", "+", "−", "-", "/", "⊙", "×", "<"})
_SUPERSCRIPT = {"T": "ᵀ", "2": "²", "3": "³", "-1": "⁻¹"}


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
        return "√" + _bracketed(t.terms, always=len(t.terms) > 1 or isinstance(t.terms[0], Frac))
    if isinstance(t, Ceil):
        return f"⌈{plain_terms(t.terms)}⌉"
    if isinstance(t, Frac):
        return f"{_bracketed(t.num)}/{_bracketed(t.den)}"
    if isinstance(t, Power):
        return f"{_bracketed(t.base)}^{_bracketed(t.exp, always=len(t.exp) > 1 or isinstance(t.exp[0], Neg))}"
    if isinstance(t, Neg):
        return "−" + _bracketed(t.terms)
    if isinstance(t, Index):
        return f"{plain(t.base)}[{plain_terms(t.index)}]"
    if isinstance(t, Pad):
        return " " * t.width
    raise TypeError(f"not a term: {t!r}")


def _bracketed(terms: tuple[Term, ...], always: bool = False) -> str:
    """Terms in brackets when they would not read as one (a sum, a power with a sign), else bare."""
    text = plain_terms(terms)
    loose = any(isinstance(t, Frac) or (isinstance(t, Op) and t.text in _SPACED) for t in terms)
    return f"({text})" if always or loose else text


def plain_terms(terms: Iterable[Term]) -> str:
    return "".join(plain(t) for t in terms)


def plain_item(item: Line | Note) -> str:
    if isinstance(item, Line):
        return plain_terms(item.terms)
    return "    " + "".join(p if isinstance(p, str) else plain(p) for p in item.parts)
