"""Writing a trace to files: strict JSON (a versioned contract) and NumPy ``.npz``.

Every matrix of every exported stage is written, weights included, so that each number can be
recomputed from the file alone. Paths are checked before anything is computed, and files are
written atomically: a reader never sees half a file, and a failed export leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import math
import os
import signal
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import numpy as np

from ..config import config_to_dict
from ..errors import ExportError
from ..model.architecture import ENCODER
from ..model.trace import Matrix, Stage, Trace

if TYPE_CHECKING:
    from ..model.backprop import Backward
    from ..views.documents.shown import Contents, Options
    from ..views.documents.worksheet import Worksheet

SCHEMA_VERSION = 2  # 2: no gradients of constants; source_vocabulary when the encoder has its own
FORMATS = (".json", ".npz", ".html", ".md", ".tex")
DOCUMENTS = (".html", ".md", ".tex")
# JSON has no infinities or NaN; the schema spells them as strings.
_NON_FINITE = {math.inf: "inf", -math.inf: "-inf"}


def check_target(path: str, force: bool, formats: tuple[str, ...] = FORMATS) -> Path | None:
    """The path to write, checked before any work is done; None means JSON on stdout ("-")."""
    if path == "-" and ".json" in formats:
        return None
    if path.endswith(("/", os.sep)):  # Path() would drop the slash, and x.json/ become x.json
        raise ExportError(f"{path}: ends in {path[-1]}, a folder's name; give the file's name")
    target = Path(path)
    try:
        directory = target.is_dir()
    except OSError as err:
        raise ExportError(f"{target}: cannot write ({err.strerror})") from None
    if directory:
        raise ExportError(f"{target}: is a directory")
    if target.suffix.lower() not in formats:
        stdout = ", or - for JSON on stdout" if ".json" in formats else ""
        choices = formats[0] if len(formats) == 1 else f"{', '.join(formats[:-1])} or {formats[-1]}"
        raise ExportError(
            f"{target}: unknown format {target.suffix or '(no suffix)'!s}; use {choices}{stdout}"
        )
    try:
        # lexists: a symlink counts even when it points nowhere (a dangling link is not replaced
        # without --force, and with it the link itself is replaced, never written through).
        if os.path.lexists(target) and not force:
            raise ExportError(f"{target}: already exists; pass --force to overwrite it")
        if not target.parent.is_dir():
            raise ExportError(f"{target.parent}: no such directory")
        if len(os.fsencode(target.name)) > NAME_MAX:
            raise ExportError(f"{target.name[:40]}…: the file name is too long ({NAME_MAX} bytes at most)")
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise ExportError(f"{target.parent}: cannot write there (permission denied)")
    except OSError as err:  # a folder that cannot be searched, a name the system refuses
        raise ExportError(f"{target}: cannot write ({err.strerror})") from None
    return target


def number(v: float) -> float | str:
    """A number for strict JSON: finite ones as they are, others as the schema's strings."""
    v = float(v)
    return v if math.isfinite(v) else _NON_FINITE.get(v, "nan")


def _values(a: np.ndarray) -> list[list[Any]]:
    rows = a.tolist()
    if not np.isfinite(a).all():
        rows = [[_NON_FINITE.get(v, "nan" if v != v else v) for v in row] for row in rows]
    return rows


class _Rows(NamedTuple):
    """A matrix's numbers left as an array until ``iter_json`` writes them, a few rows at a time:
    the document of a large export is then never whole in memory."""

    array: np.ndarray


_NUMBERS_AT_ONCE = 65_536  # numbers turned into Python floats and text in one piece


