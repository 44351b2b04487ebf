"""Issue 18: hostile tokenizer files. Each reproducer of the review, the child-process guard, the
terminal-safe labels, the SentencePiece caps, then a fuzz of tokenizer.json.

Every hostile file gives exit code 2 and one line on stderr starting with "error:" (or, for the
padding and truncation that are ignored, a normal run), never a traceback, an abort or gigabytes.
The allocation bombs run in a subprocess under RLIMIT_AS (2 GB), whose peak memory is measured.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_robustness import fails
from transformer_walkthrough.checkpoints import native
from transformer_walkthrough.checkpoints.bpe import ByteLevelBPETokenizer, label, labels
from transformer_walkthrough.checkpoints.errors import CheckpointError
from transformer_walkthrough.checkpoints.native import NativeProcess
from transformer_walkthrough.cli import app

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the child-process guard needs os.fork")

ROOT = Path(__file__).resolve().parents[1]
AS_LIMIT = 2 << 30
PEAK_LIMIT = 300 << 20  # the CLI with the tiny model peaks near 50 MB; a bomb would be GBs
HOSTILE_TERMINAL = "\x1b[2J\x1b]0;pwned\x07"
EOS = "<|endoftext|>"


def _folder(gpt2, to: Path, edit: Callable[[dict], Any] | None = None) -> Path:
    """A copy of the tiny GPT-2 (hub layout) with its tokenizer.json edited by ``edit``, and a
    tokenizer_config.json of class PreTrainedTokenizerFast: the file is used as it is, all of it
    handed to the library (GPT2Tokenizer, which config.json's model_type names otherwise, rebuilds
    the pre-tokenizer and decoder from its class in transformers 5, and would not run the edit)."""
    shutil.copytree(gpt2[0]["hub"], to)
    (to / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "PreTrainedTokenizerFast"}', encoding="utf-8"
    )
    if edit is not None:
        data = json.loads((to / "tokenizer.json").read_text(encoding="utf-8"))
        edit(data)
        (to / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return to


def _charsmap(trie_bytes: int, rest: bytes) -> str:
    """A Precompiled normalizer's charsmap: its trie's size (u32), then the blob."""
    return base64.b64encode(struct.pack("<I", trie_bytes) + rest).decode("ascii")


def _split(pattern: str) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, d["pre_tokenizer"]]}

    return edit


def _set(**changes: Any) -> Callable[[dict], None]:
    return lambda d: d.update(changes)


def _model(**changes: Any) -> Callable[[dict], None]:
    return lambda d: d["model"].update(changes)


PADDING = {
    "strategy": {"Fixed": 2_000_000_000},
    "direction": "Right",
    "pad_to_multiple_of": None,
    "pad_id": 0,
    "pad_type_id": 0,
    "pad_token": EOS,
}
TRUNCATION = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 4}
GROWING = {
    "type": "Sequence",
    "normalizers": [{"type": "Replace", "pattern": {"String": "h"}, "content": "h" * 64}] * 6,
}
CATASTROPHIC = "(a+)+$"

# name -> (edit, prompt, the message; None: the setting is ignored and the run succeeds)
HOSTILE: dict[str, tuple[Callable[[dict], Any], str, str | None]] = {
    "fixed padding of 2e9": (_set(padding=PADDING), "hi", None),
    "truncation stride = max_length": (_set(truncation=TRUNCATION), "hi there, the cat", None),
    "charsmap claiming 4 GB": (
        _set(normalizer={"type": "Precompiled", "precompiled_charsmap": _charsmap(0xFFFFFFF0, b"\0" * 64)}),
        "hi",
        "normalizer is type 'Precompiled'",
    ),
    "bad charsmap": (
        _set(normalizer={"type": "Precompiled", "precompiled_charsmap": _charsmap(8, b"\xff" * 8 + b"abc")}),
        "hi",
        "normalizer is type 'Precompiled'",
    ),
    "short charsmap": (
        _set(normalizer={"type": "Precompiled", "precompiled_charsmap": "AA=="}),
        "hi",
        "Precompiled",
    ),
    "growing Replace chain": (_set(normalizer=GROWING), "hi", "not a string of 0 to 16 characters"),
    "Replace chain within lengths": (
        _set(
            normalizer={
                "type": "Sequence",
                "normalizers": [{"type": "Replace", "pattern": {"String": "h"}, "content": "h" * 16}] * 2,
            }
        ),
        "hi",
        "more than 16 times longer",
    ),
    "Replace of nothing": (
        _set(normalizer={"type": "Replace", "pattern": {"String": ""}, "content": "x"}),
        "hi",
        "normalizer.pattern.String is ''",
    ),
    "Prepend of nothing": (_set(normalizer={"type": "Prepend", "prepend": ""}), "hi", "normalizer.prepend"),
    "1000-NUL subword prefix": (
        _model(continuing_subword_prefix="\0" * 1000),
        "hi",
        "continuing_subword_prefix",
    ),
    "WordLevel without its unk": (
        lambda d: d.update(model={"type": "WordLevel", "vocab": d["model"]["vocab"], "unk_token": "<nope>"}),
        "hi",
        "'WordLevel', not a model",
    ),
    "BPE unk not in vocab": (_model(unk_token="<nope>"), "hi", "model.unk_token is '<nope>'"),
    "catastrophic Split regex": (_split(CATASTROPHIC), "a" * 40 + "!", "panicked while encoding the text"),
    "template naming an id past the vocabulary": (
        _set(
            post_processor={
                "type": "TemplateProcessing",
                "single": [
                    {"SpecialToken": {"id": "X", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                ],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                "special_tokens": {"X": {"id": "X", "ids": [99_999_999], "tokens": ["X"]}},
            }
        ),
        "hi",
        "not an integer from 0 to",
    ),
    "unknown key": (
        _set(
            decoder={
                "type": "ByteLevel",
                "add_prefix_space": True,
                "trim_offsets": True,
                "use_regex": True,
                "surprise": 1,
            }
        ),
        "hi",
        "has the key 'surprise'",
    ),
    "unknown top-level key": (_set(extra={}), "hi", "the key 'extra' is not part of a tokenizer.json"),
    "BPE dropout": (_model(dropout=0.5), "hi", "model.dropout is 0.5"),
    "nested Sequence": (
        _set(normalizer={"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": []}]}),
        "hi",
        "not a normalizer of a supported tokenizer",
    ),
    "a token of 1.6 MB": (
        lambda d: d["model"]["vocab"].update({"x" * 1_600_000: 400}),
        "hi",
        "a token of 1,600,000",
    ),
    "a merge of tokens it lacks": (
        lambda d: d["model"]["merges"].insert(0, "zzz qqq"),
        "hi",
        "not in model.vocab",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_each_hostile_tokenizer_is_one_line_or_ignored(runner, gpt2, tmp_path, name):
    edit, prompt, message = HOSTILE[name]
    folder = str(_folder(gpt2, tmp_path / "m", edit))
    args = ["run", "--model", folder, "--prompt", prompt]
    if message is not None:
        fails(runner, args, message)
        return
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    # Ignored as transformers ignores it: its fast tokenizer resets padding and truncation per call.
    import transformers

    ours = ByteLevelBPETokenizer(folder)
    reference = transformers.GPT2TokenizerFast.from_pretrained(folder)
    for text in ("hi", "hi there, the cat is sleeping comfortably."):
        assert ours.encode(text) == reference(text)["input_ids"]


# ---------------------------------------------------------------------------------------------
# the allocation bombs and the abort, in a subprocess under RLIMIT_AS


# Runs ARGV under RLIMIT_AS and writes "exit-status peak-RSS-kB" to REPORT. A small interpreter
# forks the command, so that the peak is the command's (a fork of this large test process would
# count its pages), and wait4 includes the children the command reaped (the tokenizer's).
MEASURE = """
import os, resource, subprocess, sys, threading
report, limit, timeout, *argv = sys.argv[1:]
resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
proc = subprocess.Popen(argv)
timer = threading.Timer(float(timeout), proc.kill)
timer.start()
_, status, usage = os.wait4(proc.pid, 0)
timer.cancel()
with open(report, "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def _cli_process(args: list[str], code: str | None = None, timeout: float = 60) -> tuple[int, str, str, int]:
    """``walkthrough ARGS`` in a subprocess of at most AS_LIMIT bytes of address space: (exit code,
    stdout, stderr, peak RSS in bytes of it and the children it reaped)."""
    command = ["-m", "transformer_walkthrough"] if code is None else ["-c", code]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                MEASURE,
                str(report),
                str(AS_LIMIT),
                str(timeout),
                sys.executable,
                *command,
                *args,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=ROOT,
            timeout=timeout + 30,
            env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"},
        )
        status, peak = map(int, report.read_text().split())
    return status, done.stdout.decode(), done.stderr.decode(), peak * 1024


