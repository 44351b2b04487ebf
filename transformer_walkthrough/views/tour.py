"""`walkthrough tour`: the forward pass one stage at a time, paged by the keyboard.

Each page (a stage, then the prediction) is laid out once into lines; the screen shows a window
of them under a fixed header ("stage 5 of 16 · …"), so a stage taller than the terminal scrolls
instead of running off the top. A window that starts inside a matrix repeats the matrix's title,
column labels and rule above its rows, as a printed table repeats its head on each page. Keys are
read raw: an arrow key arrives as an escape sequence (ESC [ A), which is decoded whole, never
taken for a lone Esc; a resize of the terminal (SIGWINCH) arrives as the key ``resize``.

`g` (or `:`) jumps to a stage by id, unique prefix or number, `/` searches the pages' text, `?` (or `h`)
lists the keys. Read from a pipe, a line is a key (its first character), and ``g ID`` or
``/text`` on one line is the key with what would be typed after it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import re
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from rich.console import Console
from rich.segment import Segment, Segments
from rich.style import Style
from rich.text import Text

from ..errors import StageError, close_matches, printable
from ..model.trace import Trace
from .blocks import SideBySide
from .stages import figure, prediction_table, render_stage, weights_line
from .widgets import View, trim

if TYPE_CHECKING:
    from ..model.stream import Stages

# "h keys", not "? keys": a "?" on an ASCII stream reads as a symbol it could not encode.
HELP = "Enter next · ← back · g go · / find · h keys · q quit"
SCROLL_HELP = "j/k line · space/b page · " + HELP  # 79 columns: whole at 80
END_HELP = "the end · ← back · g go · / find · h keys · q quit"
KEYS = [
    ("Enter, n, →", "the next stage (n: the next match, after a search)"),
    ("←, Backspace", "the previous stage, from its top"),
    ("j/k, ↓/↑", "a line down or up, in a stage taller than the screen"),
    ("space, PageDown", "a screen down; at the bottom, the next stage"),
    ("b, PageUp", "a screen up; at the top, the end of the previous stage"),
    ("Home, End", "the first stage, the prediction"),
    ("g or :", "go to a stage: its id, a unique prefix of it, or its number"),
    ("/", "search the text from here on; n the next match, N the previous"),
    ("? or h", "these keys"),
    ("q, Esc", "quit"),
]
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
PROMPTS = {"g": "go to stage: ", ":": "go to stage: ", "/": "/"}
_MATCH = Style(reverse=True)


def decode(sequence: str) -> str:
    """A key's name (``up``, ``page-down``, ``escape``, …) from what the terminal sent; a plain
    character as itself; ``unknown`` for a sequence the tour has no use for (ignored, not quit)."""
    if sequence.startswith("\x1b"):
        return SEQUENCES.get(sequence, "unknown")
    return sequence


# Keys already read but not yet handed out: what followed `g` or `/` on a line read from a pipe.
_pending: collections.deque[str] = collections.deque()
# The pipe a SIGWINCH handler writes to, so that a read waiting for a key wakes up (read end, write end).
_resized: tuple[int, int] | None = None


def read_key() -> str:
    """One key press on a terminal (no Enter needed); a line's first character otherwise. "" at the end.

    ``resize`` when the terminal changed size while waiting (``redraw_on_resize``).
    """
    if _pending:
        return _pending.popleft()
    if sys.stdin is None:  # started with stdin closed (`<&-`): as at the end of a file
        return ""
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        if line.startswith("\x1b"):
            return decode(line.rstrip("\r\n"))
        if line[:1] in PROMPTS and line[1:].strip():  # "g decoder.0.cross-attention", "/softmax"
            _pending.extend([*line[1:].strip(), "\r"])
        return line[:1] if line else ""
    fd = sys.stdin.fileno()
    with keys_one_by_one():
        if _resized is not None:
            wake = _resized[0]
            if wake in select.select([fd, wake], [], [])[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 4096)  # however many signals came, one redraw
                return "resize"
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


@contextlib.contextmanager
def redraw_on_resize() -> Iterator[None]:
    """While this lasts, a SIGWINCH wakes ``read_key``, which returns ``resize``. A no-op off the
    main thread or when stdin is not a terminal (nothing to resize)."""
    global _resized
    if (
        _resized is not None
        or not hasattr(signal, "SIGWINCH")
        or threading.current_thread() is not threading.main_thread()
        or sys.stdin is None
        or not sys.stdin.isatty()
    ):
        yield
        return
    wake, poke = os.pipe()
    os.set_blocking(wake, False)
    os.set_blocking(poke, False)

    def resized(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):  # a full pipe: a redraw is already due
            os.write(poke, b".")

    old = signal.signal(signal.SIGWINCH, resized)
    _resized = (wake, poke)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, old)
        _resized = None
        os.close(wake)
        os.close(poke)


def find_stage(trace: Trace | list[str], text: str) -> int:
    """The page a stage is on, from what was typed: its id, a unique prefix of it, its number in
    the stage list (1 for the first; one past the last is the prediction, as "16 stages + the
    prediction" counts), a unique part of it (``cross``), or ``prediction``. The stages are the
    trace's, or the ids given (a streamed pass's, before it has computed them).

    Raises StageError, saying what matched, when nothing or more than one stage does.
    """
    ids = trace if isinstance(trace, list) else [s.id for s in trace]
    wanted = text.strip()
    folded = wanted.casefold()
    if not wanted:
        raise StageError("no stage given")
    if wanted.isascii() and wanted.isdigit():  # "²" is a digit to isdigit, not to int
        number = int(wanted)
        if 1 <= number <= len(ids) + 1:  # "16 stages + the prediction": 17 is the prediction
            return number - 1
        raise StageError(f"no stage {number}: the stages are 1 to {len(ids)}, the prediction {len(ids) + 1}")
    names = [*ids, "prediction"]
    for test in (str.__eq__, str.startswith, str.__contains__):
        hits = [k for k, name in enumerate(names) if test(name.casefold(), folded)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            shown = ", ".join(printable(names[k]) for k in hits[:2]) + (", …" if len(hits) > 2 else "")
            raise StageError(f"{printable(wanted)!r} matches {len(hits)} stages: {shown}")
    close = close_matches(wanted, names)
    hint = f"; did you mean {close[0]}?" if close else "; `walkthrough stages` lists them"
    raise StageError(f"no stage matches {printable(wanted)!r}{hint}")


class Page(NamedTuple):
    """A page laid out at one width: its lines, their plain text (what a search reads: "" on the
    map, which every page has), and for each line the matrix row it belongs to (an index into
    ``heads``, -1 for none). ``heads`` holds, per row of matrices, the index of its title line and of
    its first line of numbers."""

    lines: list[list[Segment]]
    texts: list[str]
    owner: list[int]
    heads: list[tuple[int, int]]


def _page(console: Console, trace: Trace, view: View, stage_index: int) -> Page:
    """A page laid out at the console's width: a stage, or the prediction."""
    stages = list(trace)
    if stage_index < len(stages):
        stage = stages[stage_index]
        parts = [figure(trace, stage.id, console.width), *render_stage(console, stage, view)]
    else:
        parts = [prediction_table(trace, view)]
    options = console.options.update(width=console.width, height=None)
    lines: list[list[Segment]] = []
    owner: list[int] = []
    heads: list[tuple[int, int]] = []
    mapped = 0  # the map's lines, at the top of a stage's page: the same words on every page
    for k, part in enumerate(parts):
        rendered = console.render_lines(part, options, pad=False)
        if k == 0 and stage_index < len(stages):
            mapped = len(rendered)
        if isinstance(part, SideBySide) and len(rendered) > 3:
            # A row of matrices: the titles, the column labels, the rule, then the numbers.
            heads.append((len(lines), len(lines) + 3))
            owner += [len(heads) - 1] * len(rendered)
        else:
            owner += [-1] * len(rendered)
        lines += rendered
    while lines and not "".join(s.text for s in lines[-1]).strip():
        lines.pop()  # no blank lines at the end to scroll to
    lines = [trim(line) for line in lines]
    texts = ["" if i < mapped else "".join(s.text for s in line) for i, line in enumerate(lines)]
    return Page(lines, texts, owner[: len(lines)], heads)


