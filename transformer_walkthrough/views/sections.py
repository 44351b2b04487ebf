"""The report's sections after the prediction: the logit lens and the attention overview.

``documents.report.iter_html`` asks for them in one call (``report_sections``) when it writes the whole
report — not a selection of stages, not a worksheet, whose hidden cells the lens or a heatmap
would give away; each section is its own module's (``lens``, ``overview``). The Markdown and
LaTeX documents end on the lens alone (``whole_lens``): a heatmap has no text form worth reading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import WalkthroughError
from .lens import HTML_TOP, LENS_CSS, lens_section
from .overview import OVERVIEW_CSS, attention_section

if TYPE_CHECKING:
    from ..model.lens import Lens
    from ..model.trace import Trace

SECTIONS_CSS = LENS_CSS + OVERVIEW_CSS  # added to the report's stylesheet when the sections are in it


def whole_lens(trace: Trace) -> Lens | None:
    """The trace's logit lens, or None for a model it cannot read (the flatten head, which reads
    every position at once; an encoder with no output layer): a document then has no lens section."""
    from ..model.lens import logit_lens

    try:
        return logit_lens(trace, top=HTML_TOP)  # what the report shows of each cell, not the vocabulary
    except WalkthroughError:
        return None


def report_sections(trace: Trace, precision: int, full: bool, rerun: str = "") -> list[tuple[str, str, str]]:
    """(anchor, title in the navigation, HTML) of each section the trace has: the lens (none for
    the flatten head, which reads every position at once) and the attention overview."""
    sections = []
    lens = whole_lens(trace)
    if lens is not None:
        sections.append(("lens", "Logit lens", lens_section(trace, lens, precision, full, rerun)))
    attention = attention_section(trace)
    if attention:
        sections.append(("attention", "Attention, every layer and head", attention))
    return sections
