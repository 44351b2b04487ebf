"""Multi-head attention, self, masked self and cross: everything about the three kinds."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import functional as F
from ..trace import ATTENTION, CONSTANT, MASK, Stage, dims, head_dims, matrix_name, positions
from .base import Arrays, Grads, Kind, Sizes, Spec
from .hand import Check, dot, gap, linear, mm, softmax_cell, softmax_rows

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ...views.explain import Cell
    from ..trace import Trace
    from ..weights import Weights

QKV = "QKV"


def columns(m: ModelConfig, which: str, head: int) -> slice:
    """Head ``head``'s block of d_k columns of W_QKV: the num_heads query heads' blocks come first,
    then the num_kv_heads key heads', then the value heads' (``which`` is "Q", "K" or "V")."""
    first = {"Q": 0, "K": m.num_heads, "V": m.num_heads + m.kv_heads}[which] + head - 1
    return slice(first * m.d_k, (first + 1) * m.d_k)


def rope(m: ModelConfig) -> F.RopeScaling:
    """The config's rotary frequencies, as ``functional.rotary`` takes them."""
    return F.RopeScaling(
        m.rope_theta, m.rope_scaling, m.rope_factor, m.rope_low_freq_factor,
        m.rope_high_freq_factor, m.rope_original_max_positions,
    )  # fmt: skip


def kv_head(m: ModelConfig, head: int) -> int:
    """The key/value head that query head ``head`` reads (from 1): each serves num_heads / num_kv_heads."""
    return (head - 1) // (m.num_heads // m.kv_heads) + 1


def readers(m: ModelConfig, group: int) -> list[int]:
    """The query heads that read key/value head ``group``."""
    share = m.num_heads // m.kv_heads
    return list(range((group - 1) * share + 1, group * share + 1))


