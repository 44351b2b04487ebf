"""The ``tokenizers`` library (Rust) run in a child process, so that a file it cannot survive is one
line, never a dead process.

A checked ``tokenizer.json`` (``tokenizer_check``) can still hurt the library: a regex that is
catastrophic on one text, an allocation it did not expect. Rust then aborts the process
(``memory allocation of 8000000000 bytes failed``, SIGABRT, exit 134: no Python ``except`` runs), or
panics, and pyo3's ``PanicException`` derives from ``BaseException``, not ``Exception``. So the
library runs in a child, and the parent turns whatever happens to the child into one
CheckpointError naming the file and the cause: a panic or an error (sent back over the pipe), a
signal or an exit code (``waitpid``), a timeout (the parent kills it).

Why this shape:

- ``os.fork``, not ``spawn`` or ``forkserver``: the child needs no new interpreter (``spawn`` pays
  ~0.2 s of imports) and no pickling of the file; it inherits the checked JSON as a string. It
  runs nothing but the library and ``os.read``/``os.write`` (no threads of the parent exist in it,
  no lock of theirs is taken), and the timeout covers the rest.
- One child per tokenizer, started at its first use and serving every ``encode``/``decode`` over
  a pipe (length-prefixed JSON, which carries lone surrogates as ``\\udcxx``): a round trip costs
  ~0.05 ms (in-process: ~0.02 ms), so generation's one decode per step stays free; the start
  (fork, ``json.dumps`` of the checked file, ``from_str``) is paid once: ~6 ms for the tests'
  tiny file, ~150 ms for a 50,257-token, 50,000-merge one (``from_file`` in-process: ~80 ms).
- The child's address space may grow by ``MEMORY`` (``RLIMIT_AS``, on top of what the fork gave
  it): an allocation bomb fails at once in the child instead of swapping the machine. No core
  files (``RLIMIT_CORE`` 0), stderr (where Rust writes its panic and abort messages) goes to a
  temporary file of at most ``MAX_STDERR`` bytes, from which the cause is read, and stdout to
  /dev/null: the terminal sees only the parent's one line.
- The child ignores SIGINT (Ctrl-C stops the parent, whose exit closes the pipe, which ends the
  child) and exits on end of file; the parent reaps it when the tokenizer is dropped or at exit.
  A child busy when its parent dies (SIGKILL, the OOM killer) reads no end of file: an alarm set
  a little past the parent's own timeout ends each load and call that no one waits for any more.
  It closes every descriptor it inherited but its two pipes and stderr, so it holds no file,
  socket or other child's pipe of the parent's open.

Where ``os.fork`` does not exist (Windows), the library runs in-process; its panics (a
``BaseException``) are still caught, an abort is not.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import struct
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from .errors import CheckpointError, first_line

MEMORY = 2 << 30  # bytes the child's address space may grow by; a 50,257-token tokenizer takes ~50 MB
LOAD_TIMEOUT = 60.0  # seconds to build the tokenizer (a 200 MB file parses in a few seconds)
CALL_TIMEOUT = 20.0  # seconds for one encode or decode of a text this tool is given
MAX_REPLY = 256 << 20  # bytes of one answer: a decoded text, a list of ids
MAX_STDERR = 1 << 20  # bytes the child may write to stderr (a panic with a backtrace is ~10 kB)
_HEADER = struct.Struct(">Q")


def is_panic(err: BaseException) -> bool:
    """Whether ``err`` is a Rust panic surfaced by pyo3 (``pyo3_runtime.PanicException``): a
    ``BaseException``, which ``except Exception`` does not catch."""
    kind = type(err)
    return kind.__name__ == "PanicException" and kind.__module__.startswith("pyo3")


class NativeProcess:
    """An object built by ``load`` in a child process, and its ``ops`` called there.

    ``ops`` maps a name to ``f(obj, *args) -> JSON-able result``; ``call(name, *args)`` returns
    the result, or raises a one-line CheckpointError "NAME: the tokenizers library …" (``name`` is
    the file's path). A failure to build is "NAME: not a readable tokenizer (…)".
    """

    def __init__(self, name: str, load: Callable[[], Any], ops: Mapping[str, Callable[..., Any]]):
        self.name = name
        self._load = load
        self._ops = dict(ops)
        self._pid: int | None = None
        self._send = self._receive = -1
        self._stderr: Any = None
        self._failure: str | None = None  # once the child died: every later call fails the same
        self._in_process: Any = None
        self._finalizer: Any = None

    def call(self, op: str, *args: Any, doing: str = "") -> Any:
        """``ops[op](obj, *args)`` in the child; ``doing`` ("encoding the text") is for messages."""
        doing = doing or op
        if self._failure is not None:
            raise CheckpointError(self._failure)
        if not hasattr(os, "fork"):
            return self._call_in_process(op, args, doing)
        try:
            if self._pid is None:
                self._start()
                self._answer(LOAD_TIMEOUT, "loading it", loading=True)
            try:
                _write_message(self._send, json.dumps([op, list(args)]).encode("ascii"))
            except OSError:  # the child is gone (EPIPE): say why
                self._died(doing)
            return self._answer(CALL_TIMEOUT, doing)
        except CheckpointError:
            raise
        except BaseException:  # interrupted (Ctrl-C) mid-call: the pipe is out of step, so end it
            self._kill()
            self.close()
            raise

    def close(self) -> None:
        """End the child (it exits when its pipe closes) and reap it; a later call starts another."""
        if self._finalizer is not None:
            self._finalizer()
        self._pid, self._finalizer = None, None

    # -- the parent's side -------------------------------------------------------------------

    def _start(self) -> None:
        fds: list[int] = []
        try:
            from_parent, to_child = os.pipe()
            fds += (from_parent, to_child)
            from_child, to_parent = os.pipe()
            fds += (from_child, to_parent)
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the child lives)
            with warnings.catch_warnings():  # Python 3.12 warns on a fork with threads; see the module
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError as err:  # no descriptors, no processes left (EMFILE, EAGAIN): nothing leaks
            for fd in fds:
                _close(fd)
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            raise CheckpointError(
                f"{self.name}: cannot start a process for the tokenizers library ({err.strerror or err})"
            ) from None
        if pid == 0:  # the child: never returns
            code = 70
            try:
                _child(from_parent, to_parent, self._stderr.fileno(), self._load, self._ops)
                code = 0
            except BaseException as err:  # our own code failed: say so where the parent looks
                os.write(2, f"{type(err).__name__}: {_one_line(str(err))}\n".encode("utf-8", "replace"))
            finally:
                os._exit(code)
        _close(from_parent)
        _close(to_parent)
        self._pid, self._send, self._receive = pid, to_child, from_child
        self._finalizer = weakref.finalize(self, _reap, pid, to_child, from_child, self._stderr)

    def _answer(self, timeout: float, doing: str, loading: bool = False) -> Any:
        deadline = time.monotonic() + timeout
        size = _HEADER.unpack(self._read(_HEADER.size, deadline, timeout, doing))[0]
        if size > MAX_REPLY:
            self._kill()
            self._fail(f"sent {size:,} bytes while {doing}, more than any answer")
        try:
            reply = json.loads(self._read(size, deadline, timeout, doing))
        except (ValueError, TypeError):
            self._kill()
            self._fail(f"sent an unreadable answer while {doing}")
        return self._result(reply, doing, loading)

    def _result(self, reply: list[Any], doing: str, loading: bool) -> Any:
        """The value of a reply ``_run`` made, or its failure as one line. A tokenizer that could
        not be loaded has no child left: every later call says the same."""
        status, value = reply
        if status == "ok":
            return value
        if loading:
            if status == "panic":
                self._fail(f"panicked while loading it ({value})")
            self._fail(f"not a readable tokenizer ({value})", prefix=False)
        verb = "panicked" if status == "panic" else "failed"
        raise CheckpointError(f"{self.name}: the tokenizers library {verb} while {doing} ({value})")

    def _read(self, n: int, deadline: float, timeout: float, doing: str) -> bytes:
        chunks: list[bytes] = []
        poll = select.poll()
        poll.register(self._receive, select.POLLIN)
        while n > 0:
            left = deadline - time.monotonic()
            if left <= 0 or not poll.poll(left * 1000):
                self._kill()
                self._fail(
                    f"took more than {timeout:g} s while {doing} (a pathological pattern?); stopped it"
                )
            chunk = os.read(self._receive, min(n, 1 << 20))
            if not chunk:
                self._died(doing)
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _kill(self) -> None:
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)

    def _died(self, doing: str) -> NoReturn:
        """The child closed its pipe: it is dead or dying. Its exit status and stderr say why."""
        status = _wait(self._pid) if self._pid is not None else None
        cause = _cause(self._stderr)
        if status is not None and os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            how = "aborted" if number == signal.SIGABRT else "was killed"
            what = f"{how} ({signal.Signals(number).name})"
        elif status is not None and os.WIFEXITED(status):
            what = f"exited with code {os.WEXITSTATUS(status)}"
        else:
            what = "stopped"
        if "memory allocation" in cause:
            cause += f"; a tokenizer may take {MEMORY >> 20:,} MB"
        self._fail(f"{what} while {doing}" + (f": {cause}" if cause else ""))

    def _fail(self, problem: str, prefix: bool = True) -> NoReturn:
        """Record and raise the failure: the child is dead, so every later call says the same."""
        self._failure = f"{self.name}: " + (f"the tokenizers library {problem}" if prefix else problem)
        self.close()
        raise CheckpointError(self._failure)

    # -- no fork: in-process ----------------------------------------------------------------

    def _call_in_process(self, op: str, args: tuple[Any, ...], doing: str) -> Any:
        if self._in_process is None:
            self._in_process = self._result(_run(self._load), "loading it", loading=True)
        return self._result(_run(functools.partial(self._ops[op], self._in_process, *args)), doing, False)


# -- the child's side --------------------------------------------------------------------------


def _child(
    requests: int, replies: int, stderr: int, load: Callable[[], Any], ops: Mapping[str, Callable[..., Any]]
) -> None:
    """Serve ``ops`` on the object ``load`` builds, one request at a time, until the pipe closes."""
    import faulthandler
    import fcntl  # Unix only, as os.fork
    import resource

    # A fault handler the parent enabled (pytest's, PYTHONFAULTHANDLER) would write the child's
    # Python stack to the parent's stderr on an abort: the cause is Rust's message, read by the parent.
    faulthandler.disable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a parent gone while answering: just end
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the alarms below end the child
    # Started with stdin, stdout or stderr closed (`<&-`), the parent's pipes or the stderr file
    # may be fds 0 to 2, which the dup2s below would replace: moved above them first.
    requests, replies, stderr = (fcntl.fcntl(fd, fcntl.F_DUPFD, 3) for fd in (requests, replies, stderr))
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(stderr, 2)
    _close_all_but({0, 1, 2, requests, replies})
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, MAX_STDERR)
    _limit(resource.RLIMIT_AS, _address_space() + MEMORY)
    obj = None
    signal.alarm(int(LOAD_TIMEOUT) + 5)  # past the parent's timeout: no one waits any more
    reply = _run(load)
    if reply[0] == "ok":
        obj, reply = reply[1], ["ok", None]
    _send(replies, reply)
    signal.alarm(0)
    if obj is None:
        return
    while True:
        request = _receive(requests)
        if request is None:
            return
        op, args = request
        signal.alarm(int(CALL_TIMEOUT) + 5)
        _send(replies, _run(functools.partial(ops[op], obj, *args)))
        signal.alarm(0)  # idle, the child waits for its parent as long as it lives


def _run(work: Callable[[], Any]) -> list[Any]:
    """``["ok", value]``, or ``["panic" | "error", why]``: what the library did, as a reply."""
    try:
        return ["ok", work()]
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as err:  # a panic (BaseException), a MemoryError, a plain error
        return ["panic" if is_panic(err) else "error", _one_line(first_line(err))]


def _send(fd: int, reply: list[Any]) -> None:
    try:
        data = json.dumps(reply).encode("ascii")
    except (TypeError, ValueError) as err:
        data = json.dumps(["error", _one_line(str(err))]).encode("ascii")
    _write_message(fd, data)


def _write_message(fd: int, data: bytes) -> None:
    """``data`` behind its length, as both sides read a message (``_HEADER``)."""
    message = _HEADER.pack(len(data)) + data
    while message:
        message = message[os.write(fd, message) :]


def _receive(fd: int) -> Any:
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _limit(which: int, value: int) -> None:
    """Lower a resource limit to ``value`` (never above the hard limit already set)."""
    import resource

    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(which, (value, hard))


def _address_space() -> int:
    """This process's virtual size in bytes (the fork's inheritance: the parent's libraries, its
    arrays), so that ``MEMORY`` is what the library may add to it."""
    import resource

    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 4 << 30  # no /proc: a generous guess


# -- helpers of both sides ---------------------------------------------------------------------


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor of this process but ``keep`` (in the child: what it inherited)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every number up to the limit
        fds = list(range(min(os.sysconf("SC_OPEN_MAX"), 1 << 16)))
    for fd in fds:
        if fd not in keep:
            _close(fd)


def _wait(pid: int, grace: float = 2.0) -> int | None:
    """The exit status of the child ``pid``, killing it if it has not ended after ``grace`` s."""
    deadline = time.monotonic() + grace
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            try:
                return os.waitpid(pid, 0)[1]
            except ChildProcessError:
                return None
        time.sleep(0.002)


def _reap(pid: int, to_child: int, from_child: int, stderr: Any) -> None:
    """Close the child's pipes (it exits on end of file) and collect its exit status."""
    for fd in (to_child, from_child):
        _close(fd)
    _wait(pid)
    stderr.close()


def _cause(stderr: Any) -> str:
    """The line of the child's stderr that says why it died: Rust's "memory allocation of N bytes
    failed", or the message after "panicked at"; "" when it wrote nothing."""
    if stderr is None:
        return ""
    try:
        stderr.seek(0)
        lines = [line.strip() for line in stderr.read(64 << 10).decode("utf-8", "replace").splitlines()]
    except (OSError, ValueError):
        return ""
    lines = [line for line in lines if line]
    for n, line in enumerate(lines):
        if line.startswith("memory allocation of"):
            return _one_line(line)
        if "panicked at" in line and n + 1 < len(lines):
            return _one_line(lines[n + 1])
    return _one_line(lines[-1]) if lines else ""
