"""A pass's stages to be read one by one, each the moment the pass completes it, and dropped when
the reader goes on to the next: what an export writes and the tour shows of a long prompt, in the
memory of one stage, not of the pass.

The pass hands its stages over as it completes them (``trace.Keep.stream``, a call); a writer
reads a sequence of stages (``for stage in stages``). ``Stages`` joins the two: the pass runs in
a thread of its own and waits, at each stage it hands over, until the reader asks for the next.
The two never compute at once, so the numbers are the pass's own, in its order; only the stage
being read is in memory, and the pass never runs ahead of its reader.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .architecture import walk
from .trace import EVERYTHING, Keep, Stage, Trace, stage_title

if TYPE_CHECKING:
    from ..config import ModelConfig


def outline(m: ModelConfig, keep: Keep = EVERYTHING) -> list[tuple[str, str]]:
    """The (id, title) of each stage ``keep`` chooses, in order, before the pass has run: the
    contents a document lists before its first stage is computed (the titles the pass will give)."""
    from .kinds import KINDS  # the kinds import the trace: only when an outline is asked for

    chosen = keep.ids(m)
    return [
        (p.id, stage_title(p.id, KINDS[p.kind].title_of(p.id, m)))
        for p in walk(m)
        if chosen is None or p.id in chosen
    ]


class _Abandoned(Exception):  # noqa: N818 — no error: the reader stopped reading, the pass stops too
    """Raised in the pass's thread at the stage it hands over once its reader has gone."""


class _Failed:
    """The error the pass ended on, handed to the reader, which raises it as its own."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()  # the pass is over: every stage was read


class Stages:
    """The stages ``keep`` chooses of the pass ``run(keep)`` makes, to be read once, in order.

    ``run`` is the pass (``session.traced`` and its notes, as a command runs it) called with the
    policy that streams its stages here; ``trace`` is the trace they belong to (its tokens, its
    config; each stage's matrices are dropped once the next is read, and the prediction is there
    once every stage is). The pass's errors (a budget refused, a bad prompt) are the reader's:
    raised where it reads the first stage or ``trace``.
    """

    def __init__(self, run: Callable[[Keep], Trace], keep: Keep = EVERYTHING) -> None:
        self._handed: queue.Queue[Any] = queue.Queue(maxsize=1)  # a stage, the end, or an error
        self._read = threading.Semaphore(0)  # released when the reader asks for the next stage
        self._gone = False
        self._first: Any = None  # what the pass handed over first, once ``trace`` has looked
        self._trace: Trace | None = None
        then = keep.stream

        def hand_over(stage: Stage) -> None:
            if then is not None:
                then(stage)
            self._handed.put(stage)
            self._read.acquire()
            if self._gone:
                raise _Abandoned

        streamed = dataclasses.replace(keep, stream=hand_over)
        self._thread = threading.Thread(target=self._pass, args=(run, streamed), daemon=True, name="pass")
        self._thread.start()

    def _pass(self, run: Callable[[Keep], Trace], keep: Keep) -> None:
        try:
            self._trace = run(keep)
        except _Abandoned:
            return
        except BaseException as error:  # handed to the reader, raised there
            self._handed.put(_Failed(error))
            return
        self._handed.put(_END)

    def _next(self) -> Any:
        if self._first is not None:
            item, self._first = self._first, None
        else:
            item = self._handed.get()
        if isinstance(item, _Failed):
            raise item.error
        if item is not _END and self._trace is None:
            self._trace = item.owner()
        return item

    @property
    def trace(self) -> Trace:
        """The trace the stages belong to: known once the pass has handed over its first stage."""
        if self._trace is None:
            if self._first is None:
                self._first = self._handed.get()
            if isinstance(self._first, _Failed):
                raise self._first.error
            if self._first is not _END:
                self._trace = self._first.owner()
        assert self._trace is not None
        return self._trace

    def __iter__(self) -> Iterator[Stage]:
        try:
            while (item := self._next()) is not _END:
                yield item
                self._read.release()  # the reader is done with it: dropped, and the next computed
            self._thread.join()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the pass at the stage it is handing over (the reader stopped reading)."""
        if self._thread.is_alive() and not self._gone:
            self._gone = True
            self._read.release()


__all__ = ["Stages", "outline"]
