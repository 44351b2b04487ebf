"""The tour, driven by keys: through a function, and through a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from rich.console import Console

from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.views.render import View
from transformer_walkthrough.views.tour import decode, run_tour

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def test_keys_move_forward_back_and_quit(trace: Trace) -> None:
    console = Console(width=100, record=True, file=io.StringIO())
    keys = iter(["\n", "\n", "b", "x", "\n", "q"])  # x means nothing and is ignored
    assert run_tour(console, trace, View(), key=keys.__next__) == 2
    pages = re.findall(r"stage (\d+) of 16 · (\S+)", console.export_text())
    assert pages == [
        ("1", "encoder.embedding"),
        ("2", "encoder.positional-encoding"),
        ("3", "encoder.0.self-attention"),
        ("2", "encoder.positional-encoding"),
        ("2", "encoder.positional-encoding"),
        ("3", "encoder.0.self-attention"),
    ]


def test_the_last_page_is_the_prediction_and_enter_there_ends(trace: Trace) -> None:
    console = Console(width=100, record=True, file=io.StringIO())
    assert run_tour(console, trace, View(), key=lambda: "\n") == 16
    text = console.export_text()
    assert "the prediction, after the 16 stages" in text and "the end · ← back · g go to · / search · ? keys · q quit" in text
    assert "stage 16 of 16 · output.probabilities" in text


def test_stages_counts_them_as_the_tour_does(runner: object) -> None:
    from transformer_walkthrough.cli import app

    out = runner.invoke(app, ["stages"]).stdout  # type: ignore[attr-defined]
    assert out.splitlines()[-1] == "16 stages + the prediction"


def test_keys_arrive_as_escape_sequences_and_are_decoded_whole() -> None:
    assert [decode(k) for k in ("\x1b[A", "\x1b[B", "\x1bOB", "\x1b[C", "\x1b[D")] == [
        "up", "down", "down", "right", "left"]  # fmt: skip
    assert [decode(k) for k in ("\x1b[5~", "\x1b[6~", "\x1b[H", "\x1b[1~", "\x1b[F", "\x1b[4~")] == [
        "page-up", "page-down", "home", "home", "end", "end"]  # fmt: skip
    assert decode("\x1b") == "escape" and decode("\x1b[99~") == "unknown" and decode("q") == "q"


def frames(text: str) -> list[list[str]]:
    """The screens shown, one per key: each from its header to its help line."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"stage \d+ of 16 · |the prediction, after", line):
            out.append([])
        out[-1].append(line)
    return out


def test_a_tall_stage_scrolls_under_a_fixed_header_at_80_by_24(trace: Trace) -> None:
    console = Console(width=80, height=24, record=True, file=io.StringIO())
    keys = iter(["\n", "\n", "j", "down", "k", " ", "page-up", "end", "home", "q"])
    assert run_tour(console, trace, View(width=80), key=keys.__next__) == 0
    shown = frames(console.export_text())
    headers = [f[0] for f in shown]
    assert headers[0] == "stage 1 of 16 · encoder.embedding"
    assert headers[1].startswith("stage 2 of 16 · encoder.positional-encoding")
    scrolled = r"stage 3 of 16 · encoder.0.self-attention · lines (\d+)–(\d+) of (\d+)"
    tall = re.findall(scrolled, "\n".join(headers))
    n = int(tall[0][2])
    assert n > 20 and [(int(a), int(b)) for a, b, _ in tall] == [
        (1, 20), (2, 21), (3, 22), (2, 21), (22, 41), (2, 21)]  # fmt: skip
    assert headers[-2:] == ["the prediction, after the 16 stages", "stage 1 of 16 · encoder.embedding"]
    for frame in shown:
        assert len(frame) <= 23  # a 24th line would scroll the header off the screen
        assert frame[1].startswith("weights: random (seed 42)")
        assert all(len(line) <= 80 and line == line.rstrip() for line in frame)
    body = [f[2:-1] for f in shown[2:5]]
    assert body[1] == [*body[0][1:], body[1][-1]]  # one line down: the same lines, moved up by one