def attend(stage: Stage, w: Weights, x: np.ndarray, q_tokens: tuple[str, ...], m: ModelConfig,
           memory: np.ndarray | None = None, kv_tokens: tuple[str, ...] = (),
           mask: np.ndarray | None = None, cache: Any = None) -> np.ndarray:  # fmt: skip
    """Multi-head attention with queries from x and keys/values from memory (x itself when None).

    Rows of every per-head matrix are the query tokens; columns of S, A are the key tokens. With a
    key/value ``cache`` (one layer's, ``generation.Cache.layer``) the keys and values of x join the
    cached ones and the queries attend over all of them; the cache notes what the step computed.
    """
    W_QKV, W_O = w.take(stage, "W_QKV"), w.take(stage, "W_O")
    b_QKV = w.take(stage, "b_QKV") if m.attention_bias else None  # True, or "qkv" (Qwen2)
    b_O = w.take(stage, "b_O") if m.attention_bias is True else None
    kv, kv_tokens = (x, q_tokens) if memory is None else (memory, kv_tokens)
    past = None if cache is None else cache.extend
    start = 0 if cache is None else cache.cache.rows
    # Rotary positions turn a self-attention's queries and keys by their positions; cross-attention's
    # keys are the encoder's, whose positions its own self-attention has already applied.
    rotation = (
        None if m.adds_positions or memory is not None else F.rotary(len(x), m.d_k, rope(m), x.dtype, start)
    )
    r = F.multi_head_attention(x, kv, W_QKV, W_O, m.num_heads, mask, b_QKV, b_O, past, rotation, m.kv_heads)
    if cache is not None:
        cache.note(r)
    if not stage.records:  # nothing is kept: skip the per-head views, made only to be shown
        return r.output
    # What the backward pass needs; not the heads' outputs, which concat already holds.
    stage.cache = r._replace(heads=r.heads._replace(output=None))
    # d0… are the model's d_model columns, k0… a head's d_k columns, h2.k1 a column of concat.
    D, Dk, Hk = dims(m.d_model), dims(m.d_k, "k"), head_dims(m.num_heads, m.d_k)
    stage.input("X", x, q_tokens, D)
    if memory is not None:
        stage.input("memory", memory, kv_tokens, D)
    if mask is not None:
        stage.rec("M", mask, q_tokens, kv_tokens, MASK)
    if r.rotation is not None:
        stage.rec("cos", r.rotation.cos, positions(q_tokens), Dk, CONSTANT)
        stage.rec("sin", r.rotation.sin, positions(q_tokens), Dk, CONSTANT)
    Q, K = r.projected if r.projected is not None else (r.Q, r.K)

    def block(which: str, head: int) -> None:  # head's block of d_k columns of W_Q, W_K or W_V
        cols = columns(m, which, head)
        stage.weight(f"W_{which}", W_QKV[:, cols], D, Dk, head=head, param="W_QKV")
        if b_QKV is not None:
            stage.weight(f"b_{which}", b_QKV[cols], (f"b_{which}{head}",), Dk, head=head, param="b_QKV")

    # Query head by query head; a key/value head where its first reader is (every head, ungrouped).
    for h in range(1, m.num_heads + 1):
        g = kv_head(m, h)
        first = h == readers(m, g)[0]
        for which, head in [("Q", h), *([("K", g), ("V", g)] if first else [])]:
            block(which, head)
        stage.rec("Q", Q[h - 1], q_tokens, Dk, head=h)
        if first:
            stage.rec("K", K[g - 1], kv_tokens, Dk, head=g)
            stage.rec("V", r.V[g - 1], kv_tokens, Dk, head=g)
        if r.rotation is not None:  # what the scores multiply: Q and K turned by their positions
            stage.rec("rot_Q", r.Q[h - 1], q_tokens, Dk, head=h)
            if first:
                stage.rec("rot_K", r.K[g - 1], kv_tokens, Dk, head=g)
        stage.rec("S", r.heads.scores[h - 1], q_tokens, kv_tokens, head=h)
        if r.heads.masked_scores is not None:
            stage.rec("S+M", r.heads.masked_scores[h - 1], q_tokens, kv_tokens, head=h)
        stage.rec("A", r.heads.weights[h - 1], q_tokens, kv_tokens, ATTENTION, head=h)
        # the same numbers as concat's block, kept once: in concat
        stage.rec("O", r.concat[:, (h - 1) * m.d_k : h * m.d_k], q_tokens, Dk, head=h)
    stage.rec("concat", r.concat, q_tokens, Hk)
    stage.weight("W_O", W_O, Hk, D)
    if b_O is not None:
        stage.weight("b_O", b_O, ("b_O",), D)
    return stage.out("output", r.output, q_tokens, D)


def attended(stage: Stage, base: str, head: int) -> np.ndarray:
    """The queries or keys (``base`` "Q" or "K") that head ``head``'s scores multiplied: the
    projections, or what a piece made of them inside the attention (the rotated ones, under rotary)."""
    rotated = f"rot_{base}"
    return stage.of(rotated, head) if stage.has(rotated, head) else stage.of(base, head)


def attention_backward(stage: Stage, d_out: np.ndarray, p: Arrays, m: ModelConfig) -> Grads:
    """dL/dX (and dL/d(memory) in cross-attention) and the gradients of W_QKV, W_O (and biases)."""
    x = stage["X"]
    kv = stage.get("memory", x)  # x itself, the same object, takes the self-attention path
    # stage.cache: the forward's intermediates, as it returned them
    gr = F.multi_head_attention_backward(d_out, x, kv, p["W_QKV"], p["W_O"], stage.cache)
    grads = {"X": gr.x_q if kv is not x else gr.x_q + gr.x_kv}
    if kv is not x:
        grads["memory"] = gr.x_kv
    if "M" in stage:
        grads["M"] = gr.S.sum(axis=0)  # S_h + M for every head: M collects each head's gradient
    per_head = {"Q": gr.Q, "K": gr.K, "V": gr.V, "S": gr.S, "S+M": gr.S, "A": gr.A, "O": gr.O,
                "rot_Q": gr.rot_Q, "rot_K": gr.rot_K}  # fmt: skip
    for constant in ("cos", "sin"):  # fixed numbers: nothing learns them, nothing is shown
        if constant in stage:
            grads[constant] = np.zeros_like(stage[constant])
    for name, matrix in stage.matrices.items():
        h = matrix.head
        if h is None:
            continue
        if matrix.param is not None:  # head h's block of W_QKV or b_QKV
            cols = columns(m, matrix.base[-1], h)
            grads[name] = gr.W_QKV[:, cols] if matrix.param == "W_QKV" else gr.b_QKV[None, cols]
        else:
            grads[name] = per_head[matrix.base][h - 1]
    grads |= {"concat": gr.concat, "W_O": gr.W_O, "b_O": gr.b_O[None], "output": d_out}
    params = {"W_QKV": gr.W_QKV, "W_O": gr.W_O, "b_QKV": gr.b_QKV, "b_O": gr.b_O}
    return Grads(
        {name: grads[name] for name in stage.matrices},  # in the stage's own order
        {name: g for name, g in params.items() if name in p},
    )


