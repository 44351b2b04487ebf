"""What a reader sees: the terminal (``widgets``, ``blocks``, ``stages``, ``tables``, ``tour``,
``figure``, ``palette``), one cell's arithmetic (``explain``) and the documents (``documents``:
Markdown, LaTeX, HTML, worksheets)."""