def _iter_rows(a: np.ndarray) -> Iterator[str]:
    """``json.dumps(_values(a))``, the same bytes, in pieces of about ``_NUMBERS_AT_ONCE`` numbers."""
    if not len(a):
        yield "[]"
        return
    step = max(1, _NUMBERS_AT_ONCE // max(1, a.shape[1]))
    yield "["
    for start in range(0, len(a), step):
        piece = json.dumps(_values(a[start : start + step]), allow_nan=False, separators=(", ", ": "))
        yield (", " if start else "") + piece[1:-1]
    yield "]"


class _Each(NamedTuple):
    """A list of objects (the stages) that ``iter_json`` writes as they come: each is made only
    when the one before it is written (a streamed pass computes it then)."""

    items: Iterable[Any]


class _Later(NamedTuple):
    """A value ``iter_json`` asks for only when it reaches it: the prediction, known once the
    stages before it in the document are computed."""

    make: Callable[[], Any]


def _matrix(m: Matrix, numbers: Callable[[np.ndarray], Any]) -> dict[str, Any]:
    rows, cols = list(m.rows), list(m.cols)
    return {"shape": list(m.shape), "role": m.role, "rows": rows, "cols": cols, "values": numbers(m.values)}


def stage_to_dict(
    stage: Stage,
    weights: bool = True,
    grads: dict[str, np.ndarray] | None = None,
    numbers: Callable[[np.ndarray], Any] = _values,
) -> dict[str, Any]:
    """One stage; with ``grads``, also "gradients": dL/d(matrix) under the matrices' names.

    ``numbers`` turns a matrix's array into what the document holds: lists of rows, by default.
    """
    names = [name for name, m in stage.matrices.items() if weights or not m.is_weight]
    out = {
        "id": stage.id,
        "kind": stage.kind,
        "title": stage.title,
        "explanation": stage.explanation,
        "formula": str(stage.formula),
        "sources": dict(stage.sources),
        "matrices": {name: _matrix(stage.matrices[name], numbers) for name in names},
    }
    if grads is not None:
        out["gradients"] = {
            name: _matrix(stage.matrices[name]._replace(values=grads[name]), numbers)
            for name in names
            if not stage.matrices[name].is_constant  # the mask and the sinusoids learn nothing
        }
    return out


def trace_to_dict(
    trace: Trace,
    stages: list[Stage] | None = None,
    weights: bool = True,
    grads: Backward | None = None,
    numbers: Callable[[np.ndarray], Any] = _values,
) -> dict[str, Any]:
    """The export document (schema version 1) of the given stages, all of them by default.

    Without ``weights`` the learned parameters are left out and only activations remain; with
    ``grads`` (a backward pass) each stage has its gradients and the document its loss. The
    matrices' numbers are lists of rows, or whatever ``numbers`` makes of each array (``export``
    leaves them as arrays, for ``iter_json`` to write piece by piece). ``source_vocabulary`` is
    there only when the encoder reads a vocabulary of its own (a checkpoint's ``separate_vocabs``).
    """
    doc = _document(trace, list(trace) if stages is None else stages, weights, grads, numbers)
    doc["stages"] = list(doc["stages"].items)
    doc["prediction"] = doc["prediction"].make()
    return doc


def _document(
    trace: Trace,
    stages: Iterable[Stage],
    weights: bool,
    grads: Backward | None,
    numbers: Callable[[np.ndarray], Any],
) -> dict[str, Any]:
    """``trace_to_dict``'s document with its stages made as ``iter_json`` writes them (``_Each``)
    and the prediction once they are (``_Later``): a streamed pass written as it is computed."""
    source_vocabulary = trace.vocabulary_of(ENCODER)
    own = source_vocabulary is not trace.vocabulary  # the same tuple when both stacks read it
    doc = {
        "schema_version": SCHEMA_VERSION,
        "config": config_to_dict(trace.config),
        "vocabulary": list(trace.vocabulary),
        **({"source_vocabulary": list(source_vocabulary)} if own else {}),
        "source_tokens": list(trace.source_tokens),
        "target_tokens": list(trace.target_tokens),
        "source_ids": list(trace.source_ids),
        "target_ids": list(trace.target_ids),
        "model": trace.weights_source,
        "stages": _Each(
            stage_to_dict(s, weights, None if grads is None else grads.stages[s.id], numbers) for s in stages
        ),
        "prediction": _Later(lambda: [
            {
                "position": p.position,
                "after": p.after,
                "expected": p.expected,
                "predicted": p.word,
                "probability": number(p.probability),
                "top": [{"token": t, "probability": number(q)} for t, q in p.top],
            }
            for p in trace.prediction
        ]),
    }  # fmt: skip
    if grads is not None:
        doc["loss"] = number(grads.loss)
    return doc


def iter_json(doc: Any, level: int = 0) -> Iterator[str]:
    """Strict JSON in pieces, readable: objects one key a line, every list (a matrix row) on one line.

    Floats are written with ``repr``, so they read back bit for bit. Pieces, so that a large
    export streams to its file instead of being built whole in memory; a matrix left as an array
    (``_Rows``) is written a few rows at a time, the same bytes as its lists would be.
    """
    pad = "  " * (level + 1)
    if isinstance(doc, _Rows):
        yield from _iter_rows(doc.array)
    elif isinstance(doc, _Later):
        yield from iter_json(doc.make(), level)
    elif isinstance(doc, _Each):
        items = iter(doc.items)
        first = next(items, _Each)  # the class itself: no item is it
        if first is _Each:
            yield "[]"
            return
        yield "[\n" + pad
        yield from iter_json(first, level + 1)
        for value in items:
            yield f",\n{pad}"
            yield from iter_json(value, level + 1)
        yield "\n" + "  " * level + "]"
    elif isinstance(doc, dict) and doc:
        yield "{\n"
        for k, (key, value) in enumerate(doc.items()):
            yield f"{',' if k else ''}\n{pad}" if k else pad
            yield f"{json.dumps(key, ensure_ascii=False)}: "
            yield from iter_json(value, level + 1)
        yield "\n" + "  " * level + "}"
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):
        yield "[\n"
        for k, value in enumerate(doc):
            yield f",\n{pad}" if k else pad
            yield from iter_json(value, level + 1)
        yield "\n" + "  " * level + "]"
    else:
        yield json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(", ", ": "))


