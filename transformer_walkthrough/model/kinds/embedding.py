"""The bottom of each stack: each token's row of E, then the positions added to it (in the same
stage for an encoder-only model, with the segment's row, as BERT's embeddings), then a norm."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import functional as F
from ..formula import Formula, Term, call, formula, frac, index, line, note, num, pad, power, sqrt, sym, word
from ..trace import CONSTANT, Stage, dims, positions
from .base import Arrays, Grads, Kind, Sizes, Spec, Step, cache_of, named, one, said, step, sum_step
from .hand import Check, gap

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..cell import Cell
    from ..trace import Trace
    from .base import Weights


# ---------------------------------------------------------------------------------------------
# Embedding: each token's row of E.
# ---------------------------------------------------------------------------------------------


class EmbeddingCache(NamedTuple):
    """What ``embed`` keeps for its backward: the rows it looked up, and where."""

    ids: list[int]  # each token's row of E
    segments: tuple[int, ...]  # each token's row of T (its segment; all 0 when not given)
    start: int  # the first token's position: its row of P


def embed(stage: Stage, w: Weights, ids: list[int], tokens: tuple[str, ...], vocabulary: tuple[str, ...],
          m: ModelConfig, start: int = 0, segment_ids: tuple[int, ...] = ()) -> np.ndarray:  # fmt: skip
    """Look up each token's row of E (times √d_model when the config scales, as the paper §3.4).

    An encoder-only model (``m.sums_embeddings``, BERT) adds here, in BERT's order, each token's
    segment row of T (``segment_ids``, all 0 when not given) and its position's row: of P from
    row ``position_offset`` (RoBERTa starts at 2), or the sinusoids."""
    D = dims(m.d_model)
    E = stage.weight("E", w.take(stage, "E"), vocabulary, D)
    # math.sqrt gives a Python float, which keeps float32 arrays float32 (a NumPy float64 would not).
    x = E[ids] * math.sqrt(m.d_model) if m.scale_embeddings else E[ids]
    stage.cache = kept = EmbeddingCache(ids, segment_ids or (0,) * len(ids), start)
    if not m.sums_embeddings:
        return stage.out("output", x, tokens, D)
    x = stage.rec("token", x, tokens, D)
    if m.segments:
        T = stage.weight("T", w.take(stage, "T"), tuple(f"segment {k}" for k in range(m.segments)), D)
        x = x + stage.rec("segment", T[list(kept.segments)], tokens, D)
    rows = slice(m.position_offset + start, m.position_offset + start + len(ids))
    if m.positional_encoding == "learned":
        P = stage.weight("P", w.take(stage, "P"), _p_rows(m), D)
        position = stage.rec("position", P[rows], positions(tokens, start), D)
    else:
        table = F.positional_encoding(
            rows.stop, m.d_model, x.dtype, m.positional_encoding == "sinusoidal-halves"
        )
        position = stage.rec("position", table[rows], positions(tokens, start), D, CONSTANT)
    return stage.out("output", x + position, tokens, D)


def _p_rows(m: ModelConfig) -> tuple[str, ...]:
    """The labels of P's rows: the position each serves (``pos 0``), and, before RoBERTa's offset,
    the rows that no position reads (``row 0 (unread)``)."""
    o = m.position_offset
    return tuple(f"row {k} (unread)" if k < o else f"pos {k - o}" for k in range(m.max_positions))


def embed_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """Each row of E (and of T) gathers the gradients of the positions that looked it up; each
    position's row of P gets its own position's."""
    ids, segment_ids, start = cache_of(stage, EmbeddingCache)
    dE = np.zeros_like(p["E"])
    # np.add.at, not dE[ids] += …: a token used twice (the the) must add both gradients.
    np.add.at(dE, ids, d_out * (math.sqrt(m.d_model) if m.scale_embeddings else 1.0))
    params = {"E": dE}
    if "T" in p:
        params["T"] = np.zeros_like(p["T"])
        np.add.at(params["T"], list(segment_ids), d_out)
    if "P" in p:
        params["P"] = np.zeros_like(p["P"])
        first = m.position_offset + start
        params["P"][first : first + len(d_out)] = d_out
    shown = {"token": d_out, "segment": d_out, "position": d_out, "output": d_out, **params}
    return Grads({name: shown[name] for name in stage.matrices}, params)


def embed_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    ids, n = list(trace.ids(stage.id)), len(stage["output"])
    rows = stage["E"][ids] * (math.sqrt(m.d_model) if m.scale_embeddings else 1)
    what = "output equals the tokens' rows of E" + (" times √d_model" if m.scale_embeddings else "")
    if not m.sums_embeddings:
        return [Check(stage.id, what, gap(stage["output"], rows))]
    if "T" in stage:
        rows = rows + stage["T"][list(trace.segment_ids or (0,) * n)]
        what += ", plus each one's segment row of T"
    if "P" in stage:
        rows = rows + stage["P"][m.position_offset : m.position_offset + n]
        what += f", plus rows {m.position_offset}… of P"
    else:
        rows = rows + sinusoid_by_hand(n, m.d_model, m.positional_encoding == "sinusoidal-halves")
        what += ", plus the sinusoids recomputed by sin and cos"
    return [Check(stage.id, what, gap(stage["output"], rows))]


def explain_lookup(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    row = trace.ids(c.stage.id)[c.i]
    e = float(c.stage["E"][row, c.j])
    line = f"{c.name}[{c.i}, {c.j}] = E[{c.row!s} (row {row} of E), {c.j}] = {c.r(e)}"
    said = [f"The token {c.row!r} looks up its row of the embedding table E.", line]
    if not m.scale_embeddings:
        return said
    root = math.sqrt(m.d_model)
    dtype = c.stage["E"].dtype
    rounded = float(np.asarray(root, dtype=dtype))  # the multiplier as the model's dtype holds it (Gemma's)
    said[1] += f", times √d_model = {c.f(rounded)}: {c.r(c.value)}"
    if rounded != root:
        said.append(
            f"  (√{m.d_model} = {root:.10g} rounded to {dtype.name}, {rounded:.10g}: the model multiplies "
            f"in its own dtype, as Gemma's normalizer does)"
        )
    return said


def explain_segment(c: Cell, trace: Trace) -> list[str]:
    k = (trace.segment_ids or (0,) * len(c.stage["output"]))[c.i]
    return [
        f"The token {c.row!r} is in sentence {k} (segment {k}): it takes row {k} of the segment table T.",
        f"segment[{c.i}, {c.j}] = T[segment {k}, {c.j}] = {c.r(c.value)}"
        + ("   (one sentence: every token is in segment 0)" if not trace.segment_ids else ""),
    ]


def explain_position_row(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    if "P" not in c.stage:
        return explain_positional(c, trace)
    o = m.position_offset
    line = f"position[{c.i}, {c.j}] = P[{o + c.i}, {c.j}] = {c.r(c.value)}: position {c.i} reads row {o + c.i} of P"
    why = (
        f"  (rows 0…{o - 1} of P are never read by a sentence: RoBERTa numbers positions from "
        f"padding_idx + 1 = {o}, so that the padding token's row is its own)"
        if o
        else "  (a learned weight, trained like any other; no formula makes it)"
    )
    return [line, why]


def explain_embedding(c: Cell, trace: Trace) -> list[str]:
    """A cell of output: the row of E alone, or (encoder-only) the sum of the three rows."""
    if "token" not in c.stage:
        return explain_lookup(c, trace)
    parts = [
        (name, float(c.stage[name][c.i, c.j])) for name in ("token", "segment", "position") if name in c.stage
    ]
    terms = " + ".join(f"{name} {c.operand(v)}" for name, v in parts)
    return [
        "output = token + segment + position: the token's row of E, its sentence's of T, its position's",
        f"  output[{c.i}, {c.j}] = {terms} = {c.r(c.value)}",
    ]


def _embedding_formula(m: ModelConfig) -> Formula:
    row: list[Term | str] = [index("E", sym("token", "i"))]
    if m.scale_embeddings:
        row += ["·", sqrt("d_model")]
    tied = (
        []
        if not m.tie_embeddings
        else [note("(E is also the output layer's table, ", sym("W"), " = ", sym("E", sup="T"), ": tied)")]
        if m.decoder_only or m.encoder_only
        else [note("(E is the one table of both stacks and of the output layer: tied)")]
    )
    if not m.sums_embeddings:
        return formula(line(index("output", "i"), "=", *row), *tied)
    lines = [line(index("token", "i"), "=", *row)]
    if m.segments:
        lines.append(line(index("segment", "i"), "=", index("T", sym("segment", "i")), "    ",
                          word("(the sentence token i is in: 0 for the first)")))  # fmt: skip
    if m.positional_encoding == "learned" and m.position_offset:
        o = m.position_offset
        lines.append(line(index("position", "i"), "=", index("P", num(o), "+", "i"), "    ",
                          word(f"(RoBERTa: positions count from padding_idx + 1; rows 0…{o - 1} are never read)")))  # fmt: skip
    elif m.positional_encoding == "learned":
        lines.append(line(index("position", "i"), "=", index("P", "i")))
    else:
        lines.append(line(index("position", "i"), "=", word("the sinusoids of position i (§3.5)")))
    lines.append(line("output", "=", "token", *(["+", "segment"] if m.segments else []), "+", "position"))
    return formula(*lines, *tied)


def lookup_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step | None:
    """A cell of the token's row: looked up in E (none past the sentence's tokens)."""
    ids = trace.ids(stage.id)
    return step("lookup", one(named(stage, "E"), int(ids[i]), j)) if i < len(ids) else None


def embedding_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step | None:
    """A cell of output: the row of E, or (encoder-only) token + segment + position."""
    if stage.has("token"):
        return sum_step("token", "segment", "position")(stage, trace, name, i, j)
    return lookup_step(stage, trace, name, i, j)


def segment_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
    segment = (trace.segment_ids or (0,) * len(trace.ids(stage.id)))[i]
    return step("lookup", one(named(stage, "T"), segment, j))


def sinusoid_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step | None:
    """A sinusoid's cell (a learned P's row is a weight's, which no worksheet asks for)."""
    return step("sinusoid") if stage.matrices[name].role == CONSTANT else None