class Window(NamedTuple):
    """What a screen of ``body`` lines shows of a page from line ``top``: the repeated head of the
    matrix it starts in (no lines if none), then ``count`` lines from ``start``."""

    head: list[list[Segment]]
    start: int
    count: int


def window(page: Page, top: int, body: int) -> Window:
    """The screen from ``top``: a top inside a matrix row, past its title, repeats the row's head."""
    row = page.owner[top] if top < len(page.owner) else -1
    if row >= 0:
        title, numbers = page.heads[row]
        if top > title and numbers - title < body:  # a head that fills the screen is not repeated
            start = max(top, numbers)
            return Window(page.lines[title:numbers], start, body - (numbers - title))
    return Window([], top, body)


def _in_head(page: Page, line: int) -> tuple[int, int] | None:
    """The (title, numbers) of the matrix row whose head ``line`` is in, past the title line (as a
    top, every such line shows the same screen as the title: the head, then the numbers)."""
    row = page.owner[line] if 0 <= line < len(page.owner) else -1
    if row >= 0:
        title, numbers = page.heads[row]
        if title < line <= numbers:
            return title, numbers
    return None


def _end(page: Page, top: int, body: int) -> int:
    shown = window(page, top, body)
    return shown.start + shown.count


def _reaching(page: Page, target: int, body: int) -> int:
    """The first top whose screen shows the line before ``target``: the screen that ends there."""
    for top in range(max(0, target - body), target):
        if _in_head(page, top) is None and _end(page, top, body) >= target:
            return top
    return max(0, target - 1)


