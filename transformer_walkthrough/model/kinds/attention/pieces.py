"""The pieces that make and turn the queries and keys (project, qk-norm, rotate), the scores that
multiply them, and the recipe: ``PIECES`` in computing order, whose turning pieces name the queries
and keys each later step reads (``attended_name``). The pieces after the scores are in ``mixing``."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ... import formula as Fm
from ... import functional as F
from ...architecture import layer_of
from ...formula import Line, Note, ceil, line, note, sqrt, sym
from ...trace import CONSTANT, Stage, dims, head_dims, matrix_name, positions
from ..base import Spec, Step, StepOf, col, named, one, row, step
from ..hand import (
    Check,
    dot,
    frequency_by_hand,
    gap,
    linear,
    mm,
    rms_norm_by_hand,
    rotary_by_hand,
    rotate_by_hand,
)
from ..norms import applied, norm_of

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
    columns,
    heads_letter,
    kv_head,
    readers,
    rope,
)
from .mixing import Concat, Mask, ProjectOut, Softcap, Softmax, Weigh
from .relative import RelativeBias

# ---------------------------------------------------------------------------------------------
# project: Q_h = X·W_Qh (+ b), K_g = memory·W_Kg, V_g = memory·W_Vg
# ---------------------------------------------------------------------------------------------


class Project(Piece):
    """The projections to heads: one product [W_Q | W_K | W_V] in self-attention, split into heads."""

    name = "project"
    groups: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"), "weights"),
        **dict.fromkeys(("Q", "K", "V"), "projections"),
    }
    tex: ClassVar[Mapping[str, str]] = {
        "W_Q": "W^{{Q}}_{{{h}}}", "W_K": "W^{{K}}_{{{h}}}", "W_V": "W^{{V}}_{{{h}}}",
        "b_Q": "b^{{Q}}_{{{h}}}", "b_K": "b^{{K}}_{{{h}}}", "b_V": "b^{{V}}_{{{h}}}",
    }  # fmt: skip

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        d, q, kv = m.d_model, m.num_heads * m.d_k, m.kv_heads * m.d_k
        specs = {"W_QKV": Spec((d, q + 2 * kv), "xavier-qkv", blocks=(q, kv, kv))}
        if m.attention_bias:
            specs["b_QKV"] = Spec((q + 2 * kv,), "zeros")
        return specs

    def forward(self, f: Flow) -> None:
        m, W, b = f.m, f.p["W_QKV"], f.p.get("b_QKV")
        q_width, kv_width = m.num_heads * m.d_k, m.kv_heads * m.d_k
        if f.self_attention:  # queries, keys and values from one product (nanoGPT's c_attn)
            QKV = F.linear(f.x, W, b)
            Q, K, V = QKV[:, :q_width], QKV[:, q_width : q_width + kv_width], QKV[:, q_width + kv_width :]
            f.K, f.V = F.split_heads(K, m.kv_heads), F.split_heads(V, m.kv_heads)
        else:  # cross-attention: queries from x, keys and values from memory (once, with a cache)
            Q = F.linear(f.x, W[:, :q_width], None if b is None else b[:q_width])
            project = functools.partial(self.memory_keys, f)
            f.K, f.V = project() if f.cache is None else f.cache.keys_values(project)
        f.Q = F.split_heads(Q, m.num_heads)
        f.made[""] = (f.Q, f.K)

    @staticmethod
    def memory_keys(f: Flow) -> tuple[np.ndarray, np.ndarray]:
        """Cross-attention's keys and values, memory·W_K and memory·W_V, split into heads."""
        m, W, b = f.m, f.p["W_QKV"], f.p.get("b_QKV")
        q_width, kv_width = m.num_heads * m.d_k, m.kv_heads * m.d_k
        KV = F.linear(f.kv, W[:, q_width:], None if b is None else b[q_width:])
        return F.split_heads(KV[:, :kv_width], m.kv_heads), F.split_heads(KV[:, kv_width:], m.kv_heads)

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        m, W, b = f.m, f.p["W_QKV"], f.p.get("b_QKV")
        D, Dk = dims(m.d_model), dims(m.d_k, "k")
        for which, head in [("Q", h), *([("K", g), ("V", g)] if first else [])]:
            cols = columns(m, which, head)
            stage.weight(f"W_{which}", W[:, cols], D, Dk, head=head, param="W_QKV")
            if b is not None:
                stage.weight(f"b_{which}", b[cols], (f"b_{which}{head}",), Dk, head=head, param="b_QKV")
        Q, K = f.made[""]
        stage.rec("Q", Q[h - 1], q, Dk, head=h)
        if first:
            stage.rec("K", K[g - 1], kv, Dk, head=g)
            stage.rec("V", f.V[g - 1], kv, Dk, head=g)

    def backward(self, f: Flow, d: Back) -> None:
        m = f.m
        q_width = m.num_heads * m.d_k
        d.per_head |= {"Q": d.Q, "K": d.K, "V": d.V}
        dq, dk, dv = F.merge_heads(d.Q), F.merge_heads(d.K), F.merge_heads(d.V)
        W = f.p["W_QKV"]
        d.x, dW_Q, db_Q = F.linear_backward(dq, f.x, W[:, :q_width])
        d_kv, dW_KV, db_KV = F.linear_backward(np.hstack([dk, dv]), f.kv, W[:, q_width:])
        if f.self_attention:
            d.x = d.x + d_kv
        else:
            d.kv = d_kv
        d.params["W_QKV"] = np.hstack([dW_Q, dW_KV])
        if "b_QKV" in f.p:
            d.params["b_QKV"] = np.concatenate([db_Q, db_KV])

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        x = stage["X"]
        kv = stage.get("memory", x)

        def bias(name: str, head: int) -> Any:
            return stage.of(f"b_{name}", head) if stage.has(f"b_{name}", head) else 0

        b.q = mm(x, stage.of("W_Q", b.h)) + bias("Q", b.h)
        b.k = mm(kv, stage.of("W_K", b.g)) + bias("K", b.g)
        b.v = mm(kv, stage.of("W_V", b.g)) + bias("V", b.g)
        b.checked += [("Q", gap(stage.of("Q", b.h), b.q)), ("K", gap(stage.of("K", b.g), b.k)),
                      ("V", gap(stage.of("V", b.g), b.v))]  # fmt: skip

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        g, kv = heads_letter(m), at.kv

        def plus(name: str, head: str) -> list[Fm.Term | str]:
            return ["+", sym(f"b_{name}", head)] if m.attention_bias else []

        heads = (
            [note("(h = 1 … num_heads; g = 1 … num_kv_heads: grouped-query attention,"),
             note("query head h reads key/value head ", sym("g"), " = ", ceil("h", "/", Fm.Num(str(m.num_heads // m.kv_heads))), ")")]
            if g == "g" else [note("(h = 1 … num_heads)", beside=True)]
        )  # fmt: skip
        return [
            line(sym("Q", "h"), "=", "X", "·", sym("W_Q", "h"), *plus("Q", "h"), ",  ",
                 sym("K", g), "=", kv, "·", sym("W_K", g), *plus("K", g), ",  ",
                 sym("V", g), "=", kv, "·", sym("W_V", g), *plus("V", g)),
            *heads,
        ]  # fmt: skip

    @staticmethod
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
            final = attended_name(c.stage, "K", h)
            turned = f" (turned: {matrix_name(final, h)})" if kind == "K" and final != "K" else ""
            lines.append(f"  (grouped-query attention: {m.kv_heads} key/value head{'s' if m.kv_heads > 1 else ''} "
                         f"for {m.num_heads} query heads; query heads {heads} all read {kind}{h}{turned})")  # fmt: skip
        return lines

    explain: ClassVar[Mapping[str, Explainer]] = dict.fromkeys("QKV", explain_projection)

    @staticmethod
    def projection_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        m = stage.matrices[name]
        source = "X" if m.base == "Q" else named(stage, "memory") or "X"
        W, b = named(stage, f"W_{m.base}", m.head), named(stage, f"b_{m.base}", m.head)
        return step("dot", row(stage, source, i), col(stage, W, j), one(b, 0, j))

    steps: ClassVar[Mapping[str, StepOf]] = dict.fromkeys("QKV", projection_step)


# ---------------------------------------------------------------------------------------------
# qk-norm: norm_Q_h = gamma_Q ⊙ Q_h / √(mean(Q_h²) + eps), likewise K (Qwen3, Gemma 3, OLMoE);
# or over the whole projection, every head's columns at once (OLMo 2)
# ---------------------------------------------------------------------------------------------


class QKNorm(Piece):
    """An RMSNorm of the queries and of the keys, each with its own gamma, after the projection and
    before the rotation; the cached generation keeps the normed (and rotated) keys.

    ``head`` (Qwen3, Gemma 3): over each head's d_k columns, one gamma of d_k shared by the heads.
    ``whole`` (OLMo 2, OLMoE): over the whole projection before it is split into heads, num_heads·d_k
    columns for the queries and num_kv_heads·d_k for the keys, one gamma entry per column; each
    head's ``norm_Q_h`` is its block of d_k columns of that."""

    name, turns = "qk-norm", "norm"
    groups: ClassVar[Mapping[str, str]] = dict.fromkeys(("norm_Q", "norm_K"), "normed")
    tex: ClassVar[Mapping[str, str]] = {
        "norm_Q": r"\hat{{Q}}_{{{h}}}", "norm_K": r"\hat{{K}}_{{{h}}}", "gamma_Q": r"\gamma^{{Q}}", "gamma_K": r"\gamma^{{K}}",
    }  # fmt: skip

    def on(self, m: ModelConfig, at: At) -> bool:
        return m.qk_norm in ("head", "whole")

    def said(self, m: ModelConfig, at: At) -> str:
        if m.qk_norm == "whole":
            return (
                " The queries and keys are normalised first, each over the whole projection (QK-norm "
                "as OLMo 2: one RMSNorm over every head's columns at once, before the split into heads, "
                "with gammas of their own), which keeps the scores from growing with the weights."
            )
        return (
            " Each head's queries and keys are normalised first (QK-norm: an RMSNorm over the head's "
            "d_k columns, with gammas of their own), which keeps the scores from growing with the weights."
        )

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        init = "zeros" if norm_of(m).offset else "ones"  # Gemma's (1 + gamma): zeros scale by 1
        if m.qk_norm == "whole":
            return {
                "gamma_Q": Spec((m.num_heads * m.d_k,), init),
                "gamma_K": Spec((m.kv_heads * m.d_k,), init),
            }
        return {"gamma_Q": Spec((m.d_k,), init), "gamma_K": Spec((m.d_k,), init)}

    def forward(self, f: Flow) -> None:
        f.kept[self.name] = (f.Q, f.K)
        f.Q, f.K = (
            _qk_norm(f.m, x, _weight(f.m, f.p[gamma])) for x, gamma in ((f.Q, "gamma_Q"), (f.K, "gamma_K"))
        )
        f.made["norm_"] = (f.Q, f.K)

    def record_before(self, stage: Stage, f: Flow, q: Labels, kv: Labels) -> None:
        m = f.m
        whole = m.qk_norm == "whole"
        stage.weight(
            "gamma_Q",
            f.p["gamma_Q"],
            ("gamma_Q",),
            head_dims(m.num_heads, m.d_k) if whole else dims(m.d_k, "k"),
        )
        stage.weight(
            "gamma_K",
            f.p["gamma_K"],
            ("gamma_K",),
            head_dims(m.kv_heads, m.d_k) if whole else dims(m.d_k, "k"),
        )

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        Dk, (Q, K) = dims(f.m.d_k, "k"), f.made["norm_"]
        stage.rec("norm_Q", Q[h - 1], q, Dk, head=h)
        if first:
            stage.rec("norm_K", K[g - 1], kv, Dk, head=g)

    def backward(self, f: Flow, d: Back) -> None:
        Q, K = f.kept[self.name]
        d.per_head |= {"norm_Q": d.Q, "norm_K": d.K}
        eps = f.m.layer_norm_eps
        gamma_Q, gamma_K = _weight(f.m, f.p["gamma_Q"]), _weight(f.m, f.p["gamma_K"])
        if f.m.qk_norm == "whole":  # the heads side by side, normed as one row, split again
            dQ, d.params["gamma_Q"] = F.rms_norm_backward(F.merge_heads(d.Q), F.merge_heads(Q), gamma_Q, eps)
            dK, d.params["gamma_K"] = F.rms_norm_backward(F.merge_heads(d.K), F.merge_heads(K), gamma_K, eps)
            d.Q, d.K = F.split_heads(dQ, Q.shape[0]), F.split_heads(dK, K.shape[0])
            return
        d.Q, d.params["gamma_Q"] = F.rms_norm_backward(d.Q, Q, gamma_Q, eps)
        d.K, d.params["gamma_K"] = F.rms_norm_backward(d.K, K, gamma_K, eps)

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        if m.qk_norm == "whole":  # every head's projection, side by side, normed as one row
            heads = {"Q": range(1, m.num_heads + 1), "K": range(1, m.kv_heads + 1)}
            normed = {
                letter: np.array(rms_norm_by_hand(np.hstack([stage.of(letter, k) for k in heads[letter]]), m.layer_norm_eps))
                * _weight(m, stage[f"gamma_{letter}"][0])
                for letter in "QK"
            }  # fmt: skip
            b.q = normed["Q"][:, (b.h - 1) * m.d_k : b.h * m.d_k]
            b.k = normed["K"][:, (b.g - 1) * m.d_k : b.g * m.d_k]
        else:
            b.q = np.array(rms_norm_by_hand(b.q, m.layer_norm_eps)) * _weight(m, stage["gamma_Q"][0])
            b.k = np.array(rms_norm_by_hand(b.k, m.layer_norm_eps)) * _weight(m, stage["gamma_K"][0])
        b.checked += [
            ("norm_Q", gap(stage.of("norm_Q", b.h), b.q)),
            ("norm_K", gap(stage.of("norm_K", b.g), b.k)),
        ]

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        g = heads_letter(m)
        # The weight as it multiplies: gamma, or under Gemma's RMSNorm 1 + gamma (gamma stored as the offset).
        plus_one = bool(norm_of(m).offset)

        def weight(gamma: str) -> list[Fm.Term | str]:
            return ["(", Fm.num(1), "+", sym(gamma), ")"] if plus_one else [sym(gamma)]

        offset = (
            [note("(", sym("gamma_Q"), " and ", sym("gamma_K"), " are stored as the offsets from 1 of the "
                  "scales applied, so zeros scale by 1: Gemma's RMSNorm)")]
            if plus_one else []
        )  # fmt: skip
        if m.qk_norm == "whole":
            return [
                line(sym("norm_Q"), "=", *weight("gamma_Q"), "⊙", sym("Q"), "/", sqrt(Fm.call("mean", [sym("Q", "", "2")]), "+", "eps"), ",  ",
                     sym("norm_K"), "=", *weight("gamma_K"), "⊙", sym("K"), "/", sqrt(Fm.call("mean", [sym("K", "", "2")]), "+", "eps")),
                note("(QK-norm over the whole projection, OLMo 2: Q = concat(", sym("Q", 1), " … ", sym("Q", "h"),
                     "), every head's columns, normed as one row before the split; ", sym("norm_Q", "h"), " is head h's d_k columns of it)"),
                *offset,
            ]  # fmt: skip
        return [
            line(sym("norm_Q", "h"), "=", *weight("gamma_Q"), "⊙", sym("Q", "h"), "/", sqrt(Fm.call("mean", [sym("Q", "h", "2")]), "+", "eps"), ",  ",
                 sym("norm_K", g), "=", *weight("gamma_K"), "⊙", sym("K", g), "/", sqrt(Fm.call("mean", [sym("K", g, "2")]), "+", "eps")),
            note("(QK-norm: an RMSNorm of each row of each head's d_k columns; mean over the d_k columns)"),
            *offset,
        ]  # fmt: skip

    @staticmethod
    def explain_normed(c: Cell, trace: Trace) -> list[str]:
        h, letter = c.matrix.head, c.matrix.base[-1]  # norm_Q -> Q
        m = trace.config.model
        whole = m.qk_norm == "whole"
        heads = _normed_heads(m, letter, h)
        row_ = [v for k in heads for v in c.stage.of(letter, k)[c.i].tolist()]
        at = (h - 1) * m.d_k + c.j if whole else c.j  # the cell's column in the normed row
        d, eps = len(row_), m.layer_norm_eps
        mean_square = math.fsum(v * v for v in row_) / d
        root = math.sqrt(mean_square + eps)
        gamma = float(c.stage[f"gamma_{letter}"][0, at])
        x = f"{letter}{h}"
        over = (
            f"concat({', '.join(f'{letter}{k}' for k in heads)})"
            if whole and len(heads) > 1 else x
        )  # fmt: skip
        said = (
            f"(QK-norm over the whole projection, OLMo 2: one RMSNorm over every head's columns, {d} numbers, "
            f"before the split into heads; {c.name} is columns {at - c.j}…{at - c.j + m.d_k - 1} of it)"
            if whole
            else "(QK-norm: an RMSNorm over the head's d_k columns, before the rotation)"
        )
        return [
            f"{c.name} is {x} with each row divided by the root mean square of {over}'s row, then scaled by "
            f"{'1 + ' if norm_of(m).offset else ''}gamma_{letter} {said}",
            f"  mean({over}[{c.i}]²) = ({c.sum_of([f'{c.operand(v)}²' for v in row_])}) / {d} = {c.r(mean_square)}",
            f"  √(mean + eps) = √({c.f(mean_square)} + {eps:g}) = {c.r(root)}",
            f"  {x}[{c.i}, {c.j}] / √(mean + eps) = {c.f(row_[at])} / {c.f(root)} = {c.r(row_[at] / root)}",
            f"  × (1 + gamma_{letter}[{at}]) = (1 + {c.operand(gamma)}) = {c.r(1 + gamma)}, gamma as stored plus 1 "
            f"(Gemma's RMSNorm): {c.r(c.value)}"
            if norm_of(m).offset
            else f"  × gamma_{letter}[{at}] {c.f(gamma)} = {c.r(c.value)}",
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {"norm_Q": explain_normed, "norm_K": explain_normed}

    @staticmethod
    def normed_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        m, cell = trace.config.model, stage.matrices[name]
        letter = cell.base[-1]
        at = (cell.head - 1) * m.d_k + j if m.qk_norm == "whole" else j
        rows = (row(stage, named(stage, letter, k), i) for k in _normed_heads(m, letter, cell.head))
        return step("norm", *rows, one(f"gamma_{letter}", 0, at))

    steps: ClassVar[Mapping[str, StepOf]] = {"norm_Q": normed_step, "norm_K": normed_step}


def _qk_norm(m: ModelConfig, x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """QK-norm of the queries or keys x, (heads, n, d_k): each head's rows, or (``whole``) every
    head's columns side by side as one row."""
    if m.qk_norm == "whole":
        return F.split_heads(F.rms_norm(F.merge_heads(x), gamma, m.layer_norm_eps), x.shape[0])
    return F.rms_norm(x, gamma, m.layer_norm_eps)


def _weight(m: ModelConfig, gamma: np.ndarray) -> np.ndarray:
    """QK-norm's weight as applied: gamma, or 1 + gamma under Gemma's RMSNorm (``norm: rmsnorm-plus-one``,
    whose every RMSNorm stores its weight as the offset from 1)."""
    return applied(norm_of(m), gamma)


def _normed_heads(m: ModelConfig, letter: str, head: int) -> list[int]:
    """The heads whose columns one row of QK-norm spans: head alone, or (``whole``) every head."""
    if m.qk_norm != "whole":
        return [head]
    return list(range(1, (m.num_heads if letter == "Q" else m.kv_heads) + 1))


# ---------------------------------------------------------------------------------------------
# rotate: rot_Q_h = Q_h ⊙ cos + rotate_half(Q_h) ⊙ sin, likewise K (rotary positions)
# ---------------------------------------------------------------------------------------------


class Rotate(Piece):
    """Rotary positions: each pair of a head's columns (i, i + d_k/2) turned by the angle pos·θ_i.

    Only in self-attention: cross-attention's keys are the encoder's, whose positions its own
    self-attention has already applied."""

    name, turns = "rotate", "rot"
    groups: ClassVar[Mapping[str, str]] = dict.fromkeys(("rot_Q", "rot_K"), "rotated")
    tex: ClassVar[Mapping[str, str]] = {
        "rot_Q": r"\tilde{{Q}}_{{{h}}}",
        "rot_K": r"\tilde{{K}}_{{{h}}}",
        "cos": r"\cos",
        "sin": r"\sin",
    }

    def on(self, m: ModelConfig, at: At) -> bool:
        return m.positional_encoding == "rotary" and not at.cross

    def said(self, m: ModelConfig, at: At) -> str:
        return (
            " Positions enter here (rotary): each head's queries and keys are turned by an angle "
            "that grows with their position, so a score depends on how far apart two tokens are."
        )

    def forward(self, f: Flow) -> None:
        r = F.rotary(len(f.x), f.m.d_k, rope(f.m, f.layer), f.x.dtype, f.start)
        f.kept[self.name] = r
        f.Q, f.K = F.apply_rotary(f.Q, r), F.apply_rotary(f.K, r)
        f.made["rot_"] = (f.Q, f.K)

    def record_before(self, stage: Stage, f: Flow, q: Labels, kv: Labels) -> None:
        r, Dk = f.kept[self.name], dims(f.m.d_k, "k")
        stage.rec("cos", r.cos, positions(q), Dk, CONSTANT)
        stage.rec("sin", r.sin, positions(q), Dk, CONSTANT)

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        Dk, (Q, K) = dims(f.m.d_k, "k"), f.made["rot_"]
        stage.rec("rot_Q", Q[h - 1], q, Dk, head=h)
        if first:
            stage.rec("rot_K", K[g - 1], kv, Dk, head=g)

    def backward(self, f: Flow, d: Back) -> None:
        r = f.kept[self.name]
        d.per_head |= {"rot_Q": d.Q, "rot_K": d.K}
        d.Q, d.K = F.apply_rotary_backward(d.Q, r), F.apply_rotary_backward(d.K, r)

    def before(self, stage: Stage, m: ModelConfig) -> list[Check]:
        layer = layer_of(stage.id)
        cos, sin = rotary_by_hand(len(stage["X"]), m, layer)
        worst = max(gap(stage["cos"], cos), gap(stage["sin"], sin))
        if m.local(layer):
            base = f"local_rope_theta {m.theta(layer):g}"
        else:
            base = "rope_theta" + ("" if m.rope_scaling == "default" else f", scaled ({m.rope_scaling})")
        return [Check(stage.id, f"cos and sin recomputed from pos / θ^(2i/d_k), θ = {base}", worst)]

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        cos, sin = stage["cos"], stage["sin"]  # checked once, before the heads
        b.q, b.k = rotate_by_hand(b.q, cos, sin), rotate_by_hand(b.k, cos, sin)
        b.checked += [
            ("rot_Q", gap(stage.of("rot_Q", b.h), b.q)),
            ("rot_K", gap(stage.of("rot_K", b.g), b.k)),
        ]

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        g, (Q, K) = heads_letter(m), entering(m, at, self)
        return [
            line(sym("rot_Q", "h"), "=", sym(Q, "h"), "⊙", "cos", "+", Fm.call("rotate_half", [sym(Q, "h")]), "⊙", "sin",
                 ",  ", sym("rot_K", g), "=", sym(K, g), "⊙", "cos", "+", Fm.call("rotate_half", [sym(K, g)]), "⊙", "sin"),
            note("(rotary: each pair of columns (i, i + d_k/2) turned by the angle pos·", THETA, ","),
            note(THETA, f" = rope_theta^(−2i/d_k){_scaled(m)}; rotate_half(", sym("x", 1), ", ", sym("x", 2),
                 ") = (−", sym("x", 2), ", ", sym("x", 1), "))"),
            *([note(f"(sliding layers of layer_types: local_rope_theta {m.local_rope_theta:g} in place of "
                    f"rope_theta {m.rope_theta:g}, unscaled)")] if m.local_rope_theta is not None else []),
        ]  # fmt: skip

    @staticmethod
    def explain_table(c: Cell, trace: Trace) -> list[str]:
        m, layer = trace.config.model, layer_of(c.stage.id)
        half = m.d_k // 2
        i = c.j % half
        pos = c.i  # a traced pass starts at position 0
        theta, scaled = frequency_by_hand(m, i, layer)
        angle = pos * theta
        base = m.theta(layer) ** (2 * i / m.d_k)
        name = "local_rope_theta" if m.local(layer) else "rope_theta"
        partner = c.j + half if c.j < half else c.j - half
        lines = [
            f"{c.name}[pos, j] = {c.name}(pos · θ_i), θ_i = {name}^(−2i/d_k), with pos = {pos}, j = {c.j}: "
            f"pair i = {i} (column j and column j {'+' if c.j < half else '−'} d_k/2 = {partner} share the angle)",
        ]
        if scaled:
            lines.append(
                f"  θ_{i} = 1 / {m.theta(layer):g}^({2 * i}/{m.d_k}) = 1 / {c.f(base)}, {scaled}: θ_{i} = {theta:.6g}"
            )
            lines.append(f"  angle = {pos} · {theta:.6g} = {c.r(angle)}")
        else:
            lines.append(
                f"  angle = {pos} / {m.theta(layer):g}^({2 * i}/{m.d_k}) = {pos} / {c.f(base)} = {c.r(angle)}"
            )
        return [
            *lines,
            f"  {c.name}({c.f(angle)}) = {c.r(c.value)}",
            "  (low pairs turn fast with the position, high ones slowly; a score of two rotated vectors depends on "
            "their positions only through the difference: rotation by a and by b leaves the angle a − b)",
        ]

    @staticmethod
    def explain_rotation(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        source = turned_from(c.stage, c.matrix.base, h)  # Q, or what an earlier piece turned it into
        x = c.stage.of(source, h)
        half = x.shape[1] // 2
        first = c.j < half
        partner = c.j + half if first else c.j - half
        cos, sin = float(c.stage["cos"][c.i, c.j]), float(c.stage["sin"][c.i, c.j])
        a, b = float(x[c.i, c.j]), float(x[c.i, partner])
        sign = "−" if first else "+"
        name = matrix_name(source, h)
        return [
            f"{c.name} is {name} with each pair of columns (j, j + d_k/2) turned by its position's angle "
            "(Hugging Face's Llama pairs column i with i + d_k/2, rotate_half; GPT-J pairs 2i with 2i+1):",
            f"  {c.name}[{c.i}, {c.j}] = {name}[{c.i}, {c.j}]·cos {sign} {name}[{c.i}, {partner}]·sin"
            f"  (row {c.i}, {c.row}; cos = cos[{c.i}, {c.j}], sin = sin[{c.i}, {c.j}])",
            f"  = {c.times(a, cos)} {sign} {c.times(b, sin)} = {c.f(a * cos)} {sign} {c.operand(b * sin)} = {c.r(c.value)}",
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {
        "cos": explain_table,
        "sin": explain_table,
        "rot_Q": explain_rotation,
        "rot_K": explain_rotation,
    }

    @staticmethod
    def rotation_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        m = stage.matrices[name]
        source, half = named(stage, turned_from(stage, m.base, m.head), m.head), m.shape[1] // 2
        return step(
            "rotation",
            one(source, i, j),
            one(source, i, (j + half) % (2 * half)),
            one("cos", i, j),
            one("sin", i, j),
        )

    @staticmethod
    def table_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return step("sinusoid")

    steps: ClassVar[Mapping[str, StepOf]] = {
        "rot_Q": rotation_step,
        "rot_K": rotation_step,
        "cos": table_step,
        "sin": table_step,
    }


THETA = sym("θ", "i", tex=r"\theta")  # how fast pair i turns


def scale(m: ModelConfig) -> float:
    """What the scores are multiplied by: 1/√d_k (the paper), 1/√n (``score_scale`` n), or 1 (none)."""
    return 1.0 if m.score_divisor is None else 1 / math.sqrt(m.score_divisor)


def _scaled(m: ModelConfig) -> str:
    """How θ_i is stretched past the trained length, in the formula's words ("" for none)."""
    if m.rope_scaling == "linear":
        return f", then / rope_factor {m.rope_factor:g}"
    if m.rope_scaling == "llama3":
        return f", the slow pairs' then / {m.rope_factor:g} (llama3)"
    return ""


# ---------------------------------------------------------------------------------------------
# scores: S_h = Q_h·K_gᵀ / √d_k (the last turned Q and K)
# ---------------------------------------------------------------------------------------------


class Scores(Piece):
    """How well each query matches each key: Q_h·K_gᵀ, scaled by 1/√d_k (paper eq. 1). With a
    key/value cache, this step's keys and values join the cached ones first: the queries attend
    over the whole sequence so far."""

    name = "scores"
    groups: ClassVar[Mapping[str, str]] = {"S": "attention"}

    def forward(self, f: Flow) -> None:
        if f.cache is not None and f.self_attention:  # the new keys join the cache turned at their positions
            f.K, f.V = f.cache.extend(f.K, f.V)
        h, n_q, _ = f.Q.shape
        S = F.group(f.Q, f.K.shape[0]) @ np.swapaxes(f.K, -1, -2)  # a group's query heads, its one key head
        if f.m.score_divisor is not None:
            S *= scale(f.m)  # a Python float keeps float32 float32
        f.S = f.kept[self.name] = S.reshape(h, n_q, -1)  # kept: a soft cap turns f.S into its own

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        stage.rec("S", f.of_head(f.kept[self.name], h), q, kv, head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head["S"] = d.S
        h, G = f.Q.shape[0], f.K.shape[0]
        dS = d.S.reshape(G, h // G, *d.S.shape[1:])
        Q = f.Q.reshape(G, h // G, *f.Q.shape[1:])
        c = scale(f.m)
        d.Q = (dS @ f.K[:, None] * c).reshape(f.Q.shape)
        d.K = (np.swapaxes(dS, -1, -2) @ Q * c).sum(axis=1)  # a shared key gathers every reader's

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        products = np.einsum("id,jd->ij", b.q, b.k)
        b.s = products if m.score_divisor is None else products / math.sqrt(m.score_divisor)
        b.checked.append(("S", gap(stage.of("S", b.h), b.s)))

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        g, (Q, K) = heads_letter(m), entering(m, at, self)
        product = [sym("S", "h"), "=", sym(Q, "h"), "·", sym(K, g, "T")]
        if m.score_scale == "d_k":
            return [line(*product, "/", sqrt(sym("d_k")))]
        if m.score_scale == "none":
            return [
                line(*product),
                note("(score_scale: none: the scores are not divided, as T5's)", beside=True),
            ]
        return [
            line(*product, "/", sqrt(Fm.num(f"{m.score_divisor:g}"))),
            note(
                "(score_scale: divided by √",
                f"{m.score_divisor:g}",
                ", not √d_k: Gemma's query_pre_attn_scalar)",
            ),
        ]

    @staticmethod
    def explain_scores(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        m = trace.config.model
        d_k, g = m.d_k, kv_head(m, h)
        Q, K = attended_name(c.stage, "Q", h), attended_name(c.stage, "K", g)
        q, k = matrix_name(Q, h), matrix_name(K, g)
        terms, total = dot(c, c.stage.of(Q, h)[c.i], c.stage.of(K, g)[c.j])
        shared = f" (query head {h} reads key head {g})" if g != h else ""
        under = (
            ""
            if m.score_divisor is None
            else " / √d_k"
            if m.score_scale == "d_k"
            else f" / √{m.score_divisor:g}"
        )
        lines = [
            f"S{h} = {q}·{k}ᵀ{under}: how well query {c.i} ({c.row}) matches key {c.j} ({c.col}){shared}",
            f"  {q}[{c.i}]·{k}[{c.j}] = {c.sum_of(terms)} = {c.r(total)}",
        ]
        if m.score_divisor is None:
            return [*lines, "  not divided (score_scale: none, as T5: the weights' initialisation keeps the "
                            f"scores' spread instead): S{h}[{c.i}, {c.j}] = {c.r(c.value)}"]  # fmt: skip
        root, n = math.sqrt(m.score_divisor), f"{m.score_divisor:g}"
        said = f"√d_k = √{d_k}" if m.score_scale == "d_k" else f"√{n} (score_scale {n}, not √d_k = √{d_k})"
        return [
            *lines,
            f"  divided by {said} = {c.r(root)}: {c.f(total)} / {c.f(root)} = {c.r(c.value)}",
            "  (were q's and k's entries independent with variance 1, q·k would have variance d_k:",
            "  dividing by √d_k brings it back to 1 whatever d_k is, so softmax does not saturate"
            + (")" if m.score_scale == "d_k" else "; Gemma divides by √query_pre_attn_scalar instead)"),
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {"S": explain_scores}

    @staticmethod
    def scores_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        g = kv_head(trace.config.model, h)
        q, k = matrix_name(attended_name(stage, "Q", h), h), matrix_name(attended_name(stage, "K", g), g)
        return step("dot", row(stage, q, i), row(stage, k, j))

    steps: ClassVar[Mapping[str, StepOf]] = {"S": scores_step}


PROJECT, QK_NORM, ROTATE, SCORES, RELATIVE_BIAS = Project(), QKNorm(), Rotate(), Scores(), RelativeBias()
SOFTCAP, MASKING, SOFTMAX, WEIGH, CONCAT, PROJECT_OUT = (
    Softcap(),
    Mask(),
    Softmax(),
    Weigh(),
    Concat(),
    ProjectOut(),
)

# Every piece of attention, in computing order; a recipe is the ones the config selects. Those from
# SCORES up to WEIGH hold n_q × n_k numbers a head: ``functional.attention_in_blocks`` does their
# arithmetic a block of queries at a time when a stage keeps no head's (or one head's) matrices.
PIECES: tuple[Piece, ...] = (
    PROJECT, QK_NORM, ROTATE, SCORES, RELATIVE_BIAS, SOFTCAP, MASKING, SOFTMAX, WEIGH, CONCAT, PROJECT_OUT,
)  # fmt: skip


def recipe(m: ModelConfig, at: At) -> tuple[Piece, ...]:
    """The pieces of one attention stage under the config, in computing order."""
    return tuple(p for p in PIECES if p.on(m, at))


# ---------------------------------------------------------------------------------------------
# Which matrix of queries or keys each step reads, by the recipe's order of turning pieces.
# ---------------------------------------------------------------------------------------------

TURNS = ("", *(f"{p.turns}_" for p in PIECES if p.turns))  # "", "rot_": the order Q and K are made in


def entering(m: ModelConfig, at: At, piece: Piece) -> tuple[str, str]:
    """The base names of the queries and keys that reach ``piece`` under the config: the last
    turning piece's before it (``rot_Q``, ``rot_K``), or the projections."""
    pieces = recipe(m, at)
    turned = [p.turns for p in pieces[: pieces.index(piece)] if p.turns]
    prefix = f"{turned[-1]}_" if turned else ""
    return f"{prefix}Q", f"{prefix}K"


def attended_name(stage: Stage, base: str, head: int) -> str:
    """The base name of the queries or keys (``base`` "Q" or "K") that head ``head``'s scores
    multiplied: the projections, or the last turned matrix of them (``rot_Q``)."""
    return next(f"{t}{base}" for t in reversed(TURNS) if stage.has(f"{t}{base}", head))


def attended(stage: Stage, base: str, head: int) -> np.ndarray:
    """The queries or keys that head ``head``'s scores multiplied (``attended_name``'s matrix)."""
    return stage.of(attended_name(stage, base, head), head)


def turned_from(stage: Stage, name: str, head: int) -> str:
    """The matrix a turned one was made from: the one before it in the order of ``TURNS``."""
    letter = name[-1]
    earlier = TURNS[: TURNS.index(name[:-1])]
    return next(f"{t}{letter}" for t in reversed(earlier) if stage.has(f"{t}{letter}", head))
