"""Issue 18: hostile input at the CLI's edge. No input a user can give shows a traceback.

Out of memory, numbers too large, a native library's panic, bytes that are not UTF-8, an output
stream that cannot encode our symbols, a terminal a billion columns wide, labels of megabytes,
values quoted whole in messages, and the export's file names and signals. Each fails in one
``error:`` line with exit code 2, or degrades and succeeds.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import transformer_walkthrough.files.export as export_module
import transformer_walkthrough.model.transformer as transformer
from tests.test_robustness import fails
from transformer_walkthrough.cli import app
from transformer_walkthrough.errors import WalkthroughError, short_message, shorten, utf8_argument
from transformer_walkthrough.model.trace import Matrix
from transformer_walkthrough.views.ascii import ERRORS, register
from transformer_walkthrough.views.blocks import matrix_block
from transformer_walkthrough.views.terminal import MAX_WIDTH
from transformer_walkthrough.views.widgets import MAX_LABEL, View, label

ROOT = Path(__file__).resolve().parents[1]
# A native library's panic as pyo3 raises it: a BaseException, past every `except Exception`.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


def walkthrough(*args: str | bytes, env: dict[str, str] | None = None, stdin: str = "", timeout: float = 60):
    """``python -m transformer_walkthrough`` with ``args`` (bytes allowed: argv as the OS gives it)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG")}
    return subprocess.run(
        [sys.executable, "-m", "transformer_walkthrough", *args],
        input=stdin.encode(),
        capture_output=True,
        env={**environ, "COLUMNS": "80", "LINES": "24", **(env or {})},
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[bytes], message: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.decode("utf-8").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


# ---- One edge catches every non-bug --------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (MemoryError(), "out of memory (MemoryError)"),
        (OverflowError("Python int too large to convert to C long"), "OverflowError: Python int too large"),
        (
            PanicException("called `Option::unwrap()` on a `None` value\nbacktrace"),
            "pyo3_runtime.PanicException",
        ),
    ],
    ids=["MemoryError", "OverflowError", "PanicException"],
)
@pytest.mark.parametrize("command", [["run"], ["export", "-"], ["verify", "-c", "configs/pre-norm.yaml"]])
def test_what_no_check_foresees_is_one_line(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, error: BaseException, message: str, command: list[str]
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(transformer, "run_forward", fail)
    monkeypatch.chdir(ROOT)
    line = fails(runner, command, message)
    assert f"walkthrough {command[0]} " in line  # the input is named ...
    assert "configs/pre-norm.yaml" in line or "(the default config)" in line
    assert "backtrace" not in line  # ... and the cause in one line


def test_a_bug_of_ours_still_shows_itself(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(transformer, "run_forward", bug)
    assert isinstance(runner.invoke(app, ["run"]).exception, KeyError)


# ---- Arguments ----------------------------------------------------------------------------------


def test_non_utf8_argv_is_refused_in_one_line() -> None:
    result = walkthrough("run", "--source", b"caf\xe9", "--target", "x")
    one_error_line(result, "--source: not valid UTF-8 (byte 0xE9 at byte 4)")
    assert b"Traceback" not in result.stderr


def test_utf8_argv_in_a_c_locale_is_read_as_utf8() -> None:
    result = walkthrough(
        "run", "--source", "café".encode(), "--target", "x", env={"LC_ALL": "C", "PYTHONUTF8": "0"}
    )
    assert result.returncode == 0, result.stderr
    assert b"cafe" in result.stdout  # the word was read whole, and shown without its accent on ASCII


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--source", "caf\udce9", "--target", "x"],
        ["run", "--source", "the cat", "--target", "\udcff"],
        ["run", "--model", "nowhere", "--prompt", "hi \udce9"],
        ["step", "--stage", "\udcc3"],
        ["explain", "-s", "output.probabilities", "-m", "prob\udce9", "--cell", "0,0"],
        ["explain", "-s", "output.probabilities", "-m", "probabilities", "--cell", "0,\udce9"],
        ["export", "x.html", "--cells", "decoder.0.masked-attention/A1[\udce9,0]"],
    ],
)
def test_every_text_argument_must_be_utf8(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    fails(runner, args, "not valid UTF-8 (byte 0x")
    assert list(tmp_path.iterdir()) == []


def test_utf8_argument() -> None:
    assert utf8_argument("café") == "café"
    with pytest.raises(ValueError, match="byte 0xE9 at byte 4"):
        utf8_argument("caf\udce9")


@pytest.mark.parametrize(
    "args",
    [
        ["generate", "--top-k", "3", "--seed", "-1"],
        ["generate", "--model", "x", "--prompt", "hi", "--top-k", "3", "--seed", "-1"],
        ["diff", "-w", "a", "-w", "b", "--seed", "-2"],
    ],
)
def test_a_negative_seed_is_refused(runner: CliRunner, args: list[str]) -> None:
    fails(runner, args, "--seed: must be 0 or more, got -")


# ---- The terminal ------------------------------------------------------------------------------------


def test_a_huge_terminal_width_is_clamped() -> None:
    start = time.monotonic()
    result = walkthrough("run", env={"COLUMNS": "10000000"}, timeout=20)
    assert time.monotonic() - start < 20
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) < 1_000_000  # 97 kB at the 1,000 columns it is clamped to
    assert max(len(line) for line in result.stdout.decode().splitlines()) <= MAX_WIDTH


