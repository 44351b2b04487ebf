"""The terminal the commands print through (pypa/hatch's ``cli/terminal.py``): the console, sized
and clamped; the ``View`` its colours and encoding ask for; and every way a command's own words
are shown (prose wrapped at the width, a user's path as it is, a dim note, the bold first line of
an explanation, the training's progress bar, a status line on stderr).

``stages`` and ``tables`` lay out what a command computed (of ``widgets`` and ``blocks``); this
module puts it and the command's sentences on the screen, so that ``cli`` holds no style. Rich and
those modules are imported inside the methods: importing this module costs nothing, and
``walkthrough --help``, ``config`` and ``export -`` never load Rich.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from ..model.training import Loss
    from .widgets import View

# The widest and tallest terminal believed (COLUMNS, LINES): a matrix is laid out to the width,
# and COLUMNS=10000000 made `run` write hundreds of megabytes (99999999999: a MemoryError). A
# 1,000-column terminal is a 4K screen's width at its smallest font; past it, no one reads a line.
MAX_WIDTH = 1000
MAX_HEIGHT = 1000


class Terminal:
    """Standard output as the commands see it: a ``TrimmedConsole`` no narrower than 20 columns
    (else 80) and no larger than ``MAX_WIDTH`` × ``MAX_HEIGHT``."""

    def __init__(self) -> None:
        from .widgets import TrimmedConsole

        console = TrimmedConsole(highlight=False)
        if console.width < 20:  # COLUMNS=0 or a tiny pane: too narrow to lay anything out
            console.width = 80
        if console.width > MAX_WIDTH:  # set only then: a real terminal's size stays live (the tour resizes)
            console.width = MAX_WIDTH
        if console.height > MAX_HEIGHT:  # the tour pages by it
            console.height = MAX_HEIGHT
        self.console: Console = console

    @property
    def width(self) -> int:
        return self.console.width

    @property
    def ascii(self) -> bool:
        """Whether the stream cannot show our symbols (then the matrices write -inf, ...)."""
        from .ascii import lacks_symbols

        return lacks_symbols(self.console.encoding)

    def view(
        self, precision: int, full: bool = False, heatmap: bool = False, shared_scale: bool = False
    ) -> View:
        """How numbers are shown: ``precision`` digits, the console's width and colours."""
        from .widgets import View

        return View(
            precision=precision,
            width=self.width,
            full=full,
            heatmap=heatmap or shared_scale,
            shared_scale=shared_scale,
            colors="truecolor" if self.console.color_system == "truecolor" else "256",
            ascii=self.ascii,
        )

    def show(self, renderable: RenderableType) -> None:
        """One table or text of the views', each line ending where its text ends."""
        self.console.print(renderable)

    def show_all(self, renderables: Iterable[RenderableType]) -> None:
        """The blocks in order, uncropped (``blocks.print_all``)."""
        from .blocks import print_all

        print_all(self.console, iter(renderables))

    def line(self, text: str) -> None:
        """A sentence of the command's, wrapped at the width as ``paragraph`` wraps it (no number
        parted from its label, no aside in brackets broken when it fits a line); never markup."""
        self.paragraph(text)

    def paragraph(self, text: str) -> None:
        """A sentence broken as the explanations are: no number parted from its label."""
        from .widgets import paragraph

        self.console.print(paragraph(text, self.width))

    def say(self, text: str) -> None:
        """One line holding a user's text (a path): never read as markup, never broken to the width."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """A line in the background: where the weights came from."""
        from rich.text import Text

        self.console.print(Text(text, style="dim"))

    def continuation(self, prompt: str, added: str) -> None:
        """The prompt as given, then in bold what the model added to it (``decoded``: its pieces may
        be of any length)."""
        from rich.text import Text

        from ..errors import decoded, printable

        self.console.print(Text(printable(prompt)) + Text(decoded(added), style="bold"))

    def explanation(self, lines: list[str]) -> None:
        """One cell's arithmetic (``views.explain``): its first line in bold, each line wrapped
        between terms; a label of a checkpoint's 1.6 MB piece is cut as the matrices cut it, the
        numbers stay whole."""
        from rich.text import Text

        from ..errors import printable, short_words
        from .widgets import wrap_explanation

        for k, line in enumerate(lines):
            for part in wrap_explanation(short_words(printable(line)), self.width):
                self.console.print(Text(part, style="bold" if k == 0 else "", overflow="fold"))

    @contextlib.contextmanager
    def training_progress(self, total: int) -> Iterator[Callable[[int, Loss], None]]:
        """A progress bar of ``total`` steps with the latest loss (with experts, its cross-entropy
        and load-balancing loss side by side), erased when the block ends; only on a terminal.
        Yields the ``on_step(step, loss)`` to call after each step."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        loss = TextColumn("{task.fields[loss]}")
        columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), loss, TimeElapsedColumn())
        console = self.console
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("train", total=total, loss="loss …")
            yield lambda i, loss: progress.update(task, advance=1, loss=progress_text(loss))


def progress_text(loss: Loss) -> str:
    """The live loss; with experts, the cross-entropy and the load-balancing loss beside each other."""
    if loss.aux is None:
        return f"loss {loss_text(loss.total)}"
    return f"cross-entropy {loss_text(loss.cross_entropy)}  load-balancing {loss_text(loss.aux)}"


def loss_text(loss: float) -> str:
    """The live loss in four significant digits: a trained toy's 0.00003 reads 3.000e-05, not 0.0000."""
    return f"{loss:.4f}" if abs(loss) >= 0.1 or loss == 0 else f"{loss:.3e}"


@contextlib.contextmanager
def status(line: str | None) -> Iterator[None]:
    """``line`` on stderr while the block runs, erased after it however it ends; only on a terminal
    (a log or a pipe keeps no half-finished lines)."""
    stream = sys.stderr
    if line is None or stream is None or not stream.isatty():
        yield
        return
    import shutil

    width = max(20, min(shutil.get_terminal_size().columns, MAX_WIDTH)) - 1
    shown = line if len(line) <= width else line[: width - 1] + "…"
    stream.write(f"\r{shown}")  # no newline: the next write replaces it
    stream.flush()
    try:
        yield
    finally:
        stream.write("\r\x1b[K")  # back to the line's start, and clear it
        stream.flush()