# The checks off: the file reaches the library as it is, and the child process is what saves us.
UNCHECKED = (
    "import sys; from transformer_walkthrough.checkpoints import bpe; "
    "bpe.check_tokenizer = lambda data, path: data; "
    "from transformer_walkthrough.cli import main; sys.argv[0] = 'walkthrough'; main()"
)
BOMBS = {
    # name -> (edit, prompt, checks off, exit code, what the one line says)
    "fixed padding of 2e9": (_set(padding=PADDING), "hi", False, 0, ""),
    "charsmap claiming 4 GB": (HOSTILE["charsmap claiming 4 GB"][0], "hi", False, 2, "Precompiled"),
    "growing Replace chain": (_set(normalizer=GROWING), "hi", False, 2, "normalizer.normalizers[0].content"),
    "unchecked: fixed padding of 2e9": (
        _set(padding=PADDING),
        "hi",
        True,
        2,
        "aborted (SIGABRT) while encoding",
    ),
    "unchecked: charsmap claiming 4 GB": (
        HOSTILE["charsmap claiming 4 GB"][0],
        "hi",
        True,
        2,
        "the tokenizers library",
    ),
    "unchecked: growing Replace chain": (
        _set(normalizer=GROWING),
        "hhhh",
        True,
        2,
        "aborted (SIGABRT) while encoding",
    ),
    "unchecked: Replace of nothing": (
        HOSTILE["Replace of nothing"][0],
        "hi",
        True,
        2,
        "panicked while encoding",
    ),
}
PEAKS: dict[str, int] = {}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOMBS))
def test_allocation_bombs_are_one_line_in_bounded_memory(gpt2, tmp_path, name):
    edit, prompt, unchecked, code, message = BOMBS[name]
    folder = str(_folder(gpt2, tmp_path / "m", edit))
    start = time.monotonic()
    status, _, err, peak = _cli_process(
        ["run", "--model", folder, "--prompt", prompt], code=UNCHECKED if unchecked else None
    )
    PEAKS[name] = peak
    print(f"\n{name}: exit {status}, peak RSS {peak / 2**20:.0f} MB, {time.monotonic() - start:.1f} s")
    assert status == code, (status, err[-2000:])
    lines = err.splitlines()
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err[-2000:]
        assert "memory allocation" in lines[0] or "SIGABRT" not in lines[0]
    else:
        assert not err.strip(), err[-2000:]
    # Checked, a bomb never reaches the library; unchecked, the child's RLIMIT_AS is what bounds it.
    bound = AS_LIMIT if unchecked else PEAK_LIMIT
    assert peak < bound, f"{name}: peak RSS {peak / 2**20:.0f} MB"


