"""The walkthrough in Markdown: tables readable on a code-hosting site."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from ...model.trace import Stage, Trace
from ..lens import lens_markdown
from .routing import Routing, has_routing
from .shown import (
    Contents,
    Options,
    Shown,
    closing,
    contents_of,
    heading,
    hole,
    mark,
    probability,
    row_values,
    units,
)  # fmt: skip
from .text import md_label, md_text, number
from .worksheet import Worksheet, hole_label


def md_fence(lines: Sequence[str]) -> str:
    """A code fence longer than any run of backticks in ``lines``, which would otherwise close it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    return "`" * max(3, longest + 1)


def _md_anchor(stage_id: str, title: str) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^\w\- ]", "", f"{stage_id} {title}".lower()).replace(" ", "-")


def _md_matrix(s: Shown) -> Iterator[str]:
    m = s.matrix
    yield f"\n**{s.name}** ({m.shape[0]}×{m.shape[1]})\n\n"
    yield (
        "| "
        + " | ".join([f"**{s.name}**", *("…" if j < 0 else md_label(m.cols[j]) for j in s.cols)])
        + " |\n"
    )
    yield "|" + "---|" + "---:|" * len(s.cols) + "\n"
    for i in s.rows:
        if i < 0:
            yield "| " + " | ".join(["⋮"] * (len(s.cols) + 1)) + " |\n"
            continue
        cells = [
            "…"
            if v is None
            else f"**{hole(s.holes[i, j])}**"
            if (i, j) in s.holes
            else number(v, s.precision)
            for j, v in zip(s.cols, row_values(s, i), strict=True)
        ]
        yield "| " + " | ".join([md_label(m.rows[i]), *cells]) + " |\n"
    if note := s.left_out():
        yield f"\n{md_text(note)}\n"


def iter_markdown(
    trace: Trace, stages: Iterable[Stage], o: Options, contents: Contents | None = None
) -> Iterator[str]:
    """The document in Markdown, a piece at a time; ``stages`` may be computed as they are read
    (a streamed pass: ``contents`` then lists them beforehand)."""
    if contents is None:
        stages = list(stages)
        contents = contents_of(trace, stages)
    title, facts = heading(trace, o)
    line = "".join(md_label(text, table=False) if code else md_text(text) for text, code in facts)
    yield f"# {md_text(title)}\n\n{line}\n\n## Stages\n\n"
    yield "".join(f"- [{sid} — {said}](#{_md_anchor(sid, said)})\n" for sid, said in contents.stages)
    sections = closing(trace, contents, o)
    routing = Routing(trace, "md", o.precision, o.full) if has_routing(trace, contents, o) else None
    for stage in stages:
        yield f"\n## {stage.id} {stage.title}\n\n{stage.explanation}\n\n```text\n{stage.formula!s}\n```\n"
        for row in units(stage, o):
            for unit in row:
                for shown in unit:
                    yield from _md_matrix(shown)
        if sections is not None:
            sections.see(stage)
        if routing is not None:
            routing.see(stage)
    if contents.predicts and trace.prediction:
        d = max(o.precision, 2)
        yield "\n## Prediction\n\n| after | predicted | p | expected | | top 3 |\n|---|---|---:|---|---|---|\n"
        for p in trace.prediction:
            top = ", ".join(f"{md_label(w)} {probability(q, d, o)}" for w, q in p.top)
            expected = md_label(p.expected) if p.expected else "—"
            yield (
                f"| {md_label(p.after)} | **{md_label(p.word)}** | {probability(p.probability, d, o)} "
                f"| {expected} | {mark(p)} | {top} |\n"
            )
    if routing is not None:
        yield routing.section()
    if sections is not None and (lens := sections.lens()):
        yield lens_markdown(lens, o.precision, o.full)
    if o.worksheet is not None and not o.worksheet.separate_key:
        yield from _md_key(trace, o.worksheet)


def _md_key(trace: Trace, sheet: Worksheet) -> Iterator[str]:
    yield "\n## Answer key\n"
    for h, lines in zip(sheet.holes, sheet.answers, strict=True):
        fence = md_fence(lines)
        yield (
            f"\n**?{h.number}** {md_label(hole_label(trace, h), table=False)}\n\n{fence}text\n"
            + "\n".join(lines)
            + f"\n{fence}\n"
        )


def to_markdown(trace: Trace, stages: list[Stage], precision: int = 2, **options: object) -> str:
    return "".join(iter_markdown(trace, stages, Options(precision, **options)))  # type: ignore[arg-type]


def iter_key(trace: Trace, sheet: Worksheet, title: str) -> Iterator[str]:
    """A worksheet's answer key as a Markdown document of its own, under ``title``."""
    yield f"# {md_text(title)}\n"
    yield from _md_key(trace, sheet)
