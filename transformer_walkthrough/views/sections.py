"""The report's sections after the prediction: the logit lens and the attention overview.

A document that writes the whole pass (not a selection of stages, not a worksheet, whose hidden
cells the lens or a heatmap would give away) shows each stage to a ``Sections`` as it writes it:
what the sections read is gathered then (each layer's output and the top's weights for the lens,
each attention stage's heads drawn), so that a streamed pass, whose stages are dropped once
written, ends on the same sections as a whole trace. Each section is its own module's (``lens``,
``overview``). The Markdown and LaTeX documents end on the lens alone: a heatmap has no text form
worth reading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import WalkthroughError
from ..model.architecture import num_layers, stage_id, top_stack, walk
from ..model.trace import Trace
from .lens import HTML_TOP, LENS_CSS, lens_section
from .overview import OVERVIEW_CSS, attention_heads, attention_row, attention_section, block_side

if TYPE_CHECKING:
    from ..model.lens import Lens
    from ..model.trace import Stage

SECTIONS_CSS = LENS_CSS + OVERVIEW_CSS  # added to the report's stylesheet when the sections are in it


def whole_lens(trace: Trace) -> Lens | None:
    """The trace's logit lens, or None for a model it cannot read (the flatten head, which reads
    every position at once; an encoder with no output layer): a document then has no lens section."""
    from ..model.lens import logit_lens

    try:
        return logit_lens(trace, top=HTML_TOP)  # what the report shows of each cell, not the vocabulary
    except WalkthroughError:
        return None


class Sections:
    """The closing sections of a document of the whole pass, gathered from its stages as they are
    written (``see``), written once every stage is (``lens``, ``html``).

    The lens reads each layer's output (copied: n × d_model a layer) and the parameters of the top
    (the final norm's, the output layer's: views of the weights, no copy); the attention overview
    draws each attention stage's heads as it goes by. Nothing else of a stage is held.
    """

    def __init__(self, trace: Trace, attention: bool = True) -> None:
        from ..model.lens import LOGITS, TRANSFORM, lens_stages

        m = trace.config.model
        self.trace, self.attention = trace, attention
        self.outputs = set(lens_stages(m)) if m.output_head != "flatten" and m.task != "encode" else set()
        norm = {stage_id(top_stack(m), "final-norm")} if m.has_final_norm else set()
        self.tops = {TRANSFORM, LOGITS} | norm
        # What the lens reads, under the trace's own ids: a trace of its own (``lens.Recorded``
        # reads the top's parameters from it as from the pass's).
        self.read = Trace(
            trace.config, trace.source_tokens, trace.target_tokens, source_ids=trace.source_ids,
            target_ids=trace.target_ids, segment_ids=trace.segment_ids, answer_ids=trace.answer_ids,
            weights_source=trace.weights_source, weights_checkpoint=trace.weights_checkpoint,
        )  # fmt: skip
        self.rows: list[tuple[int, str]] = []  # the attention overview's rows, one per attention stage
        # every head of a long prompt drawn at one scale, all of them within the report's budget
        places = [p for p in walk(m) if p.kind.endswith("attention")]
        tokens = max(len(trace.source_tokens), len(trace.target_tokens), 1)
        causal = [p for p in places if p.sublayer is not None and p.sublayer.causal]
        self.f = block_side(tokens, len(places) * m.num_heads, len(causal) * m.num_heads)

    def see(self, stage: Stage) -> None:
        """Take from ``stage``, as it is written, what the closing sections read of it."""
        import dataclasses

        if stage.id in self.outputs:
            out = stage.matrices[stage.output]
            held = {stage.output: out._replace(values=out.values.copy())}
        elif stage.id in self.tops:
            held = {name: m for name, m in stage.matrices.items() if m.is_weight}
        else:
            held = None
        if held is not None:
            self.read.stages[stage.id] = dataclasses.replace(stage, matrices=held, cache=None, owner=None)
        if self.attention and attention_heads(stage):
            self.rows.append(attention_row(stage, self.f))

    def lens(self) -> Lens | None:
        """The lens of every layer (``whole_lens``) from what was gathered; None for a model it
        cannot read."""
        return whole_lens(self.read) if self.outputs else None

    def html(self, precision: int, full: bool, rerun: str = "") -> list[tuple[str, str, str]]:
        """(anchor, title in the navigation, HTML) of each section: the lens (none for the
        flatten head, which reads every position at once) and the attention overview."""
        sections = []
        lens = self.lens()
        if lens is not None:
            sections.append(("lens", "Logit lens", lens_section(self.trace, lens, precision, full, rerun)))
        if self.rows:
            overview = attention_section(self.rows, self.f, rerun)
            sections.append(("attention", "Attention, every layer and head", overview))
        return sections

    @staticmethod
    def titles(trace: Trace, attention: bool = True) -> list[tuple[str, str]]:
        """(anchor, title) of the sections the whole pass will end on, known before it runs (the
        navigation comes first): the lens when the model has one, the overview when it has heads."""
        m = trace.config.model
        out = []
        if m.output_head != "flatten" and m.task != "encode" and num_layers(top_stack(m), m):
            out.append(("lens", "Logit lens"))
        if attention and any(p.kind.endswith("attention") for p in walk(m)):
            out.append(("attention", "Attention, every layer and head"))
        return out
