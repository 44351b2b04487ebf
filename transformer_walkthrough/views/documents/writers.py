"""Each document format's writer, by the suffix of its file: the document, and a worksheet's
answer key as a document of its own."""

from __future__ import annotations

from collections.abc import Iterator

from ...model.trace import Trace
from . import latex, markdown, report
from .shown import DOCUMENT_WIDTH, Options, heading, numbers_shown
from .worksheet import Worksheet

WRITERS = {".md": markdown.iter_markdown, ".tex": latex.iter_latex, ".html": report.iter_html}
KEYS = {".md": markdown.iter_key, ".tex": latex.iter_key, ".html": report.iter_key}
# Characters of numbers and labels a matrix may take: past them it is summarised (unless --full).
WIDTHS = {".md": DOCUMENT_WIDTH, ".tex": latex.LINE, ".html": DOCUMENT_WIDTH}


def numbers_written(suffix: str, stages: list, options: Options) -> int:
    """How many numbers the document ``suffix`` names writes of these stages, as its writer
    summarises them."""
    return numbers_shown(stages, options, WIDTHS[suffix])


def iter_key(trace: Trace, suffix: str, sheet: Worksheet) -> Iterator[str]:
    """A worksheet's answer key as a document of its own, in the format ``suffix`` names (HTML for
    any other)."""
    title = f"Answer key · {heading(trace, Options())[0]}"
    yield from KEYS.get(suffix, report.iter_key)(trace, sheet, title)
