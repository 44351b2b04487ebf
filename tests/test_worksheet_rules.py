"""A worksheet a teacher can hand out (issue 22, point 3), checked on the document itself.

Each rule is written here from the paper's formulas, not from the program's choice: the cells
a hidden cell is computed from (its inputs) are listed by hand for the article's model, and
the Markdown tables are read back to see what a student sees.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app

KINDS = ("dot", "softmax", "norm", "rotation", "activation", "sinusoid", "sum", "lookup", "copy")


def tables(md: str) -> dict[tuple[str, str], list[list[str]]]:
    """Every matrix table of a Markdown document, by (stage id, matrix name): its rows of cells."""
    out: dict[tuple[str, str], list[list[str]]] = {}
    stage = None
    lines = md.split("\n## Answer key\n")[0].splitlines()
    for k, line in enumerate(lines):
        if line.startswith("## "):
            stage = line[3:].split(" ")[0]
        match = re.match(r"\| \*\*(.+?)\*\* \|", line)
        if match and stage is not None:
            rows = []
            for row in lines[k + 2 :]:
                if not row.startswith("| `"):
                    break
                rows.append([c.strip() for c in row.strip("|").split(" | ")][1:])
            out[stage, match.group(1)] = rows
    return out


def holes(t: dict[tuple[str, str], list[list[str]]]) -> dict[int, tuple[str, str, int, int]]:
    """Each asked cell ?n where it is first shown (the first is the cell asked; later ones copies)."""
    found: dict[int, tuple[str, str, int, int]] = {}
    for (stage, name), rows in t.items():
        for i, row in enumerate(rows):
            for j, cell in enumerate(row):
                if m := re.fullmatch(r"\*\*\?(\d+)\*\*", cell):
                    found.setdefault(int(m.group(1)), (stage, name, i, j))
    return found


def inputs(t, stage: str, name: str, i: int, j: int) -> list[tuple[str, int, int]]:
    """The cells of its stage that the article's formula for stage/name[i, j] reads."""

    def row(n: str, r: int) -> list[tuple[str, int, int]]:
        return [(n, r, c) for c in range(len(t[stage, n][r]))]

    def col(n: str, c: int) -> list[tuple[str, int, int]]:
        return [(n, r, c) for r in range(len(t[stage, n]))]

    head = re.sub(r"\D", "", name)
    if "attention" in stage:
        source = "memory" if (stage, "memory") in t else "X"
        if name[0] == "Q":
            return row("X", i) + col(f"W_Q{head}", j)
        if name[0] in "KV":
            return row(source, i) + col(f"W_{name[0]}{head}", j)
        if name[0] == "S" and "+" not in name:
            return row(f"Q{head}", i) + row(f"K{head}", j)  # Q·Kᵀ / √d_k
        if name[0] == "A":
            masked = f"S{head}+M"
            return row(masked if (stage, masked) in t else f"S{head}", i)  # softmax over the row
        if name[0] == "O":
            return row(f"A{head}", i) + col(f"V{head}", j)
        if name == "output":
            return row("concat", i) + col("W_O", j)
    if "add-norm" in stage and name == "output":
        return [*row("sum", i), ("gamma", 0, j), ("beta", 0, j)]
    if "feed-forward" in stage:
        if name == "pre":
            return row("X", i) + col("W_1", j) + [("b_1", 0, j)]
        if name == "output":
            return row("hidden", i) + col("W_2", j) + [("b_2", 0, j)]
    if stage == "output.logits" and name == "logits":
        return row("X", i) + col("W", j) + [("b", 0, j)]
    if stage == "output.probabilities" and name == "probabilities":
        return row("logits", i)
    raise AssertionError(f"{stage}/{name} is not a dot product, a softmax or a norm")