def attention_second(stage: Stage, trace: Trace, m: ModelConfig) -> list[Check]:
    """Each head recomputed from the stage's inputs and its own blocks of the weights, with einsum."""
    checks = []
    x = stage["X"]
    kv = stage.get("memory", x)
    heads = []
    mask = None
    if "M" in stage:
        n, window = len(x), m.sliding_window or len(x)
        mask = np.array([[0.0 if i - window < j <= i else -math.inf for j in range(n)] for i in range(n)])
        seen = "on and below the diagonal" if window >= n else f"in the band of the last {window} positions"
        checks.append(Check(stage.id, f"M is 0 {seen}, −∞ elsewhere", gap(stage["M"], mask)))
    rotated = "cos" in stage
    if rotated:
        cos, sin = rotary_by_hand(len(x), m)
        worst = max(gap(stage["cos"], cos), gap(stage["sin"], sin))
        scaled = "" if m.rope_scaling == "default" else f", scaled ({m.rope_scaling})"
        checks.append(
            Check(stage.id, f"cos and sin recomputed from pos / rope_theta^(2i/d_k){scaled}", worst)
        )
    for h in range(1, m.num_heads + 1):
        g = kv_head(m, h)  # h itself, unless query heads share their keys and values

        def bias(name: str, head: int) -> Any:
            return stage.of(f"b_{name}", head) if stage.has(f"b_{name}", head) else 0

        q = mm(x, stage.of("W_Q", h)) + bias("Q", h)
        k = mm(kv, stage.of("W_K", g)) + bias("K", g)
        v = mm(kv, stage.of("W_V", g)) + bias("V", g)
        shared = f" (key/value head {g}, shared)" if m.kv_heads < m.num_heads else ""
        if rotated:
            checks.append(Check(stage.id, f"head {h}: Q, K before the rotation recomputed{shared}",
                                max(gap(stage.of("Q", h), q), gap(stage.of("K", g), k))))  # fmt: skip
            q, k = rotate_by_hand(stage.of("Q", h), cos, sin), rotate_by_hand(stage.of("K", g), cos, sin)
        s = np.einsum("id,jd->ij", q, k) / math.sqrt(m.d_k)
        if mask is not None:
            s = s + mask
        a = softmax_rows(s)
        o = mm(a, v)
        heads.append(o)
        what = "rot_Q, rot_K (pair by pair), V, S, A and O" if rotated else "Q, K, V, S, A and O"
        checks.append(Check(stage.id, f"head {h}: {what} recomputed{shared}", max(
            gap(attended(stage, "Q", h), q), gap(attended(stage, "K", g), k), gap(stage.of("V", g), v),
            gap(stage.of("S+M" if mask is not None else "S", h), s), gap(stage.of("A", h), a),
            gap(stage.of("O", h), o),
        )))  # fmt: skip
    concat = np.concatenate(heads, axis=1)
    out = mm(concat, stage["W_O"]) + (stage.get("b_O", 0))
    checks.append(Check(stage.id, "concat sets the heads side by side; output = concat·W_O", max(
        gap(stage["concat"], concat), gap(stage["output"], out))))  # fmt: skip
    return checks


