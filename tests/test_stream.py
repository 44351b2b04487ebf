"""`export` and `tour` stream the pass (``model.stream.Stages``): each stage written or shown as it
is computed, then dropped. What they write is what the whole trace writes: the same bytes (JSON,
Markdown, LaTeX, HTML), the same arrays in the same order (.npz), on every shipped config and on a
tiny checkpoint in float64."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.cli.passes import rerun
from transformer_walkthrough.config import load_config
from transformer_walkthrough.files.export import export
from transformer_walkthrough.model.stream import Stages, outline
from transformer_walkthrough.model.trace import Keep, Trace
from transformer_walkthrough.model.transformer import run_forward

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def npz_members(path: Path) -> list[tuple[str, np.ndarray]]:
    """The archive's arrays, in the order of its members."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    with np.load(path) as data:
        return [(name.removesuffix(".npy"), data[name.removesuffix(".npy")]) for name in names]


def same_npz(streamed: Path, whole: Path) -> None:
    a, b = npz_members(streamed), npz_members(whole)
    assert [name for name, _ in a] == [name for name, _ in b]
    for (name, x), (_, y) in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)  # bit for bit: NaN and -inf where they are


def written_whole(trace: Trace, path: Path, again: str, **options: object) -> None:
    """The reference: the whole trace, kept, written by the same writers."""
    export(trace, path, list(trace), rerun=again, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_a_streamed_export_is_the_whole_traces_file(path: Path, runner, tmp_path: Path) -> None:
    config = load_config(path)
    trace = run_forward(config)
    again = rerun(path, None, None, None)
    suffixes = [".json", ".npz", ".md"]
    if path.stem in ("article", "llama-style", "bert-style", "t5-style"):  # the costly ones on a few
        suffixes += [".html", ".tex"]
    for suffix in suffixes:
        streamed, whole = tmp_path / f"streamed{suffix}", tmp_path / f"whole{suffix}"
        done = runner.invoke(app, ["export", str(streamed), "-c", str(path)])
        assert done.exit_code == 0, done.output
        written_whole(trace, whole, again)
        if suffix == ".npz":
            same_npz(streamed, whole)
        else:
            assert streamed.read_bytes() == whole.read_bytes(), suffix
    # a selection streams too: the stages of one layer, and one kind in every layer
    layered = [s for s in trace if s.layer is not None]
    layer, kind = layered[-1].layer, layered[-1].kind
    for options, names, at in ((["--layer", str(layer)], (), layer), (["-s", kind], [kind], None)):
        streamed, whole = tmp_path / "some.md", tmp_path / "some-whole.md"
        done = runner.invoke(app, ["export", str(streamed), "-c", str(path), "--force", *options])
        assert done.exit_code == 0, done.output
        kept = run_forward(config, keep=Keep.stages(names, at))  # the same stages, kept
        export(kept, whole, kept.select(names, at), rerun=again, force=True)
        assert streamed.read_bytes() == whole.read_bytes(), options


def test_stdout_json_streams_the_same_text(runner) -> None:
    path = ROOT / "configs" / "gpt-style.yaml"
    trace = run_forward(load_config(path))
    done = runner.invoke(app, ["export", "-", "-c", str(path)])
    assert done.exit_code == 0, done.output
    assert done.stdout == "".join(export(trace, None, list(trace)))  # type: ignore[arg-type]


def test_the_outline_is_the_passes_stages_and_titles() -> None:
    for path in CONFIGS:
        config = load_config(path)
        trace = run_forward(config)
        assert outline(config.model) == [(s.id, s.title) for s in trace], path.stem
        if "decoder.0.masked-attention" in trace.stages:
            chosen = trace.select(["masked-attention"])
            listed = outline(config.model, Keep.stages(["masked-attention"]))
            assert listed == [(s.id, s.title) for s in chosen]


def test_stages_are_read_one_at_a_time_and_the_pass_stops_with_its_reader() -> None:
    config = load_config(ROOT / "configs" / "llama-style.yaml")
    full = run_forward(config)
    held: list[int] = []
    stages = Stages(lambda keep: run_forward(config, keep=keep))
    assert stages.trace.config is not None
    for stage in stages:
        # the stage read is whole; every stage before it is dropped already
        assert stage.matrices and list(stage.matrices) == list(full[stage.id].matrices)
        held.append(sum(1 for s in stage.owner() if s.matrices))
    assert held == [1] * len(full)
    assert stages.trace.prediction == full.prediction
    # a reader that stops: the pass stops at the stage it hands over, computing nothing more
    stages = Stages(lambda keep: run_forward(config, keep=keep))
    reading = iter(stages)
    next(reading), next(reading)
    reading.close()
    stages._thread.join(timeout=10)
    assert not stages._thread.is_alive()
    assert len(stages.trace) == 2  # handed over as the third opened: the third was never made


def test_the_passes_errors_are_the_readers() -> None:
    from transformer_walkthrough.errors import StageError

    config = load_config(ROOT / "configs" / "gpt-style.yaml")
    stages = Stages(lambda keep: run_forward(config, keep=keep), Keep.stages(["feed-forward"], 7))
    with pytest.raises(StageError, match="--layer 7"):
        stages.trace  # noqa: B018


# ---------------------------------------------------------------------------------------------
# A tiny checkpoint in float64: the streamed export is the whole trace's.
# ---------------------------------------------------------------------------------------------

PROMPT = "The cat is sleeping comfortably. The dog is barking loudly."


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    pytest.importorskip("transformers")
    from tests.tiny_llama import build

    return str(build(tmp_path_factory.mktemp("stream"), "llama"))


def test_a_checkpoints_streamed_export_is_its_whole_traces(llama: str, runner, tmp_path: Path) -> None:
    trace = walk_prompt(llama, PROMPT, "float64").trace
    args = ["--model", llama, "--prompt", PROMPT, "--dtype", "float64"]
    from transformer_walkthrough.session import ModelArgs

    again = rerun(None, None, None, ModelArgs(llama, None, None, "float64", PROMPT))
    for suffix in (".json", ".npz", ".md", ".html"):
        streamed, whole = tmp_path / f"streamed{suffix}", tmp_path / f"whole{suffix}"
        done = runner.invoke(app, ["export", str(streamed), *args])
        assert done.exit_code == 0, done.output
        written_whole(trace, whole, again)
        if suffix == ".npz":
            same_npz(streamed, whole)
        else:
            assert streamed.read_bytes() == whole.read_bytes(), suffix


def test_the_streamed_tour_shows_what_the_whole_traces_tour_shows() -> None:
    """Forward, back, a search, a resize (the pages laid out again from a new pass), the end and a
    jump: the same screens as the tour of the whole trace, with one stage held at a time."""
    import io

    from rich.console import Console

    from transformer_walkthrough.views.tour import run_tour
    from transformer_walkthrough.views.widgets import View

    config = load_config(ROOT / "configs" / "llama-style.yaml")
    keys = ["\n", "\n", "left", "/", *"A1", "\r", "n", "resize", "end", "home", "g", *"7", "\r", "\n", "q"]
    passes = []

    def streamed() -> Stages:
        passes.append(1)
        return Stages(lambda keep: run_forward(config, keep=keep))

    shown = []
    for streaming in (False, True):
        console = Console(width=100, height=30, file=io.StringIO(), color_system=None)
        pressed = iter(keys)
        if streaming:
            first = [streamed()]  # the pass the tour reads first; a resize asks for another
            trace = first[0].trace
            again = lambda first=first: first.pop() if first else streamed()  # noqa: E731
        else:
            trace, again = run_forward(config), None
        page = run_tour(console, trace, View(), key=lambda: next(pressed), streamed=again)
        shown.append((page, console.file.getvalue()))
    assert shown[0] == shown[1]
    assert "stage 7 of" in shown[1][1] and "/A1: " in shown[1][1]
    assert len(passes) == 2  # the first pass, and one more for the resize


def test_a_report_past_its_budget_of_tables_names_the_rest(monkeypatch) -> None:
    """A report of many matrices (a long prompt's 30 layers of 9 heads) writes its tables up to a
    budget; each stage after it names its matrices and the commands that show them."""
    import re

    from transformer_walkthrough.views.documents import report

    monkeypatch.setattr(report, "TABLES_BUDGET", 60_000)
    trace = run_forward(load_config(ROOT / "configs" / "llama-style.yaml"))
    page = report.to_html(trace, list(trace))
    bodies = dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.S))
    ids = [s.id for s in trace]
    drawn = [sid for sid in ids if '<table class="m">' in bodies[sid]]
    named = [sid for sid in ids if "are past the 0 MB of tables" in bodies[sid]]
    assert drawn and named and drawn + named == ids  # the first stages drawn, the rest named
    tables = [len(t) for sid in drawn for t in re.findall(r'<table class="m">.*?</table>', bodies[sid], re.S)]
    assert sum(tables) > 60_000  # written until past the budget, and not after
    for sid in named:
        assert "<table" not in bodies[sid]
        for name, m in trace[sid].matrices.items():
            assert f"{name} ({m.shape[0]}×{m.shape[1]})" in bodies[sid]
        assert f"walkthrough step -s {sid}</code>" in bodies[sid]
    assert report.to_html(trace, list(trace), full=True).count('<table class="m">') == sum(
        len(s.matrices) for s in trace
    )  # --full: every table, whatever the budget


def test_a_long_prompts_options_are_said_once_not_in_every_lens_cell() -> None:
    """A cell's command repeats the options that make the trace again while they are short; a long
    prompt's (2,048 tokens: about 10,000 characters, in each of 1,920 cells: 19 MB) once."""
    import html
    import re

    from transformer_walkthrough.views.lens import lens_section
    from transformer_walkthrough.views.sections import whole_lens

    trace = run_forward(load_config(ROOT / "configs" / "gpt-style.yaml"))
    lens = whole_lens(trace)
    assert lens is not None
    cells = lens.layers * len(lens.tokens)
    for options, times in (("--seed 3", cells), ("--prompt '" + "x " * 500 + "'", 1)):
        section = lens_section(trace, lens, 2, False, options)
        assert section.count(html.escape(options)) == times
        titles = [html.unescape(t) for t in re.findall(r'title="([^"]*)"', section)]
        assert len(titles) == lens.layers * len(lens.tokens)
        assert all(" · walkthrough lens --explain " in t for t in titles)
