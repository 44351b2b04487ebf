"""Output to a stream that cannot show the walkthrough's symbols (``PYTHONIOENCODING=ascii``, a C
locale without UTF-8 mode): ASCII stand-ins instead of a ``UnicodeEncodeError`` on the first rule.

Where a symbol sits in a table column it is replaced one character for one (``─`` by ``-``, ``⋮``
by ``:``, ``✓`` by ``+``), so that columns stay aligned; in prose by what a reader would type
(``√`` by ``sqrt``, ``∞`` by ``inf``, so ``-∞`` reads ``-inf``); an accented letter without its
accent; anything else is ``?``. Rich sees the stream's encoding itself and draws its tables'
boxes in ASCII; the matrices write ``-inf`` and ``...`` of their own accord (``View.ascii``),
their widths measured as such.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

ERRORS = "walkthrough-ascii"  # the name the handler is registered under (codecs.register_error)
# Characters the walkthrough prints (rules, formulas, marks, tokenizers' markers) that most would
# like to see as something better than "?".
SYMBOLS = {
    # one for one: these sit in aligned columns
    "─": "-", "━": "-", "│": "|", "└": "+", "┌": "+", "┐": "+", "┘": "+", "├": "+", "┤": "+",
    "⋮": ":", "⋯": "~", "·": "*", "×": "x", "−": "-", "–": "-", "—": "-", "•": "*",
    "✓": "+", "✗": "x", "◀": "<", "▁": "_", "Ġ": "_", "Ċ": "|",
    "σ": "s", "π": "p", "Φ": "F", "φ": "f", "β": "b", "γ": "g", "μ": "u", "ϵ": "e", "ε": "e",
    "↵": "|", "⇥": ">", "↑": "^", "↓": "v", "←": "<", "→": ">", "±": "+",
    "₀": "0", "₁": "1", "ₙ": "n", "ₖ": "k", "ᵢ": "i", "ⱼ": "j",
    # in prose
    "∞": "inf", "√": "sqrt", "…": "...", "Σ": "sum", "ᵀ": "^T", "ᵗ": "^t", "²": "^2", "³": "^3",
    "¹": "^1", "⁰": "^0", "⁴": "^4", "⁵": "^5", "⁶": "^6", "⁷": "^7", "⁹": "^9", "⁻": "^-",
    "ⁿ": "^n", "ˣ": "^x", "≈": "~=", "≤": "<=", "≥": ">=", "⊙": "(.)", "∂": "d", "⊤": "^T",
    "⌈": "ceil(", "⌉": ")", "⌊": "floor(", "⌋": ")", "§": "S", "↦": "->",
}  # fmt: skip
_OPERAND = re.compile(r"[A-Za-z0-9_.]+")  # what a √ applies to when it has no brackets: d_k, 2
# The symbols every command prints: a stream that cannot encode them all gets the handler.
SAMPLE = "─∞√·…−×⋮✓"


def _replace(err: UnicodeError) -> tuple[str, int]:
    """The ``codecs`` error handler: each character the encoding lacks, as its ASCII stand-in."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text, end = err.object[err.start : err.end], err.end
    out = "".join(SYMBOLS.get(ch) or _plain(ch) for ch in text)
    if text.endswith("√"):  # √d_k: its operand in brackets, sqrt(d_k), read as the formula means
        operand = _OPERAND.match(err.object, end)
        if operand and operand.end() > end:
            out = f"{out[: -len('sqrt')]}sqrt({operand[0]})"
            end = operand.end()
    return out, end


def _plain(ch: str) -> str:
    """A letter without its accents (é: e), by Unicode's compatibility decomposition; else "?"."""
    import unicodedata

    plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
    return plain if len(plain) == 1 and plain.isprintable() else "?"


def register() -> None:
    """Make ``errors=ERRORS`` known to every codec (idempotent)."""
    codecs.register_error(ERRORS, _replace)


def lacks_symbols(encoding: str | None) -> bool:
    """Whether text in ``encoding`` cannot hold the symbols the walkthrough prints."""
    if not encoding:
        return False
    try:
        SAMPLE.encode(encoding)
    except UnicodeEncodeError:
        return True
    except LookupError:  # an encoding Python does not know: leave the stream alone
        return False
    return False


def degrade(stream: Any) -> bool:
    """Give ``stream`` the ASCII stand-ins if its encoding lacks our symbols; whether it did."""
    if stream is None or not lacks_symbols(getattr(stream, "encoding", None)):
        return False
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:  # not a TextIOWrapper (a test's buffer): nothing to change
        return False
    register()
    try:
        reconfigure(errors=ERRORS)
    except (ValueError, OSError):  # closed, or already written to in a way that forbids it
        return False
    return True
