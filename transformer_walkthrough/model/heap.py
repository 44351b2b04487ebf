"""Keep the memory a dropped trace frees, so that the next pass reuses it instead of faulting it in.

A trace holds every intermediate of a pass: 40 MB of arrays at the paper's base size, most of
them between 128 KB and 1 MB. When the trace is dropped, glibc's malloc hands the top of its heap
back to the kernel whenever that top is free (its trim threshold is a few MB), and the next traced
pass faults those pages in again, zeroed by the kernel: up to a third of the pass at base size
(``benchmarks/bench_forward.py``), in a training loop, a notebook or a test suite alike.

``keep_freed_memory`` raises the trim threshold to 256 MB, so that up to that much freed memory
stays in the process for the next pass. Setting it turns off glibc's dynamic mmap threshold, which
would otherwise have grown to cover the trace's arrays, so the mmap threshold is fixed at that
dynamic ceiling's default (32 MB): arrays below it come from the heap, where freed ones are
reused. This is process-wide, as malloc is: nothing happens under another C library, or when the
user set one of these thresholds themselves (``MALLOC_TRIM_THRESHOLD_`` and its kin, or the same
in ``GLIBC_TUNABLES``), which is also how to opt out (``MALLOC_TRIM_THRESHOLD_=131072``).
"""

from __future__ import annotations

import functools
import os

TRIM_THRESHOLD = 256 << 20  # bytes of freed memory the process keeps
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the dynamic threshold's ceiling
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # not glibc, or not a POSIX system
        return False


# The settings that decide when freed memory goes back to the kernel, as variables and as tunables.
_SETTINGS = ("trim_threshold", "mmap_threshold", "top_pad", "mmap_max")


def _user_tuned() -> bool:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(f"MALLOC_{s.upper()}_" in os.environ or f"glibc.malloc.{s}" in tunables for s in _SETTINGS)


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds once per process; True if both were set."""
    if not _glibc() or _user_tuned():
        return False
    import ctypes  # only here: 3 ms of import that `walkthrough --help` does not need

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a Python linked in a way that hides libc's symbols
        return False
    # The mmap threshold first: the trim threshold set alone would leave it fixed at 128 KB, and
    # every larger array would be mapped anew. (mallopt refuses only values out of range.)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