def to_json(doc: Any) -> str:
    """The whole document as one string (see ``iter_json``)."""
    return "".join(iter_json(doc))


def matrices(
    stages: list[Stage], weights: bool = True, grads: Backward | None = None
) -> dict[str, np.ndarray]:
    """Every matrix under "{stage id}/{name}", the names of the .npz file; gradients as "…/dL/d{name}"."""
    out = {}
    for s in stages:
        for name, m in s.matrices.items():
            if weights or not m.is_weight:
                out[f"{s.id}/{name}"] = m.values
                if grads is not None and not m.is_constant:
                    out[f"{s.id}/dL/d{name}"] = grads.stages[s.id][name]
    return out


def size(stages: list[Stage], weights: bool = True) -> int:
    """How many numbers an export of these stages holds."""
    return sum(a.size for a in matrices(stages, weights).values())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


NAME_MAX = 255  # bytes in one file name, on Linux and macOS alike
LARGE = 2_000_000  # numbers: past this a JSON export runs to tens of megabytes


# Bytes a number takes in each format, separators and markup included: a float written by repr
# in JSON; a shaded table cell in HTML; a table cell in Markdown; an alignment cell in LaTeX.
_BYTES_PER_NUMBER = {".json": 20, ".html": 25, ".md": 8, ".tex": 9}
_FORMAT_NAMES = {".json": "JSON", ".html": "HTML", ".md": "Markdown", ".tex": "LaTeX"}


def size_warning(
    trace: Trace,
    stages: list[Stage],
    weights: bool = True,
    suffix: str = ".json",
    grads: Backward | None = None,
    worksheet: Worksheet | None = None,
    full: bool = False,
) -> str | None:
    """A word of warning when a text export (JSON, HTML, Markdown, LaTeX) will be large, with what
    to do instead. It counts what will be written: JSON holds every number (gradients too); a
    document only the rows and columns it shows of a large matrix, unless ``full``."""
    tally = Tally(trace, stages, suffix, document_options(trace, weights, grads, worksheet, full))
    for _ in tally:
        pass
    return tally.warning()


