"""The kinds' LaTeX formulas (``Kind.latex``) as MathML Core, typeset by the browser itself: the
HTML report needs no script to show them."""

from __future__ import annotations

import html
import re

_MATH_SYMBOLS = {
    "gamma": ("mi", "γ"), "beta": ("mi", "β"), "mu": ("mi", "μ"), "sigma": ("mi", "σ"), "epsilon": ("mi", "ϵ"),
    "pi": ("mi", "π"), "top": ("mi", "⊤"), "odot": ("mo", "⊙"), "cdot": ("mo", "·"), "cdots": ("mo", "⋯"),
    "ldots": ("mo", "…"), "infty": ("mi", "∞"), "to": ("mo", "→"), "times": ("mo", "×"), "le": ("mo", "≤"),
    "sin": ("mi", "sin"), "cos": ("mi", "cos"), "tanh": ("mi", "tanh"), "max": ("mi", "max"),
    "exp": ("mi", "exp"), "log": ("mi", "log"), "Sigma": ("mi", "Σ"),
}  # fmt: skip
_MATH_SPACES = {",": 0.17, ";": 0.28, " ": 0.25, "quad": 1.0, "qquad": 2.0}
_MATH_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\d+(?:\.\d+)?|\s+|.")


class _MathML:
    """A recursive-descent reader of the LaTeX the kinds write (``Kind.latex``), to MathML Core.

    It knows the few commands those formulas use; any other raises ValueError, and the report
    shows the plain-text formula instead."""

    def __init__(self, source: str) -> None:
        self.tokens = _MATH_TOKEN.findall(source)
        self.pos = 0

    def peek(self) -> str | None:
        """The next token, spaces skipped (they mean nothing in math mode)."""
        while self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("unexpected end of formula")
        self.pos += 1
        return token

    def row(self, until: str | None = None) -> str:
        """Atoms up to ``until`` (a closing brace) or the end, each with its sub- and superscripts."""
        out = []
        while (token := self.peek()) is not None and token != until and token != "&":
            base = self.atom()
            sub = sup = None
            while self.peek() in ("_", "^"):
                if self.take() == "_":
                    sub = self.atom()
                else:
                    sup = self.atom()
            if sub and sup:
                base = f"<msubsup>{base}{sub}{sup}</msubsup>"
            elif sub:
                base = f"<msub>{base}{sub}</msub>"
            elif sup:
                base = f"<msup>{base}{sup}</msup>"
            out.append(base)
        return "".join(out)

    def group(self) -> str:
        if self.peek() != "{":
            return self.atom()
        self.take()
        inner = self.row("}")
        self.take()
        return f"<mrow>{inner}</mrow>"

    def text(self) -> str:
        """The raw text of a {…} argument, as written (for \\text and \\mathrm)."""
        if self.peek() != "{":
            raise ValueError("expected {")
        self.pos += 1
        depth, parts = 0, []
        while True:
            token = self.tokens[self.pos] if self.pos < len(self.tokens) else None
            if token is None:
                raise ValueError("unclosed {")
            self.pos += 1
            if token == "}" and depth == 0:
                return "".join(parts)
            depth += {"{": 1, "}": -1}.get(token, 0)
            parts.append(token)

    def atom(self) -> str:
        e = html.escape
        token = self.take()
        if token == "{":
            self.pos -= 1
            return self.group()
        if token.startswith("\\") and len(token) > 1:
            command = token[1:]
            if command in _MATH_SPACES:
                return f'<mspace width="{_MATH_SPACES[command]}em"></mspace>'
            if command in _MATH_SYMBOLS:
                tag, symbol = _MATH_SYMBOLS[command]
                return f"<{tag}>{symbol}</{tag}>"
            if command in ("mathrm", "operatorname"):
                return (
                    f'<mi mathvariant="normal">{e(self.text())}</mi>'
                    if command == "mathrm"
                    else f"<mi>{e(self.text())}</mi>"
                )
            if command == "text":
                return f"<mtext>{e(self.text()).replace(' ', '&#160;')}</mtext>"
            if command in ("frac", "tfrac"):
                return f"<mfrac>{self.group()}{self.group()}</mfrac>"
            if command == "sqrt":
                return f"<msqrt>{self.group()}</msqrt>"
            if command in ("left", "right"):
                return f"<mo>{e(self.take())}</mo>"
            if command in ("{", "}"):
                return f"<mo>{command}</mo>"
            raise ValueError(f"unknown command {token}")
        if token.isdigit() or re.fullmatch(r"\d+\.\d+", token):
            return f"<mn>{token}</mn>"
        if token.isalpha():
            return f"<mi>{e(token)}</mi>"
        if token == "-":
            return "<mo>−</mo>"
        if token in "()[]":  # only \left( and \right) grow with what they enclose
            return f'<mo stretchy="false">{token}</mo>'
        if token in "=+/,<>|!":
            return f"<mo>{e(token)}</mo>"
        raise ValueError(f"unexpected {token!r}")

    def line(self) -> str:
        """One align* line, "lhs &= rhs", as a row of two cells (aligned at the "=")."""
        left = self.row()
        if self.peek() == "&":
            self.take()
            return f"<mtr><mtd>{left}</mtd><mtd>{self.row()}</mtd></mtr>"
        return f"<mtr><mtd></mtd><mtd>{left}</mtd></mtr>"


def mathml(lines: list[str]) -> str:
    """The lines of an align* as one block of MathML (ValueError for LaTeX it does not know)."""
    rows = "".join(_MathML(line).line() for line in lines)
    return f'<math display="block"><mtable>{rows}</mtable></math>'