def test_each_stage_of_the_tour_opens_under_its_map_at_80_by_24(trace: Trace) -> None:
    console = Console(width=80, height=24, record=True, file=io.StringIO())
    assert run_tour(console, trace, View(width=80), key=lambda: "\n") == 16
    shown = frames(console.export_text())
    assert len(shown) == 17
    assert shown[0][2:7] == [
        "                             output linear softmax",
        "encoder ×1                   decoder ×1",
        "  0 self +norm ffn +norm       0 masked +norm cross +norm ffn +norm",
        "    [embed] pos                  embed pos",
        "inputs: the tokens' ids",
    ]
    assert shown[10][2:7] == [
        "                             output linear softmax",
        "encoder ×1                   decoder ×1",
        "  0 self +norm ffn +norm       0 masked +norm [cross] +norm ffn +norm",
        "    embed pos                    embed pos",
        "inputs: X = decoder.0.add-norm-1 output · memory = encoder.0.add-norm-2 output",
    ]
    assert shown[10][0].startswith("stage 11 of 16 · decoder.0.cross-attention")
    for frame in shown:
        assert len(frame) <= 23 and all(len(line) <= 80 for line in frame)


def test_tour_in_a_pseudo_terminal() -> None:
    master, slave = pty.openpty()
    # The terminal is 80×24, and says so to the program (TIOCSWINSZ) as a real one would.
    fcntl_ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "transformer_walkthrough", "tour"],
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)  # fmt: skip
    os.close(slave)
    raw = ""

    def wait_for(text: str, after: int) -> int:
        nonlocal raw
        deadline = time.monotonic() + 30
        while (found := ANSI.sub("", raw).find(text, after)) < 0:
            assert time.monotonic() < deadline, f"no {text!r} in: {ANSI.sub('', raw)[-500:]!r}"
            if select.select([master], [], [], 0.5)[0]:
                try:
                    raw += os.read(master, 65536).decode("utf-8", "replace")
                except OSError:
                    break
        return found + len(text)

    try:
        at = wait_for("stage 1 of 16 · encoder.embedding", 0)
        assert "\x1b[" in raw  # colour, and the clearing of the screen: a real terminal
        for key, expect in [
            (b"\r", "stage 2 of 16 · encoder.positional-encoding"),  # Enter: next
            (b"\x1b[C", "stage 3 of 16 · encoder.0.self-attention · lines 1–20"),  # →: next
            (b"\x1b[B", "lines 2–21"),  # ↓: a line down, and not quit (ESC used to quit)
            (b"\x1b[6~", "lines 22–41"),  # PageDown
            (b"\x1b[5~", "lines 2–21"),  # PageUp
            (b"\x1b[A", "lines 1–20"),  # ↑
            (b"\x1b[D", "stage 2 of 16"),  # ←: back
            (b"\x1b[F", "the prediction, after the 16 stages"),  # End
            (b"\x1b[H", "stage 1 of 16"),  # Home
        ]:
            os.write(master, key)
            at = wait_for(expect, at)
        os.write(master, b"q")
        assert proc.wait(timeout=20) == 0
        time.sleep(0.2)
        while select.select([master], [], [], 0.2)[0]:
            try:
                raw += os.read(master, 65536).decode("utf-8", "replace")
            except OSError:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    screens = raw.split("\x1b[2J")[1:]  # each page starts by clearing the screen
    assert len(screens) == 10
    first = ANSI.sub("", screens[0]).replace("\r", "")
    assert "    [embed] pos" in first and "inputs: the tokens' ids" in first  # the map, in the terminal
    for screen in screens:
        lines = ANSI.sub("", screen).replace("\r", "").split("\n")
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        assert re.match(r"stage \d+ of 16|the prediction", lines[0].lstrip())


def fcntl_ioctl(fd: int, request: int, arg: bytes) -> None:
    import fcntl

    fcntl.ioctl(fd, request, arg)
