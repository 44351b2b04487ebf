"""From the scores to the output: the soft cap, the mask, softmax, the weighted sum of the values, the
heads side by side and the output projection. The mask and softmax read the scores as the soft cap
left them (``flow.scores_name``: cap_S, S+B or S); no other name another piece makes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ... import formula as Fm
from ... import functional as F
from ...architecture import layer_of
from ...formula import Line, Note, line, note, sym
from ...trace import ATTENTION, Stage, dims, head_dims, matrix_name
from ..base import Spec, Step, StepOf, col, named, one, row, step
from ..hand import (
    Check,
    dot,
    gap,
    linear,
    mm,
    softcap_by_hand,
    softcap_lines,
    softmax_cell,
    softmax_rows,
)

if TYPE_CHECKING:
    from ....config import ModelConfig
    from ...cell import Cell
    from ...trace import Trace
from .flow import At, Back, ByHand, Explainer, Flow, Labels, Piece, heads_letter, kv_head, scores_name

# ---------------------------------------------------------------------------------------------
# softcap: cap_S_h = c·tanh(S_h / c) (Gemma 2's attn_logit_softcapping)
# ---------------------------------------------------------------------------------------------


class Softcap(Piece):
    """The scores' soft cap, c·tanh(S_h / c): after the scaling, before the mask (as Gemma 2's eager
    attention), so no score goes beyond ±c. A score near 0 stays itself (tanh(t) ≈ t); a large one
    is squeezed towards c, and softmax can no longer give one key nearly all the weight."""

    name = "softcap"
    groups: ClassVar[Mapping[str, str]] = {"cap_S": "attention"}
    tex: ClassVar[Mapping[str, str]] = {"cap_S": r"\bar{{S}}_{{{h}}}"}

    def on(self, m: ModelConfig, at: At) -> bool:
        return m.attention_softcap is not None

    def said(self, m: ModelConfig, at: At) -> str:
        c = f"{m.attention_softcap:g}"
        return (
            f" The scores are soft-capped at ±{c} (Gemma 2): cap_S = {c}·tanh(S / {c}) leaves a small "
            f"score as it is and bends a large one below {c}, so no single key can take all the weight."
        )

    def forward(self, f: Flow) -> None:
        f.S = F.softcap(f.S, f.m.attention_softcap)

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        stage.rec("cap_S", f.of_head(f.S, h), q, kv, head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head["cap_S"] = d.S
        d.S = F.softcap_backward(d.S, f.S, f.m.attention_softcap)  # f.S: the capped scores

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        b.s = softcap_by_hand(b.s, m.attention_softcap)
        b.checked.append(("cap_S", gap(stage.of("cap_S", b.h), b.s)))

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        c = Fm.num(f"{m.attention_softcap:g}")
        return [
            line(sym("cap_S", "h"), "=", c, "·", Fm.call("tanh", [sym("S", "h"), "/", c])),
            note("(soft cap, Gemma 2: every score kept within ±", c, "; a small one nearly unchanged)", beside=True),
        ]  # fmt: skip

    @staticmethod
    def explain_capped(c: Cell, trace: Trace) -> list[str]:
        h, cap = c.matrix.head, trace.config.model.attention_softcap
        return softcap_lines(c, f"S{h}", float(c.stage.of("S", h)[c.i, c.j]), cap, "score")

    explain: ClassVar[Mapping[str, Explainer]] = {"cap_S": explain_capped}

    @staticmethod
    def capped_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return step("softcap", one(named(stage, "S", stage.matrices[name].head), i, j))

    steps: ClassVar[Mapping[str, StepOf]] = {"cap_S": capped_step}


# ---------------------------------------------------------------------------------------------
# mask: S_h + M, M of 0 and −∞ (the decoder's causal mask, a sliding window)
# ---------------------------------------------------------------------------------------------


class Mask(Piece):
    """The mask M added to every head's scores: −∞ where a query may not look (a later position,
    or one outside the sliding window). M is an input of the stage, given by the layer."""

    name = "mask"
    groups: ClassVar[Mapping[str, str]] = {"S+M": "attention"}
    tex: ClassVar[Mapping[str, str]] = {"S+M": "S_{{{h}}}+M", "M": "M"}

    def on(self, m: ModelConfig, at: At) -> bool:
        return at.masked

    def said(self, m: ModelConfig, at: At) -> str:
        if m.sliding_window is None:
            return ""
        w = m.sliding_window
        if m.layer_types is not None:
            return (
                f" Layers are sliding or full (layer_types, as Gemma 2 and 3): in a sliding layer M is −∞ "
                f"also more than {w - 1} positions back (each position sees itself and the {w - 1} before "
                "it: a band); a full layer sees every earlier position."
            )
        return (
            f" With a sliding window of {w} (Mistral), M is −∞ also more than {w - 1} positions back: "
            f"each position sees itself and the {w - 1} before it (a band, when the text is longer "
            "than the window)."
        )

    def forward(self, f: Flow) -> None:
        f.masked = f.scored + f.mask

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        stage.rec("S+M", f.of_head(f.masked, h), q, kv, head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head["S+M"] = d.S  # S + M: the same gradient as S
        d.M = d.S.sum(axis=0)  # M is added to every head's scores: it collects each head's

    def before(self, stage: Stage, m: ModelConfig) -> list[Check]:
        n, window = len(stage["X"]), m.window(layer_of(stage.id)) or len(stage["X"])
        mask = np.array([[0.0 if i - window < j <= i else -math.inf for j in range(n)] for i in range(n)])
        seen = "on and below the diagonal" if window >= n else f"in the band of the last {window} positions"
        return [Check(stage.id, f"M is 0 {seen}, −∞ elsewhere", gap(stage["M"], mask))]

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        b.s = b.s + stage["M"]
        b.checked.append(("S+M", gap(stage.of("S+M", b.h), b.s)))

    @staticmethod
    def explain_mask(c: Cell, trace: Trace) -> list[str]:
        window = trace.config.model.window(layer_of(c.stage.id))
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

    @staticmethod
    def explain_masked_scores(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        scores = matrix_name(scores_name(c.stage, h), h)
        s, mask = float(c.stage[scores][c.i, c.j]), float(c.stage["M"][c.i, c.j])
        return [
            f"{c.name}[{c.i}, {c.j}] = {scores}[{c.i}, {c.j}] + M[{c.i}, {c.j}] = {c.f(s)} + {c.operand(mask)} = {c.r(c.value)}"
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {"M": explain_mask, "S+M": explain_masked_scores}

    @staticmethod
    def masked_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        return step("sum", one(named(stage, scores_name(stage, h), h), i, j), one("M", i, j))

    steps: ClassVar[Mapping[str, StepOf]] = {"S+M": masked_step}


# ---------------------------------------------------------------------------------------------
# softmax, weigh, concat, project-out
# ---------------------------------------------------------------------------------------------


class Softmax(Piece):
    """A_h = softmax of each row of the (masked) scores: weights that sum to 1."""

    name = "softmax"
    groups: ClassVar[Mapping[str, str]] = {"A": "attention"}

    def forward(self, f: Flow) -> None:
        f.A = F.softmax(f.scored if f.masked is None else f.masked)

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        stage.rec("A", f.of_head(f.A, h), q, kv, ATTENTION, head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head["A"] = d.A
        d.S = F.softmax_backward(d.A, f.A)

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        b.a = softmax_rows(b.s)
        b.checked.append(("A", gap(stage.of("A", b.h), b.a)))

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        S = sym("cap_S" if m.attention_softcap is not None else "S", "h")
        s: list[Fm.Term | str] = [S]
        if m.biases_positions and not at.cross:
            s += ["+", sym("B", "h")]
        if at.masked:
            s += ["+", sym("M")]
        return [line(sym("A", "h"), "=", Fm.call("softmax", s), "    ", Fm.Word("(row-wise)"))]

    @staticmethod
    def explain_weights(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        base = "S+M" if c.stage.has("S+M", h) else scores_name(c.stage, h)
        return softmax_cell(c, matrix_name(base, h))

    explain: ClassVar[Mapping[str, Explainer]] = {"A": explain_weights}

    @staticmethod
    def weights_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        return step(
            "softmax", row(stage, named(stage, "S+M", h) or named(stage, scores_name(stage, h), h), i)
        )

    steps: ClassVar[Mapping[str, StepOf]] = {"A": weights_step}


class Weigh(Piece):
    """O_h = A_h·V_g: each query's weighted mix of the value rows."""

    name = "weigh"
    groups: ClassVar[Mapping[str, str]] = {"O": "attention"}

    def forward(self, f: Flow) -> None:
        h, n_q, _ = f.A.shape
        f.O = (F.group(f.A, f.V.shape[0]) @ f.V).reshape(
            h, n_q, -1
        )  # a group's query heads, its one value head

    def record(self, stage: Stage, f: Flow, h: int, g: int, first: bool, q: Labels, kv: Labels) -> None:
        d_k = f.m.d_k  # the same numbers as concat's block, kept once: in concat
        stage.rec("O", f.concat[:, (h - 1) * d_k : h * d_k], q, dims(d_k, "k"), head=h)

    def backward(self, f: Flow, d: Back) -> None:
        d.per_head["O"] = d.O
        h, G = f.Q.shape[0], f.K.shape[0]
        dO = d.O.reshape(G, h // G, *d.O.shape[1:])
        A = f.A.reshape(G, h // G, *f.A.shape[1:])
        d.A = (dO @ np.swapaxes(f.V[:, None], -1, -2)).reshape(f.A.shape)
        d.V = (np.swapaxes(A, -1, -2) @ dO).sum(axis=1)  # a shared value head gathers every reader's

    def by_hand(self, stage: Stage, m: ModelConfig, b: ByHand) -> None:
        b.o = mm(b.a, b.v)
        b.checked.append(("O", gap(stage.of("O", b.h), b.o)))

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        return [line(sym("O", "h"), "=", sym("A", "h"), "·", sym("V", heads_letter(m)))]

    @staticmethod
    def explain_weighted_sum(c: Cell, trace: Trace) -> list[str]:
        h = c.matrix.head
        g = kv_head(trace.config.model, h)
        A, V = c.stage.of("A", h), c.stage.of("V", g)
        keys = c.stage.matrices[f"A{h}"].cols
        terms, _ = dot(c, A[c.i], V[:, c.j])
        return [
            f"O{h} = A{h}·V{g}: position {c.i} ({c.row}) takes its weights A{h}[{c.i}] over the value rows",
            "  weights: " + ", ".join(f"{k} {c.f(a)}" for k, a in zip(keys, A[c.i].tolist(), strict=True)),
            f"  O{h}[{c.i}, {c.j}] = Σ_k A{h}[{c.i}, k]·V{g}[k, {c.j}] = {c.sum_of(terms)} = {c.r(c.value)}",
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {"O": explain_weighted_sum}

    @staticmethod
    def weighted_sum_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h = stage.matrices[name].head
        g = kv_head(trace.config.model, h)
        return step("dot", row(stage, named(stage, "A", h), i), col(stage, named(stage, "V", g), j))

    steps: ClassVar[Mapping[str, StepOf]] = {"O": weighted_sum_step}


class Concat(Piece):
    """The heads' outputs side by side (the paper's Concat), head 1 leftmost."""

    name = "concat"

    def forward(self, f: Flow) -> None:
        f.concat = F.merge_heads(f.O)
        f.O = None  # type: ignore[assignment]  # the heads' outputs live on in concat (O1, O2, … are its views)

    def record_after(self, stage: Stage, f: Flow, q: Labels) -> None:
        stage.rec("concat", f.concat, q, head_dims(f.m.num_heads, f.m.d_k))

    def backward(self, f: Flow, d: Back) -> None:
        d.O = F.split_heads(d.concat, f.m.num_heads)

    @staticmethod
    def explain_concat(c: Cell, trace: Trace) -> list[str]:
        d_k = trace.config.model.d_k
        h, k = c.j // d_k + 1, c.j % d_k
        return [
            f"concat puts the heads side by side, d_k = {d_k} columns each: column {c.j} is column {k} of head {h}",
            f"  concat[{c.i}, {c.j}] = O{h}[{c.i}, {k}] = {c.r(float(c.stage.of('O', h)[c.i, k]))}",
        ]

    explain: ClassVar[Mapping[str, Explainer]] = {"concat": explain_concat}

    @staticmethod
    def concat_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        h, c = divmod(j, trace.config.model.d_k)
        return step("copy", one(named(stage, "O", h + 1), i, c))

    steps: ClassVar[Mapping[str, StepOf]] = {"concat": concat_step}


class ProjectOut(Piece):
    """output = concat·W_O (+ b_O): the heads mixed back into d_model dimensions."""

    name = "project-out"
    tex: ClassVar[Mapping[str, str]] = {"W_O": "W^{{O}}", "b_O": "b^{{O}}"}

    def params(self, m: ModelConfig) -> dict[str, Spec]:
        specs = {"W_O": Spec((m.num_heads * m.d_k, m.d_model), "xavier")}
        if m.attention_bias is True:  # "qkv": Qwen2's projections have biases, its W_O none
            specs["b_O"] = Spec((m.d_model,), "zeros")
        return specs

    def forward(self, f: Flow) -> None:
        f.output = F.linear(f.concat, f.p["W_O"], f.p.get("b_O"))

    def record_after(self, stage: Stage, f: Flow, q: Labels) -> None:
        D, Hk = dims(f.m.d_model), head_dims(f.m.num_heads, f.m.d_k)
        stage.weight("W_O", f.p["W_O"], Hk, D)
        if "b_O" in f.p:
            stage.weight("b_O", f.p["b_O"], ("b_O",), D)

    def backward(self, f: Flow, d: Back) -> None:
        d.concat, d.params["W_O"], db_O = F.linear_backward(d.output, f.concat, f.p["W_O"])
        if "b_O" in f.p:
            d.params["b_O"] = db_O

    def formula(self, m: ModelConfig, at: At) -> list[Line | Note]:
        b = ["+", sym("b_O")] if m.attention_bias is True else []
        h = m.num_heads  # every head when there are few, the first and the last of many
        shown = [sym("O", k) for k in range(1, h + 1)] if h <= 3 else [sym("O", 1), "…", sym("O", h)]
        heads = Fm.Call("concat", tuple((t,) if isinstance(t, Fm.Sym) else (Fm.Op(t),) for t in shown))
        return [line("output", "=", heads, "·", sym("W_O"), *b)]

    @staticmethod
    def explain_output(c: Cell, trace: Trace) -> list[str]:
        return linear(
            c, f"output = concat·W_O: the heads mixed back into d_model dimensions; row {c.i} of concat times column {c.j} of W_O",
            c.stage["concat"][c.i], c.stage["W_O"][:, c.j], "b_O",
        )  # fmt: skip

    explain: ClassVar[Mapping[str, Explainer]] = {"output": explain_output}

    @staticmethod
    def output_step(stage: Stage, trace: Trace, name: str, i: int, j: int) -> Step:
        return step("dot", row(stage, "concat", i), col(stage, "W_O", j), one(named(stage, "b_O"), 0, j))

    steps: ClassVar[Mapping[str, StepOf]] = {"output": output_step}
