"""The attention overview (``walkthrough attention`` and the report's "Attention" section): every
head's weights as a shaded grid, each row's strongest link equal to the argmax of the recorded A
(and, for GPT-2, of transformers' attentions), plain on a pipe and under NO_COLOR, coloured on a
terminal, summarised past 24 tokens, one click enlarging a head in a real browser; bad input."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.trace import ATTENTION, Matrix, Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.report import to_html
from transformer_walkthrough.views.overview import Glyphs, head_block, kept
from transformer_walkthrough.views.widgets import View, label

ROOT = Path(__file__).resolve().parents[1]
HEAD = re.compile(r"^head (\d+) · (A\d+)")
LINK = re.compile(r"→ (.+) (\d\.\d\d)$")


def _plain(renderable) -> str:
    console = Console(width=100, no_color=True, file=None, force_terminal=False, record=True)
    with console.capture() as captured:
        console.print(renderable, crop=False)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def test_a_head_as_plain_text_by_hand() -> None:
    A = np.array([[1.0, 0.0, 0.0], [0.2, 0.8, 0.0], [0.1, 0.3, 0.6]])
    hidden = np.triu(np.ones((3, 3), dtype=bool), 1)  # the causal mask's −∞ cells
    m = Matrix(A, ("<s>", "a", "bb"), ("<s>", "a", "bb"), ATTENTION, "A", 1)
    block = head_block("A1", m, hidden, Glyphs(View(), coloured=False), 2)
    # each weight by the nearest quarter of its row's largest weight, two characters a cell: row a
    # 0.2/0.8 = 1/4 ░, 0.8/0.8 █; row bb 0.1/0.6 = 0.17 ░ (0.67 quarters), 0.3/0.6 = 1/2 ▒, 0.6/0.6 █;
    # · where the mask hides the key; the row's largest weight named, with its value
    assert _plain(block) == "\n".join(
        [
            "head 1 · A1",
            "      0 1 2",
            "<s>  ██ · ·  → <s> 1.00",
            "a    ░░██ ·  → a 0.80",
            "bb   ░░▒▒██  → bb 0.60",
        ]
    )
    ascii_block = head_block("A1", m, hidden, Glyphs(View(ascii=True), coloured=False), 2)
    assert _plain(ascii_block).splitlines()[2:] == [  # a stream without block characters: " .+*#", - masked
        "<s>  ## - -  → <s> 1.00",
        "a    ..## -  → a 0.80",
        "bb   ..++##  → bb 0.60",
    ]


def test_a_near_uniform_row_shows_its_contrast_and_keys_past_9_keep_unique_labels() -> None:
    """14 keys of weights 0.067 to 0.096: by the fixed 0–1 scale every cell would be blank; on the
    row's own scale the favoured keys are dark. Past key 9 the indices are written downwards."""
    n = 14
    A = np.full((1, n), 1.0 / n)
    A[0, 3], A[0, 11] = A[0, 3] + 0.03, A[0, 11] + 0.03  # 0.067 against 0.096: 0.70 of it, ▓
    A /= A.sum()
    m = Matrix(A, ("q",), tuple(f"k{j}" for j in range(n)), ATTENTION, "A", 1)
    lines = _plain(head_block("A1", m, None, Glyphs(View(), coloured=False), 2)).splitlines()
    tens, ones, row = lines[1], lines[2], lines[3]
    columns = [(tens[k : k + 2].strip() + ones[k : k + 2].strip()) for k in range(3, 3 + 2 * n, 2)]
    assert columns == [str(j) for j in range(n)]  # unique, in order
    cells = [row[k : k + 2] for k in range(3, 3 + 2 * n, 2)]
    assert cells[3] == cells[11] == "██" and all(c == "▓▓" for j, c in enumerate(cells) if j not in (3, 11))


def test_kept_shows_the_first_and_last_twelve() -> None:
    assert kept(24) == list(range(24))
    assert kept(30) == [*range(12), -1, *range(18, 30)]


def _links(out: str) -> dict[tuple[str, int], list[tuple[str, str, str]]]:
    """(stage id, head) -> each row's (query, key, weight) as printed, from output whose heads
    stand one under the other (a narrow terminal)."""
    found: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    stage, head = None, None
    for line in out.splitlines():
        words = line.split()
        if words and "." in words[-1] and words[-1].count(".") == 2 and not LINK.search(line):
            stage = words[-1]  # a stage's title line ends with its id
            continue
        started = HEAD.match(line)
        if started:
            head = int(started[1])
            found[stage, head] = []  # type: ignore[index]
            continue
        link = LINK.search(line)
        if link and head is not None:
            found[stage, head].append((words[0], link[1], link[2]))  # type: ignore[index]
    return found