# ---------------------------------------------------------------------------------------------
# the guard itself


def _abort(_: object) -> None:
    os.abort()


def test_an_abort_in_the_child_is_one_line_and_later_calls_say_the_same():
    proc = NativeProcess("x/tokenizer.json", lambda: object(), {"abort": _abort, "echo": lambda _, v: v})
    assert proc.call("echo", "a\udc80b") == "a\udc80b"  # JSON carries lone surrogates both ways
    with pytest.raises(CheckpointError) as err:
        proc.call("abort", doing="encoding the text")
    message = str(err.value)
    assert message.startswith("x/tokenizer.json: the tokenizers library aborted (SIGABRT) while encoding")
    assert "\n" not in message
    with pytest.raises(CheckpointError) as again:
        proc.call("echo", 1)
    assert str(again.value) == message


def test_a_child_that_hangs_is_stopped_at_the_timeout(monkeypatch):
    monkeypatch.setattr(native, "CALL_TIMEOUT", 0.3)
    proc = NativeProcess("x/tokenizer.json", lambda: object(), {"sleep": lambda _: time.sleep(30)})
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"took more than 0.3 s while decoding"):
        proc.call("sleep", doing="decoding")
    assert time.monotonic() - start < 5


def test_a_failed_fork_is_one_line_and_leaks_no_descriptor(monkeypatch):
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    before = len(os.listdir("/proc/self/fd"))
    proc = NativeProcess("x/tokenizer.json", lambda: object(), {"echo": lambda _, v: v})
    with pytest.raises(CheckpointError, match="cannot start a process for the tokenizers library"):
        proc.call("echo", 1)
    assert len(os.listdir("/proc/self/fd")) == before


