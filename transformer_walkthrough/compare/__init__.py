"""One computation held against another: each stage against its second computation (``verify``),
the model against PyTorch's layers (``reference``), two runs against each other (``diff``), and
the first number that stopped being one (``nonfinite``); ``checks`` is what they report."""