@pytest.mark.parametrize(
    "command",
    [["run"], ["tour"], ["step", "-s", "probabilities", "--full"]],
)
def test_widths_and_heights_beyond_memory_are_clamped(runner: CliRunner, command: list[str]) -> None:
    huge = {"COLUMNS": "99999999999", "LINES": "99999999999"}
    result = runner.invoke(app, command, env=huge, input="q\n")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout) < 1_000_000


def test_long_labels_are_cut_on_screen_and_whole_in_exports(runner: CliRunner) -> None:
    word = "a" * 200_000 + "z"
    args = ["--source", f"{word} b", "--target", "x y"]
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout) < 200_000 and f"{'a' * 21}…{'a' * 9}z" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    explained = runner.invoke(app, ["explain", "-s", "output.probabilities", "-m", "probabilities",
                                    "--cell", "0,0", *args])  # fmt: skip
    assert explained.exit_code == 0 and len(explained.stdout) < 5_000, explained.stderr
    exported = runner.invoke(app, ["export", "-", *args])
    assert word in json.loads(exported.stdout)["vocabulary"]


def test_the_renderer_escapes_and_shortens_every_label() -> None:
    import numpy as np
    from rich.console import Console

    rows = ("\x1b[2Jred", "b" * 1_000_000, "ok")
    block = matrix_block("M\x07", Matrix(np.zeros((3, 2)), rows, ("\u200bx", "\udce9")), View(width=80))
    console = Console(width=80, no_color=True, record=True, file=io.StringIO())
    console.print(block)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\udce9" not in text
    assert "\\x1b[2Jred" in text and "\\udce9" in text and "\\u200bx" in text
    assert max(len(line) for line in text.splitlines()) < 80
    assert label("b" * 1_000_000) == "b" * 21 + "…" + "b" * 10 and len(label("x" * 33)) == MAX_LABEL
    assert label("<start>") == "<start>"


def test_values_in_messages_are_cut_to_about_80_characters(runner: CliRunner, monkeypatch) -> None:
    line = fails(runner, ["run", "--precision", "9" * 4000], "display.precision")
    assert len(line) < 300 and "…" in line
    shape = (1,) * 100_000  # 300 kB of repr, with spaces

    def fail(*args: object, **kwargs: object) -> None:
        raise WalkthroughError(f"W_Q1: expected shape (4, 2), got {shape}")

    monkeypatch.setattr(transformer, "run_forward", fail)
    line = fails(runner, ["run"], "W_Q1: expected shape (4, 2), got (1, 1")
    assert len(line) < 200


def test_shortening() -> None:
    assert shorten("abcdefghij", 6) == "abcd…j" and shorten("short", 80) == "short"
    path = "/home/someone/" + "d" * 400 + "/weights.npz"
    assert short_message(f"{path}: no such file").endswith(
        "/weights.npz: no such file"
    )  # paths stay readable
    assert len(short_message("x " + "9" * 10_000)) == 82
    assert short_message("plain words " * 8) == "plain words " * 8


# ---- Output that cannot show our symbols ---------------------------------------------------------------

