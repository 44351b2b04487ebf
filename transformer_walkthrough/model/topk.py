"""The k largest of each row, ties broken exactly as ``torch.topk`` breaks them on the CPU.

A router whose probabilities tie (a router of zeros, a uniform row) must choose the experts that
transformers' models choose, or the two would send a token to different experts. ``torch.topk``
makes no promise about ties; what it does is its CPU kernel's (``aten/src/ATen/native/TopKImpl.h``):
each row's (value, index) pairs ordered by value alone, by ``std::partial_sort`` when k·64 ≤ n and
otherwise by ``std::nth_element`` and then ``std::sort`` of the first k − 1, as GCC's libstdc++
writes them. Those three are written out here, step for step, comparing values only (NaN largest);
a row without equal values needs none of it, and is sorted by value.
"""

from __future__ import annotations

import math

import numpy as np

Pairs = list[tuple[float, int]]


def _before(a: tuple[float, int], b: tuple[float, int]) -> bool:
    """torch's order for the largest first: a comes before b when a's value is larger (NaN largest)."""
    return (math.isnan(a[0]) and not math.isnan(b[0])) or a[0] > b[0]


# libstdc++'s heap, as partial_sort uses it.
def _push_heap(q: Pairs, first: int, hole: int, top: int, value: tuple[float, int]) -> None:
    parent = (hole - 1) // 2
    while hole > top and _before(q[first + parent], value):
        q[first + hole] = q[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    q[first + hole] = value


def _adjust_heap(q: Pairs, first: int, hole: int, length: int, value: tuple[float, int]) -> None:
    top = child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _before(q[first + child], q[first + child - 1]):
            child -= 1
        q[first + hole] = q[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        q[first + hole] = q[first + child - 1]
        hole = child - 1
    _push_heap(q, first, hole, top, value)


def _make_heap(q: Pairs, first: int, last: int) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(q, first, parent, length, q[first + parent])
        if parent == 0:
            return
        parent -= 1


def _pop_heap(q: Pairs, first: int, last: int, result: int) -> None:
    value = q[result]
    q[result] = q[first]
    _adjust_heap(q, first, 0, last - first, value)


def _partial_sort(q: Pairs, first: int, middle: int, last: int) -> None:
    _make_heap(q, first, middle)
    for i in range(middle, last):
        if _before(q[i], q[first]):
            _pop_heap(q, first, middle, i)
    while middle - first > 1:
        middle -= 1
        _pop_heap(q, first, middle, middle)


# libstdc++'s introselect and introsort: median-of-three pivots, insertion sort for short ranges.
def _insertion_sort(q: Pairs, first: int, last: int) -> None:
    for i in range(first + 1, last):
        value = q[i]
        if _before(value, q[first]):
            q[first + 1 : i + 1] = q[first:i]
            q[first] = value
        else:
            j = i
            while _before(value, q[j - 1]):
                q[j] = q[j - 1]
                j -= 1
            q[j] = value


def _swap(q: Pairs, a: int, b: int) -> None:
    q[a], q[b] = q[b], q[a]


def _median_to_first(q: Pairs, result: int, a: int, b: int, c: int) -> None:
    if _before(q[a], q[b]):
        if _before(q[b], q[c]):
            _swap(q, result, b)
        elif _before(q[a], q[c]):
            _swap(q, result, c)
        else:
            _swap(q, result, a)
    elif _before(q[a], q[c]):
        _swap(q, result, a)
    elif _before(q[b], q[c]):
        _swap(q, result, c)
    else:
        _swap(q, result, b)


def _partition_pivot(q: Pairs, first: int, last: int) -> int:
    mid = first + (last - first) // 2
    _median_to_first(q, first, first + 1, mid, last - 1)
    pivot, lo, hi = q[first], first + 1, last
    while True:
        while _before(q[lo], pivot):
            lo += 1
        hi -= 1
        while _before(pivot, q[hi]):
            hi -= 1
        if not lo < hi:
            return lo
        _swap(q, lo, hi)
        lo += 1


def _lg(n: int) -> int:
    return n.bit_length() - 1


def _nth_element(q: Pairs, first: int, nth: int, last: int) -> None:
    depth = 2 * _lg(last - first)
    while last - first > 3:
        if depth == 0:
            _partial_sort_select(q, first, nth + 1, last)
            _swap(q, first, nth)
            return
        depth -= 1
        cut = _partition_pivot(q, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(q, first, last)


def _partial_sort_select(q: Pairs, first: int, middle: int, last: int) -> None:
    """libstdc++'s __heap_select: the heap of [first, middle) keeps the best seen."""
    _make_heap(q, first, middle)
    for i in range(middle, last):
        if _before(q[i], q[first]):
            _pop_heap(q, first, middle, i)


def _introsort(q: Pairs, first: int, last: int, depth: int) -> None:
    while last - first > 16:
        if depth == 0:
            _partial_sort(q, first, last, last)
            return
        depth -= 1
        cut = _partition_pivot(q, first, last)
        _introsort(q, cut, last, depth)
        last = cut


def _sort(q: Pairs, first: int, last: int) -> None:
    if last - first < 2:
        return
    _introsort(q, first, last, 2 * _lg(last - first))
    if last - first > 16:
        _insertion_sort(q, first, first + 16)
        for i in range(first + 16, last):  # unguarded: the first 16 hold a smaller one
            value, j = q[i], i
            while _before(value, q[j - 1]):
                q[j] = q[j - 1]
                j -= 1
            q[j] = value
    else:
        _insertion_sort(q, first, last)


def topk_row(values: list[float], k: int) -> list[int]:
    """The indices of the k largest values, in the order ``torch.topk`` gives them on the CPU."""
    q = [(v, i) for i, v in enumerate(values)]
    n = len(q)
    if k * 64 <= n:
        _partial_sort(q, 0, k, n)
    else:
        _nth_element(q, 0, k - 1, n)
        _sort(q, 0, k - 1)
    return [i for _, i in q[:k]]


def topk(x: np.ndarray, k: int) -> np.ndarray:  # (n, E) -> (n, k) ints
    """The indices of the k largest of each row, largest first, ties as ``torch.topk`` breaks them."""
    out = np.argsort(-x, axis=-1, kind="stable")[:, :k]
    ordered = np.sort(x, axis=-1)  # a row has a tie when two of its sorted values are equal
    tied = np.any(ordered[:, 1:] == ordered[:, :-1], axis=-1) | np.isnan(x).any(axis=-1)
    for r in np.flatnonzero(tied):  # ties: the kernel's own order
        out[r] = topk_row(x[r].tolist(), k)
    return out