def _embedding_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    specs = {"E": Spec((sizes.vocab, m.d_model), "embedding")}
    if m.sums_embeddings and m.segments:
        specs["T"] = Spec((m.segments, m.d_model), "positions")  # BERT draws every table N(0, 0.02²)
    if m.sums_embeddings and m.positional_encoding == "learned":
        specs["P"] = Spec((m.max_positions, m.d_model), "positions")
    return specs


EMBEDDING = Kind(
    "embedding",
    "embedding",
    lambda m: (
        "Each token looks up its row of the embedding table E, a vector of d_model numbers"
        + (
            ", and adds its segment's row of T and its position's row: one vector per token, as BERT's "
            "embeddings sum them."
            if m.sums_embeddings and m.segments
            else ", and adds its position's row: one vector per token."
            if m.sums_embeddings
            else "."
        )
    ),
    _embedding_formula,
    embed_backward,
    embed_second,
    {
        "output": explain_embedding,
        "token": explain_lookup,
        "segment": explain_segment,
        "position": explain_position_row,
    },
    params=_embedding_params,
    steps={
        "output": embedding_step,
        "token": lookup_step,
        "segment": segment_step,
        "position": sinusoid_step,
    },
)


# ---------------------------------------------------------------------------------------------
# Positional encoding: a pattern that differs from position to position, added to each row.
# ---------------------------------------------------------------------------------------------