def test_an_interrupted_call_ends_the_child_and_the_next_call_starts_afresh(monkeypatch):
    proc = NativeProcess("x/tokenizer.json", lambda: object(), {"echo": lambda _, v: v})
    assert proc.call("echo", 1) == 1
    first = proc._pid
    real = native.NativeProcess._answer

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(native.NativeProcess, "_answer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        proc.call("echo", 2)
    monkeypatch.setattr(native.NativeProcess, "_answer", real)
    assert proc.call("echo", 3) == 3  # not the stale answer 2 of the child that was ended
    assert proc._pid != first
    with pytest.raises(ChildProcessError):  # the interrupted child was reaped
        os.waitpid(first, os.WNOHANG)
    proc.close()


_ORPHAN = """
import os, sys, time
from transformer_walkthrough.checkpoints import native
native.CALL_TIMEOUT = 0.5  # the child's alarm: 5.5 s
ops = {"pid": lambda _: os.getpid(), "spin": lambda _: time.sleep(60)}
proc = native.NativeProcess("x", lambda: object(), ops)
print(proc.call("pid"), flush=True)
proc.call("spin")
"""


def test_a_busy_child_whose_parent_was_killed_ends_by_its_alarm():
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.2)  # the child is in its 60 s call
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the orphaned child outlived its alarm")


def test_the_child_holds_no_descriptor_of_the_parent_but_its_pipes(tmp_path):
    held = (tmp_path / "held").open("w")  # a file the parent has open: not the child's business
    proc = NativeProcess("x", lambda: object(), {"fds": lambda _: sorted(os.listdir("/proc/self/fd"))})
    fds = proc.call("fds")
    proc.close()
    held.close()
    assert len(fds) <= 6, fds  # stdin, stdout, stderr, its two pipes, and the one listdir opened


def test_an_error_or_a_panic_in_the_child_leaves_it_serving(gpt2, tmp_path):
    from tokenizers import Tokenizer

    bad = (_folder(gpt2, tmp_path / "m", HOSTILE["Replace of nothing"][0]) / "tokenizer.json").read_text()
    ops = {"encode": lambda tok, text: tok.encode(text).ids, "fail": lambda _: 1 / 0}
    proc = NativeProcess("t.json", lambda: Tokenizer.from_str(bad), ops)
    with pytest.raises(CheckpointError, match="panicked while encoding the text"):
        proc.call("encode", "hi", doing="encoding the text")
    with pytest.raises(CheckpointError, match=r"failed while fail \(division by zero\)"):
        proc.call("fail")
    with pytest.raises(CheckpointError, match="panicked"):
        proc.call("encode", "hi", doing="encoding the text")
    pid = proc._pid
    proc.close()
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)


def test_without_fork_a_panic_is_still_one_line(monkeypatch, gpt2, tmp_path):
    folder = _folder(gpt2, tmp_path / "m", HOSTILE["Replace of nothing"][0])
    monkeypatch.setattr("transformer_walkthrough.checkpoints.bpe.check_tokenizer", lambda data, path: data)
    monkeypatch.delattr(os, "fork")
    tok = ByteLevelBPETokenizer(folder)
    with pytest.raises(CheckpointError, match="panicked while encoding the text"):
        tok.encode("hi")


def test_a_failed_load_is_not_a_readable_tokenizer(gpt2, tmp_path, monkeypatch):
    folder = _folder(gpt2, tmp_path / "m", _split("("))
    with pytest.raises(CheckpointError, match=r"not a readable tokenizer \(Oniguruma error"):
        ByteLevelBPETokenizer(folder).encode("hi")


# ---------------------------------------------------------------------------------------------
# labels safe for a terminal


HOSTILE_CHARS = ["\x1b", "\x07", "\x9b", "\udc80", "\u202e", "\u2066", "\u200f", "\u200b", "\ufeff", "\ud800"]


def test_every_label_is_printable_and_names_what_it_hides():
    for c in HOSTILE_CHARS:
        shown = label(f"a{c}b")
        # A Latin-1 character reads as a byte of a byte-level token (<0x1B>); the others by code point.
        named = f"<0x{ord(c):02X}>" if ord(c) < 0x100 else f"<U+{ord(c):04X}>"
        assert shown == f"a{named}b" and shown.isprintable(), (c, shown)
    # The batch's separator inside a token must not split it (it did: a ValueError from zip).
    assert labels(["Ġcat", "x\ud800y", "Ġ"]) == ["·cat", "x<U+D800>y", "·"]


