"""The one error class the library raises for bad input; the CLI turns it into exit code 2.

Also the helpers that keep a message to one readable line: escaping, shortening, UTF-8.
"""

from __future__ import annotations

from typing import Any


class WalkthroughError(Exception):
    """Bad input from the user: a config, a stage name, an export path. Message is one line."""


class ConfigError(WalkthroughError):
    """The YAML config cannot be read or does not describe a valid model."""


class StageError(WalkthroughError):
    """A stage or matrix name that the trace does not have."""


class ExportError(WalkthroughError):
    """An export path that cannot be written."""


def close_matches(word: str, candidates: list[str], cutoff: float = 0.6) -> list[str]:
    """The candidate spelled most like ``word``, for a "did you mean" (difflib loads only then)."""
    import difflib

    return difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)


def printable(text: str) -> str:
    """Text safe for a terminal: control characters (ESC, newline, …) and the lone surrogates of
    undecodable bytes shown as escapes, never sent."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


# Characters of a text a checkpoint decoded (a translation, a continuation) shown on screen: a
# screenful. A vocabulary may hold a piece of 50 MB, and one such piece decoded is a 50 MB line.
MAX_DECODED = 2000


def decoded(text: str, limit: int = MAX_DECODED) -> str:
    """A text a checkpoint's tokenizer decoded, as the terminal shows it: ``printable``, and cut
    after ``limit`` characters, saying how many more it had."""
    if len(text) <= limit:
        return printable(text)
    return f"{printable(text[:limit])}… ({len(text) - limit:,} more characters not shown)"


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut to at most ``limit`` characters around a "…": its head and, so that a file
    name or a number's last digits stay readable, its tail (a third of what is kept)."""
    if len(text) <= limit:
        return text
    keep = max(2, limit - 1)
    tail = keep // 3
    return f"{text[: keep - tail]}…{text[len(text) - tail :] if tail else ''}"


LONGEST_WORD = 100  # characters: a run of non-space characters longer than this is a value, not prose
LONGEST_PATH = 300  # characters of a path quoted in a message
LONGEST_MESSAGE = 1000  # characters in one error line, as a last resort
_PATTERNS: list[Any] = []  # the regular expressions, compiled on first use (`--help` pays nothing)


def _patterns() -> list[Any]:
    if not _PATTERNS:
        import re

        _PATTERNS.append(re.compile(rf"\S{{{LONGEST_WORD + 1},}}"))
        _PATTERNS.append(re.compile(rf"[(\[{{][^A-Za-z()\[\]{{}}]{{{LONGEST_WORD},}}[)\]}}]"))
    return _PATTERNS


def short_words(text: str, keep: int = 80) -> str:
    """``text`` with every run of over ``LONGEST_WORD`` non-space characters cut to ``keep``
    around a "…": a 1.6 MB token inside a sentence, a 4,000-digit number."""
    if len(text) <= LONGEST_WORD:
        return text
    # A path is kept longer, and its tail (the file name) with it: it is what the user typed.
    return _patterns()[0].sub(lambda m: shorten(m[0], LONGEST_PATH if "/" in m[0] else keep), text)


def short_message(message: str) -> str:
    """A message with every value it quotes cut to about 80 characters: the last resort of the CLI
    edge, for a value quoted whole deep down (a 4,000-digit integer, a 300 kB shape).

    A run of over ``LONGEST_WORD`` non-space characters is cut to its head and tail (a path that
    long keeps its file name); so is a bracketed run of numbers over that length (a shape's
    ``(1, 1, …)``, which has spaces); and the whole line to ``LONGEST_MESSAGE``.
    """
    if len(message) <= LONGEST_WORD:
        return message
    numbers = _patterns()[1]
    message = numbers.sub(lambda m: m[0][0] + shorten(m[0][1:-1], 78) + m[0][-1], message)
    return shorten(short_words(message), LONGEST_MESSAGE)


def utf8_argument(text: str) -> str:
    """A command-line argument as the UTF-8 text it was typed as; ValueError saying why when its
    bytes are not UTF-8.

    Python decodes the command line with ``surrogateescape``: a byte it cannot decode (0xE9 of
    Latin-1 "café") arrives as a lone surrogate (U+DCE9), which no file, terminal or tokenizer
    takes. In a C locale without UTF-8 mode even UTF-8's bytes arrive so, and are decoded here.
    For words, not paths (a path's bytes are the file system's).
    """
    import os

    try:
        text.encode("utf-8")  # fails exactly on a surrogate
        return text
    except UnicodeEncodeError as err:
        ch, at = text[err.start], err.start
    try:
        data = os.fsencode(text)  # the bytes as they were given
    except UnicodeError:
        why = f"not valid UTF-8 (a lone surrogate U+{ord(ch):04X} at character {at + 1})"
        raise ValueError(why) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = data[err.start]
        raise ValueError(f"not valid UTF-8 (byte 0x{byte:02X} at byte {err.start + 1})") from None
