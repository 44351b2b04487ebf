"""The walkthrough as a document: Markdown, a standalone LaTeX file, a self-contained HTML report.

Each reads the same trace as the terminal and writes every stage's title, explanation, formula and
matrices (with their row and column labels), then the prediction. With ``--backward`` each matrix
has its gradient dL/d(matrix) beside it; with ``--no-weights`` the learned parameters are left
out. A worksheet hides chosen cells as numbered "?" boxes and ends with their answers: the
arithmetic ``explain`` shows for each.

Every writer yields the document in pieces, a stage (or a matrix row) at a time, so that a
large export streams to its file instead of being built whole in memory. Everything a trace
holds is text from a config — tokens such as <start> included — so every piece is escaped for
its format.

One module a job, each importing only those above it:

- ``text``: how a document writes a number, a token and prose in its markup (Markdown, LaTeX);
- ``shades``: how the HTML report shades a matrix's cells, and the legend that says so;
- ``worksheet``: the cells a worksheet hides, how each is computed (``cell_step``), the answers;
- ``shown``: what every document shows of a trace: the options, each stage's matrices grouped
  by meaning and summarised as the terminal summarises them, the heading, the prediction's cells;
- ``formulas``: a formula's terms (``model.formula``) as LaTeX and as MathML, which the browser typesets;
- ``markdown``, ``latex``, ``report`` (the HTML): one writer a format;
- ``writers``: the writer and the answer key of each format, by the file's suffix.

The package itself imports nothing, so that ``lens`` and ``overview`` can take ``text`` and
``shades`` without loading the writers, which show the lens in turn.
"""
