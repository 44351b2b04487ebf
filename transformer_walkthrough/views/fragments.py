"""The report's own HTML for one part of a trace — the whole pass, a stage, a matrix — for a page
that is not the report's: a notebook's output cell (``notebook_html``, which the package registers with
IPython for the three types).

Each piece is what ``export report.html`` writes for that part (``documents.report``): the same
tables, shades, formulas and legend, self-contained — its stylesheet inline, nothing fetched, no
script. The stylesheet is the report's, every rule scoped to the piece's own box, so that showing
a trace does not restyle the notebook around it; the report's print rules and its navigation
column are left out (a notebook scrolls, it has no side column).
"""

from __future__ import annotations

import functools
import html
import re
from typing import TYPE_CHECKING

from .documents.report import CSS, html_matrix, html_prediction, html_stage
from .documents.shades import legend
from .documents.shown import DOCUMENT_WIDTH, Options, Shown, heading

if TYPE_CHECKING:
    from ..model.trace import Matrix, Stage, Trace

SCOPE = "walkthrough"  # the class of the box every piece comes in


def _prefixed(selector: str) -> str:
    """One selector of the report's stylesheet, confined to the box: the page's own (``:root``,
    ``body``) become the box itself."""
    if selector in (":root", "body"):
        return f".{SCOPE}"
    return f".{SCOPE} {selector}"


@functools.lru_cache(maxsize=1)
def scoped_css() -> str:
    """The report's stylesheet (``documents.report.CSS``) with every rule inside ``.walkthrough``, and
    its at-rules (the print layout) dropped."""
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)
    rules, at = [], 0
    while (brace := css.find("{", at)) >= 0:
        depth, end = 1, brace + 1
        while depth:  # the block's end, past any nested in it (@media holds rules)
            depth += {"{": 1, "}": -1}.get(css[end], 0)
            end += 1
        selectors = css[at:brace].strip()
        if not selectors.startswith("@"):
            scoped = ", ".join(_prefixed(s.strip()) for s in selectors.split(","))
            rules.append(f"{scoped} {{{' '.join(css[brace + 1 : end - 1].split())}}}")  # a rule a line
        at = end
    return "\n".join(rules)


def _boxed(body: str) -> str:
    return f'<div class="{SCOPE}"><style>{scoped_css()}</style>{body}</div>'


def _options(trace: Trace | None) -> Options:
    precision = 2 if trace is None else trace.config.display.precision
    return Options(precision, clickable=False)


def matrix_html(m: Matrix, name: str | None = None, precision: int = 2) -> str:
    """One matrix as the report shows it, under ``name`` (its own: base and head), with the
    legend of its shade; summarised as the report summarises it when it is large."""
    from ..model.trace import matrix_name
    from .blocks import summary
    from .widgets import View

    name = name or (matrix_name(m.base, m.head) if m.base else "matrix")
    rows, cols = map(tuple, summary(m, View(precision, DOCUMENT_WIDTH)))
    kinds: set[str | None] = set()
    table = "".join(html_matrix(Shown(name, m, precision, {}, "", rows, cols), kinds))
    return _boxed(table + legend(kinds))


def stage_html(stage: Stage, trace: Trace | None = None) -> str:
    """A stage's section of the report; its map and typeset formula need the ``trace`` it is of."""
    return _boxed("".join(html_stage(trace, stage, _options(trace))))


def notebook_html(shown: Trace | Stage | Matrix) -> str:
    """A trace, a stage or a matrix as a notebook shows it (IPython's HTML formatter calls this: the
    package registers it); a stage finds the trace it is of, while that trace is alive."""
    from ..model.trace import Stage, Trace

    if isinstance(shown, Trace):
        return trace_html(shown)
    if isinstance(shown, Stage):
        return stage_html(shown, None if shown.owner is None else shown.owner())
    return matrix_html(shown)


def trace_html(trace: Trace) -> str:
    """The report without its navigation column: the heading, every stage, the prediction."""
    o = _options(trace)
    title, facts = heading(trace, o)
    e = html.escape
    line = "".join(f"<code>{e(text)}</code>" if code else e(text) for text, code in facts)
    parts = [f"<header><h1>{e(title)}</h1><p>{line}</p></header><main>"]
    parts.extend(piece for stage in trace for piece in html_stage(trace, stage, o))
    if trace.prediction:
        parts.append(html_prediction(trace, o))
    return _boxed("".join(parts) + "</main>")