class Tally:
    """The stages of an export, counted as they go by to be written: how many numbers the file
    holds (``written``), and how many the same stages hold as .npz (``every``): the size warning
    is said from these once a streamed export is written."""

    def __init__(self, trace: Trace, stages: Iterable[Stage], suffix: str, o: Options) -> None:
        self.trace, self.stages, self.suffix, self.o = trace, stages, suffix, o
        self.written = self.every = 0

    def __iter__(self) -> Iterator[Stage]:
        from ..views.documents.writers import numbers_written

        for stage in self.stages:
            shown = [m for m in stage.matrices.values() if self.o.weights or not m.is_weight]
            every = sum(m.values.size for m in shown)
            if self.o.grads is not None:  # and each one's gradient, but a constant's
                every += sum(m.values.size for m in shown if not m.is_constant)
            self.every += every
            if self.suffix in DOCUMENTS:
                self.written += numbers_written(self.suffix, [stage], self.o)
            else:
                self.written += every
            yield stage

    def warning(self) -> str | None:
        """A word of warning when a text export (JSON, HTML, Markdown, LaTeX) is large, with what
        to do instead; None for a small one and for .npz."""
        if self.suffix not in _BYTES_PER_NUMBER or self.written <= LARGE:
            return None
        hint = "; --no-weights leaves the weights out" if self.o.weights else ""
        text_mb = self.written * _BYTES_PER_NUMBER[self.suffix] / 1e6
        npz_mb = self.every * np.dtype(self.trace.config.model.dtype).itemsize / 1e6
        return (
            f"{self.written:,} numbers make about {text_mb:,.0f} MB of {_FORMAT_NAMES[self.suffix]}{hint}; "
            f"as .npz, {npz_mb:,.0f} MB"
        )


def document_options(
    trace: Trace,
    weights: bool,
    grads: Backward | None,
    worksheet: Worksheet | None,
    full: bool,
    rerun: str = "",
) -> Options:
    """How a document shows the trace (``views.documents.shown.Options``)."""
    from ..views.documents.shown import Options

    return Options(
        trace.config.display.precision, weights, None if grads is None else grads.stages, worksheet, full,
        rerun=rerun,
    )  # fmt: skip


Writer = Callable[[BinaryIO], None]  # writes a file's bytes to the open file it is given


def write_atomic(path: Path, write: Writer, force: bool = False) -> None:
    """Write through ``write`` to a temporary file beside ``path``, then put it in place in one step.

    Without ``force`` the file is linked into place, which fails if ``path`` exists by then: of two
    exports racing to one name, the second fails instead of silently replacing the first. With
    ``force`` it is renamed over ``path``; a symlink there is replaced, not written through. The
    temporary file is removed on any failure, Ctrl-C, SIGTERM, SIGHUP and SIGQUIT included.
    """
    write_together([(path, write)], force)


def write_together(outputs: Sequence[tuple[Path, Writer]], force: bool = False) -> None:
    """The files of one command (a worksheet and its answer key; the weights before and after
    training), written all or none: each is written to a temporary file beside its target first
    (``write_atomic``'s), and only once every one is whole are they put in place, in order. A
    failure while writing (a full disk, a folder that refuses files) leaves none of them; one while
    putting them in place (a name taken meanwhile) removes those already placed."""
    staged: list[tuple[str, Path]] = []
    placed: list[Path] = []
    signals = _Unwinding()
    try:
        for path, write in outputs:
            with signals.held():  # a signal between making the file and noting its name would orphan it
                fd, tmp = _temporary(path)
                staged.append((tmp, path))
            _write(fd, tmp, write, path)
        for tmp, path in staged:
            _place(tmp, path, force)
            placed.append(path)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        for path in placed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    finally:
        signals.restore()


def _temporary(path: Path) -> tuple[int, str]:
    """A new, empty temporary file beside ``path``, hidden, named after it: its descriptor and name."""
    try:
        return tempfile.mkstemp(dir=path.parent, prefix=f".{_fit(path.name, _TMP_NAME)}.", suffix=".tmp")
    except OSError as err:
        raise ExportError(f"{path}: cannot write ({err.strerror})") from None


def _write(fd: int, tmp: str, write: Writer, path: Path) -> None:
    """The temporary file ``tmp`` (open as ``fd``) written through ``write`` and on disk (fsync),
    then closed, and made readable as an export is."""
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; an export is not
    except OSError as err:
        raise ExportError(f"{path}: cannot write ({err.strerror})") from None


