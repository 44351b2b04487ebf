"""How much memory reading a checkpoint may take, known before anything is allocated.

A checkpoint's files say how large they are, and a hostile file can say anything: a 15 kB pickle
can describe gigabytes of views, a config.json a billion layers, a sparse file terabytes of
zeros. So every reader adds up what it is about to allocate — a storage read from a torch zip, a
bfloat16 tensor widened to float32, the converter's float32 or float64 copy of every tensor — and
refuses, in one line, the checkpoint whose total would pass the limit, before allocating it.

The limit is half of what the process can have: half of the machine's physical memory
(``os.sysconf``: SC_PHYS_PAGES × SC_PAGE_SIZE), or half of its address-space limit (``ulimit -v``,
RLIMIT_AS) when that is lower; half, because the forward pass and its trace need room after the
weights. It does not follow MemAvailable, so that the same checkpoint loads or not whatever else
the machine is running. The environment variable ``WALKTHROUGH_MAX_MEMORY`` sets it instead, in
bytes or with a suffix K, M, G or T (``WALKTHROUGH_MAX_MEMORY=16G``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

from .errors import CheckpointError

ENVIRONMENT = "WALKTHROUGH_MAX_MEMORY"
_SIZE = re.compile(r"\s*(\d{1,20})\s*([KMGT]?)i?B?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_limit() -> int:
    """The bytes a checkpoint's reading may allocate: WALKTHROUGH_MAX_MEMORY, else half of the
    physical memory or of the address-space limit, whichever is lower (see the module)."""
    setting = os.environ.get(ENVIRONMENT)
    if setting:
        match = _SIZE.fullmatch(setting)
        if not match:
            raise CheckpointError(f"{ENVIRONMENT} is {setting[:40]!r}, not a size in bytes (like 8G)")
        return int(match[1]) * _UNITS[match[2].upper()]
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX, or the value unknown
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(ImportError, ValueError, OSError):  # Windows has no resource module
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    positive = [n for n in limits if n > 0]
    return min(positive) // 2 if positive else 8 * 2**30


def size(nbytes: int) -> str:
    """A number of bytes as a person reads it: ``3.1 GiB``, ``250 MiB``, ``12 kiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("kiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} bytes"


def how_to_raise(limit: int) -> str:
    """The end of every refusal: what the limit is and how to move it."""
    return f"the limit is {size(limit)}; set {ENVIRONMENT} (e.g. {ENVIRONMENT}=16G) to change it"


class Budget:
    """The bytes that reading one checkpoint may still allocate; each reader charges before it allocates.

    One budget follows a checkpoint from its files to its converted weights, so that what is held
    at once (a torch zip's storages, then our copies of them) is counted together.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = memory_limit() if limit is None else limit
        self.spent = 0

    def charge(self, nbytes: int, where: object, what: str) -> None:
        """Count ``nbytes`` that ``what`` is about to take, or refuse if the total passes the limit."""
        self.spent += nbytes
        if self.spent > self.limit:
            raise CheckpointError(
                f"{where}: {what} would take {size(self.spent)} of memory in all; {how_to_raise(self.limit)}"
            )


@contextlib.contextmanager
def out_of_memory(where: object) -> Iterator[None]:
    """A MemoryError met despite the budget (the machine is busy, or a library allocated more than
    counted) as one line, never a traceback."""
    try:
        yield
    except MemoryError:
        raise CheckpointError(
            f"{where}: out of memory while reading the checkpoint; {how_to_raise(memory_limit())}"
        ) from None