def add_positions(
    stage: Stage, w: Weights, x: np.ndarray, tokens: tuple[str, ...], m: ModelConfig, start: int = 0
) -> np.ndarray:
    """X + PE: fixed sinusoids (§3.5, interleaved or in halves), or rows of a learned P; the rows of
    positions ``start``, ``start + 1``, … (a cached generation step adds its one token's)."""
    D = dims(m.d_model)
    stage.input("X", x, tokens, D)
    rows = slice(start, start + len(tokens))
    if m.positional_encoding == "learned":
        P = stage.weight("P", w.take(stage, "P"), tuple(f"pos {k}" for k in range(m.max_positions)), D)
        pe = stage.rec("PE", P[rows], positions(tokens, start), D)
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        halves = m.positional_encoding == "sinusoidal-halves"
        table = F.positional_encoding(rows.stop, m.d_model, x.dtype, halves)[rows]
        pe = stage.rec("PE", table, positions(tokens, start), D, CONSTANT)
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return stage.out("output", x + pe, tokens, D)


def positions_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """output = X + PE passes its gradient to X unchanged, and to the rows of P that were used."""
    grads = {"X": d_out, "PE": d_out, "output": d_out}
    if "P" not in p:
        return Grads(grads, {})
    dP = np.zeros_like(p["P"])
    dP[: len(d_out)] = d_out
    return Grads({"X": d_out, "P": dP, "PE": d_out, "output": d_out}, {"P": dP})


def sinusoid_by_hand(n: int, d_model: int, halves: bool) -> np.ndarray:
    """The sinusoidal table, one cell at a time with ``math``."""

    def cell(pos: int, j: int) -> float:
        if halves:  # sines in the first ⌈d/2⌉ columns, the cosines of the same angles after them
            sines = (d_model + 1) // 2
            i, f = (j, math.sin) if j < sines else (j - sines, math.cos)
            return f(pos / 10000 ** (2 * i / d_model))
        return (math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / d_model))

    return np.array([[cell(pos, j) for j in range(d_model)] for pos in range(n)])


def positions_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    n = len(stage["X"])
    if m.positional_encoding == "learned":
        pe, what = stage["P"][:n], "PE equals the first rows of P; output equals X + PE"
    elif m.positional_encoding in ("sinusoidal", "sinusoidal-halves"):
        pe = sinusoid_by_hand(n, m.d_model, m.positional_encoding == "sinusoidal-halves")
        what = "PE recomputed by sin and cos; output equals X + PE"
    else:
        raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")
    return [Check(stage.id, what, max(gap(stage["PE"], pe), gap(stage["output"], stage["X"] + pe)))]


