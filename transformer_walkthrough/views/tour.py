"""`walkthrough tour`: the forward pass one stage at a time, paged by the keyboard.

Each page (a stage, then the prediction) is laid out once into lines; the screen shows a window
of them under a fixed header ("stage 5 of 16 · …"), so a stage taller than the terminal scrolls
instead of running off the top. Keys are read raw: an arrow key arrives as an escape sequence
(ESC [ A), which is decoded whole, never taken for a lone Esc.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Callable, Iterator

from rich.console import Console, Group
from rich.segment import Segment, Segments
from rich.text import Text

from ..errors import printable
from ..model.trace import Trace
from .render import View, figure, prediction_table, render_stage, trim, weights_line

HELP = "Enter next · b back · Home/End first/last · q quit"
SCROLL_HELP = "j/k ↓/↑ scroll · space page · " + HELP
# The escape sequences of the keys the tour knows, in both the normal and the application mode.
SEQUENCES = {
    "\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down",
    "\x1b[C": "right", "\x1bOC": "right", "\x1b[D": "left", "\x1bOD": "left",
    "\x1b[5~": "page-up", "\x1b[6~": "page-down",
    "\x1b[H": "home", "\x1bOH": "home", "\x1b[1~": "home", "\x1b[7~": "home",
    "\x1b[F": "end", "\x1bOF": "end", "\x1b[4~": "end", "\x1b[8~": "end",
    "\x1b": "escape",
}  # fmt: skip
ESCAPE_WAIT = 0.05  # seconds: the rest of a sequence arrives at once; a lone Esc is followed by nothing


def decode(sequence: str) -> str:
    """A key's name (``up``, ``page-down``, ``escape``, …) from what the terminal sent; a plain
    character as itself; ``unknown`` for a sequence the tour has no use for (ignored, not quit)."""
    if sequence.startswith("\x1b"):
        return SEQUENCES.get(sequence, "unknown")
    return sequence


def read_key() -> str:
    """One key press on a terminal (no Enter needed); a line's first character otherwise. "" at the end."""
    if sys.stdin is None:  # started with stdin closed (`<&-`): as at the end of a file
        return ""
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        if line.startswith("\x1b"):
            return decode(line.rstrip("\r\n"))
        return line[:1] if line else ""
    fd = sys.stdin.fileno()
    with keys_one_by_one():
        # os.read, not sys.stdin.read: a buffered read would swallow the rest of a sequence, which
        # select() would then never see.
        data = os.read(fd, 1)
        if data == b"\x1b":
            while select.select([fd], [], [], ESCAPE_WAIT)[0]:
                data += os.read(fd, 1)
                if len(data) >= 3 and (data[-1:].isalpha() or data.endswith(b"~")):
                    break
        elif data and data[0] >= 0xC0:  # the first byte of a character of 2, 3 or 4 bytes (UTF-8)
            size = 2 if data[0] < 0xE0 else 3 if data[0] < 0xF0 else 4
            while len(data) < size and select.select([fd], [], [], ESCAPE_WAIT)[0]:
                data += os.read(fd, 1)
    return decode(data.decode("utf-8", "replace"))


@contextlib.contextmanager
def keys_one_by_one() -> Iterator[None]:
    """Keys arrive one by one, without echo, for as long as this lasts (the whole tour: a key
    pressed while a page prints must not be echoed onto it); Ctrl-C still interrupts. Nested, it
    does nothing. A no-op when stdin is not a terminal."""
    global _raw
    if _raw or sys.stdin is None or not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    # TCSANOW, not the default TCSAFLUSH, which would throw away keys already pressed.
    tty.setcbreak(fd, termios.TCSANOW)
    _raw = True
    try:
        yield
    finally:
        _raw = False
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


_raw = False


def _page_lines(console: Console, trace: Trace, view: View, stage_index: int) -> list[list[Segment]]:
    """A page laid out at the console's width, as lines of segments: a stage, or the prediction."""
    stages = list(trace)
    if stage_index < len(stages):
        stage = stages[stage_index]
        page = Group(figure(trace, stage.id, console.width), *render_stage(console, stage, view))
    else:
        page = prediction_table(trace, view)
    options = console.options.update(width=console.width, height=None)
    lines = console.render_lines(page, options, pad=False)
    while lines and not "".join(s.text for s in lines[-1]).strip():
        lines.pop()  # no blank lines at the end to scroll to
    return [trim(line) for line in lines]


def run_tour(console: Console, trace: Trace, view: View, key: Callable[[], str] = read_key) -> int:
    """Page through every stage, then the prediction, until the last page or q; return the page reached.

    Enter, n or → go to the next page, b, Backspace or ← back, Home and End to the first and last;
    within a page taller than the screen j/k or ↓/↑ move a line, space and PageDown/PageUp a screen
    (space at the bottom goes on to the next page).
    """
    with keys_one_by_one() if key is read_key else contextlib.nullcontext():
        return _pages(console, trace, view, key)


def _pages(console: Console, trace: Trace, view: View, key: Callable[[], str]) -> int:
    stages = list(trace)
    pages = len(stages) + 1
    cache: dict[int, list[list[Segment]]] = {}
    page, top = 0, 0
    while True:
        lines = cache.get(page)
        if lines is None:
            lines = cache[page] = _page_lines(console, trace, view, page)
        # The header, the weights' origin and the help line, and one line left for the cursor: a
        # screen filled to its last line would scroll the header away.
        body = max(1, console.height - 4)
        bottom = max(0, len(lines) - body)
        top = min(top, bottom)
        where = (
            f"stage {page + 1} of {len(stages)} · {printable(stages[page].id)}"
            if page < len(stages)
            else f"the prediction, after the {len(stages)} stages"
        )
        if len(lines) > body:
            where += f" · lines {top + 1}–{min(top + body, len(lines))} of {len(lines)}"
        if console.is_terminal:
            console.clear()
        header = Text(where, style="bold reverse", no_wrap=True, overflow="ellipsis")
        header.truncate(console.width, overflow="ellipsis")
        console.print(header)
        console.print(weights_line(trace), no_wrap=True, overflow="ellipsis")
        window = [s for line in lines[top : top + body] for s in (*line, Segment.line())]
        console.print(Segments(window), end="")
        help_text = SCROLL_HELP if len(lines) > body else HELP
        console.print(
            Text(help_text if page < pages - 1 else "the end · b back · q quit", style="dim"),
            no_wrap=True,
            overflow="ellipsis",
        )
        pressed = key()
        if pressed in ("q", "Q", "", "escape"):
            return page
        if pressed in ("j", "down"):
            top = min(top + 1, bottom)
        elif pressed in ("k", "up"):
            top = max(0, top - 1)
        elif pressed == "page-up":
            top = max(0, top - body)
        elif pressed in (" ", "page-down") and top < bottom:
            top = min(top + body, bottom)
        elif pressed in ("b", "B", "\x7f", "left"):  # back; also Backspace
            page, top = max(0, page - 1), 0
        elif pressed == "home":
            page, top = 0, 0
        elif pressed == "end":
            page, top = pages - 1, 0
        elif pressed in ("\n", "\r", " ", "n", "right", "page-down"):
            if page == pages - 1:
                return page
            page, top = page + 1, 0