def sheet(runner: CliRunner, path: Path, *args: str) -> str:
    result = runner.invoke(app, ["export", str(path), *args])
    assert result.exit_code == 0, result.stderr
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "args", [["--exercise", "6"], ["--exercise", "20"], ["--exercise", "40", "--pick-seed", "3"]]
)
def test_every_input_of_a_hidden_cell_is_shown(runner: CliRunner, tmp_path: Path, args: list[str]) -> None:
    t = tables(sheet(runner, tmp_path / "sheet.md", *args))
    asked = holes(t)
    assert sorted(asked) == list(range(1, int(args[1]) + 1))
    for n, (stage, name, i, j) in asked.items():
        for src, r, c in inputs(t, stage, name, i, j):
            cell = t[stage, src][r][c]
            assert not cell.startswith("**?"), (
                f"?{n} = {stage}/{name}[{i},{j}] needs {src}[{r},{c}], hidden as {cell}"
            )


def test_a_row_bound_by_a_sum_hides_two_cells_or_none(runner: CliRunner, tmp_path: Path) -> None:
    # A softmax row sums to 1 and a LayerNorm row's (y − β)/γ to 0 (β = 0, γ = 1 untrained): one
    # hidden cell would be 1 − (or −) the sum of the others.
    seen = 0
    for seed in ("1", "2", "3"):
        t = tables(sheet(runner, tmp_path / f"sheet{seed}.md", "--exercise", "30", "--pick-seed", seed))
        for (stage, name), rows in t.items():
            bound = (
                re.fullmatch(r"A\d+", name)
                or name == "probabilities"
                or ("add-norm" in stage and name == "output")
            )
            if bound:
                for row in rows:
                    count = sum(cell.startswith("**?") for cell in row)
                    assert count != 1, f"{stage}/{name}: a row with one hidden cell: {row}"
                    seen += count
    assert seen > 0  # the rule was exercised


def test_default_kinds_ask_real_steps_only(runner: CliRunner, tmp_path: Path) -> None:
    t = tables(sheet(runner, tmp_path / "sheet.md", "--exercise", "40"))
    for stage, name, _, _ in holes(t).values():
        assert not stage.endswith(("embedding", "positional-encoding")), "a lookup or a single addition"
        assert name not in ("concat", "sum", "hidden") and not name.endswith("+M"), "a copy or an addition"
        inputs(t, stage, name, 0, 0)  # raises unless a dot product, a softmax or a norm


def test_kinds_chooses_the_steps(runner: CliRunner, tmp_path: Path) -> None:
    t = tables(sheet(runner, tmp_path / "sheet.md", "--exercise", "5", "--kinds", "lookup"))
    asked = holes(t)
    assert len(asked) == 5
    for stage, name, _i, _j in asked.values():
        assert stage.endswith(".embedding") and name == "output"
    t = tables(sheet(runner, tmp_path / "sheet2.md", "--exercise", "4", "--kinds", "softmax"))
    assert {re.sub(r"\d", "", name) for _, name, _, _ in holes(t).values()} <= {"A", "probabilities"}


def test_a_bad_kind_lists_them_in_one_line(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["export", str(tmp_path / "s.md"), "--exercise", "3", "--kinds", "dot,sotfmax"]
    )
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "'sotfmax'" in result.stderr and all(k in result.stderr for k in KINDS)
    assert list(tmp_path.iterdir()) == []


def test_more_than_there_are_says_how_many(runner: CliRunner, tmp_path: Path) -> None:
    # Only the probabilities: 4 rows of 7 next-word probabilities, every one above 0 and each
    # row of 7 ≥ 2 cells, so all 28 can be hidden (the row rule allows a full row).
    path = tmp_path / "s.md"
    base = ["export", str(path), "-s", "output.probabilities"]
    result = runner.invoke(app, [*base, "--exercise", "29"])
    assert result.exit_code == 2 and "has 28 cells worth asking" in result.stderr
    assert list(tmp_path.iterdir()) == []
    assert len(holes(tables(sheet(runner, path, "-s", "output.probabilities", "--exercise", "28")))) == 28


