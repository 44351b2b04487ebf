"""The documents' "Expert routing" section, after the prediction of a whole trace of a mixture of
experts: for each sparse layer, each token's experts and their weights (the ``routing_weights``
matrix, each weight beside the expert it weighs), then each expert's load (``views.experts``). In
the HTML report a click on a weight shows its arithmetic, as ``explain`` prints it: the softmax over
the router's row, the top-k cut, the renormalisation. The Markdown and the LaTeX have the same tables.

A streamed pass (``model.stream``) drops each stage once it is written, so the section is gathered
as the stages go by (``Routing.see``: each sparse layer's part written while its stage is there) and
written after the prediction (``Routing.section``).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import numpy as np

from ...model.trace import Stage, Trace
from ..blocks import summary
from ..experts import loads
from ..widgets import View, label
from .shown import DOCUMENT_WIDTH, Contents, Options, Shown
from .text import md_label, md_text, number, tex

ROUTING_CSS = """
table.route td span.e { color: var(--accent); font-weight: 600; margin-right: .35em; }
table.load { border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; margin: .3rem 0 1.2rem; }
table.load th, table.load td { padding: 2px 8px; text-align: right; border-bottom: 1px solid var(--line); }
table.load td.idle { color: var(--muted); text-align: left; }
"""
ROUTING_ABOUT = (
    "Each sparse layer's router sends every token to {k} of its {E} experts, the most probable first, "
    "and weighs each expert's output by the weight beside it{norm}; the load is how many tokens each "
    "expert got and the weight they gave it."
)


def has_routing(trace: Trace, contents: Contents, o: Options) -> bool:
    """Whether a document of ``contents`` ends on a routing section, known before its first stage
    is written: the whole pass of a model with a sparse layer (not a selection, not a worksheet)."""
    sparse = any(sid.rsplit(".", 1)[-1] == "experts" for sid, _ in contents.stages)
    return o.worksheet is None and contents.whole and sparse and trace.config.model.experts > 0


def _sparse(stage: Stage) -> bool:
    return stage.kind == "experts" and "routing_weights" in stage.matrices


class Routing:
    """The "Expert routing" section of one document, gathered layer by layer as its stages are
    written (``see``) and written whole after the prediction (``section``): ``form`` is "html",
    "md" or "tex"; ``clickable`` the report's ``Clicks.add``."""

    def __init__(
        self,
        trace: Trace,
        form: str,
        precision: int = 2,
        full: bool = False,
        clickable: Callable[[Stage, Shown], str] | None = None,
    ) -> None:
        self.trace, self.form, self.precision, self.full, self.clickable = (
            trace,
            form,
            precision,
            full,
            clickable,
        )
        self.parts: list[str] = []

    def see(self, stage: Stage) -> None:
        """Write the part of a sparse layer's stage while it is there."""
        if not _sparse(stage):
            return
        if self.form == "html":
            self.parts.append(_layer_html(stage, self.precision, self.full, self.clickable))
        elif self.form == "md":
            self.parts.append(_layer_markdown(stage, self.precision, self.full))
        else:
            self.parts.append(_layer_latex(stage, self.precision, self.full))

    def section(self) -> str:
        """The whole section ("" when no sparse layer went by)."""
        if not self.parts:
            return ""
        about = _about(self.trace)
        if self.form == "html":
            e = html.escape
            return f'<section id="routing"><h2>Expert routing</h2><p>{e(about)}</p>{"".join(self.parts)}</section>'
        if self.form == "md":
            return "\n".join(["\n## Expert routing\n", f"{md_text(about)}\n", *self.parts]) + "\n"
        return "".join(["\n\\section*{Expert routing}\n", tex(about) + "\\par\n", *self.parts])


def _about(trace: Trace) -> str:
    m = trace.config.model
    norm = " (the k probabilities divided by their sum)" if m.norm_topk else " (the router's probabilities)"
    return ROUTING_ABOUT.format(k=m.experts_per_token, E=m.experts, norm=norm)


def _kept_rows(stage: Stage, precision: int, full: bool) -> list[int]:
    """The tokens a document shows of a layer's routing: as the matrices are summarised (-1: "⋮")."""
    return summary(stage.matrices["routing_weights"], View(precision, DOCUMENT_WIDTH, full=full))[0]