def _expected(trace: Trace) -> dict[tuple[str, int], list[tuple[str, str, str]]]:
    out = {}
    for stage in trace:
        for m in stage.matrices.values():
            if m.role == ATTENTION:
                best = np.argmax(m.values, axis=1)
                out[stage.id, m.head] = [
                    (label(m.rows[i], 12), label(m.cols[j], 12), f"{m.values[i, j]:.2f}")
                    for i, j in enumerate(best)
                ]
    return out


@pytest.mark.parametrize(
    "name", ["standard.yaml", "gpt-style.yaml", "llama-style.yaml", "longer-sentence.yaml"]
)
def test_every_heads_strongest_link_is_the_argmax_of_its_recorded_weights(
    runner: CliRunner, name: str
) -> None:
    config = ROOT / "configs" / name
    trace = run_forward(load_config(config))
    result = runner.invoke(app, ["attention", "-c", str(config)], env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.stderr
    assert "\x1b[" not in result.stdout  # a pipe: plain
    expected = _expected(trace)
    assert _links(result.stdout) == expected
    assert len(expected) == sum(s.kind.endswith("attention") for s in trace) * trace.config.model.num_heads


def test_each_attention_kind_says_what_its_rows_and_columns_are(runner: CliRunner) -> None:
    result = runner.invoke(app, ["attention"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "self-attention: queries and keys are the encoder's tokens" in out
    assert "masked self-attention: queries and keys are the decoder's tokens" in out
    assert "cross-attention: queries are the decoder's tokens, keys the encoder's output" in out
    assert "keys (columns): 0 the, 1 cat, 2 is" in out
    assert "<start>      ██ · · ·  → <start> 1.00" in out  # row 0 of a masked head sees only itself


def test_layer_head_and_stage_narrow_it(runner: CliRunner) -> None:
    config = str(ROOT / "configs" / "standard.yaml")
    result = runner.invoke(
        app, ["attention", "-c", config, "--layer", "1", "--head", "2", "-s", "cross-attention"]
    )
    assert result.exit_code == 0, result.stderr
    found = _links(result.stdout)
    assert list(found) == [("decoder.1.cross-attention", 2)]


def test_colour_on_a_terminal_and_plain_under_no_color(runner: CliRunner) -> None:
    coloured = runner.invoke(app, ["attention"], env={"FORCE_COLOR": "1", "COLORTERM": "truecolor"})
    assert coloured.exit_code == 0
    assert "\x1b[48;2;" in coloured.stdout  # shaded backgrounds, the palette's RGB
    rows = [line for line in coloured.stdout.splitlines() if "→" in line]
    assert rows and not any(ch in row for row in rows for ch in "░▒▓█")  # colour, not characters
    plain = runner.invoke(app, ["attention"], env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.exit_code == 0
    assert "\x1b[48;" not in plain.stdout and "\x1b[4" not in plain.stdout.replace("\x1b[4m", "")
    assert "██" in plain.stdout


def test_a_long_sentence_is_summarised(runner: CliRunner, tmp_path: Path) -> None:
    words = " ".join(f"w{k}" for k in range(30))
    config = tmp_path / "long.yaml"
    config.write_text(
        f"sentence: {words}\nencoder_words: 0\nmodel:\n  num_encoder_layers: 0\n", encoding="utf-8"
    )
    trace = run_forward(load_config(config))
    n = len(trace.target_tokens)
    assert n > 24
    result = runner.invoke(app, ["attention", "-c", str(config), "--head", "1"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"head 1 · A1  ({n}×{n})" in out and "the first and last 12 of each are shown" in out
    assert "⋮" in out and "…" in out
    rows = [line for line in out.splitlines() if "→" in line]
    assert len(rows) == 24  # the first and last 12 queries
    shown = [*range(12), *range(n - 12, n)]
    A = trace["decoder.0.masked-attention"]["A1"]
    for line, i in zip(rows, shown, strict=True):
        j = int(np.argmax(A[i]))
        assert line.startswith(trace.target_tokens[i]) and line.endswith(
            f"→ {trace.target_tokens[j]} {A[i, j]:.2f}"
        )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--head", "3"], "--head: this model has heads 1 to 2, got 3"),
        (["--head", "0"], "--head: this model has heads 1 to 2, got 0"),
        (["--layer", "1"], "--layer: this model has layers 0 to 0, got 1"),
        (["--stage", "feed-forward"], "--stage feed-forward: not an attention stage"),
        (["--stage", "masked-atention"], "did you mean masked-attention?"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["attention", *args])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_gpt2_strongest_links_equal_transformers_attentions(runner: CliRunner, gpt2) -> None:
    import torch

    from transformer_walkthrough.checkpoints.run import walk_prompt

    folder, reference = gpt2[0]["saved"], gpt2[1]
    prompt = "The cat is sleeping."
    trace = walk_prompt(str(folder), prompt, "float64").trace
    result = runner.invoke(
        app,
        ["attention", "--model", str(folder), "--prompt", prompt, "--dtype", "float64"],
        env={"COLUMNS": "40"},
    )
    assert result.exit_code == 0, result.stderr
    with torch.no_grad():
        attentions = reference(torch.tensor([list(trace.target_ids)]), output_attentions=True).attentions
    found = _links(result.stdout)
    tokens = trace.target_tokens
    for layer, A in enumerate(attentions):
        for h in range(A.shape[1]):
            weights = A[0, h].numpy()
            best = weights.argmax(axis=1)
            assert found[f"decoder.{layer}.masked-attention", h + 1] == [
                (label(tokens[i], 12), label(tokens[j], 12), f"{weights[i, j]:.2f}")
                for i, j in enumerate(best)
            ]


# ---------------------------------------------------------------------------------------------
# The report's section.
# ---------------------------------------------------------------------------------------------


def test_report_has_every_layer_and_head_each_enlarged_by_its_own_link() -> None:
    trace = run_forward(Config())
    page = to_html(trace, list(trace))
    section = page[page.index('<section id="attention">') :]
    figures = re.findall(r'<figure class="att" id="([^"]+)">', section)
    heads = [(s.id, m.head) for s in trace for m in s.matrices.values() if m.role == ATTENTION]
    assert figures == [f"att-{sid}-{h}" for sid, h in heads]
    assert re.findall(r'<a href="#(att-[^"]+)" title=', section) == figures  # one click: its own :target
    # no script is needed to see or enlarge a head: the section ends before the report's one script
    # (click-to-explain), and has none of its own
    assert "<script" not in section[: section.index("</section>")]
    masked = int(np.isneginf(trace["decoder.0.masked-attention"]["M"]).sum())
    assert section.count('<td class="mk">') == masked * trace.config.model.num_heads
    # the enlarged head's list of strongest links: the argmax of each row of A
    A = trace["decoder.0.cross-attention"]["A2"]
    body = section[section.index('id="att-decoder.0.cross-attention-2"') :]
    links = re.findall(r"<li>([^<]*)</li>", body[: body.index("</ol>")])
    assert [html.unescape(x) for x in links] == [
        f"{trace.target_tokens[i]} → {trace.source_tokens[j]} {A[i, j]:.2f}"
        for i, j in enumerate(A.argmax(axis=1))
    ]


def test_one_click_enlarges_a_head_in_a_real_browser(tmp_path: Path) -> None:
    from tests.test_documents import WebDriver, need

    chromium, chromedriver = need("chromium"), need("chromedriver")
    trace = run_forward(Config())
    report = tmp_path / "report.html"
    report.write_text(to_html(trace, list(trace)), encoding="utf-8")
    box = (
        "const f = document.getElementById(arguments[0]); const r = f.getBoundingClientRect();"
        "return [getComputedStyle(f).position, r.width, r.height, location.hash];"
    )
    driver = WebDriver(chromedriver, chromium)
    try:
        driver("POST", "/url", {"url": report.as_uri()})
        target = "att-decoder.0.masked-attention-1"
        before = driver("POST", "/execute/sync", {"script": box, "args": [target]})
        link = driver("POST", "/element", {"using": "css selector", "value": f'a[href="#{target}"]'})
        element = next(iter(link.values()))
        driver("POST", "/execute/sync", {"script": "arguments[0].scrollIntoView()", "args": [link]})
        driver("POST", f"/element/{element}/click", {})
        after = driver("POST", "/execute/sync", {"script": box, "args": [target]})
        other = driver("POST", "/execute/sync", {"script": box, "args": ["att-decoder.0.cross-attention-1"]})
        text = driver(
            "POST",
            "/execute/sync",
            {"script": f"return document.getElementById('{target}').innerText", "args": []},
        )
    finally:
        driver.close()
    assert before[0] == "static" and before[1] < 150  # a thumbnail
    assert after[0] == "fixed" and after[1] > 600 and after[3] == f"#{target}"  # enlarged by the click
    assert other[0] == "static" and other[1] < 150  # the others stay small
    A = trace["decoder.0.masked-attention"]["A1"]
    assert "sleeping → sleeping" in text and f"{A[1, 1]:.2f}" in text  # its tokens, weights and links shown
