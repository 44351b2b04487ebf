"""Click any number: the HTML report explains each cell beside its matrix, as ``explain`` would.

The report is a document first: every number is in its table, and with scripts off it reads as
before. Its one inline script only adds. When the report is written, the arithmetic of every cell
it shows is worked out (``views.explain``; ``views.gradients`` for a dL/d cell) and carried in
that script as data: a table of distinct lines — a line many cells share (a softmax row's exps, a
weight's origin) is stored once — and, for each matrix, its cells as lists of line numbers. The
script reads the cell a click or the keyboard lands on and shows its lines in a panel after the
matrix, with the command line that prints the same.

The size stays bounded. The first ``BUDGET`` cells of a report (in reading order, a whole matrix
at a time, at most ``LINES_BUDGET`` characters of lines) carry their arithmetic; the cells past
it show the ``walkthrough explain`` command that prints theirs, as do the cells whose arithmetic
reads more than ``MAX_READS`` numbers (a softmax over GPT-2's 50,257 logits reads them all), and
every cell of a report without its weights (their numbers are in the arithmetic). The article's
example shows 1,651 cells (3,258 with ``--backward``): all of them fit.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import StageError, printable, short_words
from .explain import explain

if TYPE_CHECKING:
    from ..model.trace import Stage, Trace
    from .documents.shown import Options, Shown

BUDGET = 10_000  # cells whose arithmetic a report carries (the paper's base size: about 2.5 MB, 6 s)
LINES_BUDGET = 5_000_000  # characters of distinct lines, whatever the cells
MAX_READS = 4_096  # numbers one cell's arithmetic may read (and list) to be carried
LINES_A_PIECE = 50  # lines of arithmetic written at a time (a line of a 64-wide model: ~200 characters)


class Clicks:
    """The arithmetic of the cells of one report, gathered matrix by matrix as it is written."""

    def __init__(self, trace: Trace, o: Options) -> None:
        self.trace = trace
        self.grads = None
        if o.grads is not None:
            from ..model.backprop import Backward

            # explain_gradient reads only the stages' gradients; the loss is not shown here
            self.grads = Backward(math.nan, {}, o.grads)
        self.weights = o.weights
        self.rerun = f" {o.rerun}" if o.rerun else ""
        self.lines: dict[str, int] = {}  # each distinct line, by its number in the payload
        self.chars = 0  # of the lines
        self.figures: list[dict[str, Any]] = []
        self.cells = 0  # carried so far
        self.spent = False  # a matrix did not fit: it and every one after it show the command line

    def add(self, stage: Stage, shown: Shown) -> str:
        """The attributes of the matrix's figure: its number in the payload, whose entry holds
        the command that explains a cell of it, the rows and columns shown (-1 for the "⋮" and the
        "…") and each shown cell's lines — or, past the budget, why not."""
        rows, cols = shown.kept()
        entry: dict[str, Any] = {
            "p": f"walkthrough explain --stage {shlex.quote(stage.id)} --matrix {shlex.quote(shown.name)}",
            "r": list(shown.rows),
            "c": list(shown.cols),
        }
        self.figures.append(entry)
        attributes = f' data-x="{len(self.figures) - 1}"'
        n, reads = len(rows) * len(cols), self._reads(stage, shown)
        if not self.weights:
            entry["why"] = "This report leaves the weights out, and their numbers are in a cell's arithmetic."
            return attributes
        if reads > MAX_READS:
            entry["why"] = f"A cell of {shown.name} reads {reads:,} numbers: too many to carry in the report."
            return attributes
        before = len(self.lines), self.chars
        if not self.spent and self.cells + n <= BUDGET:
            x = [[self._cell(stage, shown.name, i, j) for j in cols] for i in rows]
            if self.chars <= LINES_BUDGET:
                self.cells += n
                entry["x"] = x
                return attributes
            for line in list(self.lines)[before[0] :]:  # this matrix's own lines go with it
                del self.lines[line]
            self.chars = before[1]
        self.spent = True
        entry["why"] = (
            f"This report carries the arithmetic of its first {self.cells:,} cells (a report carries "
            f"{BUDGET:,} at most, {LINES_BUDGET // 1_000_000} MB of it); this one is past them."
        )
        return attributes

    def _reads(self, stage: Stage, shown: Shown) -> int:
        """How many numbers the arithmetic of one cell of the matrix reads (the first cell's:
        every cell of a matrix is computed the same way); 0 for a weight, an input, a constant."""
        from .documents.worksheet import cell_step

        name = shown.name.removeprefix("dL/d")
        step = cell_step(self.trace, stage, name, 0, 0) if shown.matrix.values.size else None
        return 0 if step is None else len(step.inputs)

    def _cell(self, stage: Stage, name: str, i: int, j: int) -> list[int]:
        try:
            if name.startswith("dL/d"):
                from .gradients import explain_gradient

                lines = explain_gradient(self.trace, self.grads, stage.id, name, f"{i},{j}")  # type: ignore[arg-type]
            else:
                lines = explain(self.trace, stage.id, name, f"{i},{j}")  # its digits: the command's default
        except StageError as err:  # as the command line says it (numbers too large for their arithmetic)
            lines = [str(err)]
        ids = []
        for said in lines:
            line = short_words(printable(said))  # as printed: no control character, no 1.6 MB token
            if line not in self.lines:
                self.lines[line] = len(self.lines)
                self.chars += len(line)
            ids.append(self.lines[line])
        return ids

    def script(self) -> Iterator[str]:
        """The report's one script, its data first, in pieces of a few thousand characters (a
        matrix row's cells, ``LINES_A_PIECE`` lines). The data is JSON with every "<" escaped, so that no
        label (a token "</script>") can end the script early."""
        yield f"<script>const EXPLAINED = {{{_json('rerun')}:{_json(self.rerun)},{_json('lines')}:["
        lines = list(self.lines)
        for k in range(0, len(lines), LINES_A_PIECE):
            yield ("," if k else "") + ",".join(map(_json, lines[k : k + LINES_A_PIECE]))
        yield f"],{_json('figures')}:["
        for k, figure in enumerate(self.figures):
            x = figure.get("x")
            head = _json({key: v for key, v in figure.items() if key != "x"})[:-1]
            yield ("," if k else "") + head + (f",{_json('x')}:[" if x is not None else "}")
            if x is not None:
                yield from (("," if i else "") + _json(row) for i, row in enumerate(x))
                yield "]}"
        yield f"]}};\n{_SCRIPT}</script>"