def frequency_by_hand(m: ModelConfig, i: int) -> tuple[float, str]:
    """θ_i of pair i with ``math``, and how it was scaled (the words of ``explain``)."""
    theta = m.rope_theta ** (-2 * i / m.d_k)
    if m.rope_scaling == "linear":
        return theta / m.rope_factor, f"divided by rope_factor {m.rope_factor:g} (linear scaling)"
    if m.rope_scaling == "llama3":
        wavelength, old = 2 * math.pi / theta, m.rope_original_max_positions
        low, high = old / m.rope_low_freq_factor, old / m.rope_high_freq_factor
        if wavelength > low:
            return theta / m.rope_factor, (
                f"divided by rope_factor {m.rope_factor:g}: its wavelength 2π/θ_i = {wavelength:.6g} "
                f"exceeds {low:g} positions (llama3)"
            )
        if wavelength < high:
            return (
                theta,
                f"kept: its wavelength 2π/θ_i = {wavelength:.6g} is under {high:g} positions (llama3)",
            )
        smooth = (old / wavelength - m.rope_low_freq_factor) / (
            m.rope_high_freq_factor - m.rope_low_freq_factor
        )
        return (1 - smooth) * theta / m.rope_factor + smooth * theta, (
            f"blended: wavelength {wavelength:.6g} is between {high:g} and {low:g} positions, so "
            f"(1 − s)·θ_i/{m.rope_factor:g} + s·θ_i with s = {smooth:.6g} (llama3)"
        )
    return theta, ""