def test_pick_seed_is_deterministic_and_picks_others(runner: CliRunner, tmp_path: Path) -> None:
    a = sheet(runner, tmp_path / "a.md", "--exercise", "8", "--pick-seed", "5")
    b = sheet(runner, tmp_path / "b.md", "--exercise", "8", "--pick-seed", "5")
    c = sheet(runner, tmp_path / "c.md", "--exercise", "8", "--pick-seed", "6")
    assert a == b
    assert holes(tables(a)) != holes(tables(c))
    # the same numbers: every cell shown in both is the same (one may show it finer: a hidden
    # cell's inputs are shown to two more decimals)
    ta, tc = tables(a), tables(c)
    for key, rows in ta.items():
        for ra, rc in zip(rows, tc[key], strict=True):
            for x, y in zip(ra, rc, strict=True):
                assert x == y or "?" in x or "?" in y or _same_number(x, y), (key, x, y)


def _same_number(x: str, y: str) -> bool:
    """Two cells that show one number, one of them to more decimals: the finer, rounded, is the other."""
    coarse, fine = sorted((x, y), key=len)
    decimals = len(coarse.split(".")[1]) if "." in coarse else 0
    rounded = f"{float(fine.replace('−', '-')):.{decimals}f}".replace("-", "−")
    return rounded == coarse or (rounded == "−" + coarse)  # −0.00 is shown as 0.00


def test_answers_go_to_their_own_file(runner: CliRunner, tmp_path: Path) -> None:
    doc, key = tmp_path / "sheet.md", tmp_path / "key.md"
    result = runner.invoke(app, ["export", str(doc), "--exercise", "6", "--answers", str(key)])
    assert result.exit_code == 0, result.stderr
    body, answers = doc.read_text(encoding="utf-8"), key.read_text(encoding="utf-8")
    assert "## Answer key" not in body and "in a file of their own" in body
    assert "## Answer key" in answers
    asked = holes(tables(body))
    for n, (stage, name, _, _) in asked.items():
        assert f"**?{n}** `{stage} · {name}[" in answers
    # never overwritten without --force, and then nothing else is written either
    key.write_text("mine", encoding="utf-8")
    doc.unlink()
    again = runner.invoke(app, ["export", str(doc), "--exercise", "6", "--answers", str(key)])
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr
    assert key.read_text(encoding="utf-8") == "mine" and not doc.exists()
    forced = runner.invoke(app, ["export", str(doc), "--exercise", "6", "--answers", str(key), "--force"])
    assert forced.exit_code == 0 and key.read_text(encoding="utf-8") == answers
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    same = runner.invoke(app, ["export", str(doc), "--exercise", "6", "--answers", str(doc), "--force"])
    assert same.exit_code == 2 and "is the worksheet itself" in same.stderr
    alone = runner.invoke(app, ["export", str(tmp_path / "x.md"), "--answers", str(tmp_path / "k.md")])
    assert alone.exit_code == 2 and "--exercise" in alone.stderr


def test_latex_worksheet_and_key_compile_with_typeset_minus_signs(runner: CliRunner, tmp_path: Path) -> None:
    from tests.test_documents import compile_latex, overfull

    doc, key = tmp_path / "sheet.tex", tmp_path / "key.tex"
    # norms: their key shows eps = 1e-05, which must read 1 × 10⁻⁵; dot products show negatives
    result = runner.invoke(
        app, ["export", str(doc), "--exercise", "8", "--kinds", "norm,dot", "--answers", str(key)]
    )
    assert result.exit_code == 0, result.stderr
    source = key.read_text(encoding="utf-8")
    assert r"\times10^{-5}" in source and "1e-05" not in source
    assert re.search(r"\$-\d", source)  # a negative number in math, its sign a minus
    assert not re.search(
        r"(?<![$\w{])-\d", source.split(r"\section*{Answer key}")[1]
    )  # no hyphen-minus in text
    for path, out in ((doc, tmp_path / "doc"), (key, tmp_path / "key")):
        out.mkdir()
        log, pdf = compile_latex(path.read_text(encoding="utf-8"), out)
        assert overfull(log) == []
        if shutil.which("pdftotext"):
            text = subprocess.run(
                ["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True
            ).stdout
            if path == key:
                assert "−" in text  # U+2212, typeset, not a hyphen
                assert not re.search(r"(?<![\w])-\d", text)
