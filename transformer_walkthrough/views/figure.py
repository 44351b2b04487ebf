"""Where am I: Figure 1 of the paper as a small map, with the current stage highlighted.

The map is laid out once here, from the walk of ``architecture`` (so it follows every convention:
pre-norm's norm-k and residual-k stages, final norms, a decoder-only model with no encoder), each
stage drawn as the box its ``Place`` names, as lines of spans; the terminal styles the spans
(``stages.figure``) and the HTML report takes the same layout as an inline SVG (``figure_svg``).
Like Figure 1 it reads bottom to top, the encoder on the left and the decoder on the right, one
row per layer::

                                   output   linear softmax
    encoder ×1                     decoder ×1
      0 self +norm ffn +norm         0 masked +norm cross +norm ffn +norm
        embed pos                      embed pos
    inputs: X = decoder.0.add-norm-1 output · memory = encoder.0.add-norm-2 output

The current stage is in brackets, ``[cross]`` (and highlighted in colour), the stages computed
before it are dimmed. A stack of more than three layers shows its first and last layers and the
current one, with ``⋮`` rows between.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, NamedTuple

from ..model import architecture
from ..model.architecture import ENCODER, Place, bottom, final_norm, head, num_layers, stacks

if TYPE_CHECKING:
    from ..config import ModelConfig
    from ..model.trace import Trace

# The state of a span: a box before, at or after the current stage, or text that is not a box.
DONE, CURRENT, TODO, LABEL, TEXT = "done", "current", "todo", "label", "text"
GAP = 3  # spaces between the encoder's column and the decoder's
MAX_LAYERS = 3  # more layers than this: the first, the current and the last, with ⋮ between


class Span(NamedTuple):
    """A piece of a line of the map: its text, its state, and the stage id of a box (else None)."""

    text: str
    state: str
    stage: str | None = None


Line = list[Span]


def _boxes(places: list[Place], order: dict[str, int], current: str | None) -> Line:
    """The places' boxes (``Place.box``), one space apart; the current one in brackets, "[cross]"."""
    at = order.get(current, -1) if current is not None else -1
    line: Line = []
    for k, place in enumerate(places):
        sid = place.id
        state = CURRENT if sid == current else DONE if order.get(sid, len(order)) < at else TODO
        if k:
            line.append(Span(" ", TEXT))
        if state == CURRENT:
            line += [Span("[", CURRENT, sid), Span(place.box, state, sid), Span("]", CURRENT, sid)]
        else:
            line.append(Span(place.box, state, sid))
    return line


def _shown_layers(n: int, current_layer: int | None) -> list[int | None]:
    """The layers to draw, bottom to top; None for a ``⋮`` row standing for the layers between."""
    if n <= MAX_LAYERS:
        return list(range(n))
    keep = sorted({0, n - 1, *([current_layer] if current_layer is not None else [])})
    out: list[int | None] = []
    for k, layer in enumerate(keep):
        if k and layer - keep[k - 1] > 1:
            out.append(None)
        out.append(layer)
    return out


def _width(line: Line) -> int:
    return sum(len(s.text) for s in line)


def _stack(side: str, m: ModelConfig, order: dict[str, int], current: str | None) -> list[Line]:
    """One stack's rows, top to bottom: its heading, the final norm, the layers, the embedding."""
    n = num_layers(side, m)
    parts = (current or "").split(".")
    current_layer = int(parts[1]) if parts[0] == side and len(parts) == 3 else None
    rows: list[Line] = [[Span(f"{side} ×{n}", LABEL)]]
    if m.has_final_norm:
        rows.append([Span("    ", TEXT), *_boxes(final_norm(side, m), order, current)])
    label_width = len(str(n - 1))
    for layer in reversed(_shown_layers(n, current_layer)):
        if layer is None:
            rows.append([Span("  " + "⋮".rjust(label_width), LABEL)])
            continue
        head = Span(f"  {layer:>{label_width}} ", LABEL)
        places = [place for block in architecture.layer(side, layer, m) for place in block.places]
        rows.append([head, *_boxes(places, order, current)])
    rows.append([Span(" " * (3 + label_width), TEXT), *_boxes(bottom(side, m), order, current)])
    return rows