def _json(value: object) -> str:
    """``value`` as compact JSON that is safe inside a <script>: "<", ">" and "&" (and the two
    line separators older engines end a string at) as \\u escapes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(_UNSAFE)


_UNSAFE = {ord(ch): f"\\u{ord(ch):04x}" for ch in "<>&\u2028\u2029"}


# Shown only once the script has run (it marks the body "clickable"): with scripts off, nothing
# looks as if it could be clicked.
CSS = """
.clickable figure[data-x] td:not(.gap) { cursor: pointer; }
.clickable figure[data-x] td:focus { outline: none; box-shadow: inset 0 0 0 2px var(--accent); }
aside.explained { flex: 1 1 28rem; max-width: 48rem; margin: 0; padding: .4rem .8rem; background: #f3f6fc;
                  border-left: 3px solid var(--accent); font-size: .85rem; }
aside.explained pre { margin: 0; white-space: pre-wrap; font: 12px/1.45 ui-monospace, monospace; }
aside.explained pre strong { font-weight: 700; }
aside.explained p { margin: .3rem 0 0; color: var(--muted); }
aside.explained p code { color: var(--fg); }
@media print { aside.explained { display: none; } }
"""

# Each matrix's table is one stop of the Tab key (its last cell visited: a roving tabindex); the
# arrow keys move between its cells, Home and End to the row's ends, Escape closes the panel.
# The panel is a live region: a screen reader reads the arithmetic as the cell is reached.
_SCRIPT = r"""(() => {
const X = EXPLAINED;
const panel = document.createElement("aside");
panel.className = "explained";
panel.setAttribute("role", "status");
panel.setAttribute("aria-live", "polite");
const text = document.createElement("pre");
const how = document.createElement("p");
panel.append(text, how);
const cellsOf = tr => [...tr.children].filter(c => c.tagName === "TD");
function where(td) {
  const fig = td.closest("figure[data-x]");
  if (!fig || td.classList.contains("gap")) return null;
  const f = X.figures[+fig.dataset.x], tr = td.parentElement;
  const i = f.r[[...tr.parentElement.children].indexOf(tr)], j = f.c[cellsOf(tr).indexOf(td)];
  return i >= 0 && j >= 0 ? {fig, f, i, j} : null;
}
function show(td) {
  const w = where(td);
  if (!w) return;
  const {fig, f, i, j} = w;
  const command = `${f.p} --cell ${i},${j}${X.rerun}`;
  const code = document.createElement("code");
  code.textContent = command;
  if (f.x) {
    const cell = f.x[f.r.filter(r => r >= 0).indexOf(i)][f.c.filter(c => c >= 0).indexOf(j)];
    const lines = cell.map(n => X.lines[n]);
    const head = document.createElement("strong");
    head.textContent = lines[0];
    text.replaceChildren(head, lines.length > 1 ? "\n" + lines.slice(1).join("\n") : "");
    how.replaceChildren("The command line prints the same: ", code);
  } else {
    text.textContent = f.why;
    how.replaceChildren("The command line shows its arithmetic: ", code);
  }
  if (fig.nextElementSibling !== panel) fig.after(panel);
  panel.hidden = false;
}
for (const fig of document.querySelectorAll("figure[data-x]")) {
  const table = fig.querySelector("table");
  const name = fig.querySelector("figcaption").textContent;
  table.setAttribute("aria-label", `${name}: move to a cell to see its arithmetic beside the matrix`);
  let first = true;
  for (const td of table.querySelectorAll("tbody td:not(.gap)")) {
    td.tabIndex = first ? 0 : -1;
    first = false;
  }
}
document.body.classList.add("clickable");
document.addEventListener("focusin", e => {
  const td = e.target.closest && e.target.closest("figure[data-x] td");
  if (!td) return;
  const table = td.closest("table");
  for (const other of table.querySelectorAll("td[tabindex='0']")) other.tabIndex = -1;
  td.tabIndex = 0;
  show(td);
});
document.addEventListener("keydown", e => {
  if (e.key === "Escape") { panel.hidden = true; return; }
  const td = e.target.closest && e.target.closest("figure[data-x] td");
  if (!td) return;
  const rows = [...td.closest("tbody").children].map(cellsOf);
  let k = rows.findIndex(r => r.includes(td)), l = rows[k].indexOf(td);
  const step = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]}[e.key];
  if (e.key === "Home") l = 0;
  else if (e.key === "End") l = rows[k].length - 1;
  else if (!step) return;
  do {
    if (step) { k += step[0]; l += step[1]; }
    if (k < 0 || k >= rows.length || l < 0 || l >= rows[k].length) return;
  } while (rows[k][l].classList.contains("gap") && step);
  e.preventDefault();
  rows[k][l].focus();
});
})();
"""