def _down(page: Page, top: int) -> int:
    """One line down: past the lines that a repeated head would hide."""
    head = _in_head(page, top + 1)
    return top + 1 if head is None else head[1] + 1


def _up(page: Page, top: int) -> int:
    head = _in_head(page, top - 1)
    return max(0, top - 1 if head is None else head[0])


def _at(page: Page, line: int) -> int:
    """A top that shows ``line`` first (or the head of its matrix above it)."""
    head = _in_head(page, line)
    return line if head is None else head[0]


def run_tour(
    console: Console,
    trace: Trace,
    view: View,
    key: Callable[[], str] = read_key,
    start: int = 0,
    streamed: Callable[[], Stages] | None = None,
) -> int:
    """Page through every stage, then the prediction, until the last page or q; return the page reached.

    Enter, n or → go to the next page, ← or Backspace back, Home and End to the first and last;
    within a page taller than the screen j/k or ↓/↑ move a line, space and PageDown/PageUp (or b)
    a screen (space at the bottom goes on to the next page, PageUp at the top back to the end of
    the previous one); g jumps, / searches, ? or h lists the keys. ``start`` is the first page shown.

    With ``streamed`` the trace keeps no stage (``trace.Keep``): each page is laid out as the pass
    ``streamed()`` makes reaches its stage, and only its lines are kept; a resized terminal lays
    the pages out again from a new pass. Memory then holds one stage and the pages' lines.
    """
    terminal = key is read_key
    with contextlib.ExitStack() as stack:
        if terminal:
            stack.enter_context(keys_one_by_one())
            stack.enter_context(redraw_on_resize())
        return Tour(console, trace, view, key, start, streamed=streamed).run()