COMMANDS = [
    ["run"],
    ["step", "-s", "masked-attention"],
    ["explain", "-s", "decoder.0.masked-attention", "-m", "A1", "--cell", "0,1"],
    ["verify"],
    ["generate"],
    ["stages"],
    ["diff", "configs/article.yaml", "configs/pre-norm.yaml"],
    ["config"],
    ["export", "-"],
    ["train", "--steps", "2"],
    ["tour"],
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}, {"LANG": "C", "LC_ALL": "C"}],
    ids=["PYTHONIOENCODING=ascii", "LC_ALL=C, no UTF-8 mode", "LC_ALL=C"],
)  # fmt: skip
def test_an_ascii_stream_degrades_instead_of_failing(env: dict[str, str]) -> None:
    for command in COMMANDS:
        result = walkthrough(*command, env=env, stdin="q\n")
        assert result.returncode == 0 and b"Traceback" not in result.stderr, (command, result.stderr[-800:])
        if command[0] in ("config", "export"):  # data: Click writes it as UTF-8, whole
            text = result.stdout.decode("utf-8")
            if command[0] == "export":
                assert json.loads(text)["schema_version"] == 2
        elif env.get("PYTHONIOENCODING") or env.get("PYTHONUTF8") == "0":
            text = result.stdout.decode("ascii")  # no byte past ASCII
            assert "?" not in text, command  # every symbol has its stand-in
            if command[0] == "step":
                assert "/ sqrt(d_k)" in text and "-inf" in text and "-----" in text


def test_the_ascii_stand_ins() -> None:
    register()
    text = "S = Q·Kᵀ / √d_k, −∞, 猫 é … ─│"
    assert text.encode("ascii", ERRORS) == b"S = Q*K^T / sqrt(d_k), -inf, ? e ... -|"


# ---- Exports: names, signals, slashes, one line ---------------------------------------------------------


def test_a_255_byte_name_of_multibyte_characters_exports(runner: CliRunner, tmp_path: Path) -> None:
    name = "猫" * 83 + "a.json"
    assert len(os.fsencode(name)) == 255
    result = runner.invoke(app, ["export", str(tmp_path / name)])
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize(("command", "name"), [("export", "x.json"), ("train", "x.npz")])
def test_a_trailing_slash_is_refused(runner: CliRunner, tmp_path: Path, command: str, name: str) -> None:
    args = (
        ["export", f"{tmp_path / name}/"]
        if command == "export"
        else ["train", "--steps", "1", "-o", f"{tmp_path / name}/"]
    )
    fails(runner, args, f"{name}/: ends in /")
    assert list(tmp_path.iterdir()) == []


def test_sigquit_mid_export_leaves_no_temporary_file(tmp_path: Path) -> None:
    config = tmp_path / "big.yaml"  # 3.8 million numbers: about two seconds of writing
    config.write_text(
        "model: {d_model: 256, num_heads: 4, d_ff: 1024, num_encoder_layers: 2, num_decoder_layers: 2}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "transformer_walkthrough", "export", "big.html", "-c", "big.yaml"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        assert process.poll() is None and time.monotonic() < deadline, "the export never started writing"
        time.sleep(0.01)
    process.send_signal(signal.SIGQUIT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGQUIT, stderr
    assert b"Traceback" not in stderr
    assert [p.name for p in tmp_path.iterdir()] == ["big.yaml"]


def test_an_error_after_the_size_warning_is_the_only_line(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformer_walkthrough.errors import ExportError
    from transformer_walkthrough.views.documents import writers

    monkeypatch.setattr(export_module, "LARGE", 100)

    def failing(*args: object) -> object:
        yield "<!DOCTYPE html>"
        raise ExportError("the disk is full")

    monkeypatch.setitem(writers.WRITERS, ".html", failing)
    fails(runner, ["export", str(tmp_path / "r.html")], "error: the disk is full")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    monkeypatch.setattr(export_module, "LARGE", 100)
    result = runner.invoke(app, ["export", str(tmp_path / "r.json")])  # success: the warning, then "wrote"
    assert result.exit_code == 0
    warning, wrote = result.stderr.splitlines()
    assert warning.startswith("warning: ") and "MB of JSON" in warning and wrote.startswith("wrote ")