def _place(tmp: str, path: Path, force: bool) -> None:
    """``tmp`` given the name ``path``: over it with ``force``, else only if nothing has it."""
    try:
        if force:
            os.replace(tmp, path)
        else:
            _link_exclusive(tmp, path)
    except FileExistsError:
        raise ExportError(f"{path}: already exists; pass --force to overwrite it") from None
    except OSError as err:
        raise ExportError(f"{path}: cannot write ({err.strerror})") from None


# Bytes of the name the temporary file borrows: with its dot before and after, mkstemp's eight
# random characters and ".tmp", the temporary name is at most NAME_MAX bytes.
_TMP_NAME = NAME_MAX - 2 - 8 - len(".tmp")


def _fit(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes of the file system's encoding, between characters
    (a name of 85 three-byte characters is 255 bytes: cut at 200 characters, it was not cut)."""
    if len(os.fsencode(name)) <= limit:
        return name
    name = name[:limit]  # a character is at least one byte
    while len(os.fsencode(name)) > limit:
        name = name[:-1]
    return name


def _link_exclusive(tmp: str, path: Path) -> None:
    """Give ``tmp`` the name ``path`` only if nothing has it (FileExistsError otherwise)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # A file system without hard links: check, then rename (a race is possible only here).
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "exists", str(path)) from None
        os.rename(tmp, path)
        return
    os.unlink(tmp)