def test_gpt2_tokens_and_added_tokens_are_escaped_in_the_cli(runner, gpt2, tmp_path):
    def edit(d: dict) -> None:  # the end-of-text token (id 0) becomes one that clears the screen
        d["added_tokens"][0]["content"] = HOSTILE_TERMINAL
        d["model"]["vocab"][HOSTILE_TERMINAL] = d["model"]["vocab"].pop(EOS)

    folder = _folder(gpt2, tmp_path / "m", edit)
    tok = ByteLevelBPETokenizer(folder)
    assert tok.labels[0] == "<U+001B>[2J<U+001B>]0;pwned<U+0007>"
    assert all(t.isprintable() for t in tok.labels)
    assert 0 in tok.encode(f"hi{HOSTILE_TERMINAL}")
    result = runner.invoke(app, ["run", "--model", str(folder), "--prompt", f"hi{HOSTILE_TERMINAL}"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "\x1b" not in result.stdout and "<U+001B>[2J" in result.stdout


@pytest.mark.parametrize("surrogate", [False, True])
def test_gpt2_vocabulary_tokens_with_bidi_and_lone_surrogates_are_labels(runner, gpt2, tmp_path, surrogate):
    hostile = "\u202e\x1b[2J" + ("\udc80" if surrogate else "")
    renamed = {}

    def edit(d: dict) -> None:  # the last merge's token renamed, and that merge dropped
        merges, vocab = d["model"]["merges"], d["model"]["vocab"]
        parts = {t for m in merges for t in (m.split(" ") if isinstance(m, str) else m)}
        n, merge = next((n, m) for n, m in reversed(list(enumerate(merges))) if "".join(m) not in parts)
        del merges[n]
        token = "".join(merge)
        renamed["id"] = vocab[hostile + token] = vocab.pop(token)

    folder = _folder(gpt2, tmp_path / "m", edit)
    tok = ByteLevelBPETokenizer(folder)
    shown = tok.labels[renamed["id"]]
    assert shown.startswith("<U+202E><U+001B>[2J") and shown.isprintable()
    args = ["run", "--model", str(folder), "--prompt", "hi"]
    if surrogate:  # the library cannot hold a lone surrogate: refused in one line, never a traceback
        fails(runner, args, "not a readable tokenizer")
    else:
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "\x1b" not in result.stdout, (result.stderr, result.exception)


def _hostile_marian(marian, to: Path, long: int = 0) -> Path:
    """The tiny Marian with every piece's id also given to a hostile piece (a later piece with an
    id already taken wins its label, as in transformers), so every label is hostile."""
    shutil.copytree(marian[0], to)
    vocab = json.loads((to / "vocab.json").read_text(encoding="utf-8"))
    hostile = dict(vocab)
    for piece, i in vocab.items():
        if piece not in ("</s>", "<unk>", "<pad>"):
            hostile[f"{HOSTILE_TERMINAL}{piece}\udc80\u202e{'x' * long}{i}"] = i
    (to / "vocab.json").write_text(json.dumps(hostile), encoding="utf-8")  # ASCII: \udc80 survives
    return to


@pytest.mark.parametrize("command", ["run", "generate", "explain"])
def test_marian_pieces_with_escapes_and_lone_surrogates_are_shown_escaped(runner, marian, tmp_path, command):
    folder = str(_hostile_marian(marian, tmp_path / "m"))
    args = {
        "run": ["run", "--model", folder, "--source", "the cat"],
        "generate": ["generate", "--model", folder, "--source", "the cat", "--max-len", "4"],
        "explain": [
            "explain",
            "--model",
            folder,
            "--source",
            "the cat",
            "--target",
            "die Katze",
            "--stage",
            "encoder.0.self-attention",
            "--matrix",
            "A1",
            "--cell",
            "0,0",
        ],
    }[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\u202e" not in result.stdout
    assert "<U+001B>[2J" in result.stdout or "\\x1b[2J" in result.stdout


def test_marian_labels_are_escaped_and_decoding_reads_the_pieces(marian, tmp_path):
    from transformer_walkthrough.checkpoints.tokenizer import MarianTokenizer

    tok = MarianTokenizer(_hostile_marian(marian, tmp_path / "m"))
    assert all(p.isprintable() for p in tok.source_vocabulary)
    assert tok.target_vocabulary is tok.source_vocabulary  # one vocabulary: one tuple
    ids = tok.encode_source("the cat")
    text = tok.decode(ids)
    assert "\x1b[2J" in text and "<U+DC80>" in text  # the checkpoint's text; the CLI escapes it


def test_an_export_carries_a_long_label_whole(runner, marian, tmp_path):
    folder = _hostile_marian(marian, tmp_path / "m", long=2000)
    out = tmp_path / "trace.json"
    result = runner.invoke(
        app, ["export", str(out), "--model", str(folder), "--source", "the cat", "--target", "die"]
    )
    assert result.exit_code == 0, (result.stderr, result.exception)
    data = json.loads(out.read_text(encoding="utf-8"))
    longest = max(data["vocabulary"], key=len)
    assert "x" * 2000 in longest and longest.startswith("<U+001B>[2J")


# ---------------------------------------------------------------------------------------------
# SentencePiece files


def test_a_sparse_9_gb_spm_is_refused_unread(runner, marian, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(marian[0], folder)
    with open(folder / "source.spm", "wb") as f:
        f.truncate(9 << 30)  # sparse: no disk used, and none read
    start = time.monotonic()
    fails(
        runner,
        ["run", "--model", str(folder), "--source", "the cat"],
        "bytes is too large for a SentencePiece model (the limit is 50,000,000)",
    )
    assert time.monotonic() - start < 10


def test_a_fifo_spm_is_refused_without_blocking(runner, marian, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(marian[0], folder)
    (folder / "target.spm").unlink()
    os.mkfifo(folder / "target.spm")
    args = ["run", "--model", str(folder), "--source", "the cat"]
    fails(runner, args, "target.spm: not a regular file (a pipe")


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "huge declared size", "empty"])
def test_a_malformed_spm_is_one_line(runner, marian, tmp_path, damage):
    folder = tmp_path / "m"
    shutil.copytree(marian[0], folder)
    data = (folder / "source.spm").read_bytes()
    broken = {
        "truncated": data[: len(data) // 2],
        "random bytes": os.urandom(5000),
        "huge declared size": b"\x0a\xff\xff\xff\xff\x0f" + b"\0" * 100,
        "empty": b"",
    }[damage]
    (folder / "source.spm").write_bytes(broken)
    fails(
        runner,
        ["run", "--model", str(folder), "--source", "the cat"],
        "source.spm: not a SentencePiece model",
    )


# ---------------------------------------------------------------------------------------------
# fuzz: tokenizer.json mutated


TEXTS = st.sampled_from(
    [
        "",
        "h",
        "▁",
        " ",
        "##",
        "Ġ",
        "\x00",
        "\x00" * 1000,
        "h" * 64,
        "(a+)+$",
        "(",
        "\\p{L}+",
        "<|endoftext|>",
        "\udc80",
        "x" * 3000,
    ]
)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([2**31, 2**63, 10**30]),
    TEXTS,
    st.lists(st.integers(-1, 400), max_size=3),
    st.just({}),
    st.just([]),
    st.floats(-1, 2),
)
BYTE_LEVEL = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
METASPACE = {"replacement": "▁", "prepend_scheme": "first", "split": False}
EXAMPLES = {
    "normalizer": [
        None,
        {"type": "NFC"},
        {"type": "NFKD"},
        {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        {"type": "Replace", "pattern": {"Regex": "h+"}, "content": "x"},
        {"type": "Prepend", "prepend": "▁"},
        {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        {"type": "Precompiled", "precompiled_charsmap": "AA=="},
        {"type": "Strip", "strip_left": True},
    ],
    "pre_tokenizer": [
        None,
        {"type": "ByteLevel", **BYTE_LEVEL},
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "Metaspace", **METASPACE},
        {"type": "BertPreTokenizer"},
        {"type": "Whitespace"},
        {"type": "UnicodeScripts"},
    ],
    "decoder": [
        None,
        {"type": "ByteLevel", **BYTE_LEVEL},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        {"type": "Metaspace", **METASPACE},
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
        {"type": "CTC"},
    ],
    "post_processor": [
        None,
        {"type": "ByteLevel", **BYTE_LEVEL},
        {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": EOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {EOS: {"id": EOS, "ids": [0], "tokens": [EOS]}},
        },
        {"type": "RobertaProcessing", "sep": [EOS, 0], "cls": [EOS, 0]},
    ],
}
SEQUENCE_KEY = {
    "normalizer": "normalizers",
    "pre_tokenizer": "pretokenizers",
    "decoder": "decoders",
    "post_processor": "processors",
}


@st.composite
def components(draw, kind: str, depth: int = 0):
    """One of the examples of ``kind``, perhaps a field changed, a key added, or in a Sequence."""
    how = draw(st.sampled_from(["example", "field", "key", "sequence", "type", "value"]))
    if how == "sequence" and depth < 2:
        items = draw(st.lists(components(kind, depth + 1), max_size=4))
        return {"type": "Sequence", SEQUENCE_KEY[kind]: items}
    if how == "value":
        return draw(VALUES)
    part = copy.deepcopy(draw(st.sampled_from(EXAMPLES[kind])))
    if part is None:
        return None
    if how == "field" and len(part) > 1:
        part[draw(st.sampled_from(sorted(k for k in part if k != "type")))] = draw(VALUES)
    elif how == "key":
        part[draw(st.sampled_from(["surprise", "pattern", "content", "prepend"]))] = draw(VALUES)
    elif how == "type":
        part["type"] = draw(st.sampled_from(["Sequence", "WordLevel", "Unigram", "Precompiled", 3, None]))
    return part


MODEL_CHANGES = st.dictionaries(
    st.sampled_from(
        [
            "type",
            "unk_token",
            "continuing_subword_prefix",
            "end_of_word_suffix",
            "dropout",
            "byte_fallback",
            "fuse_unk",
            "ignore_merges",
            "max_input_chars_per_word",
            "surprise",
        ]
    ),
    st.one_of(VALUES, st.sampled_from(["BPE", "WordPiece", "WordLevel", "Unigram", "Ġ", "h"])),
    max_size=3,
)


@st.composite
def tokenizers(draw, base: dict):
    data = copy.deepcopy(base)
    for kind in EXAMPLES:
        if draw(st.booleans()):
            data[kind] = draw(components(kind))
    if draw(st.integers(0, 3)) == 0:  # rarely: most model changes are refused before the rest is seen
        data["model"].update(draw(MODEL_CHANGES))
    if draw(st.booleans()):
        data["padding"] = draw(st.one_of(st.just(PADDING), VALUES))
    if draw(st.booleans()):
        data["truncation"] = draw(st.one_of(st.just(TRUNCATION), VALUES))
    if draw(st.booleans()):
        entry = {"id": draw(st.integers(-1, 400)), "content": draw(TEXTS), "special": draw(VALUES)}
        data["added_tokens"] = [*data["added_tokens"], entry]
    if draw(st.integers(0, 3)) == 0:
        merges = data["model"]["merges"]
        data["model"]["merges"] = draw(st.sampled_from([merges[1:], ["zz qq", *merges], [["a"], *merges], 7]))
    return data


@pytest.fixture(scope="module")
def fuzz_folder(gpt2, tmp_path_factory):
    folder = _folder(gpt2, tmp_path_factory.mktemp("fuzz") / "m")
    return folder, json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 30)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_tokenizer_json_is_a_run_or_one_line(runner, fuzz_folder, data):
    folder, base = fuzz_folder
    mutated = data.draw(tokenizers(base))
    (folder / "tokenizer.json").write_text(json.dumps(mutated), encoding="utf-8")
    result = runner.invoke(app, ["run", "--model", str(folder), "--prompt", "hi aab ▁the ##cat 42"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 2), (result.exit_code, result.stderr)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 30)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_tokenizer_json_given_unchecked_to_the_library_is_one_line(monkeypatch, fuzz_folder, data):
    """The guard alone: whatever reaches the library, its failure is a CheckpointError, never more."""
    from tokenizers import Tokenizer

    monkeypatch.setattr(native, "MEMORY", 256 << 20)  # a bomb fails at once, not after 2 GB
    spec = json.dumps(data.draw(tokenizers(fuzz_folder[1])))
    ops = {"encode": lambda tok, text: tok.encode(text).ids, "decode": lambda tok, ids: tok.decode(ids)}
    proc = NativeProcess("t.json", lambda: Tokenizer.from_str(spec), ops)
    try:
        ids = proc.call("encode", "hi aab ▁the ##cat 42 " + "a" * 40 + "!", doing="encoding the text")
        proc.call("decode", ids, doing="decoding")
    except CheckpointError as err:
        assert "\n" not in str(err) and str(err).startswith("t.json: "), str(err)
    finally:
        proc.close()


# ---------------------------------------------------------------------------------------------
# the families to come pass the check, and tokenize through it as without it

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _family(name: str, base: dict) -> dict:
    """A tokenizer.json as the family's own files spell it, on the tiny fixture's vocabulary."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = dict(base["model"]["vocab"])
    merges = [tuple(m) for m in base["model"]["merges"]]
    bos = processors.TemplateProcessing(
        single=f"{EOS} $A", pair=f"{EOS} $A {EOS} $B", special_tokens=[(EOS, 0)]
    )
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if name == "bert":
        tok = Tokenizer(models.WordPiece({**vocab, "[UNK]": len(vocab)}, unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.post_processor = bos
        return json.loads(tok.to_str())
    if name.startswith("llama2"):
        vocab = {**vocab, "<unk>": len(vocab), **{f"<0x{b:02X}>": len(vocab) + 1 + b for b in range(256)}}
        tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if name == "llama2":
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        else:  # newer files (Mistral, TinyLlama): Metaspace
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        tok.post_processor = bos
        return json.loads(tok.to_str())
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=name == "llama3"))
    tok.decoder = decoders.ByteLevel()
    if name == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    else:  # llama3, qwen2
        split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False)
        tok.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), bos])
    return json.loads(tok.to_str())


def _gpt2_as_on_the_hub(base: dict) -> dict:
    """The fixture spelled as openai-community/gpt2's own file: merges as "a b" strings, no model
    type, an empty subword prefix and suffix, no use_regex."""
    data = copy.deepcopy(base)
    model = data["model"]
    data["model"] = {"dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "vocab": model["vocab"],
                     "merges": [" ".join(m) for m in model["merges"]]}  # fmt: skip
    for kind in ("pre_tokenizer", "post_processor", "decoder"):
        data[kind] = {k: v for k, v in data[kind].items() if k != "use_regex"}
    return data


@pytest.mark.parametrize(
    "name", ["gpt2-hub", "llama3", "qwen2", "smollm", "llama2", "llama2-metaspace", "bert"]
)
def test_the_supported_families_pass_the_check_and_tokenize_the_same(gpt2, name):
    from tokenizers import Tokenizer

    from transformer_walkthrough.checkpoints.tokenizer_check import check_tokenizer

    base = json.loads((gpt2[0]["hub"] / "tokenizer.json").read_text(encoding="utf-8"))
    data = _gpt2_as_on_the_hub(base) if name == "gpt2-hub" else _family(name, base)
    cleaned = check_tokenizer(copy.deepcopy(data), Path("tokenizer.json"))
    ours, theirs = Tokenizer.from_str(json.dumps(cleaned)), Tokenizer.from_str(json.dumps(data))
    for text in ("The cat is sleeping comfortably.", "naïve café 1234 数字 🐈", "  spaces\nand\ttabs  "):
        ids = theirs.encode(text).ids
        assert ours.encode(text).ids == ids, text
        assert ours.decode(ids) == theirs.decode(ids)


def test_a_separate_target_vocabulary_is_escaped_too(marian_separate, tmp_path):
    from transformer_walkthrough.checkpoints.tokenizer import MarianTokenizer

    folder = tmp_path / "m"
    shutil.copytree(marian_separate["untied"][0], folder)
    target = json.loads((folder / "target_vocab.json").read_text(encoding="utf-8"))
    hostile = {**target, **{f"{HOSTILE_TERMINAL}\udc80{i}": i for p, i in target.items() if p != "</s>"}}
    (folder / "target_vocab.json").write_text(json.dumps(hostile), encoding="utf-8")
    tok = MarianTokenizer(folder)
    assert tok.source_vocabulary is not tok.target_vocabulary
    assert all(p.isprintable() for p in tok.target_vocabulary)
    assert tok.target_vocabulary[1].startswith("<U+001B>[2J") and "<U+DC80>" in tok.target_vocabulary[1]
    assert "\x1b[2J" in tok.decode([1, 2])  # decoding reads the pieces; the CLI escapes the text
