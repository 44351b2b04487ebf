"""Nothing false on screen or in a file (issue 36, points 8–12): the weights' origin as it is, a
size warning that counts what will be written, a prediction header that says what was predicted,
the toy's departures from the article said where they happen, and the smaller wordings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app

WIDE = "model:\n  d_model: 64\n  num_heads: 2\n  d_ff: 256\n"  # wider than a document's 100 columns


def _warned(stderr: str) -> int:
    """The count of numbers in the export's size warning."""
    found = re.search(r"^warning: ([\d,]+) numbers make about", stderr, re.MULTILINE)
    assert found, stderr
    return int(found.group(1).replace(",", ""))


def _markdown_cells(text: str) -> int:
    """The numbers in a Markdown export's matrix tables (a table headed ``| **name** |``), counted
    from the file: every body cell but the row label and the "…" and "⋮" that stand for left-out ones."""
    count, in_matrix = 0, False
    for line in text.splitlines():
        if line.startswith("| **"):
            in_matrix = True
        elif not line.startswith("|"):
            in_matrix = False
        elif in_matrix and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")][1:]
            count += sum(c not in ("…", "⋮") for c in cells)
    return count


def test_the_size_warning_counts_what_the_document_writes(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)
    config = tmp_path / "wide.yaml"
    config.write_text(WIDE)
    counts = {}
    for full in (False, True):
        target = tmp_path / f"full-{full}.md"
        result = runner.invoke(app, ["export", str(target), "-c", str(config), *(["--full"] * full)])
        assert result.exit_code == 0, result.output
        counts[full] = _warned(result.stderr)
        assert counts[full] == _markdown_cells(target.read_text())
    assert counts[False] < counts[True] / 2  # the summarised document is much smaller
    data = runner.invoke(app, ["export", "-", "-c", str(config)])
    assert _warned(data.stderr) == counts[True]  # JSON holds every number