def figure_lines(trace: Trace, current: str, width: int = 80) -> list[Line]:
    """Figure 1 as lines of spans, bottom to top like the paper, with ``current`` highlighted, the
    stages before it dimmed, and last where its inputs come from (broken between inputs to fit
    ``width``)."""
    m = trace.config.model
    order = {sid: k for k, sid in enumerate(trace.stages)}
    columns = [_stack(side, m, order, current) for side in stacks(m)]
    output = [Span("output ", LABEL), *_boxes(head(m), order, current)] if head(m) else []
    # The decoder's column starts at the same place on every page: as if the widest encoder row
    # held the current box's brackets.
    left = 0
    if len(columns) == 2:
        left = max(_width(row) for row in _stack(ENCODER, m, order, None)) + 2 + GAP
    height = max(len(c) for c in columns)
    # The headings on one row, the embeddings on one row: the shorter stack is padded under its
    # heading (and final norm).
    top = 1 + m.has_final_norm
    padded = [c[:top] + [[] for _ in range(height - len(c))] + c[top:] for c in columns]
    lines: list[Line] = [[Span(" " * left, TEXT), *output]]
    for k in range(height):
        line = list(padded[0][k])
        if len(padded) == 2 and padded[1][k]:
            line += [Span(" " * (left - _width(line)), TEXT), *padded[1][k]]
        lines.append(line)
    lead = "inputs: "
    for k, text in enumerate(pack(inputs_of(trace, current), " · ", width - len(lead))):
        lines.append([Span(lead if k == 0 else " " * len(lead), LABEL), Span(text, TEXT)])
    return [_trimmed(line) for line in lines]


def pack(entries: list[str], sep: str, width: int) -> list[str]:
    """Entries joined by ``sep`` into lines of at most ``width``, broken only between entries."""
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + len(sep) + len(entry) <= width:
            lines[-1] += sep + entry
        else:
            lines.append(entry)
    return lines


def inputs_of(trace: Trace, current: str) -> list[str]:
    """Where the stage's inputs come from: ["X = decoder.0.add-norm-1 output", "memory = …"]."""
    if current not in trace.stages:
        return ["—"]
    stage = trace[current]
    if not stage.sources:
        return ["the tokens' ids" if stage.kind == "embedding" else "its own matrices"]
    return [f"{name} = {source} {trace[source].output}" for name, source in stage.sources.items()]


def _trimmed(line: Line) -> Line:
    """No spaces at the end of a line, nor empty spans."""
    line = [s for s in line if s.text]
    while line and line[-1].state == TEXT and not line[-1].text.strip():
        line.pop()
    return line


def figure_text(trace: Trace, current: str, width: int = 80) -> str:
    """The map as plain text (the current box in brackets): for pipes, tests and Markdown."""
    return "\n".join("".join(s.text for s in line) for line in figure_lines(trace, current, width))


# ---------------------------------------------------------------------------------------------
# SVG: the same layout, a box a rectangle, for the HTML report (inline, no script, no fonts to fetch)
# ---------------------------------------------------------------------------------------------

CHAR, ROW = 7.8, 20  # px: a monospace character's advance at 13px, and a row's height
SVG_COLOURS = {  # fill, text
    CURRENT: ("#41a555", "#000000"),  # the deepest green of the palette (palette.sequential(1))
    DONE: ("#f0f0f0", "#888888"),
    TODO: ("#ffffff", "#000000"),
}


def figure_svg(trace: Trace, current: str) -> str:
    """The map as an inline ``<svg>`` element: boxes as rectangles (the current one filled, those
    before it grey), labels as text; the same layout as ``figure_lines``."""
    lines = figure_lines(trace, current)
    width = max(sum(len(s.text) for s in line) for line in lines) * CHAR + 8
    height = len(lines) * ROW + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="figure-map" role="img" width="{width:.0f}" '
        f'height="{height}" viewBox="0 0 {width:.0f} {height}" font-family="monospace" font-size="13">',
        f"<title>Figure 1: where {html.escape(current)} sits in the model</title>",
    ]
    for row, line in enumerate(lines):
        y = 4 + row * ROW
        column = 0
        for span in line:
            x = 4 + column * CHAR
            column += len(span.text)
            if span.state in SVG_COLOURS and span.text not in ("[", "]"):
                fill, ink = SVG_COLOURS[span.state]
                parts.append(
                    f'<rect x="{x - 2:.1f}" y="{y + 1}" width="{len(span.text) * CHAR + 4:.1f}" '
                    f'height="{ROW - 4}" rx="3" fill="{fill}" stroke="#999999"/>'
                )
                weight = ' font-weight="bold"' if span.state == CURRENT else ""
                text = html.escape(span.text)
                parts.append(f'<text x="{x:.1f}" y="{y + ROW - 7}" fill="{ink}"{weight}>{text}</text>')
            elif span.text.strip() and span.text not in ("[", "]"):
                weight = ' font-weight="bold"' if span.state == LABEL else ""
                parts.append(
                    f'<text x="{x:.1f}" y="{y + ROW - 7}" xml:space="preserve"{weight}>'
                    f"{html.escape(span.text)}</text>"
                )
    parts.append("</svg>")
    return "\n".join(parts)


__all__ = ["CURRENT", "DONE", "LABEL", "TEXT", "TODO", "Span", "figure_lines", "figure_svg", "figure_text"]
