"""The tour, driven by keys: through a function, and through a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time

from rich.console import Console

from transformer_walkthrough.render import View
from transformer_walkthrough.tour import run_tour
from transformer_walkthrough.trace import Trace

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def test_keys_move_forward_back_and_quit(trace: Trace) -> None:
    console = Console(width=100, record=True, file=io.StringIO())
    keys = iter(["\n", "\n", "b", "x", "\n", "q"])  # x means nothing and is ignored
    assert run_tour(console, trace, View(), key=keys.__next__) == 2
    pages = re.findall(r"stage (\d+) of 17 · (\S+)", console.export_text())
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
    assert "stage 17 of 17 · prediction" in text and "the end · b back · q quit" in text


def test_tour_in_a_pseudo_terminal() -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "50"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "transformer_walkthrough", "tour"],
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)  # fmt: skip
    os.close(slave)
    seen = ""

    def wait_for(text: str, after: int) -> int:
        nonlocal seen
        deadline = time.monotonic() + 30
        while (found := seen.find(text, after)) < 0:
            assert time.monotonic() < deadline, f"no {text!r} in: {seen[-500:]!r}"
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += ANSI.sub("", os.read(master, 65536).decode("utf-8", "replace"))
                except OSError:
                    break
        return found + len(text)

    try:
        at = wait_for("stage 1 of 17", 0)
        assert "\x1b" not in seen[:at]  # the escapes were stripped above; colour was there to strip
        os.write(master, b"\r")  # Enter: next
        at = wait_for("stage 2 of 17 · encoder.positional-encoding", at)
        os.write(master, b" ")  # space: next too
        at = wait_for("stage 3 of 17", at)
        os.write(master, b"b")  # one key, no Enter: back
        at = wait_for("stage 2 of 17", at)
        os.write(master, b"q")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
