"""What a reader sees: the terminal (``render``, ``tour``, ``figure``, ``palette``), one cell's
arithmetic (``explain``) and the documents (``documents``: Markdown, LaTeX, HTML, worksheets)."""
