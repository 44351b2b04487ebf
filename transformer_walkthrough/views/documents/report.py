"""The walkthrough as an HTML report: one self-contained file, no network, one inline script that
only adds (``views.clickable``: a click on a cell shows its arithmetic); matrices as heatmaps
(``shades``); formulas typeset in MathML (``formulas``); prints well. The whole report ends on the
logit lens and the attention overview (``views.sections``).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ...model.formula import Formula
from ...model.trace import Stage, Trace
from ..sections import SECTIONS_CSS, Sections
from ..stages import predicted
from .formulas import html_notes
from .formulas import mathml as formula_mathml
from .routing import ROUTING_CSS, Routing, has_routing
from .shades import OPENINGS, SHADES_CSS, cell_shades, legend, shading
from .shown import Contents, Options, Shown, closing, contents_of, heading, hole, mark, probability, units
from .text import number
from .worksheet import Worksheet, hole_label

if TYPE_CHECKING:
    from ..clickable import Clicks

CSS = f"""
:root {{ --fg: #1d2330; --muted: #5b6475; --line: #d8dce4; --accent: #2f5fb3; }}
* {{ box-sizing: border-box; }}
body {{ margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: #fbfbfd; }}
header {{ padding: 1.2rem 2rem; background: #fff; border-bottom: 1px solid var(--line); }}
header h1 {{ margin: 0 0 .3rem; font-size: 1.4rem; }}
header p {{ margin: 0; color: var(--muted); }}
.layout {{ display: flex; align-items: flex-start; }}
nav {{ position: sticky; top: 0; width: 19rem; max-height: 100vh; overflow: auto; padding: 1rem;
      border-right: 1px solid var(--line); background: #fff; flex: none; }}
nav ol {{ margin: 0; padding-left: 1.4rem; font-size: .85rem; }}
nav a {{ color: var(--accent); text-decoration: none; }}
main {{ padding: 1rem 2rem 4rem; min-width: 0; }}
section {{ margin-bottom: 2.5rem; }}
h2 {{ font-size: 1.15rem; margin: 1.5rem 0 .3rem; }}
h2 code {{ color: var(--muted); font-weight: normal; font-size: .9rem; margin-left: .5rem; }}
.formula {{ background: #fff7e0; border-left: 3px solid #e0b400; padding: .5rem .8rem; overflow-x: auto; }}
.formula math {{ font-size: 1.15em; }}
.formula mtd {{ padding: .15em 0; }}
.formula mtd:first-child {{ text-align: right; }}
.formula mtd:last-child {{ text-align: left; }}
.formula p {{ margin: .3rem 0 0; color: var(--muted); font-size: .9rem; }}
pre.formula {{ margin: 0; }}
.matrices {{ display: flex; flex-wrap: wrap; gap: 1.2rem 1.8rem; align-items: flex-start; margin-bottom: 1.2rem; }}
.unit {{ display: flex; flex-wrap: wrap; gap: .8rem; align-items: flex-start; }}
figure {{ margin: 0; }}
figcaption {{ font-weight: 600; margin-bottom: .2rem; }}
figcaption span {{ color: var(--muted); font-weight: normal; }}
figure.gradient figcaption {{ color: var(--muted); }}
table.m {{ border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; }}
table.m th {{ color: var(--accent); font-weight: 600; padding: 2px 6px; text-align: right; }}
table.m th.row {{ text-align: left; }}
table.m td {{ padding: 2px 6px; text-align: right; border: 1px solid #fff; }}
table.m td.ninf {{ background: #3a3f4b; color: #fff; }}
table.m td.gap {{ text-align: center; color: var(--muted); }}
p.left-out {{ margin: .2rem 0 0; max-width: 40rem; color: var(--muted); font-size: .8rem; }}
p.legend {{ color: var(--muted); font-size: .85rem; }}
p.legend span {{ display: inline-block; width: 1.1em; height: .9em; vertical-align: middle;
                 border: 1px solid var(--line); border-width: 1px 0; }}
table.m td.hole {{ background: #fff; border: 1.5px solid var(--fg); font-weight: 700; text-align: center; }}
{SHADES_CSS}
table.pred {{ border-collapse: collapse; }}
table.pred th, table.pred td {{ padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; }}
tr.right td.word {{ color: #0b7a32; font-weight: 700; }}
.best {{ background: #e8f5ec; }}
.answers li {{ margin-bottom: 1rem; }}
.where {{ margin: .2rem 0 .6rem; max-width: 100%; overflow-x: auto; }}
.where svg {{ max-width: 100%; height: auto; }}
.answers pre {{ white-space: pre-wrap; margin: .2rem 0; font-size: .85rem; }}
@media print {{
  @page {{ margin: 1.5cm; }}
  body {{ background: #fff; font-size: 11pt; }}
  * {{ -webkit-print-color-adjust: exact; print-color-adjust: exact; }}
  nav {{ display: none; }}
  .layout {{ display: block; }}
  header, main {{ padding: 0; border: 0; }}
  main {{ padding-bottom: 0; }}
  .formula {{ overflow: visible; white-space: pre-wrap; }}
  h2 {{ break-after: avoid; }}
  /* A heading with what follows it: the prediction is one block (a row a position, it fits a
     page), and a stage's heading keeps its map and first lines (break-after alone is a hint
     that Chromium drops before an image or a table). */
  #prediction, .intro {{ break-inside: avoid; }}
  .formula, figure, .unit, table.pred, .where {{ break-inside: avoid; }}
  table.m {{ font-size: 8pt; }}
  .answers {{ break-before: page; }}
}}
"""


def _html_formula(stage: Stage) -> str:
    """The stage's formula typeset in MathML (its terms written as MathML elements, which the
    browser lays out itself), its notes below it; the plain formula as the block's title."""
    e = html.escape
    said = html_notes(stage.formula)
    return (
        f'<div class="formula" title="{e(str(stage.formula))}">{formula_mathml(stage.formula)}'
        + (f"<p>{said}</p>" if said else "")
        + "</div>"
    )


def html_matrix(s: Shown, kinds: set[str | None], attributes: str = "") -> Iterator[str]:
    """A matrix as a table, a row at a time, each cell shaded as ``shading`` says (added to
    ``kinds``, for the stage's legend); a "⋮" row and a "…" column where it is summarised.
    ``attributes`` go on its figure (the report's script finds the matrix's arithmetic by them)."""
    e = html.escape
    m, p = s.matrix, s.precision
    rows, cols = s.kept()
    values = m.values if s.whole else m.values[np.ix_(rows, cols)]
    finite = np.isfinite(values)
    kind = shading(m, values)
    kinds.add(kind)
    shade = cell_shades(kind, values, finite)
    opening = OPENINGS[kind]
    plain = f"{{:.{p}f}}".format
    zero = "0" if p == 0 else "0." + "0" * p
    gap = s.cols.index(-1) if -1 in s.cols else None
    hole_rows = {i for i, _ in s.holes}
    heads = "".join("<th>…</th>" if j < 0 else f"<th>{e(m.cols[j])}</th>" for j in s.cols)
    gradient = ' class="gradient"' if s.gradient else ""
    yield (
        f"<figure{gradient}{attributes}><figcaption>{e(s.name)} "
        f"<span>({m.shape[0]}×{m.shape[1]})</span></figcaption>"
        f'<table class="m"><thead><tr><th></th>{heads}</tr></thead><tbody>'
    )
    k = 0  # the row of ``values`` that row i of the matrix is
    for i in s.rows:
        if i < 0:
            yield '<tr><th class="row">⋮</th>' + '<td class="gap">⋮</td>' * len(s.cols) + "</tr>"
            continue
        row, shades = values[k].tolist(), shade[k].tolist()
        if finite[k].all() and i not in hole_rows:
            parts = list(map(str.__add__, map(opening.__getitem__, shades), map(plain, row)))
        else:
            parts = [_html_cell(s, i, j, v, opening[c]) for j, v, c in zip(cols, row, shades, strict=True)]
        if gap is not None:
            parts.insert(gap, '</td><td class="gap">…')
        cells = ("".join(parts)[5:] + "</td>").replace(f">-{zero}<", f">{zero}<").replace("-", "−")
        yield f'<tr><th class="row">{e(m.rows[i])}</th>{cells}</tr>'
        k += 1
    note = s.left_out()
    yield "</tbody></table>" + (f'<p class="left-out">{e(note)}</p>' if note else "") + "</figure>"


def _html_cell(s: Shown, i: int, j: int, v: float, opening: str) -> str:
    """A cell that is not a plain number, opened as the fast path opens it (the one before closing)."""
    if (i, j) in s.holes:
        return f'</td><td class="hole">{hole(s.holes[i, j])}'
    if math.isinf(v):
        return f'</td><td class="ninf" title="masked">{number(v, s.precision)}'
    return f"{opening}{number(v, s.precision)}"


def iter_html(
    trace: Trace, stages: Iterable[Stage], o: Options, contents: Contents | None = None
) -> Iterator[str]:
    """The report, a piece at a time; ``stages`` may be computed as they are read (a streamed
    pass: ``contents`` then says what they are beforehand, for the navigation that comes first)."""
    from ..clickable import CSS as CLICK_CSS
    from ..clickable import Clicks

    if contents is None:
        stages = list(stages)
        contents = contents_of(trace, stages)
    e = html.escape
    # A worksheet is never clickable: the arithmetic of a cell would give its answers away.
    clicks = Clicks(trace, o) if o.clickable and o.worksheet is None else None
    title, facts = heading(trace, o)
    line = "".join(f"<code>{e(text)}</code>" if code else e(text) for text, code in facts)
    nav = "".join(f'<li><a href="#{e(sid)}">{e(said)}</a></li>' for sid, said in contents.stages)
    if contents.predicts:
        nav += '<li><a href="#prediction">Prediction</a></li>'
    # A mixture's routing, after the prediction: each sparse layer's part written as its stage goes by.
    routing = None
    if has_routing(trace, contents, o):
        routing = Routing(trace, "html", o.precision, o.full, None if clicks is None else clicks.add)
        nav += '<li><a href="#routing">Expert routing</a></li>'
    # The whole report (not a selection, not a worksheet) ends on the lens and the attention overview.
    sections = closing(trace, contents, o, attention=True)
    extras = [] if sections is None else Sections.titles(trace)
    nav += "".join(f'<li><a href="#{anchor}">{e(title)}</a></li>' for anchor, title in extras)
    css = CSS + (SECTIONS_CSS if extras else "") + (ROUTING_CSS if routing is not None else "")
    if o.worksheet is not None:
        nav += '<li><a href="#answers">Answer key</a></li>'
    yield (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
        f"<style>{css}{CLICK_CSS if clicks else ''}</style></head><body><header><h1>{e(title)}</h1><p>{line}</p></header>"
        f'<div class="layout"><nav><strong>Stages</strong><ol>{nav}</ol></nav><main>'
    )
    tables = None if o.full or o.worksheet is not None else Tables(o.rerun)
    for stage in stages:
        yield from html_stage(trace, stage, o, clicks, tables)
        if sections is not None:
            sections.see(stage)
        if routing is not None:
            routing.see(stage)
    if contents.predicts and trace.prediction:
        yield html_prediction(trace, o)
    if routing is not None:
        yield routing.section()
    for _, _, section in [] if sections is None else sections.html(o.precision, o.full, o.rerun):
        yield section
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield _html_key(trace, o.worksheet)
    if clicks is not None:
        yield from clicks.script()  # last: the tables it reads are all above it
    yield "</main></div></body></html>\n"


# characters of matrix tables a report writes (not --full, not a worksheet): with their click data
# and a long prompt's head pictures, a 2,048-token report of SmolLM2-135M's shape stays under 20 MB
TABLES_BUDGET = 8_000_000


class Tables:
    """The characters of matrix tables a report has written. A matrix is summarised to a few rows
    and columns whatever its size, so a report grows with its matrices' count: 30 layers of 9 heads
    make 2,700 attention tables. Past ``TABLES_BUDGET`` a stage names its matrices and the command
    that shows them instead, so that a long report stays small enough to open."""

    def __init__(self, rerun: str = "") -> None:
        self.written = 0
        self.rerun = rerun  # said once, in the first stage past the budget: a long prompt's is long
        self.said = False

    @property
    def spent(self) -> bool:
        return self.written > TABLES_BUDGET

    def instead(self, stage: Stage, o: Options) -> str:
        """What a stage past the budget shows in place of its tables."""
        e = html.escape
        named = ", ".join(
            f"{shown.name} ({shown.matrix.shape[0]:,}×{shown.matrix.shape[1]:,})"
            for group in units(stage, o)
            for unit in group
            for shown in unit
        )
        options = f" with <code>{e(self.rerun)}</code>" if self.rerun and not self.said else ""
        options = options or (" with the options above" if self.rerun else "")
        self.said = True
        return (
            f'<p class="left-out">Its matrices — {e(named)} — are past the {TABLES_BUDGET // 1_000_000} MB of '
            f"tables this report writes: <code>walkthrough step -s {e(stage.id)}</code> shows them, "
            f"<code>walkthrough export --stage {e(stage.id)} FILE</code> writes them{options}.</p>"
        )


def html_stage(
    trace: Trace | None, stage: Stage, o: Options, clicks: Clicks | None = None, tables: Tables | None = None
) -> Iterator[str]:
    """A stage's section of the report: its heading, where it sits in Figure 1, its explanation,
    formula and matrices, and the legend of their shades. Without its ``trace`` (a stage shown
    alone) there is no map; past the ``tables`` budget, its matrices are named, not drawn."""
    from ..figure import figure_svg

    e = html.escape
    where = "" if trace is None else f'<div class="where">{figure_svg(trace, stage.id)}</div>'
    formula = (
        _html_formula(stage)  # MathML: the formula is the stage's own data, with its trace or without
        if isinstance(stage.formula, Formula)
        else f'<pre class="formula">{e(str(stage.formula))}</pre>'  # a stage made by hand, of plain text
    )
    yield (
        f'<section id="{e(stage.id)}"><div class="intro"><h2>{e(stage.title)}<code>{e(stage.id)}</code></h2>'
        f"{where}<p>{e(stage.explanation)}</p>{formula}</div>"  # where: the stage's place in Figure 1
    )
    if tables is not None and tables.spent:
        yield f"{tables.instead(stage, o)}</section>"
        return
    kinds: set[str | None] = set()
    for group in units(stage, o):
        yield '<div class="matrices">'
        for unit in group:
            yield '<div class="unit">'
            for shown in unit:
                for piece in html_matrix(shown, kinds, "" if clicks is None else clicks.add(stage, shown)):
                    if tables is not None:
                        tables.written += len(piece)
                    yield piece
            yield "</div>"
        yield "</div>"
    yield f"{legend(kinds)}</section>"


def html_prediction(trace: Trace, o: Options) -> str:
    """The prediction's section: the most likely next word after each position, ✓ where right."""
    e = html.escape
    rows = []
    for p in trace.prediction:
        right = " right" if p.expected is not None and p.word == p.expected else ""
        top = ", ".join(f"{e(w)} {probability(q, 2, o)}" for w, q in p.top)
        rows.append(
            f'<tr class="best{right}"><td>{e(p.after)}</td><td class="word">{e(p.word)}</td>'
            f"<td>{probability(p.probability, 3, o)}</td><td>{e(p.expected or '—')}</td><td>{mark(p)}</td>"
            f"<td>{top}</td></tr>"
        )
    return (
        f'<section id="prediction"><h2>Prediction</h2><p>{e(predicted(trace)[0].upper() + predicted(trace)[1:])}.</p>'
        '<table class="pred"><thead><tr><th>after</th><th>predicted</th><th>p</th><th>expected</th><th></th>'
        f"<th>top 3</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _html_key(trace: Trace, sheet: Worksheet) -> str:
    e = html.escape
    items = "".join(
        f'<li value="{h.number}"><strong>?{h.number}</strong> <code>{e(hole_label(trace, h))}</code>'
        f"<pre>{e(chr(10).join(lines))}</pre></li>"
        for h, lines in zip(sheet.holes, sheet.answers, strict=True)
    )
    return f'<section id="answers" class="answers"><h2>Answer key</h2><ol>{items}</ol></section>'


def iter_key(trace: Trace, sheet: Worksheet, title: str) -> Iterator[str]:
    """A worksheet's answer key as an HTML page of its own, under ``title``."""
    e = html.escape
    yield (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
        f"<style>{CSS}</style></head><body><header><h1>{e(title)}</h1></header><main>"
        f"{_html_key(trace, sheet)}</main></body></html>\n"
    )


def to_html(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_html(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]
