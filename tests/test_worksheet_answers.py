"""A worksheet's answers, checked as a student works them (issue 36, points 1–3): each hidden cell is
computed here from the numbers the sheet shows, by the paper's formulas written out in this test,
and must land on the key's answer within the tolerance the sheet states; the default picks mix the
kinds of step; and no hidden answer can be read off another number the sheet shows."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_worksheet_rules import holes, sheet, tables
from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents.worksheet import cell_step, worksheet

CONFIGS = Path(__file__).parent.parent / "configs"


def _value(text: str) -> float:
    return float(text.strip("*").replace("−", "-"))


def _from_the_sheet(t, stage: str, name: str, i: int, j: int) -> float:
    """stage/name[i, j] worked out from the sheet's numbers, by the article's formulas."""

    def row(n: str, r: int) -> list[float]:
        return [_value(c) for c in t[stage, n][r]]

    def col(n: str, c: int) -> list[float]:
        return [_value(r[c]) for r in t[stage, n]]

    def dot(a: list[float], b: list[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    def softmax_at(values: list[float], k: int) -> float:
        top = max(v for v in values if math.isfinite(v))
        exps = [math.exp(v - top) if math.isfinite(v) else 0.0 for v in values]
        return exps[k] / math.fsum(exps)

    head = re.sub(r"\D", "", name)
    if "attention" in stage:
        source = "memory" if (stage, "memory") in t else "X"
        if name[0] == "Q":
            return dot(row("X", i), col(f"W_Q{head}", j))
        if name[0] in "KV":
            return dot(row(source, i), col(f"W_{name[0]}{head}", j))
        if name[0] == "S" and "+" not in name:
            q = row(f"Q{head}", i)
            return dot(q, row(f"K{head}", j)) / math.sqrt(len(q))
        if name[0] == "A":
            masked = f"S{head}+M" if (stage, f"S{head}+M") in t else f"S{head}"
            values = [-math.inf if "∞" in c else _value(c) for c in t[stage, masked][i]]
            return softmax_at(values, j)
        if name[0] == "O":
            return dot(row(f"A{head}", i), col(f"V{head}", j))
        if name == "output":
            return dot(row("concat", i), col("W_O", j))
    if "add-norm" in stage and name == "output":
        x = row("sum", i)
        mean = math.fsum(x) / len(x)
        var = math.fsum((v - mean) ** 2 for v in x) / len(x)
        return (x[j] - mean) / math.sqrt(var + 1e-5) * row("gamma", 0)[j] + row("beta", 0)[j]
    if "feed-forward" in stage:
        if name == "pre":
            return dot(row("X", i), col("W_1", j)) + row("b_1", 0)[j]
        if name == "output":
            return dot(row("hidden", i), col("W_2", j)) + row("b_2", 0)[j]
    if stage == "output.logits" and name == "logits":
        return dot(row("X", i), col("W", j)) + row("b", 0)[j]
    if stage == "output.probabilities" and name == "probabilities":
        return softmax_at(row("logits", i), j)
    raise AssertionError(f"{stage}/{name}: no formula here")


@pytest.mark.parametrize("args", [["--exercise", "6"], ["--exercise", "12", "--pick-seed", "3"]])
def test_an_answer_worked_from_the_sheet_is_the_key_s_within_the_stated_tolerance(
    runner: CliRunner, tmp_path: Path, args: list[str]
) -> None:
    md = sheet(runner, tmp_path / "sheet.md", *args)
    stated = re.search(r"each answer is right within ±(\d+\.\d+) of its key", md)
    assert stated, "the sheet says how an answer is marked"
    tolerance = float(stated.group(1))
    t = tables(md)
    key = md.split("\n## Answer key\n")[1]
    trace = run_forward(load_config(CONFIGS / "article.yaml"))
    asked = holes(t)
    assert asked
    for n, (stage, name, i, j) in asked.items():
        answer = re.search(rf"\*\*\?{n}\*\* `[^`]+`\n\n```text\n[^\n]* = (−?\d+\.\d+)\n", key)
        assert answer, f"?{n} has its answer in the key"
        given = _value(answer.group(1))
        # the key is right: the model's own value at the key's digits
        true = float(trace[stage].matrices[name].values[i, j])
        assert abs(given - true) <= tolerance / 2 + 1e-12, (n, given, true)
        # and a student working from the sheet's numbers lands on it
        worked = _from_the_sheet(t, stage, name, i, j)
        assert abs(worked - given) <= tolerance + 1e-12, (n, stage, name, worked, given)


def test_the_default_picks_mix_the_kinds_of_step() -> None:
    for config, n, expected in (
        ("article", 8, {"dot", "softmax", "norm"}),
        ("llama-style", 10, {"dot", "softmax", "norm", "rotation"}),
    ):
        trace = run_forward(load_config(CONFIGS / f"{config}.yaml"))
        found = worksheet(trace, list(trace), n)
        kinds = {cell_step(trace, trace[h.stage], h.name, h.i, h.j).kind for h in found.holes}
        assert kinds == expected, (config, kinds)


def test_a_hidden_logit_hides_its_probabilities_and_a_hidden_pre_its_activation(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The issue's two give-aways: 1.13 + ln(0.30/0.25) = 1.31 from a row of probabilities beside a
    hidden logit, and the sign of a hidden pre-activation from its ReLU's visible 0.00."""
    trace = run_forward(load_config(CONFIGS / "article.yaml"))
    pre = trace["decoder.0.feed-forward"]["pre"]
    i, j = next((int(a), int(b)) for a, b in zip(*(pre < 0).nonzero(), strict=True))
    md = sheet(
        runner,
        tmp_path / "sheet.md",
        "--cells",
        "output.logits/logits[0,6]",
        "--cells",
        f"decoder.0.feed-forward/pre[{i},{j}]",
    )
    t = tables(md)
    assert t["output.logits", "logits"][0][6] == "**?1**"
    assert all(c.startswith("**?") for c in t["output.probabilities", "probabilities"][0])
    assert not any(c.startswith("**?") for c in t["output.probabilities", "probabilities"][1])
    prediction = md.split("| after | predicted |")[1].split("\n\n")[0].splitlines()[2]
    assert "?" in prediction and not re.search(r"\d\.\d\d", prediction)  # its p and its top 3
    assert t["decoder.0.feed-forward", "pre"][i][j] == "**?2**"
    assert t["decoder.0.feed-forward", "hidden"][i][j] == "**?**"  # not 0.00, the ReLU of a negative


