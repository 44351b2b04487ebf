"""T5's relative positions, a piece of attention: a learned bias added to each head's scores, read
from a table by the bucket of the distance key − query (its own module: the scores' other steps,
project to scores, are in ``pieces``; what follows them in ``mixing``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ... import formula as Fm
from ... import functional as F
from ...formula import Line, Note, line, note, sym
from ...trace import CONSTANT, Stage, dims
from ..base import Spec, Step, StepOf, named, one, step
from ..hand import Check, bucket_by_hand, gap

if TYPE_CHECKING:
    from ....config import ModelConfig
    from ...cell import Cell
    from ...trace import Trace
from .flow import (
    At,
    Back,
    ByHand,
    Explainer,
    Flow,
    Labels,
    Piece,
)

# ---------------------------------------------------------------------------------------------
# relative bias: S_h + B_h, B_h[i, j] = R[bucket(j − i), h] (T5's relative positions)
# ---------------------------------------------------------------------------------------------


class RelativeBias(Piece):
    """T5's positions: a learned bias added to each head's scores, read from a table R (a row per
    bucket, a column per head) by the bucket of the distance key − query: one bucket per distance
    near the query, log-spaced ones farther, the last shared beyond relative_max_distance.

    Bidirectional in the encoder (keys after the query have buckets of their own), causal in the
    decoder (a later key is distance 0: the mask hides it anyway); none in cross-attention, whose
    keys have no position relative to the decoder's. R is the first layer's, shared by every layer
    of its stack (T5 computes the bias once and hands it up)."""

    name = "relative-bias"
    groups: ClassVar[Mapping[str, str]] = {"B": "attention", "S+B": "attention"}
    tex: ClassVar[Mapping[str, str]] = {
        "B": "B_{{{h}}}",
        "S+B": "S_{{{h}}}+B_{{{h}}}",
        "R": "R",
        "buckets": r"\mathrm{{bucket}}",
    }

    def on(self, m: ModelConfig, at: At) -> bool:
        return m.biases_positions and not at.cross

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        # T5 draws R from N(0, 1/d_model); one table per stack, the first layer's
        return {"R": Spec((m.relative_buckets, m.num_heads), "normal", fan_in=m.d_model, per_stack=True)}

    def said(self, m: ModelConfig, at: At) -> str:
        how = (
            "only keys before the query count (causal)"
            if at.masked
            else "keys after the query have buckets of their own (bidirectional)"
        )
        return (
            " Positions enter here as a bias (T5): each head adds B_h[i, j] = R[bucket, h] to its scores, "
            f"the bucket of the distance key − query: one per distance up to half a direction's buckets, "
            f"log-spaced up to {m.relative_max_distance}, the last shared beyond; {how}. "
            "R is the first layer's, shared by the stack's every layer."
        )

    def forward(self, f: Flow) -> None:
        n_q, n_k = f.S.shape[-2:]
        buckets = f.kept[self.name] = self.buckets(f, slice(0, n_q), slice(0, n_k))
        f.B = F.relative_bias(f.p["R"], buckets)
        f.biased = f.S + f.B

    @staticmethod
    def buckets(f: Flow, rows: slice, keys: slice) -> np.ndarray:
        """The bucket of each pair of the query ``rows`` and the ``keys``: (rows, keys) ints."""
        m, start = f.m, f.start  # a cached step's new token is at start
        queries = np.arange(start + rows.start, start + rows.stop)
        return F.relative_buckets(queries, np.arange(keys.start, keys.stop), not f.causal, m.relative_buckets,
                                  m.relative_max_distance)  # fmt: skip

    def bias(self, f: Flow) -> Callable[[slice, slice], np.ndarray]:
        """B of the query rows and keys asked for, (h, rows, keys): attention in blocks reads it a
        block at a time (``functional.attention_in_blocks``), never whole."""
        return lambda rows, keys: F.relative_bias(f.p["R"], self.buckets(f, rows, keys))

    def record_before(self, stage: Stage, f: Flow, q: Labels, kv: Labels) -> None:
        m = f.m
        heads = tuple(f"head {h}" for h in range(1, m.num_heads + 1))
        stage.weight("R", f.p["R"], dims(m.relative_buckets, "bucket "), heads)
        stage.rec("buckets", f.kept[self.name].astype(f.x.dtype), q, kv, CONSTANT)

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        stage.rec("B", f.of_head(f.B, h), q, kv, head=h)
        stage.rec("S+B", f.of_head(f.biased, h), q, kv, head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head |= {"S+B": d.S, "B": d.S}  # S + B: S and B get the same gradient
        d.params["R"] = F.relative_bias_backward(d.S, f.kept[self.name], f.m.relative_buckets)

    def before(self, stage: Stage, m: ModelConfig) -> list[Check]:
        n_q, n_k = stage["buckets"].shape
        causal = "M" in stage
        buckets = np.array(
            [[bucket_by_hand(i, j, not causal, m).bucket for j in range(n_k)] for i in range(n_q)]
        )
        how = "causal" if causal else "bidirectional"
        return [Check(stage.id, f"buckets recomputed pair by pair from key − query ({how})",
                      gap(stage["buckets"], buckets))]  # fmt: skip

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        R, buckets = stage["R"], stage["buckets"].astype(int)  # the buckets checked once, before the heads
        bias = np.array([[R[k, b.h - 1] for k in row] for row in buckets.tolist()])
        b.s = b.s + bias
        b.checked += [("B", gap(stage.of("B", b.h), bias)), ("S+B", gap(stage.of("S+B", b.h), b.s))]

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        how = (
            "causal: keys before the query only" if at.masked else "bidirectional: keys after the query apart"
        )
        bucket = Fm.call("bucket", [sym("j"), "−", sym("i")])
        return [
            line(Fm.index(sym("B", "h"), sym("i"), ",", sym("j")), "=", Fm.index(sym("R"), bucket, ",", sym("h"))),
            note(f"(T5: one bucket per distance near the query, log-spaced ones up to {m.relative_max_distance}; "
                 f"{m.relative_buckets} buckets, {how}; R is the stack's first layer's)"),
        ]  # fmt: skip

    @staticmethod
    def bucket_lines(c: Cell, trace: Trace, i: int, j: int) -> list[str]:
        """The bucket of query i and key j, step by step with the numbers."""
        m = trace.config.model
        causal = "M" in c.stage
        k = bucket_by_hand(i, j, not causal, m)
        where = "after" if k.distance > 0 else "before" if k.distance < 0 else "at"
        apart = (
            f"{abs(k.distance)} position{'s' if abs(k.distance) != 1 else ''} {where}"
            if k.distance
            else where
        )
        lines = [
            f"  distance = key − query = {j} − {i} = {str(k.distance).replace('-', '−')}: key {j} ({c.col}) is {apart} query {i} ({c.row})"
        ]
        if causal:
            lines.append(
                f"  causal (the decoder): counted = max(−distance, 0) = {k.counted}; "
                f"all {k.per_side} buckets for keys at or before the query"
            )
        else:
            half = f"upper half, from bucket {k.offset}" if k.offset else "lower half, from bucket 0"
            lines.append(
                f"  bidirectional (the encoder): {m.relative_buckets} / 2 = {k.per_side} buckets each way; "
                f"counted = |distance| = {k.counted}, {half}"
                + (" (keys after the query)" if k.offset else " (keys at or before the query)")
            )
        if k.counted < k.exact:
            lines.append(
                f"  exact range: {k.counted} < {k.per_side} / 2 = {k.exact}, one bucket per distance: "
                f"bucket = {k.offset} + {k.counted} = {k.bucket}"
            )
        else:
            raw = k.exact + int(k.log_value)
            capped = f", capped at {k.per_side - 1}" if raw > k.per_side - 1 else ""
            lines += [
                f"  log range: {k.counted} ≥ {k.exact}: {k.exact} + ⌊ln({k.counted}/{k.exact}) / "
                f"ln({m.relative_max_distance}/{k.exact}) · ({k.per_side} − {k.exact})⌋ (in float32, as T5)",
                f"  = {k.exact} + ⌊{k.log_value:.6g}⌋ = {raw}{capped}; bucket = {k.offset} + "
                f"{min(raw, k.per_side - 1)} = {k.bucket}",
            ]
        return lines

    @staticmethod
    def explain_buckets(c: Cell, trace: Trace) -> list[str]:
        return [
            f"buckets[{c.i}, {c.j}] = {int(c.value)}: the row of R that query {c.i} ({c.row}) and "
            f"key {c.j} ({c.col}) read, the same in every head",
            *RelativeBias.bucket_lines(c, trace, c.i, c.j),
        ]

    @staticmethod
    def explain_bias(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        k = int(c.stage["buckets"][c.i, c.j])
        return [
            f"B{h}[{c.i}, {c.j}] = R[bucket, head {h}]: the learned bias of this distance for head {h}",
            *RelativeBias.bucket_lines(c, trace, c.i, c.j),
            f"  row {k} of R (bucket {k}), column {h - 1} (head {h}): R[{k}, {h - 1}] = {c.r(c.value)}",
        ]

    @staticmethod
    def explain_biased(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        s, b = float(c.stage.of("S", h)[c.i, c.j]), float(c.stage.of("B", h)[c.i, c.j])
        return [
            f"{c.name}[{c.i}, {c.j}] = S{h}[{c.i}, {c.j}] + B{h}[{c.i}, {c.j}] = {c.f(s)} + {c.operand(b)} = "
            f"{c.r(c.value)}  (the score, moved by how far apart the two tokens are)"
        ]

    @staticmethod
    def explain_table(c: Cell, trace: Trace) -> list[str]:
        pairs = [(i, j) for i, row_ in enumerate(c.stage["buckets"].astype(int).tolist())
                 for j, k in enumerate(row_) if k == c.i]  # fmt: skip
        read = ", ".join(f"({i}, {j})" for i, j in pairs[:8]) + (" …" if len(pairs) > 8 else "")
        return [
            f"R[{c.i}, {c.j}] = {c.r(c.value)}: the learned bias of bucket {c.i} for head {c.j + 1}",
            f"  read here by {len(pairs)} (query, key) pair{'s' if len(pairs) != 1 else ''}"
            + (f": {read}" if pairs else " (no pair of this input is that far apart)"),
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {
        "buckets": explain_buckets,
        "B": explain_bias,
        "S+B": explain_biased,
        "R": explain_table,
    }

    @staticmethod
    def bias_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        # the table's cell, then the bucket that chose its row
        return step("lookup", one("R", int(stage["buckets"][i, j]), h - 1), one("buckets", i, j))

    @staticmethod
    def biased_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        return step("sum", one(named(stage, "S", h), i, j), one(named(stage, "B", h), i, j))

    steps: ClassVar[Mapping[str, StepOf]] = {"B": bias_step, "S+B": biased_step}
