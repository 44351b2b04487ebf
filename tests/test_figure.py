"""Where am I: Figure 1 as a small map, for every convention. Snapshots written by hand."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from transformer_walkthrough.config import Config, ModelConfig, load_config
from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.figure import CURRENT, DONE, TODO, figure_lines, figure_svg, figure_text

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def trace_of(name: str) -> Trace:
    return run_forward(load_config(CONFIGS / f"{name}.yaml"))


def test_the_article_in_cross_attention(trace: Trace) -> None:
    assert figure_text(trace, "decoder.0.cross-attention").splitlines() == [
        "                             output linear softmax",
        "encoder ×1                   decoder ×1",
        "  0 self +norm ffn +norm       0 masked +norm [cross] +norm ffn +norm",
        "    embed pos                    embed pos",
        "inputs: X = decoder.0.add-norm-1 output · memory = encoder.0.add-norm-2 output",
    ]


def test_standard_two_layers_each() -> None:
    assert figure_text(trace_of("standard"), "encoder.1.add-norm-2").splitlines() == [
        "                             output linear softmax",
        "encoder ×2                   decoder ×2",
        "  1 self +norm ffn [+norm]     1 masked +norm cross +norm ffn +norm",
        "  0 self +norm ffn +norm       0 masked +norm cross +norm ffn +norm",
        "    embed pos                    embed pos",
        "inputs: X = encoder.1.add-norm-1 output",
        "        sublayer = encoder.1.feed-forward output",
    ]


def test_pre_norm_has_norm_and_residual_boxes_and_final_norms() -> None:
    assert figure_text(trace_of("pre-norm"), "decoder.0.residual-2").splitlines() == [
        "                               output linear softmax",
        "encoder ×1                     decoder ×1",
        "    final norm                     final norm",
        "  0 norm self + norm ffn +       0 norm masked + norm cross [+] norm ffn +",
        "    embed pos                      embed pos",
        "inputs: X = decoder.0.residual-1 output",
        "        sublayer = decoder.0.cross-attention output",
    ]


def test_decoder_only_has_no_encoder_column() -> None:
    assert figure_text(trace_of("gpt-style"), "decoder.final-norm").splitlines() == [
        "output linear softmax",
        "decoder ×2",
        "    [final norm]",
        "  1 norm masked + norm ffn +",
        "  0 norm masked + norm ffn +",
        "    embed pos",
        "inputs: X = decoder.1.residual-2 output",
    ]


def test_marian_style_at_the_output() -> None:
    assert figure_text(trace_of("marian-style"), "output.logits").splitlines() == [
        "                             output [linear] softmax",
        "encoder ×1                   decoder ×1",
        "  0 self +norm ffn +norm       0 masked +norm cross +norm ffn +norm",
        "    embed pos                    embed pos",
        "inputs: X = decoder.0.add-norm-3 output",
    ]


def test_a_deep_stack_shows_its_first_last_and_current_layers() -> None:
    trace = run_forward(Config(model=ModelConfig(num_encoder_layers=6, num_decoder_layers=6)))
    assert figure_text(trace, "encoder.3.feed-forward").splitlines() == [
        "                             output linear softmax",
        "encoder ×6                   decoder ×6",
        "  5 self +norm ffn +norm",
        "  ⋮",
        "  3 self +norm [ffn] +norm     5 masked +norm cross +norm ffn +norm",
        "  ⋮                            ⋮",
        "  0 self +norm ffn +norm       0 masked +norm cross +norm ffn +norm",
        "    embed pos                    embed pos",
        "inputs: X = encoder.3.add-norm-1 output",
    ]


@pytest.mark.parametrize("name", ["article", "standard", "pre-norm", "gpt-style", "marian-style"])
def test_every_stage_is_one_box_done_before_and_todo_after(name: str) -> None:
    trace = trace_of(name)
    ids = list(trace.stages)
    for k, current in enumerate(ids):
        lines = figure_lines(trace, current)
        assert all(sum(len(s.text) for s in line) <= 80 for line in lines)
        boxes = {s.stage: s.state for line in lines for s in line if s.stage and s.text not in "[]"}
        assert sorted(boxes) == sorted(ids)  # every stage drawn once
        assert [boxes[i] for i in ids] == [DONE] * k + [CURRENT] + [TODO] * (len(ids) - k - 1)


def test_the_svg_is_well_formed_and_fills_the_current_box(trace: Trace) -> None:
    svg = figure_svg(trace, "decoder.0.cross-attention")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    rects = root.findall(f"{ns}rect")
    assert len(rects) == len(trace.stages)  # a rectangle per stage
    assert [r.get("fill") for r in rects].count("#41a555") == 1
    texts = [t.text for t in root.findall(f"{ns}text")]
    assert "cross" in texts and "encoder ×1" in texts
    assert "memory = encoder.0.add-norm-2 output" in " ".join(t or "" for t in texts)
    assert "<script" not in svg


def test_step_shows_the_map_above_the_stage_and_run_on_request(runner) -> None:  # type: ignore[no-untyped-def]
    from transformer_walkthrough.cli import app

    env = {"COLUMNS": "80", "NO_COLOR": "1"}
    lines = runner.invoke(app, ["step", "-s", "decoder.0.cross-attention"], env=env).stdout.splitlines()
    assert lines[1:6] == figure_text(run_forward(Config()), "decoder.0.cross-attention").splitlines()
    assert lines[6].startswith("Decoder layer 0 · multi-head cross-attention")
    plain = runner.invoke(app, ["step", "-s", "decoder.0.cross-attention", "--no-map"], env=env).stdout
    assert "inputs:" not in plain and "[cross]" not in plain
    assert "inputs:" not in runner.invoke(app, ["run"], env=env).stdout
    mapped = runner.invoke(app, ["run", "--map"], env=env).stdout
    assert mapped.count("inputs: ") == 16 and "    [embed] pos" in mapped


def test_the_report_places_the_map_beside_each_stage(tmp_path: Path) -> None:
    from transformer_walkthrough.views.documents.report import to_html

    trace = run_forward(load_config(CONFIGS / "pre-norm.yaml"))
    html = to_html(trace, list(trace))
    assert html.count('<div class="where"><svg') == len(trace)
    section = html[html.index('<section id="decoder.0.cross-attention">') :]
    section = section[: section.index("</section>")]
    assert "<title>Figure 1: where decoder.0.cross-attention sits in the model</title>" in section