@pytest.mark.parametrize("seed", ["1", "2"])
def test_no_shown_number_gives_an_answer_away(runner: CliRunner, tmp_path: Path, seed: str) -> None:
    """Across a long worksheet: a hidden score's S+M and softmax row, a hidden pre-activation's
    activation, a hidden output's residual sum are hidden too."""
    t = tables(sheet(runner, tmp_path / "sheet.md", "--exercise", "30", "--pick-seed", seed))
    checked = 0
    for stage, name, i, j in holes(t).values():
        read = []
        if re.fullmatch(r"S\d", name):
            read = [(f"{name}+M", i, j)] if (stage, f"{name}+M") in t else []
            read += [(f"A{name[1]}", i, c) for c in range(len(t[stage, f"A{name[1]}"][i]))]
        elif name == "pre":
            read = [("hidden", i, j)]
        for other, r, c in read:
            assert t[stage, other][r][c].startswith("**?"), (stage, name, i, j, other, r, c)
            checked += 1
    assert checked > 0


def _words(stem: str, n: int) -> str:
    """n distinct long words: "stemaa stemba …", each a token of its own, a column of its own."""
    return " ".join(f"{stem}{chr(97 + k % 26)}{chr(97 + k // 26)}" for k in range(n))


def test_a_long_worksheet_over_long_token_columns_compiles(runner: CliRunner, tmp_path: Path) -> None:
    """The issue's case: 40 cells over columns labelled with long tokens; a matrix a worksheet asks
    a cell of is shown whole, and pdflatex must hold it."""
    from tests.test_documents import compile_latex

    source, target = _words("internationalizationword" * 2, 20), _words("counterrevolutionaryterm" * 2, 20)
    for args in (["--exercise", "40"], ["--cells", "output.logits/logits[0,3]"]):
        path = tmp_path / "sheet.tex"
        result = runner.invoke(
            app, ["export", str(path), "--source", source, "--target", target, "--force", *args]
        )
        assert result.exit_code == 0, result.stderr
        folder = tmp_path / args[0].strip("-")
        folder.mkdir()
        compile_latex(path.read_text(encoding="utf-8"), folder)


def test_a_matrix_wider_than_tex_can_hold_is_refused_before_writing(
    runner: CliRunner, tmp_path: Path
) -> None:
    """122 columns labelled with 80-letter tokens: about 12 m of matrix, more than TeX's 5.76 m."""
    source, target = (
        _words("internationalizationwordextraordinarily" * 2, 60),
        _words("counterrevolutionaryterms" * 3, 60),
    )
    path = tmp_path / "sheet.tex"
    args = [
        "export",
        str(path),
        "--source",
        source,
        "--target",
        target,
        "--cells",
        "output.logits/logits[0,3]",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith("error: output.logits: logits would be about ")
    assert "more than pdflatex can hold" in result.stderr and "export .html or .md" in result.stderr
    assert list(tmp_path.iterdir()) == []
    html = runner.invoke(app, [*args[:1], str(tmp_path / "sheet.html"), *args[2:]])
    assert html.exit_code == 0, html.stderr


def test_a_summary_whose_mark_ends_the_row_says_what_it_left_out(runner: CliRunner, tmp_path: Path) -> None:
    """Columns so wide that a summary keeps only the first, then "…" (no last column after it):
    the note under it counts to the end (it raised IndexError)."""
    from tests.test_documents import compile_latex

    source = (
        "Supercalifragilisticexpialidocious antidisestablishmentarianism floccinaucinihilipilification "
        "pneumonoultramicroscopicsilicovolcanoconiosis"
    )
    path = tmp_path / "sheet.tex"
    args = ["export", str(path), "--source", source, "--target", "incomprehensibilities uncharacteristically"]
    result = runner.invoke(app, [*args, "--exercise", "40"])
    assert result.exit_code == 0, result.output
    text = path.read_text(encoding="utf-8")
    assert re.search(r"are left out; export with", text)
    folder = tmp_path / "tex"
    folder.mkdir()
    compile_latex(text, folder)
