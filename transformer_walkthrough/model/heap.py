"""Keep the memory a dropped trace frees, so that the next pass reuses it instead of faulting it in.

A trace holds every intermediate of a pass: 40 MB of arrays at the paper's base size, most of
them between 128 KB and 1 MB. When the trace is dropped, glibc's malloc hands the top of its heap
back to the kernel (its trim threshold is a few MB), and the next traced pass faults every page
of those 40 MB in again, zeroed by the kernel: a third of the pass at base size
(``benchmarks/bench_forward.py``), in a training loop, a notebook or a test suite alike.

``keep_freed_memory`` raises the trim threshold to 256 MB, so that up to that much freed memory
stays in the process for the next pass. Setting it turns off glibc's dynamic mmap threshold, which
would otherwise have grown to cover the trace's arrays, so the mmap threshold is fixed at that
dynamic ceiling's default (32 MB): arrays below it come from the heap, where freed ones are
reused. Nothing happens under another C library, or when the user tuned malloc themselves
(``MALLOC_*_`` variables or ``GLIBC_TUNABLES``).
"""

from __future__ import annotations

import functools
import os

TRIM_THRESHOLD = 256 << 20  # bytes of freed memory the process keeps
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the dynamic threshold's ceiling
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # not glibc, or not a POSIX system
        return False


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds once per process; True if they were set."""
    if not _glibc() or any(name in os.environ for name in _USER_SETTINGS):
        return False
    import ctypes  # only here: 3 ms of import that `walkthrough --help` does not need

    mallopt = ctypes.CDLL(None).mallopt
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