def _angle() -> list[Term | str]:
    """pos / 10000^(2i/d_model), the angle of pair i at position pos (§3.5)."""
    return [sym("pos"), "/", power(num(10000), frac([num(2), "i"], "d_model"))]


def _positions_formula(m: ModelConfig) -> Formula:
    pe, pos = sym("PE"), sym("pos")
    output = line("output", "=", "X", "+", pe)
    if m.positional_encoding == "learned":
        P = sym("P")
        return formula(line(pe, "=", word("the first rows of "), P, word(", one per position ("), P,
                            word(" is learned)")), output)  # fmt: skip
    sin, cos = call("sin", _angle()), call("cos", _angle())
    if m.positional_encoding == "sinusoidal-halves":
        return formula(
            line(index(pe, pos, ",", "i"), pad(12), "=", sin, "    ",
                 "(", "i", "<", frac("d_model", num(2)), word(": the sines first"), ")"),
            line(index(pe, pos, ",", frac("d_model", num(2)), "+", "i"), "=", cos, "   ",
                 word("(then the cosines)")),
            output,
        )  # fmt: skip
    if m.positional_encoding == "sinusoidal":
        return formula(
            line(index(pe, pos, ",", num(2), "i"), pad(4), "=", sin),
            line(index(pe, pos, ",", num(2), "i", "+", num(1)), "=", cos),
            output,
        )
    raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")


def _token_at(c: Cell) -> str:
    """The token at the cell's position (PE's rows are named "pos 2 · is")."""
    return c.stage.matrices["X"].rows[c.i] if "X" in c.stage else c.row


def explain_positional(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    d_model = m.d_model
    if m.positional_encoding == "learned":
        return [
            f"PE[{c.i}, {c.j}] = P[{c.i}, {c.j}] = {c.r(c.value)}: the token at position {c.i} ({c.row}) takes row {c.i}",
            "  of the learned position table P (a weight, trained like any other; no formula makes it).",
        ]
    if m.positional_encoding == "sinusoidal-halves":
        sines = (d_model + 1) // 2
        i, fn = (c.j, "sin") if c.j < sines else (c.j - sines, "cos")
        angle = c.i / 10000 ** (2 * i / d_model)
        return [
            f"PE[pos, {'i' if fn == 'sin' else 'd_model/2 + i'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"i = {i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({2 * i}/{d_model}) = {c.i} / {c.f(10000 ** (2 * i / d_model))} = {c.r(angle)}",
            f"  {fn}({c.f(angle)}) = {c.r(c.value)}",
            "  (the first half of the columns are sines, the second half the cosines of the same angles: Marian's layout)",
        ]
    if m.positional_encoding == "sinusoidal":
        two_i = c.j - c.j % 2
        angle = c.i / 10000 ** (two_i / d_model)
        fn = "sin" if c.j % 2 == 0 else "cos"
        return [
            f"PE[pos, {'2i' if c.j % 2 == 0 else '2i+1'}] = {fn}(pos / 10000^(2i/d_model)) with pos = {c.i} ({_token_at(c)}), "
            f"2i = {two_i}, d_model = {d_model}",
            f"  angle = {c.i} / 10000^({two_i}/{d_model}) = {c.i} / {c.f(10000 ** (two_i / d_model))} = {c.r(angle)}",
            f"  {fn}({c.f(angle)}) = {c.r(c.value)}",
            "  (even columns are sines, odd ones cosines; low columns turn fast with the position, high ones slowly)",
        ]
    raise ValueError(f"unknown positional_encoding {m.positional_encoding!r}")


def explain_shifted(c: Cell, trace: Trace) -> list[str]:
    x, pe = float(c.stage["X"][c.i, c.j]), float(c.stage["PE"][c.i, c.j])
    return [
        f"output = X + PE: {c.f(x)} + {c.operand(pe)} = {c.r(c.value)} (the token's vector, shifted by its position's pattern)"
    ]


def _positions_params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    return (
        {"P": Spec((m.max_positions, m.d_model), "positions")} if m.positional_encoding == "learned" else {}
    )


POSITIONAL_ENCODING = Kind(
    "positional-encoding",
    "positional encoding",
    said(
        "Attention by itself ignores word order, so a pattern different for every position is added "
        "to each token's vector: fixed sines and cosines, or a table learned like any weight."
    ),
    _positions_formula,
    positions_backward,
    positions_second,
    {"PE": explain_positional, "output": explain_shifted},
    params=_positions_params,
    steps={"PE": sinusoid_step, "output": sum_step("X", "PE")},
    tex={"PE": "PE"},
)