@dataclasses.dataclass
class Tour:
    """The tour's state: the page and its first line shown, the last search and its match."""

    console: Console
    trace: Trace
    view: View
    key: Callable[[], str]
    page: int = 0
    top: int = 0
    status: str = ""  # said in place of the help line, once
    query: str = ""
    match: tuple[int, int] | None = None  # the page and line of the last match
    cache: dict[int, Page] = dataclasses.field(default_factory=dict)
    streamed: Callable[[], Stages] | None = None  # a new pass of the trace's stages, streamed

    def __post_init__(self) -> None:
        if self.streamed is None:
            self.ids = [s.id for s in self.trace]
        else:
            from ..model.stream import outline

            self.ids = [sid for sid, _ in outline(self.trace.config.model)]
            self.reading = iter(self.streamed())
        self.read = 0  # the streamed pass's stages read so far
        self.pages = len(self.ids) + 1

    def laid_out(self, page: int) -> Page:
        """The page laid out at the console's width (a streamed pass read on up to it first)."""
        while page not in self.cache and self.streamed is not None and self.read < len(self.ids):
            stage = next(self.reading)  # the page's stage, and the ones before it not yet read
            self.trace = stage.owner()  # after a resize, the new pass's (the prediction is its)
            self.cache[self.read] = _page(self.console, self.trace, self.view, self.read)
            self.read += 1
        if page not in self.cache:
            self.cache[page] = _page(self.console, self.trace, self.view, page)
        return self.cache[page]

    @property
    def body(self) -> int:
        # The header, the weights' origin and the help line, and one line left for the cursor: a
        # screen filled to its last line would scroll the header away.
        return max(1, self.console.height - 4)

    def bottom(self, page: int) -> int:
        lines = self.laid_out(page)
        if len(lines.lines) <= self.body:
            return 0
        return _reaching(lines, len(lines.lines), self.body)

    def draw(self) -> None:
        console, ids = self.console, self.ids
        page = self.laid_out(self.page)
        body, n = self.body, len(page.lines)
        self.top = max(0, min(self.top, self.bottom(self.page)))
        shown = window(page, self.top, body)
        where = (
            f"stage {self.page + 1} of {len(ids)} · {printable(ids[self.page])}"
            if self.page < len(ids)
            else f"the prediction, after the {len(ids)} stages"
        )
        if n > body:
            first, last = shown.start + 1, min(shown.start + shown.count, n)
            span = f" · lines {first}–{last} of {n}"
            if len(where + span) > console.width:  # the id is what a reader types: the count gives way
                span = f" · {first}–{last}/{n}"
            where += span
        if console.is_terminal:
            console.clear()
        header = Text(where, style="bold reverse", no_wrap=True, overflow="ellipsis")
        header.truncate(console.width, overflow="ellipsis")
        console.print(header)
        console.print(weights_line(self.trace), no_wrap=True, overflow="ellipsis")
        lines = [*shown.head, *page.lines[shown.start : shown.start + shown.count]]
        if self.query:  # not on the map, which a search does not read
            searched = [True] * len(shown.head) + [
                bool(text) for text in page.texts[shown.start : shown.start + shown.count]
            ]
            lines = [self.highlight(x) if read else x for x, read in zip(lines, searched, strict=True)]
        console.print(Segments([s for line in lines for s in (*line, Segment.line())]), end="")
        if self.status:
            said, style = self.status, ""
        else:
            said = SCROLL_HELP if n > body else HELP if self.page < self.pages - 1 else END_HELP
            style = "dim"
        console.print(Text(said, style=style), no_wrap=True, overflow="ellipsis")
        self.status = ""

    def highlight(self, line: list[Segment]) -> list[Segment]:
        """``line`` with every occurrence of the search's text in reverse video."""
        text = "".join(s.text for s in line)
        spans = [m.span() for m in self.pattern().finditer(text)]
        if not spans:
            return line
        out: list[Segment] = []
        at = 0
        for segment in line:
            end = at + len(segment.text)
            cuts = sorted({at, end, *(p for span in spans for p in span if at < p < end)})
            for a, b in itertools.pairwise(cuts):
                lit = any(s <= a and b <= e for s, e in spans)
                style = (segment.style or Style()) + _MATCH if lit else segment.style
                out.append(Segment(segment.text[a - at : b - at], style))
            at = end
        return out

    def pattern(self) -> re.Pattern[str]:
        """The search's text, literally; case-blind unless it holds a capital (``A1`` is not ``a1``)."""
        flags = 0 if any(ch.isupper() for ch in self.query) else re.IGNORECASE
        return re.compile(re.escape(self.query), flags)

    def run(self) -> int:
        self.page = max(0, min(self.page, self.pages - 1))
        while True:
            self.draw()
            pressed = self.key()
            if pressed in ("q", "Q", "", "escape"):
                return self.page
            if self.act(pressed):
                return self.page

    def act(self, pressed: str) -> bool:
        """Do what a key asks; True when the tour is over (Enter on the last page)."""
        page = self.laid_out(self.page)
        bottom = self.bottom(self.page)
        if pressed == "resize":
            self.resize()
        elif pressed in ("j", "down"):
            self.top = min(_down(page, self.top), bottom)
        elif pressed in ("k", "up"):
            self.top = _up(page, self.top)
        elif pressed in ("page-up", "b", "B"):
            if self.top > 0:
                self.top = _reaching(page, self.top, self.body)
            elif self.page > 0:  # at the top: the end of the previous stage
                self.page -= 1
                self.top = self.bottom(self.page)
        elif pressed in (" ", "page-down") and self.top < bottom:
            self.top = min(_at(page, _end(page, self.top, self.body)), bottom)
        elif pressed in ("\x7f", "\x08", "left"):  # Backspace, ←: the previous stage, from its top
            self.page, self.top = max(0, self.page - 1), 0
        elif pressed == "home":
            self.page, self.top = 0, 0
        elif pressed == "end":
            self.page, self.top = self.pages - 1, 0
        elif pressed in ("g", ":"):
            self.go(self.ask(PROMPTS[pressed]))
        elif pressed == "/":
            self.search(self.ask("/"))
        elif pressed in ("?", "h"):
            self.keys()
        elif pressed == "n" and self.query:
            self.next_match(forward=True)
        elif pressed == "N":
            self.next_match(forward=False)
        elif pressed in ("\n", "\r", " ", "n", "right", "page-down"):
            if self.page == self.pages - 1:
                return True
            self.page, self.top = self.page + 1, 0
        return False

    def resize(self) -> None:
        """Lay the pages out again at the terminal's new size, near the same place."""
        from .terminal import MAX_HEIGHT, MAX_WIDTH

        console = self.console
        try:
            columns, rows = os.get_terminal_size(console.file.fileno())
        except (AttributeError, OSError, ValueError):  # not a terminal: the size the console has
            columns, rows = console.size
        columns = min(MAX_WIDTH, columns if columns >= 20 else 80)
        console.size = (columns, min(MAX_HEIGHT, max(rows, 5)))
        old = len(self.laid_out(self.page).lines)
        self.view = dataclasses.replace(self.view, width=console.width)
        self.cache.clear()
        if self.streamed is not None:  # the pages' lines are all it kept: a new pass lays them out
            self.reading.close()  # type: ignore[attr-defined]
            self.reading, self.read = iter(self.streamed()), 0
        page = self.laid_out(self.page)
        self.top = _at(page, min(len(page.lines) - 1, self.top * len(page.lines) // max(1, old)))

    def ask(self, prompt: str) -> str:
        """A line typed at ``prompt`` in the status line; "" when cancelled (Esc, or nothing typed)."""
        typed = ""
        while True:
            self.echo(prompt + typed)
            pressed = self.key()
            if pressed in ("\r", "\n"):
                return typed
            if pressed in ("", "escape"):
                return ""
            if pressed in ("\x7f", "\x08"):
                typed = typed[:-1]
            elif pressed == "\x15":  # Ctrl-U: the whole line
                typed = ""
            elif pressed == "resize":
                self.resize()
                self.draw()
            elif len(pressed) == 1 and pressed.isprintable():
                typed += pressed

    def echo(self, text: str) -> None:
        """On a terminal, ``text`` in place of the help line, the cursor after it; elsewhere nothing
        (what was typed shows in the next screen's status)."""
        console = self.console
        if not console.is_terminal:
            return
        shown = printable(text)[-(console.width - 1) :]
        console.file.write("\x1b[1A\r\x1b[2K" + shown + "\n")
        console.file.flush()

    def go(self, typed: str) -> None:
        if not typed.strip():
            return
        try:
            self.page, self.top = find_stage(self.ids, typed), 0
        except StageError as err:
            self.status = str(err)

    def keys(self) -> None:
        """The keys, on a screen of their own, until any key but a resize."""
        while True:
            console = self.console
            if console.is_terminal:
                console.clear()
            console.print(Text("keys", style="bold reverse"))
            width = max(len(k) for k, _ in KEYS) + 2
            for keys, what in KEYS:
                console.print(Text(keys.ljust(width) + what), no_wrap=True, overflow="ellipsis")
            console.print(Text("any key returns", style="dim"))
            pressed = self.key()
            if pressed != "resize":
                return
            self.resize()

    def search(self, typed: str) -> None:
        if not typed:
            return
        self.query = typed
        self.find(self.page, self.top, forward=True, first=True)

    def next_match(self, forward: bool) -> None:
        if not self.query:
            self.status = "no search yet: / and the text to look for"
            return
        here = (self.page, self.top)
        line = self.match if self.match is not None and self.match[0] == self.page else here
        self.find(*line, forward=forward, first=False)

    def find(self, page: int, line: int, forward: bool, first: bool) -> None:
        """Show the next line holding the query from (page, line) on — or back — wrapping around;
        said in the status line, or that nothing holds it."""
        pattern = self.pattern()
        step = 1 if forward else -1
        for k in range(self.pages + 1):
            p = (page + step * k) % self.pages
            texts = self.laid_out(p).texts
            if k == 0:
                lines = range(line if first else line + 1, len(texts)) if forward else range(line - 1, -1, -1)
            elif k == self.pages:  # back where it started: the lines before (or after) it
                end = min(line + (not first), len(texts))  # n finds the one match again
                lines = range(0, end) if forward else range(len(texts) - 1, line - 1, -1)
            else:
                lines = range(len(texts)) if forward else range(len(texts) - 1, -1, -1)
            for i in lines:
                if pattern.search(texts[i]):
                    wrapped = k == self.pages or (k > 0 and (p < page if forward else p > page))
                    self.page, self.match = p, (p, i)
                    self.top = min(_at(self.laid_out(p), i), self.bottom(p))
                    where = printable(self.ids[p]) if p < len(self.ids) else "the prediction"
                    self.status = f"/{printable(self.query)}: {where} · line {i + 1}" + (
                        " (wrapped around)" if wrapped else ""
                    )
                    return
        self.status = f"/{printable(self.query)}: not found"
