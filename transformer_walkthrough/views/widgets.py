"""The terminal's small pieces, which every screen is made of: the styles, how numbers are shown
(``View``), a token cut to fit (``label``), the walkthrough's table, entries that wrap between
entries, explanations broken where a reader would break them, ✓ and ✗, and lines that end where
their text ends (``TrimmedConsole``, which the commands print through).

Text is never markup: a token like ``<start>`` or ``[1]`` must show as itself, and parsing
markup is the slow path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from ..errors import printable, shorten

LABEL = "bold cyan"
TITLE = "bold"
FORMULA = "yellow"
NEG_INF = "red"
ELLIPSIS = "…"
# Characters of a token on screen: a row label of 1.6 MB (a checkpoint's vocabulary can hold one)
# must not become a 1.6 MB column. Exports keep every label whole.
MAX_LABEL = 32


@dataclass(frozen=True)
class View:
    """How numbers are shown: never how they are computed."""

    precision: int = 2
    width: int = 100
    full: bool = False
    heatmap: bool = False  # every matrix coloured by value (on a colour terminal)
    shade_weights: bool = True  # attention weights and probabilities shaded, 0 white to 1 green
    colors: str = "truecolor"  # the terminal's: "truecolor", or "256" (palette's own 256-colour ramps)
    shared_scale: bool = False  # one heatmap scale per stage (its largest |value|), not per matrix
    scale: float | None = None  # the heatmap's scale when shared; None: each matrix's own
    ascii: bool = False  # the output cannot show "∞" or "…": the matrices write "-inf" and "..."


def label(text: str, limit: int = MAX_LABEL) -> str:
    """A token as the terminal shows it: escaped where it is not printable (ESC, newline, the lone
    surrogate of a byte that was not UTF-8) and cut to ``limit`` characters around a "…".

    The renderer's own guard: a label reaches it from a config, a checkpoint's vocabulary or a
    tokenizer, and whoever made it may not have escaped it.
    """
    if len(text) <= limit and text.isprintable():
        return text  # the common case, at the cost of two checks
    if len(text) > 2 * limit:  # only its ends can show: a 1.6 MB piece costs no more than a short one
        text = text[:limit] + text[-limit:]
    return shorten(printable(text), limit)


def styled_table(title: str | None = None) -> Table:
    """The walkthrough's table: title on the left, a rule under the header, no outer edges. The
    table is at least as wide as its title, which Rich would otherwise wrap at the columns' width
    ("Cached steps vs one full / pass")."""
    return Table(
        title=Text(title, style=TITLE) if title else None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        header_style=LABEL,
        min_width=cell_len(title) if title else None,
    )


class Entries:
    """A table cell of entries ("<end> 0.25") joined by ``sep`` that wraps between entries, never
    inside one: at 80 columns a word must not be parted from its number."""

    def __init__(self, entries: list[str], sep: str = ", ", style: str = "") -> None:
        self.entries, self.sep, self.style = entries, sep, style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((cell_len(e) + cell_len(self.sep.rstrip()) for e in self.entries), default=0)
        return Measurement(widest, cell_len(self.sep.join(self.entries)))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        for line in pack(self.entries, self.sep, options.max_width):
            yield Text(line, style=self.style, no_wrap=True, overflow="fold")


class Fitting:
    """The first of its layouts whose narrowest form fits the width (the last one otherwise): a
    table too wide for the terminal is laid out another way, never cut inside a word or a number."""

    def __init__(self, *layouts: RenderableType) -> None:
        self.layouts = layouts

    def chosen(self, console: Console, options: ConsoleOptions) -> RenderableType:
        unbounded = options.update_width(10_000)  # Measurement.get clamps to the width it is given
        for layout in self.layouts[:-1]:
            if Measurement.get(console, unbounded, layout).minimum <= options.max_width:
                return layout
        return self.layouts[-1]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.chosen(console, options))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        yield self.chosen(console, options)


def pack(entries: list[str], sep: str, width: int) -> list[str]:
    """The entries joined by ``sep`` into lines of at most ``width`` cells, broken only between
    entries (the separator's trailing space dropped at a break); an entry wider than the line
    stands alone."""
    lines: list[str] = []
    line = ""
    for k, entry in enumerate(entries):
        tail = sep.rstrip() if k < len(entries) - 1 else ""
        if line and cell_len(line) + cell_len(sep) + cell_len(entry) + cell_len(tail) > width:
            lines.append(line + sep.rstrip())
            line = entry
        else:
            line = f"{line}{sep}{entry}" if line else entry
    return [*lines, line] if line or not lines else lines


_OPEN, _CLOSE = "([{", ")]}"
_OPERATORS = ("=", "+", "−", "-", "/", "·", "×", "→", "≈")


def wrap_explanation(line: str, width: int, hang: int = 4) -> list[str]:
    """A line of ``explain`` broken to ``width`` where a reader would break it: never inside
    brackets (``A1[1, 0]``, an aside ``(h = 1 … num_heads)``), never between a label and its
    number (``<end> −∞``) nor around an operator (``e^(−∞) = 0.0000``); a long sum, only before
    its operators; what is still too long for a line (a long aside), between its words. Continuation
    lines are indented ``hang`` spaces past the line's own indent."""
    if cell_len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    words = line.lstrip(" ").split(" ")
    # Chunks: runs of words that must stay together; a weak break (before an operator) may part them.
    chunks: list[list[str]] = []
    depth = 0  # brackets open: A1[i, j], e^(x − m), an aside (h = 1 … num_heads)
    for k, word in enumerate(words):
        glued = k > 0 and (
            depth > 0
            or (word[:1] != "" and word[:1] in "0123456789−-+∞=/·×→≈|")
            or words[k - 1] in _OPERATORS
            or words[k - 1].startswith("Σ")  # a sum's sign stays with what it sums
        )
        if glued:
            chunks[-1].append(word)
        else:
            chunks.append([word])
        for ch in word:
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSE and depth:
                depth -= 1
    room = width - len(indent) - hang
    pieces: list[str] = []  # unbreakable text, each with the space before it implied
    for chunk in chunks:
        text = " ".join(chunk)
        if cell_len(text) <= room:
            pieces.append(text)
            continue
        parts: list[list[str]] = [[]]
        for word in chunk:  # too long to keep together: break before its operators
            if parts[-1] and word in _OPERATORS[:4]:
                parts.append([])
            parts[-1].append(word)
        for part in parts:  # and a part still too long (prose in brackets), between its words
            pieces += [" ".join(part)] if cell_len(" ".join(part)) <= room else part
    lines: list[str] = []
    line_text = indent
    for piece in pieces:
        if line_text.strip() and cell_len(line_text) + 1 + cell_len(piece) > width:
            lines.append(line_text)
            line_text = indent + " " * hang + piece
        else:
            line_text = f"{line_text} {piece}" if line_text.strip() else line_text + piece
    return [*lines, line_text]


def paragraph(text: str, width: int, style: str = "") -> Text:
    """``text`` broken into lines as ``wrap_explanation`` breaks them: no number parted from its label."""
    return Text("\n".join(wrap_explanation(text, width, hang=0)), style=style, overflow="fold")


def cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes: its length, unless a character is wide (▁猫: 3).

    ASCII first, at the cost of ``len``.
    """
    return len(text) if text.isascii() else cell_len(text)


def mark(right: bool | None) -> Text:
    """✓ or ✗ in plain text (colour only repeats it), nothing where there is no right answer."""
    if right is None:
        return Text("")
    return Text("✓", style="green") if right else Text("✗", style="bold red")


def trim(line: list[Segment]) -> list[Segment]:
    """A line of segments without the spaces at its end (unless they are coloured: a shaded cell)."""
    line = list(line)
    while line:
        last = line[-1]
        if last.control or (last.style is not None and last.style.bgcolor is not None):
            break
        text = last.text.rstrip(" ")
        if text:
            line[-1] = Segment(text, last.style)
            break
        line.pop()
    return line


def print_trimmed(console: Console, renderable: RenderableType) -> None:
    """One renderable, laid out at the console's width, each line without its trailing spaces."""
    lines = Segment.split_lines(console.render(renderable, console.options))
    console.print(Segments([s for line in lines for s in (*trim(line), Segment.line())]), end="", crop=False)


class TrimmedConsole(Console):
    """A console whose tables and text end their lines where their text ends, never in padding:
    what the commands print through."""

    def print(self, *objects: object, **kwargs: object) -> None:  # type: ignore[override]
        if len(objects) == 1 and not kwargs and isinstance(objects[0], (str, Text, Table, Group)):
            renderable = objects[0]
            print_trimmed(self, self.render_str(renderable) if isinstance(renderable, str) else renderable)
        else:
            super().print(*objects, **kwargs)  # type: ignore[arg-type]