class _Unwinding:
    """Ctrl-C (SIGINT), SIGTERM, SIGHUP (a closed terminal) and SIGQUIT (Ctrl-\\) made to unwind,
    so that ``finally`` and ``except`` run and the temporary file goes: Ctrl-C as KeyboardInterrupt,
    the others as an exit with the shell's code for a signal, 128 + its number. SIGQUIT would
    otherwise end the process at once (and dump its core), leaving the file behind.

    ``held()`` makes a signal wait for the few steps inside it: a handler runs between any two steps
    of Python, so a signal just after ``mkstemp`` has made the file, before its name is noted, would
    orphan it. (Blocking the signal in this thread would not do: another thread, the pass's or the
    BLAS's, can receive it, and the handler still runs here.) ``restore()`` puts the old handlers
    back. Outside the main thread signals cannot be handled: then this does nothing.
    """

    def __init__(self) -> None:
        self.holding = False
        self.pending: int | None = None
        self.previous: dict[int, Any] = {}
        names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # the last two are POSIX's, not Windows'
        for signum in (getattr(signal, name) for name in names if hasattr(signal, name)):
            if signum == signal.SIGINT and signal.getsignal(signum) is not signal.default_int_handler:
                continue  # Ctrl-C handled elsewhere (or ignored): left as it is
            try:
                self.previous[signum] = signal.signal(signum, self._arrived)
            except ValueError:  # not the main thread
                break

    def _arrived(self, signum: int, frame: object) -> None:
        if self.holding:
            self.pending = signum
        else:
            self._unwind(signum)

    @staticmethod
    def _unwind(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.pending is not None:  # the signal wins over an error inside, as it would have
                self._unwind(self.pending)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def export(
    trace: Trace,
    target: Path | None,
    stages: Iterable[Stage],
    weights: bool = True,
    grads: Backward | None = None,
    force: bool = False,
    worksheet: Worksheet | None = None,
    full: bool = False,
    rerun: str = "",
    also: Sequence[tuple[Path, Writer]] = (),
    contents: Contents | None = None,
) -> Iterator[str] | None:
    """Write the stages to ``target`` in the format its suffix names; return the JSON text, in
    pieces, instead when ``target`` is None (stdout). A document (.html, .md, .tex) may be a
    worksheet; it summarises large matrices as the terminal does unless ``full`` (data files keep
    every number). ``rerun``: the options that make the trace again, for the commands an HTML
    report shows; ``also``: files written with it, all or none (``write_together``: a worksheet's
    answer key).

    ``stages`` may be computed as they are written (``model.stream.Stages``: each is dropped once
    written, and the next computed then); ``contents`` then says what they are beforehand (a
    document lists them first). Every format is written a stage at a time: JSON's stages one
    object after another, the .npz one array after another, a document one table after another.
    """
    suffix = "" if target is None else target.suffix.lower()
    if worksheet is not None and suffix not in DOCUMENTS:
        raise ExportError(f"a worksheet is a document: export it as {', '.join(DOCUMENTS)}")
    if suffix == ".npz":
        write_together([(target, lambda f: write_npz(f, arrays_of(stages, weights, grads))), *also], force)
        return None
    if suffix in DOCUMENTS:
        from ..views.documents.writers import WRITERS

        options = document_options(trace, weights, grads, worksheet, full, rerun)

        def write_document(f: BinaryIO) -> None:
            # A piece at a time (a stage's header, a matrix row): never the whole document in memory.
            for piece in WRITERS[suffix](trace, stages, options, contents):
                if suffix == ".tex":
                    _check_latin(piece, target)
                f.write(piece.encode("utf-8"))

        write_together([(target, write_document), *also], force)
        return None
    pieces = iter_json(_document(trace, stages, weights, grads, numbers=_Rows))
    if target is None:
        return itertools.chain(pieces, ["\n"])

    def write(f: BinaryIO) -> None:
        for piece in pieces:
            f.write(piece.encode("utf-8"))
        f.write(b"\n")

    write_together([(target, write), *also], force)
    return None


def arrays_of(
    stages: Iterable[Stage], weights: bool = True, grads: Backward | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Every matrix of the stages under its .npz name (``matrices``), a stage at a time."""
    for stage in stages:
        yield from matrices([stage], weights, grads).items()


def write_npz(f: BinaryIO, arrays: Iterable[tuple[str, np.ndarray]]) -> None:
    """``np.savez(f, **dict(arrays))``, the same archive (one uncompressed ``name.npy`` member an
    array, in order), written one array at a time as ``arrays`` makes them."""
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, values in arrays:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(values), allow_pickle=False)


def key_writer(trace: Trace, target: Path, sheet: Worksheet) -> Writer:
    """What writes a worksheet's answer key, a document of its own, to ``target`` (``export``'s
    ``also``: written with the worksheet, all or none, never over a file without ``force``)."""
    from ..views.documents.writers import iter_key

    suffix = target.suffix.lower()

    def write(f: BinaryIO) -> None:
        for piece in iter_key(trace, suffix, sheet):
            if suffix == ".tex":
                _check_latin(piece, target)
            f.write(piece.encode("utf-8"))

    return write


def _check_latin(text: str, target: Path) -> None:
    """Refuse a .tex that pdflatex cannot typeset: its T1 fonts have Latin letters only.

    Cyrillic, CJK or emoji would need XeLaTeX or LuaLaTeX and fonts that a plain TeX installation
    (texlive-latex-base) does not have; the .html and .md exports show every script.
    """
    bad = next((k for k, ch in enumerate(text) if ord(ch) > 0xFF), None)
    if bad is None:
        return
    start = max(text.rfind(" ", 0, bad), text.rfind("{", 0, bad)) + 1
    end = min(k for k in (text.find(" ", bad), text.find("}", bad), len(text)) if k >= 0)
    word = text[start:end][:20]
    raise ExportError(
        f"{target}: the word {word!r} has characters that pdflatex cannot typeset (Latin script only); "
        "export .html or .md instead"
    )


def schema() -> dict[str, Any]:
    """The JSON Schema every export validates against: the file shipped as package data, with each
    convention's values filled in from ModelConfig's fields (config/conventions.py defines them once)."""
    import typing

    from ..config import ModelConfig

    doc = json.loads((Path(__file__).parents[1] / "data" / "export.schema.json").read_text("utf-8"))
    model = doc["properties"]["config"]["properties"]["model"]["properties"]
    for name, hint in typing.get_type_hints(ModelConfig).items():
        others = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(others) == 1 and typing.get_origin(others[0]) is typing.Literal:  # norm_placement's None
            hint = others[0]  # is resolved when the config is made: never exported
        if typing.get_origin(hint) is typing.Literal:
            model[name] = {"enum": list(typing.get_args(hint))}
    return doc
