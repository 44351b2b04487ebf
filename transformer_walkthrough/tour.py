"""`walkthrough tour`: the forward pass one stage at a time, paged by the keyboard."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from .render import View, prediction_table, print_all, render_stage
from .trace import Trace

HELP = "Enter next · b back · q quit"


def read_key() -> str:
    """One key press on a terminal (no Enter needed); a line's first character otherwise. "" at the end."""
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line[:1] if line else ""
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        # Keys arrive one by one, without echo; Ctrl-C still interrupts. TCSANOW, not the default
        # TCSAFLUSH, which would throw away keys pressed while the stage was printing.
        tty.setcbreak(fd, termios.TCSANOW)
        return sys.stdin.read(1)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def run_tour(console: Console, trace: Trace, view: View, key: Callable[[], str] = read_key) -> int:
    """Page through every stage, then the prediction, until the last page or q; return the page reached."""
    stages = list(trace)
    pages = len(stages) + 1
    page = 0
    while True:
        if console.is_terminal:
            console.clear()
        where = stages[page].id if page < len(stages) else "prediction"
        console.print(Text(f"stage {page + 1} of {pages} · {where}", style="bold reverse"))
        if page < len(stages):
            print_all(console, render_stage(console, stages[page], view))
        else:
            console.print(prediction_table(trace, view))
        console.print(Text(HELP if page < pages - 1 else "the end · b back · q quit", style="dim"))
        pressed = key()
        if pressed in ("q", "Q", "", "\x1b"):
            return page
        if pressed in ("b", "B", "\x7f"):  # back; also Backspace
            page = max(0, page - 1)
        elif pressed in ("\n", "\r", " ", "n"):
            if page == pages - 1:
                return page
            page += 1