def test_the_size_warning_of_json_counts_the_gradients_it_writes(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import transformer_walkthrough.files.export as export

    monkeypatch.setattr(export, "LARGE", 100)
    result = runner.invoke(app, ["export", "-", "--backward"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)

    def numbers(node: object) -> int:
        if isinstance(node, (int, float)) or node in ("-inf", "inf", "nan"):  # JSON has no −∞: a string
            return 1
        if isinstance(node, list):
            return sum(numbers(v) for v in node)
        return 0

    written = sum(
        numbers(m["values"]) for s in doc["stages"] for part in ("matrices", "gradients")
        for m in s.get(part, {}).values()
    )  # fmt: skip
    assert _warned(result.stderr) == written


def _first_line(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "300"})  # a long path on one line
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[0]


def test_a_checkpoint_is_said_to_be_a_checkpoint_not_trained(runner: CliRunner, marian, gpt2) -> None:
    """The tests' checkpoints are random: "trained" would be false; where they come from is not."""
    folder = marian[0]
    said = f"weights: from the checkpoint {folder} (model.safetensors)"
    source = ("--model", str(folder), "--source", "the cat")
    assert _first_line(runner, "run", *source, "--target", "die Katze") == said
    assert _first_line(runner, "generate", *source, "--max-len", "2") == said
    saved = gpt2[0]["saved"]
    prompt = ("--model", str(saved), "--prompt", "The cat is")
    assert _first_line(runner, "generate", *prompt, "--max-len", "2").startswith(
        f"weights: from the checkpoint {saved}"
    )
    assert _first_line(runner, "step", *prompt, "-s", "embedding").startswith(
        f"weights: from the checkpoint {saved}"
    )


def _said(runner: CliRunner, *args: str) -> str:
    """A command's output as one line of words (the prose wraps where the terminal ends)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_the_flatten_heads_prediction_says_it_is_one_word_from_all_positions(runner: CliRunner) -> None:
    flatten = _said(runner, "run", "-c", "configs/article-flatten.yaml")
    assert "Prediction: one next word, from all the decoder's positions at once (flattened)" in flatten
    assert "after each decoder position" not in flatten
    assert "Prediction: the most likely next word after each decoder position" in _said(runner, "run")


def test_the_flatten_heads_report_says_it_is_one_word(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    result = runner.invoke(app, ["export", str(target), "-c", "configs/article-flatten.yaml"])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert "<p>One next word, from all the decoder&#x27;s positions at once (flattened).</p>" in text
    assert "after each decoder position" not in text


DEPARTURES = {  # a stage of the toy, and what the article says otherwise there
    "decoder.0.masked-attention": "The article says the decoder takes one token at a time",
    "decoder.0.feed-forward": "The article draws one linear layer here",
    "output.logits": "The article flattens the decoder's rows into one",
    "output.probabilities": 'The article\'s "sleeping, 0.42" cannot be reproduced',
}


@pytest.mark.parametrize("stage", DEPARTURES)
def test_where_the_toy_departs_from_the_article_its_stage_says_so(runner: CliRunner, stage: str) -> None:
    assert DEPARTURES[stage] in _said(runner, "step", "-s", stage)


def test_a_departure_is_said_only_where_it_is_one(runner: CliRunner) -> None:
    """The flatten head is the article's step, a gated feed-forward is not the article's one layer,
    and an encoder-only toy predicts no next word."""
    assert "The article flattens" not in _said(
        runner, "step", "-c", "configs/article-flatten.yaml", "-s", "output.logits"
    )
    assert "one linear layer here" not in _said(
        runner, "step", "-c", "configs/llama-style.yaml", "-s", "decoder.0.feed-forward"
    )
    bert = _said(runner, "step", "-c", "configs/bert-style.yaml", "-s", "output.probabilities")
    assert "sleeping, 0.42" not in bert and "The article" not in bert


def test_a_checkpoint_is_not_told_about_the_article(runner: CliRunner, gpt2) -> None:
    prompt = ("--model", str(gpt2[0]["saved"]), "--prompt", "The cat is")
    for stage in (
        "decoder.0.masked-attention",
        "decoder.0.feed-forward",
        "output.logits",
        "output.probabilities",
    ):
        assert "article" not in _said(runner, "step", *prompt, "-s", stage)


def test_the_smaller_wordings_are_true(runner: CliRunner, marian) -> None:
    """SiLU is not Marian's alone; an RMSNorm stage is no layer-norm; √d_k keeps the variance at 1
    only for unit-variance q and k; and a ✓ against the model's own translation compares it with itself."""
    llama = ("-c", "configs/llama-style.yaml")
    gate = _said(runner, "explain", *llama, "-s", "decoder.0.feed-forward", "-m", "hidden", "--cell", "0,0")
    assert "(SiLU, also called swish)" in gate and "Marian" not in gate
    listed = runner.invoke(app, ["stages", *llama], env={"COLUMNS": "120"}).stdout
    norms = [line.split()[:2] for line in listed.splitlines() if line.startswith("decoder.0.norm-1")]
    assert norms == [["decoder.0.norm-1", "rms-norm"]]
    assert "decoder.0.norm-1" in _said(runner, "step", *llama, "-s", "rms-norm")  # as listed
    layer_norm = runner.invoke(app, ["stages"]).stdout
    assert any(line.split()[:2] == ["encoder.0.add-norm-1", "add-norm"] for line in layer_norm.splitlines())
    scores = _said(runner, "explain", "-s", "encoder.0.self-attention", "-m", "S1", "--cell", "0,0")
    assert "entries independent with variance 1" in scores and "whatever d_k is" in scores
    translated = runner.invoke(app, ["run", "--model", str(marian[0]), "--source", "the cat"])
    assert translated.exit_code == 0, translated.output
    lines = translated.stdout.splitlines()
    assert lines[0].startswith("translation (greedy): ")
    assert lines[1] == "(the target is this translation: a ✓ compares the model with itself)"
    given = runner.invoke(
        app, ["run", "--model", str(marian[0]), "--source", "the cat", "--target", "die Katze"]
    )
    assert "compares the model with itself" not in given.stdout


def _toured(trace, keys: list[str]) -> str:
    import io

    from rich.console import Console

    from transformer_walkthrough.views.tour import run_tour
    from transformer_walkthrough.views.widgets import View

    console = Console(width=80, height=24, record=True, file=io.StringIO())
    pressed = iter([*keys, "q"])
    run_tour(console, trace, View(width=80), key=pressed.__next__)
    return console.export_text()


def test_a_search_in_the_tour_reads_the_stages_not_the_map(trace) -> None:
    """Every page opens under the map, whose "output linear softmax" is on every page: /softmax
    then n must stop only where the stage itself says softmax."""
    text = _toured(trace, ["/", *"softmax", "\r", *"n" * 6])
    found = re.findall(r"^/softmax: (\S+) · line (\d+)", text, re.MULTILINE)
    assert len(found) == 7, text
    kinds = {s.id: s.kind for s in trace}
    for stage, line in found:
        assert kinds.get(stage) in (
            "self-attention",
            "masked-attention",
            "cross-attention",
            "probabilities",
        ), found
        assert int(line) > 5  # below the map's lines
    assert found[0][0] == "encoder.0.self-attention"


def test_g_goes_to_the_prediction_by_the_number_the_count_gives_it(trace) -> None:
    """The header counts "16 stages + the prediction": g 17 is the prediction, g 18 nothing."""
    assert "the prediction, after the 16 stages" in _toured(trace, ["g", *"17", "\r"])
    assert "no stage 18: the stages are 1 to 16, the prediction 17" in _toured(trace, ["g", *"18", "\r"])


@pytest.mark.parametrize("columns", [60, 80])
def test_the_prediction_cuts_no_word_and_no_number(runner: CliRunner, trace, columns: int) -> None:
    """Each word of the prediction is a word of the vocabulary or of the table's header, each number
    a whole probability; at 60 columns the runners-up move to a table of their own."""
    result = runner.invoke(app, ["run"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("Prediction")) :]
    assert all(len(line) <= columns for line in lines)
    header = {"after", "predicted", "p", "expected", "top", "3", "✓", "✗", "—"}
    header |= {"Prediction:", "most", "likely", "next", "word", "each", "decoder", "position"}
    for line in table[1:]:
        for word in line.replace(",", " ").split():
            number = re.fullmatch(r"[01]\.\d\d", word)
            assert word in trace.vocabulary or word in header or number or set(word) == {"─"}, (word, line)
    said = " ".join(" ".join(table).split())
    for pred in trace.prediction:
        for word, q in pred.top:
            assert f"{word} {q:.2f}" in said  # a runner-up beside its probability


DEEP = "model:\n  num_encoder_layers: 12\n  num_decoder_layers: 12\n"


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_the_stage_rule_never_cuts_the_id(runner: CliRunner, tmp_path: Path, columns: int) -> None:
    """The id is what a reader types next: the title gives way (shortened, or on a line of its own)."""
    config = tmp_path / "deep.yaml"
    config.write_text(DEEP)
    result = runner.invoke(
        app, ["step", "-c", str(config), "-s", "masked-attention"], env={"COLUMNS": str(columns)}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    for layer in range(12):
        stage = f"decoder.{layer}.masked-attention"
        rules = [line for line in lines if re.search(rf"(^|  ){re.escape(stage)} ─+$", line)]
        assert len(rules) == 1, (stage, [line for line in lines if "─" in line][:4])


def test_the_tours_header_keeps_the_id_at_60_columns(tmp_path: Path) -> None:
    """A tall page's header counts its lines; at 60 columns the count is written short, the id whole."""
    import io

    from rich.console import Console

    from transformer_walkthrough.config import load_config
    from transformer_walkthrough.model.transformer import run_forward
    from transformer_walkthrough.views.tour import run_tour
    from transformer_walkthrough.views.widgets import View

    config = tmp_path / "deep.yaml"
    config.write_text(DEEP)
    deep = run_forward(load_config(config))
    console = Console(width=60, height=24, record=True, file=io.StringIO())
    keys = iter(["g", *"decoder.11.masked-attention", "\r", "q"])
    run_tour(console, deep, View(width=60), key=keys.__next__)
    headers = [line for line in console.export_text().splitlines() if line.startswith("stage ")]
    assert re.fullmatch(r"stage \d+ of \d+ · decoder\.11\.masked-attention · 1–20/\d+", headers[-1]), headers[
        -1
    ]
