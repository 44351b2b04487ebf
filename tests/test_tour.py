"""The tour, driven by keys: through a function, and through a real pseudo-terminal."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from transformer_walkthrough.model.trace import Trace
from transformer_walkthrough.views.tour import decode, run_tour
from transformer_walkthrough.views.widgets import View

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
    assert (
        "the prediction, after the 16 stages" in text
        and "the end · ← back · g go · / find · h keys · q quit" in text
    )
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


# The keys of issue 22's point 7: jump, search, the key list, a matrix's head repeated, resize,
# PageUp at the top, --stage. Expectations are written from the stage list (README: the ids, in
# order) and from the page's layout: the map's 5 lines, the stage's rule, its explanation, its formula.

TWO_DECODER_LAYERS = "model:\n  num_decoder_layers: 2\n"  # 22 stages: decoder.1.* are stages 15 to 20
HEADER = re.compile(r"stage (\d+) of (\d+) · (\S+)(?: · lines (\d+)–(\d+) of (\d+))?$")


class Tty:
    """The tour in a pseudo-terminal of ``rows`` × ``columns``: keys written, screens read back."""

    def __init__(self, *args: str, rows: int = 24, columns: int = 80) -> None:
        self.master, slave = pty.openpty()
        self.resize(rows, columns, slave)
        env = {**os.environ, "TERM": "xterm-256color"}
        for name in ("NO_COLOR", "COLUMNS", "LINES"):
            env.pop(name, None)
        command = [sys.executable, "-m", "transformer_walkthrough", "tour", *args]
        self.proc = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
        )
        os.close(slave)
        self.raw = ""

    def resize(self, rows: int, columns: int, fd: int | None = None) -> None:
        fcntl_ioctl(
            self.master if fd is None else fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0)
        )

    def screens(self) -> list[list[str]]:
        """Every screen so far (each starts by clearing the terminal), as plain lines."""
        return [ANSI.sub("", s).replace("\r", "").split("\n") for s in self.raw.split("\x1b[2J")[1:]]

    def wait(self, done: Callable[[list[str]], bool], after: int) -> list[str]:
        """The first screen past the ``after`` first ones for which ``done`` holds."""
        deadline = time.monotonic() + 30
        while True:
            shown = self.screens()[after:]
            for screen in shown:
                if done(screen):
                    return screen
            assert time.monotonic() < deadline, f"not shown; last: {shown[-1:]!r}"
            assert self.proc.poll() is None, f"the tour ended ({self.proc.returncode}): {self.raw[-800:]!r}"
            if select.select([self.master], [], [], 0.5)[0]:
                with contextlib.suppress(OSError):
                    self.raw += os.read(self.master, 65536).decode("utf-8", "replace")

    def press(self, keys: bytes, last_line: str | re.Pattern[str], header: str = "") -> list[str]:
        """Write ``keys``; the screen that follows, once its last line (the status) and header are in."""
        after = len(self.screens())
        os.write(self.master, keys)

        def done(screen: list[str]) -> bool:
            lines = [line for line in screen if line.strip()]
            if not lines or not lines[0].lstrip().startswith(header):
                return False
            return (
                bool(re.search(last_line, lines[-1]))
                if isinstance(last_line, re.Pattern)
                else lines[-1] == last_line
            )

        return [line for line in self.wait(done, after) if line.strip() or False]

    def quit(self) -> None:
        os.write(self.master, b"q")
        assert self.proc.wait(timeout=20) == 0
        assert "Traceback" not in self.raw

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.master)


ANY_HELP = re.compile(r"q quit$")


def test_g_and_colon_jump_by_id_prefix_and_number_and_say_when_nothing_matches(tmp_path: Path) -> None:
    config = tmp_path / "two.yaml"
    config.write_text(TWO_DECODER_LAYERS)
    tty = Tty("-c", str(config))
    try:
        tty.wait(lambda s: s[0].startswith("stage 1 of 22 · encoder.embedding"), 0)
        for keys, header in [
            (b"gdecoder.1.masked-attention\r", "stage 15 of 22 · decoder.1.masked-attention"),  # the id
            (b"gdecoder.1.cr\r", "stage 17 of 22 · decoder.1.cross-attention"),  # a unique prefix
            (b":8\r", "stage 8 of 22 · decoder.positional-encoding"),  # a number from the stage list
            (
                b"gcross\x7f\x7f\x7f\x7f\x7f\x7fdecoder.0.add-norm-3\r",
                "stage 14 of 22 · decoder.0.add-norm-3",
            ),
            (b"g22\r", "stage 22 of 22 · output.probabilities"),
            (b"gprediction\r", "the prediction, after the 22 stages"),
            (b"g23\r", "the prediction, after the 22 stages"),  # "22 stages + the prediction"
        ]:
            screen = tty.press(keys, ANY_HELP, header)
            assert screen[0].startswith(header)
        tty.press(b"g1\r", ANY_HELP, "stage 1 of 22")
        for keys, said in [
            (b"gdecoder.2\r", "no stage matches 'decoder.2'"),
            (b"g24\r", "no stage 24: the stages are 1 to 22, the prediction 23"),
            (b"g0\r", "no stage 0: the stages are 1 to 22, the prediction 23"),
            (
                b"gdecoder.1\r",
                # Six stages start so (the six sublayers' of layer 1); the line is cut at 80 columns.
                "'decoder.1' matches 6 stages: decoder.1.masked-attention, decoder.1.add-norm-1",
            ),
        ]:
            screen = tty.press(keys, re.compile(re.escape(said)), "stage 1 of 22")
            assert screen[0].startswith("stage 1 of 22 · encoder.embedding")  # where it was: nothing moved
        # Esc gives up the prompt, and Enter on nothing does nothing: the same page, the help line again.
        assert tty.press(b"gdecoder.1\x1b", ANY_HELP, "stage 1 of 22")[0].startswith("stage 1 of 22")
        assert tty.press(b":\r", ANY_HELP, "stage 1 of 22")[0].startswith("stage 1 of 22")
        tty.quit()
    finally:
        tty.close()


def test_search_from_here_on_with_n_and_N_wrapping_around() -> None:
    tty = Tty()
    try:
        tty.wait(lambda s: s[0].startswith("stage 1 of 16"), 0)
        # W_O first shows in encoder.0.self-attention's formula: its 14th line (5 of the map, the
        # stage's rule, 3 of explanation, then the 5th line of the formula).
        screen = tty.press(b"/W_O\r", re.compile("^/W_O: "), "stage 3 of 16")
        assert screen[-1] == "/W_O: encoder.0.self-attention · line 14"
        assert HEADER.match(screen[0]).group(4) == "14" and "·W_O" in screen[2]  # the match, first
        screen = tty.press(b"n", re.compile("^/W_O: "), "stage 3 of 16")
        line = int(re.fullmatch(r"/W_O: encoder.0.self-attention · line (\d+)", screen[-1]).group(1))
        assert line > 14 and any("W_O" in row for row in screen[2:-1])  # the matrix W_O, further down
        screen = tty.press(b"N", re.compile("^/W_O: "), "stage 3 of 16")
        assert screen[-1] == "/W_O: encoder.0.self-attention · line 14"
        # From the prediction (no W_O there) the search goes round to the first stage that has it.
        tty.press(b"\x1b[F", ANY_HELP, "the prediction")
        screen = tty.press(b"/W_O\r", re.compile("^/W_O: "), "stage 3 of 16")
        assert screen[-1] == "/W_O: encoder.0.self-attention · line 14 (wrapped around)"
        # Lower case finds any case; nothing found is said, and the page stays.
        screen = tty.press(b"/zebra\r", re.compile("^/zebra"), "stage 3 of 16")
        assert screen[-1] == "/zebra: not found" and screen[0].startswith("stage 3 of 16")
        screen = tty.press(b"/w_o\r", re.compile("^/w_o: "), "stage 3 of 16")
        assert screen[-1] == "/w_o: encoder.0.self-attention · line 14"
        tty.quit()
    finally:
        tty.close()


def test_question_mark_lists_the_keys_and_any_key_returns() -> None:
    tty = Tty("--stage", "3")
    try:
        tty.wait(lambda s: s[0].startswith("stage 3 of 16"), 0)
        screen = tty.press(b"?", "any key returns", "keys")
        assert screen[0].strip() == "keys"
        said = "\n".join(screen)
        for key in ("Enter, n, →", "←, Backspace", "j/k, ↓/↑", "space, PageDown", "b, PageUp", "Home, End",
                    "g or :", "/", "? or h", "q, Esc"):  # fmt: skip
            assert re.search(rf"^{re.escape(key)}  ", said, re.M), key
        # q here returns too (it does not quit): any key.
        screen = tty.press(b"q", ANY_HELP, "stage 3 of 16")
        assert HEADER.match(screen[0]).groups()[:4] == ("3", "16", "encoder.0.self-attention", "1")
        assert tty.press(b"h", "any key returns", "keys")[0].strip() == "keys"  # h, as the help line says
        assert tty.press(b" ", ANY_HELP, "stage 3 of 16")[0].startswith("stage 3 of 16")
        tty.quit()
    finally:
        tty.close()


def test_pageup_and_b_at_the_top_show_the_end_of_the_previous_stage() -> None:
    tty = Tty("--stage", "encoder.0.add-norm-1")
    try:
        tty.wait(lambda s: s[0].startswith("stage 4 of 16 · encoder.0.add-norm-1 · lines 1–20"), 0)
        screen = tty.press(b"\x1b[5~", ANY_HELP, "stage 3 of 16")  # PageUp at the top
        header = HEADER.match(screen[0])
        assert header.group(5) == header.group(6)  # the last line of stage 3, on screen
        last = screen[-2]
        screen = tty.press(b"\x1b[5~", ANY_HELP, "stage 3 of 16")  # not at the top: a screen up
        # A screen up ends where that one began, give or take the lines a repeated head takes.
        began, up = int(header.group(4)), HEADER.match(screen[0])
        assert int(up.group(4)) < began and began - 1 <= int(up.group(5)) <= began + 3
        assert last not in screen
        tty.press(b"\x1b[H", ANY_HELP, "stage 1 of 16")
        tty.press(b"\r", ANY_HELP, "stage 2 of 16")
        tty.press(b"\r", ANY_HELP, "stage 3 of 16")
        screen = tty.press(b"b", ANY_HELP, "stage 2 of 16")  # b at the top of stage 3
        header = HEADER.match(screen[0])
        assert header.group(5) == header.group(6) and int(header.group(4)) > 1
        screen = tty.press(b"\x1b[D", ANY_HELP, "stage 1 of 16")  # ← is the previous stage, from its top
        tty.quit()
    finally:
        tty.close()


def test_a_resize_redraws_at_the_new_size() -> None:
    tty = Tty("--stage", "decoder.0.cross-attention")
    try:
        tty.wait(lambda s: s[0].startswith("stage 11 of 16 · decoder.0.cross-attention · lines 1–20"), 0)
        for rows, columns in ((30, 100), (20, 60), (24, 80)):
            after = len(tty.screens())
            tty.resize(rows, columns)
            os.kill(tty.proc.pid, signal.SIGWINCH)
            # The screen's body is its height less 4 (header, weights, help, the cursor's line).
            screen = tty.wait(
                # at 60 columns the header writes its line count short ("1–16/136"), never the id
                lambda s, n=rows - 4: (
                    (f"lines 1–{n} of" in s[0] or f" 1–{n}/" in s[0]) and s[-2].startswith("j/k line")
                ),
                after,
            )
            lines = [line for line in screen if line]
            assert len(lines) <= rows - 1 and all(len(line) <= columns for line in lines)
            # The stage's rule runs to the right edge, the new one.
            assert any(line.startswith("Decoder layer 0 ·") and len(line) == columns for line in lines)
        tty.quit()
    finally:
        tty.close()


def body_starts_inside_a_matrix(body: list[str]) -> bool:
    """A screen whose first line is a row of numbers (a label, then two or more numbers)."""
    first = body[0] if body else ""
    return len(re.findall(r"(?<![\w.])-?\d+\.\d\d(?![\w.])", first)) >= 2 and not re.search(r"[=×(]", first)


def test_a_screen_that_starts_inside_a_matrix_repeats_its_title_and_column_labels(trace: Trace) -> None:
    # Each page whole, from a screen tall enough for any of them: what the screens must cover.
    tall = Console(width=80, height=1000, record=True, file=io.StringIO())
    run_tour(tall, trace, View(width=80), key=lambda: "\n")
    whole = {f[0].split(" · ")[1]: f[2:-1] for f in frames(tall.export_text()) if f[0].startswith("stage")}
    console = Console(width=80, height=24, record=True, file=io.StringIO())
    keys = iter([" "] * 80 + ["q"])  # space through every page, a screen at a time
    run_tour(console, trace, View(width=80), key=keys.__next__)
    shown = [f for f in frames(console.export_text()) if f[0].startswith("stage")]
    repeated, ends = 0, 0
    for before, frame in itertools.pairwise(shown):
        header = HEADER.match(frame[0])
        assert header is not None, frame[0]
        page, first, last, n = whole[header.group(3)], *map(int, header.group(4, 5, 6) or (1, 0, 0))
        body = frame[2:-1]
        assert not body_starts_inside_a_matrix(body), frame
        if first == 1:
            continue
        if body[: last - first + 1] != page[first - 1 : last]:  # the lines said, under a repeated head
            head = body[: len(body) - (last - first + 1)]
            assert len(head) == 3 and re.match(r"\S+  \(\d+×\d+\)", head[0]) and set(head[2]) <= {"─", " "}
            assert body[3:] == page[first - 1 : last]
            # The head is the matrix's own: the last title, column labels and rule above line `first`.
            titles = [k for k in range(first - 1) if re.match(r"\S+  \(\d+×\d+\)", page[k])]
            assert page[titles[-1] : titles[-1] + 3] == head
            repeated += 1
        if HEADER.match(before[0]).group(3) == header.group(3):  # space: the screen after the last one
            before_last = int(HEADER.match(before[0]).group(5))
            # Nothing skipped. The last screen may overlap; so may a matrix's head shown at the foot
            # of a screen, which the next shows again above the matrix's rows.
            assert (
                first == before_last + 1
                or last == n
                or (
                    before_last - 2 <= first <= before_last and re.match(r"\S+  \(\d+×\d+\)", page[first - 1])
                )
            )
            ends += last == n
    assert repeated >= 3 and ends >= 3  # the attention stages split X, W_Q1 … across screens


def test_stage_starts_the_tour_there_and_a_bad_one_is_one_line(runner: CliRunner) -> None:
    from transformer_walkthrough.cli import app

    for given in ("decoder.0.cross-attention", "decoder.0.cross", "11"):
        result = runner.invoke(app, ["tour", "--stage", given], input="q\n")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines()[0].startswith("stage 11 of 16 · decoder.0.cross-attention")
    for given, said in [
        (
            "decoder.1.cross-attention",
            "error: no stage matches 'decoder.1.cross-attention'; did you mean decoder.0.cross-attention?",
        ),
        ("18", "error: no stage 18: the stages are 1 to 16, the prediction 17"),
        (
            "encoder.0",
            "error: 'encoder.0' matches 4 stages: encoder.0.self-attention, encoder.0.add-norm-1, …",
        ),
    ]:
        result = runner.invoke(app, ["tour", "--stage", given], input="q\n")
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", said + "\n")


def test_stage_with_a_checkpoint_and_a_prompt(runner: CliRunner, gpt2) -> None:
    from transformer_walkthrough.cli import app

    # GPT-2 of 2 layers: decoder.embedding, decoder.positional-encoding, then per layer norm-1,
    # masked-attention, residual-1, norm-2, feed-forward, residual-2: layer 1's attention is stage 10.
    args = ["tour", "--model", str(gpt2[0]["saved"]), "--prompt", "the cat"]
    result = runner.invoke(app, [*args, "--stage", "decoder.1.masked-attention"], input="q\n")
    assert result.exit_code == 0, result.stderr
    assert re.match(r"stage 10 of \d+ · decoder\.1\.masked-attention", result.stdout)
    result = runner.invoke(app, [*args, "--stage", "decoder.2.masked-attention"], input="q\n")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: no stage matches 'decoder.2.masked-attention'")
    assert result.stderr.count("\n") == 1


def test_from_a_pipe_a_line_is_a_key_and_g_or_slash_take_the_rest_of_it(runner: CliRunner) -> None:
    from transformer_walkthrough.cli import app

    keys = "\n".join(["", "g decoder.0.add-norm-2", "b", "", "/W_O", "gnowhere", "q"]) + "\n"
    result = runner.invoke(app, ["tour"], input=keys)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout  # plain, and no screen cleared
    headers = [
        line.split(" · lines")[0] for line in result.stdout.splitlines() if re.match(r"stage \d+ of", line)
    ]
    assert headers == [
        "stage 1 of 16 · encoder.embedding",
        "stage 2 of 16 · encoder.positional-encoding",  # Enter (an empty line)
        "stage 12 of 16 · decoder.0.add-norm-2",
        "stage 11 of 16 · decoder.0.cross-attention",  # b at the top: the previous stage's end
        "stage 12 of 16 · decoder.0.add-norm-2",
        # W_O is in the attention stages alone (3, 9, 11): from stage 12 the search wraps round.
        "stage 3 of 16 · encoder.0.self-attention",
        "stage 3 of 16 · encoder.0.self-attention",
    ]
    said = result.stdout.splitlines()
    assert "/W_O: encoder.0.self-attention · line 14 (wrapped around)" in said
    assert "no stage matches 'nowhere'; `walkthrough stages` lists them" in said