def rotary_by_hand(n: int, m: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of pos·θ_i (``frequency_by_hand``), column i and i + d_k/2 alike, with ``math``."""
    half = m.d_k // 2
    thetas = [frequency_by_hand(m, i)[0] for i in range(half)]
    angles = [[pos * thetas[j % half] for j in range(m.d_k)] for pos in range(n)]
    return (np.array([[math.cos(a) for a in row] for row in angles]),
            np.array([[math.sin(a) for a in row] for row in angles]))  # fmt: skip


def rotate_by_hand(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Each pair (i, i + d_k/2) of each row turned, one cell at a time:
    x'_i = x_i·cos − x_{i+d/2}·sin, x'_{i+d/2} = x_{i+d/2}·cos + x_i·sin."""
    n, d = x.shape
    half = d // 2
    out = np.empty((n, d))
    for p in range(n):
        for j in range(d):
            partner, sign = (j + half, -1.0) if j < half else (j - half, 1.0)
            out[p, j] = x[p, j] * cos[p, j] + sign * x[p, partner] * sin[p, j]
    return out


# ---------------------------------------------------------------------------------------------
# A cell's arithmetic: ``c.matrix.head`` is the head the cell's matrix belongs to.
# ---------------------------------------------------------------------------------------------


def explain_projection(c: Cell, trace: Trace) -> list[str]:
    h, kind = c.matrix.head, c.matrix.base
    m = trace.config.model
    source = "memory" if kind in "KV" and "memory" in c.stage else "X"
    lines = linear(
        c, f"{c.name} = {source}·W_{kind}{h}: row {c.i} of {source} ({c.row}) times column {c.j} of W_{kind}{h}",
        c.stage[source][c.i], c.stage.of(f"W_{kind}", h)[:, c.j], f"b_{kind}{h}",
    )  # fmt: skip
    if kind in "KV" and m.kv_heads < m.num_heads:
        heads = ", ".join(map(str, readers(m, h)))
        rotated = (
            " (turned by their positions: rot_K" + str(h) + ")"
            if kind == "K" and c.stage.has("rot_K", h)
            else ""
        )
        lines.append(f"  (grouped-query attention: {m.kv_heads} key/value head{'s' if m.kv_heads > 1 else ''} "
                     f"for {m.num_heads} query heads; query heads {heads} all read {kind}{h}{rotated})")  # fmt: skip
    return lines


def explain_scores(c: Cell, trace: Trace) -> list[str]:
    h = c.matrix.head
    m = trace.config.model
    d_k, g = m.d_k, kv_head(m, h)
    rot = "rot_" if c.stage.has("rot_Q", h) else ""
    terms, total = dot(c, attended(c.stage, "Q", h)[c.i], attended(c.stage, "K", g)[c.j])
    shared = f" (query head {h} reads key head {g})" if g != h else ""
    return [
        f"S{h} = {rot}Q{h}·{rot}K{g}ᵀ / √d_k: how well query {c.i} ({c.row}) matches key {c.j} ({c.col}){shared}",
        f"  {rot}Q{h}[{c.i}]·{rot}K{g}[{c.j}] = {c.sum_of(terms)} = {c.f(total)}",
        f"  divided by √d_k = √{d_k} = {c.f(math.sqrt(d_k))}: {c.f(total)} / {c.f(math.sqrt(d_k))} = {c.f(c.value)}",
        "  (dividing by √d_k keeps the scores' spread the same whatever d_k is, so softmax does not saturate)",
    ]


def explain_table(c: Cell, trace: Trace) -> list[str]:
    m = trace.config.model
    half = m.d_k // 2
    i = c.j % half
    pos = c.i  # a traced pass starts at position 0
    theta, scaled = frequency_by_hand(m, i)
    angle = pos * theta
    base = m.rope_theta ** (2 * i / m.d_k)
    lines = [
        f"{c.name}[pos, j] = {c.name}(pos · θ_i), θ_i = rope_theta^(−2i/d_k), with pos = {pos}, j = {c.j}: "
        f"pair i = {i} (column j and column j {'+' if c.j < half else '−'} d_k/2 = {c.j + half if c.j < half else c.j - half} share the angle)",
    ]
    if scaled:
        lines.append(
            f"  θ_{i} = 1 / {m.rope_theta:g}^({2 * i}/{m.d_k}) = 1 / {c.f(base)}, {scaled}: θ_{i} = {theta:.6g}"
        )
        lines.append(f"  angle = {pos} · {theta:.6g} = {c.f(angle)}")
    else:
        lines.append(
            f"  angle = {pos} / {m.rope_theta:g}^({2 * i}/{m.d_k}) = {pos} / {c.f(base)} = {c.f(angle)}"
        )
    return [
        *lines,
        f"  {c.name}({c.f(angle)}) = {c.f(c.value)}",
        "  (low pairs turn fast with the position, high ones slowly; a score of two rotated vectors depends on "
        "their positions only through the difference: rotation by a and by b leaves the angle a − b)",
    ]


def explain_rotation(c: Cell, trace: Trace) -> list[str]:
    h, base = c.matrix.head, c.matrix.base[-1]  # rot_Q -> Q
    x = c.stage.of(base, h)
    half = x.shape[1] // 2
    first = c.j < half
    partner = c.j + half if first else c.j - half
    cos, sin = float(c.stage["cos"][c.i, c.j]), float(c.stage["sin"][c.i, c.j])
    a, b = float(x[c.i, c.j]), float(x[c.i, partner])
    sign, op = ("−", "−") if first else ("+", "+")
    return [
        f"{c.name} is {base}{h} with each pair of columns (j, j + d_k/2) turned by its position's angle "
        "(Hugging Face's Llama pairs column i with i + d_k/2, rotate_half; GPT-J pairs 2i with 2i+1):",
        f"  {c.name}[{c.i}, {c.j}] = {base}{h}[{c.i}, {c.j}]·cos {sign} {base}{h}[{c.i}, {partner}]·sin"
        f"  (row {c.i}, {c.row}; cos = cos[{c.i}, {c.j}], sin = sin[{c.i}, {c.j}])",
        f"  = {c.times(a, cos)} {op} {c.times(b, sin)} = {c.f(a * cos)} {op} {c._factor(b * sin)} = {c.f(c.value)}",
    ]


def explain_mask(c: Cell, trace: Trace) -> list[str]:
    window = trace.config.model.sliding_window
    if window is not None and c.j <= c.i - window:
        return [
            f"M[{c.i}, {c.j}] = −∞: column {c.j} ({c.col}) is {c.i - c.j} positions before row {c.i} ({c.row}), "
            f"outside the sliding window of {window} (each position sees itself and the {window - 1} before it).",
            "Added to the score it makes −∞, and softmax turns e^−∞ into a weight of exactly 0.",
        ]
    if c.j <= c.i:
        within = "" if window is None else f", within the sliding window of {window}"
        return [f"M[{c.i}, {c.j}] = 0: column {c.j} ({c.col}) is not after row {c.i} ({c.row}){within}, "
                "so it may be seen; adding 0 leaves the score as it is."]  # fmt: skip
    return [
        f"M[{c.i}, {c.j}] = −∞: column {c.j} ({c.col}) comes after row {c.i} ({c.row}), a word the decoder "
        "must not see yet. Added to the score it makes −∞, and softmax turns e^−∞ into a weight of exactly 0.",
    ]


def explain_masked_scores(c: Cell, trace: Trace) -> list[str]:
    h = c.matrix.head
    s, mask = float(c.stage.of("S", h)[c.i, c.j]), float(c.stage["M"][c.i, c.j])
    return [
        f"{c.name}[{c.i}, {c.j}] = S{h}[{c.i}, {c.j}] + M[{c.i}, {c.j}] = {c.f(s)} + {c._factor(mask)} = {c.f(c.value)}"
    ]


def explain_weights(c: Cell, trace: Trace) -> list[str]:
    h = c.matrix.head
    base = "S+M" if c.stage.has("S+M", h) else "S"
    return softmax_cell(c, matrix_name(base, h))


def explain_weighted_sum(c: Cell, trace: Trace) -> list[str]:
    h = c.matrix.head
    g = kv_head(trace.config.model, h)
    A, V = c.stage.of("A", h), c.stage.of("V", g)
    keys = c.stage.matrices[f"A{h}"].cols
    terms, _ = dot(c, A[c.i], V[:, c.j])
    return [
        f"O{h} = A{h}·V{g}: position {c.i} ({c.row}) takes its weights A{h}[{c.i}] over the value rows",
        "  weights: " + ", ".join(f"{k} {c.f(a)}" for k, a in zip(keys, A[c.i].tolist(), strict=True)),
        f"  O{h}[{c.i}, {c.j}] = Σ_k A{h}[{c.i}, k]·V{g}[k, {c.j}] = {c.sum_of(terms)} = {c.f(c.value)}",
    ]


def explain_concat(c: Cell, trace: Trace) -> list[str]:
    d_k = trace.config.model.d_k
    h, k = c.j // d_k + 1, c.j % d_k
    return [
        f"concat puts the heads side by side, d_k = {d_k} columns each: column {c.j} is column {k} of head {h}",
        f"  concat[{c.i}, {c.j}] = O{h}[{c.i}, {k}] = {c.f(float(c.stage.of('O', h)[c.i, k]))}",
    ]


def explain_output(c: Cell, trace: Trace) -> list[str]:
    return linear(
        c, f"output = concat·W_O: the heads mixed back into d_model dimensions; row {c.i} of concat times column {c.j} of W_O",
        c.stage["concat"][c.i], c.stage["W_O"][:, c.j], "b_O",
    )  # fmt: skip


def explain_memory(c: Cell, trace: Trace) -> list[str]:
    source = c.stage.sources.get(c.name)
    return [
        f"memory is the encoder's output (from {source}), the same for every decoder layer: it gives the keys and values."
    ]


EXPLAIN = {
    "Q": explain_projection, "K": explain_projection, "V": explain_projection, "S": explain_scores,
    "M": explain_mask, "S+M": explain_masked_scores, "A": explain_weights, "O": explain_weighted_sum,
    "concat": explain_concat, "output": explain_output, "memory": explain_memory,
    "cos": explain_table, "sin": explain_table, "rot_Q": explain_rotation, "rot_K": explain_rotation,
}  # fmt: skip

GROUPS = {
    **dict.fromkeys(("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"), "weights"),
    **dict.fromkeys(("Q", "K", "V"), "projections"),
    **dict.fromkeys(("rot_Q", "rot_K"), "rotated"),
    **dict.fromkeys(("S", "S+M", "A", "O"), "attention"),
}

TEX = {
    "W_Q": "W^{{Q}}_{{{h}}}", "W_K": "W^{{K}}_{{{h}}}", "W_V": "W^{{V}}_{{{h}}}",
    "b_Q": "b^{{Q}}_{{{h}}}", "b_K": "b^{{K}}_{{{h}}}", "b_V": "b^{{V}}_{{{h}}}",
    "S+M": "S_{{{h}}}+M", "W_O": "W^{{O}}", "b_O": "b^{{O}}", "M": "M",
    "rot_Q": r"\tilde{{Q}}_{{{h}}}", "rot_K": r"\tilde{{K}}_{{{h}}}", "cos": r"\cos", "sin": r"\sin",
}  # fmt: skip


def _params(m: ModelConfig, sizes: Sizes) -> dict[str, Spec]:
    d, q, kv = m.d_model, m.num_heads * m.d_k, m.kv_heads * m.d_k
    specs = {"W_QKV": Spec((d, q + 2 * kv), "xavier-qkv", blocks=(q, kv, kv)), "W_O": Spec((q, d), "xavier")}
    if m.attention_bias:
        specs["b_QKV"] = Spec((q + 2 * kv,), "zeros")
    if m.attention_bias is True:  # "qkv": Qwen2's projections have biases, its W_O none
        specs["b_O"] = Spec((d,), "zeros")
    return specs


def _rotated(m: ModelConfig, kv: str) -> bool:
    """Whether this kind turns its queries and keys (rotary positions, in self-attention)."""
    return not m.adds_positions and kv == "X"


def _latex(kv: str, s: str) -> Callable[[ModelConfig], list[str]]:
    def latex(m: ModelConfig) -> list[str]:
        b = (lambda x: f" + b^{x}") if m.attention_bias else (lambda x: "")
        b_O = " + b^O" if m.attention_bias is True else ""
        g = "g" if m.kv_heads < m.num_heads else "h"
        rotation = [
            rf"\tilde{{Q}}_h &= Q_h \odot \cos + \operatorname{{rotate\_half}}(Q_h) \odot \sin, \quad "
            rf"\tilde{{K}}_{g} = K_{g} \odot \cos + \operatorname{{rotate\_half}}(K_{g}) \odot \sin",
            r"\cos_{pos, i} &= \cos(pos\,\theta_i), \quad \theta_i = \theta^{-2i/d_k}, "
            r"\quad \operatorname{rotate\_half}(x_1, x_2) = (-x_2, x_1)",
            rf"S_h &= \tilde{{Q}}_h \tilde{{K}}_{g}^{{\top}} / \sqrt{{d_k}}",
        ]
        grouped = (
            [rf"g &= \lceil h / {m.num_heads // m.kv_heads} \rceil \quad \text{{(grouped-query attention: "
             rf"{m.kv_heads} key/value heads for {m.num_heads} query heads)}}"]
            if g == "g" else []
        )  # fmt: skip
        return [
            rf"Q_h &= X\,W^Q_h{b('Q_h')}, \quad K_{g} = {kv}\,W^K_{g}{b('K_' + g)}, "
            rf"\quad V_{g} = {kv}\,W^V_{g}{b('V_' + g)} \qquad (h = 1, \ldots, {m.num_heads})",
            *grouped,
            *(rotation if _rotated(m, kv) else [rf"S_h &= Q_h K_{g}^{{\top}} / \sqrt{{d_k}}"]),
            rf"A_h &= \operatorname{{softmax}}({s}) \quad \text{{(row-wise)}}",
            rf"O_h &= A_h V_{g}",
            rf"\mathrm{{output}} &= {_heads_side_by_side(m.num_heads)}\, W^O{b_O}",
        ]

    return latex


def _heads_side_by_side(h: int) -> str:
    """The heads' outputs set side by side, in LaTeX: [O_1\\; O_2] for two, [O_1\\; O_2\\; O_3] for
    three, [O_1 \\cdots O_h] for more (a "⋯" only where heads are left out)."""
    if h <= 3:
        return "[" + r"\; ".join(f"O_{{{k}}}" for k in range(1, h + 1)) + "]"
    return rf"[O_1 \cdots O_{{{h}}}]"


def _formula(kv: str, s: str) -> Callable[[ModelConfig], str]:
    def formula(m: ModelConfig) -> str:
        b = (lambda name: f" + b_{name}") if m.attention_bias else (lambda name: "")
        b_O = " + b_O" if m.attention_bias is True else ""
        if m.kv_heads < m.num_heads:
            g = "g"
            heads = (
                "\n    (h = 1 … num_heads; g = 1 … num_kv_heads: grouped-query attention,\n"
                f"    query head h reads key/value head g = ⌈h / {m.num_heads // m.kv_heads}⌉)\n"
            )
        else:
            g, heads = "h", "    (h = 1 … num_heads)\n"
        return (
            f"Q_h = X·W_Qh{b('Qh')},  K_{g} = {kv}·W_K{g}{b('K' + g)},  V_{g} = {kv}·W_V{g}{b('V' + g)}"
            + heads
            + (
                f"rot_Q_h = Q_h ⊙ cos + rotate_half(Q_h) ⊙ sin,  rot_K_{g} likewise\n"
                "    (rotary: each pair of columns (i, i + d_k/2) turned by the angle pos·θ_i,\n"
                f"    θ_i = rope_theta^(−2i/d_k){_scaled(m)}; rotate_half(x₁, x₂) = (−x₂, x₁))\n"
                f"S_h = rot_Q_h·rot_K_{g}ᵀ / √d_k\n"
                if _rotated(m, kv)
                else f"S_h = Q_h·K_{g}ᵀ / √d_k\n"
            )
            + f"A_h = softmax({s})    (row-wise)\n"
            f"O_h = A_h·V_{g}\n"
            f"output = concat(O_1, …, O_num_heads)·W_O{b_O}"
        )

    return formula


def _scaled(m: ModelConfig) -> str:
    """How θ_i is stretched past the trained length, in the formula's words ("" for none)."""
    if m.rope_scaling == "linear":
        return f", then / rope_factor {m.rope_factor:g}"
    if m.rope_scaling == "llama3":
        return f", the slow pairs' then / {m.rope_factor:g} (llama3)"
    return ""


def _explanation(text: str, kv: str, masked: bool) -> Callable[[ModelConfig], str]:
    def explanation(m: ModelConfig) -> str:
        said = text
        if m.encoder_only:
            said += (
                " No mask: every token sees every token, those after it too, so a blank is read "
                "from both sides (BERT; a decoder's masked attention sees only the past)."
            )
        if masked and m.sliding_window is not None:
            w = m.sliding_window
            said += (
                f" With a sliding window of {w} (Mistral), M is −∞ also more than {w - 1} positions back: "
                f"each position sees itself and the {w - 1} before it (a band, when the text is longer "
                "than the window)."
            )
        if _rotated(m, kv):
            said += (
                " Positions enter here (rotary): each head's queries and keys are turned by an angle "
                "that grows with their position, so a score depends on how far apart two tokens are."
            )
        return said

    return explanation


def _kind(id: str, title: str, explanation: str, kv: str, kv_tex: str, s: str, article: str = "") -> Kind:
    return Kind(
        id, title, _explanation(explanation, kv, id == "masked-attention"), _formula(kv, s), _latex(kv_tex, s), attention_backward,
        attention_second, EXPLAIN, params=_params, groups=GROUPS, tex=TEX, article=article,
    )  # fmt: skip


SELF_ATTENTION = _kind(
    "self-attention",
    "multi-head self-attention",
    "Every token scores every token (query against key), turns the scores into weights with "
    "softmax and takes the weighted mix of their values; each head does this in its own "
    "d_k-dimensional subspace.",
    "X", "X", "S_h",
)  # fmt: skip
MASKED = (
    "Self-attention where the mask M puts −∞ above the diagonal, so no position can look at "
    "a later one: softmax turns −∞ into a weight of exactly 0."
)
MASKED_ATTENTION = _kind("masked-attention", "masked multi-head self-attention", MASKED, "X", "X", "S_h + M")
CROSS_ATTENTION = _kind(
    "cross-attention",
    "multi-head cross-attention",
    "The decoder's tokens ask the questions (queries from X) and the encoder output answers "
    "(keys and values from memory): this is how the source sentence reaches the decoder.",
    "memory", r"\mathrm{memory}", "S_h",
    "(The article says it the other way round; that cannot work when the sentences differ in length.)",
)  # fmt: skip