def _layer_html(
    stage: Stage, precision: int, full: bool, clickable: Callable[[Stage, Shown], str] | None
) -> str:
    """The HTML report's part of one sparse layer: each token's experts and their weights (the
    ``routing_weights`` matrix, each weight beside the expert it weighs: a click on it shows its
    arithmetic, the softmax over the router's row, the top-k cut and the renormalisation, as
    ``explain`` prints it: ``clickable`` gives the figure its attributes), then each expert's load."""
    e = html.escape
    m = stage.matrices["routing_weights"]
    chosen = np.rint(stage["chosen"]).astype(int)
    rows, cols = _kept_rows(stage, precision, full), list(range(m.shape[1]))
    shown = Shown("routing_weights", m, precision, {}, "", tuple(rows), tuple(cols))
    attributes = "" if clickable is None else clickable(stage, shown)
    heads = "".join(f"<th>{e(c)}</th>" for c in m.cols)
    body = []
    for i in rows:
        if i < 0:
            body.append('<tr><th class="row">⋮</th>' + '<td class="gap">⋮</td>' * len(cols) + "</tr>")
            continue
        cells = "".join(
            f'<td><span class="e">e{chosen[i, j]}</span>{number(m.values[i, j], precision)}</td>'
            for j in cols
        )
        body.append(f'<tr><th class="row">{e(m.rows[i])}</th>{cells}</tr>')
    note = shown.left_out()
    loads_ = "".join(
        f"<tr><td>expert {k}</td>"
        + (
            f"<td>{load.tokens}</td><td>{number(load.weight, precision)}</td>"
            if load.tokens
            else '<td class="idle" colspan="2">no token: it computed nothing</td>'
        )
        + "</tr>"
        for k, load in enumerate(loads(stage))
    )
    return (
        f'<h3>Layer {stage.layer} <code>{e(stage.id)}</code></h3><div class="matrices">'
        f"<figure{attributes}><figcaption>routing_weights <span>({m.shape[0]}×{m.shape[1]}: "
        f'each token\'s experts)</span></figcaption><table class="m route"><thead><tr><th></th>{heads}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
        + (f'<p class="left-out">{e(note)}</p>' if note else "")
        + "</figure>"
        f'<figure><figcaption>load</figcaption><table class="load"><thead><tr><th></th><th>tokens</th>'
        f"<th>weight</th></tr></thead><tbody>{loads_}</tbody></table></figure></div>"
    )


def _layer_markdown(stage: Stage, precision: int, full: bool) -> str:
    """The Markdown document's part of one sparse layer: its table of tokens × their k experts
    (expert and weight in each cell), then each expert's load."""
    m = stage.matrices["routing_weights"]
    chosen = np.rint(stage["chosen"]).astype(int)
    rows = _kept_rows(stage, precision, full)
    lines = [f"\n### Layer {stage.layer} (`{stage.id}`)\n", "| token | " + " | ".join(m.cols) + " |"]
    lines.append("|---|" + "---:|" * m.shape[1])
    for i in rows:
        if i < 0:
            lines.append("| " + " | ".join(["⋮"] * (m.shape[1] + 1)) + " |")
            continue
        cells = [f"e{chosen[i, j]} {number(m.values[i, j], precision)}" for j in range(m.shape[1])]
        lines.append(f"| {md_label(m.rows[i])} | " + " | ".join(cells) + " |")
    lines += ["\n| load | tokens | weight |", "|---|---:|---:|"]
    for k, load in enumerate(loads(stage)):
        said = f"{load.tokens} | {number(load.weight, precision)}" if load.tokens else "0 | no token"
        lines.append(f"| expert {k} | {said} |")
    return "\n".join(lines)


def _typed(piece: str) -> str:
    """A token as typed: typewriter, "--" two hyphens, not a dash."""
    return rf"\texttt{{{tex(label(piece)).replace('--', '-{}-')}}}"


def _layer_latex(stage: Stage, precision: int, full: bool) -> str:
    """The LaTeX document's part of one sparse layer: the same tables as tabulars, every token in
    typewriter as typed, shrunk to the line when they must be (the document's ``\\fit``)."""
    m = stage.matrices["routing_weights"]
    chosen = np.rint(stage["chosen"]).astype(int)
    k = m.shape[1]
    out = [f"\\subsection*{{Layer {stage.layer}}}\n{{\\small\\ttfamily {tex(stage.id)}}}\\par\n"]
    rows = [r"\multicolumn{1}{c}{$\vdots$}" + r" & $\vdots$" * k + r" \\" if i < 0 else
            _typed(m.rows[i]) + "".join(
                f" & $e_{{{chosen[i, j]}}}$ {number(m.values[i, j], precision)}" for j in range(k)
            ) + r" \\"
            for i in _kept_rows(stage, precision, full)]  # fmt: skip
    load = [
        f"expert {e} & {x.tokens} & {number(x.weight, precision) if x.tokens else '---'}" + r" \\"
        for e, x in enumerate(loads(stage))
    ]
    out += [
        "\\fit{\\begin{tabular}{l" + "r" * k + "}\n",
        "token & " + " & ".join(tex(c) for c in m.cols) + r" \\ \hline" + "\n",
        "\n".join(rows) + "\n\\end{tabular}\\qquad\\begin{tabular}{lrr}\n",
        r"load & tokens & weight \\ \hline" + "\n" + "\n".join(load) + "\n\\end{tabular}}\n",
    ]
    return "".join(out)
