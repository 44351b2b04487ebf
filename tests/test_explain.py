"""`explain`: every kind of matrix, on small numbers whose arithmetic is checked by hand."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.errors import StageError
from transformer_walkthrough.model.trace import MASK, Trace
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.explain import explain, explainable, parse_cell

INF = math.inf
D = ("d0", "d1")


def hand_trace() -> Trace:
    """A trace of made-up round numbers (default config: d_model 4, 2 heads, d_k 2)."""
    config = Config()
    source, target = ("the", "cat"), ("<start>", "sleeping")
    t = Trace(config, source, target, source_ids=tuple(config.token_ids(source)),
              target_ids=tuple(config.token_ids(target)))  # fmt: skip
    emb = t.stage("encoder.embedding", "embedding")
    emb.weight("E", np.arange(28.0).reshape(7, 4) / 10, config.vocabulary, ("d0", "d1", "d2", "d3"))
    emb.rec(
        "output",
        np.array([[0.8, 0.9, 1.0, 1.1], [1.2, 1.3, 1.4, 1.5]]),
        ("the", "cat"),
        ("d0", "d1", "d2", "d3"),
    )
    pe = t.stage("encoder.positional-encoding", "positional-encoding")
    pe.input(
        "X", np.array([[0.8, 0.9, 1.0, 1.1], [1.2, 1.3, 1.4, 1.5]]), ("the", "cat"), ("d0", "d1", "d2", "d3")
    )
    pe.rec(
        "PE",
        np.array([[0.0, 1.0, 0.0, 1.0], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]]),
        ("the", "cat"),
        ("d0", "d1", "d2", "d3"),
    )
    pe.rec("output", np.array([[0.8, 1.9, 1.0, 2.1], [1.2 + math.sin(1), 1.3 + math.cos(1), 1.41, 2.5]]),
           ("the", "cat"), ("d0", "d1", "d2", "d3"))  # fmt: skip
    st = t.stage("decoder.0.masked-attention", "masked-attention")
    tok = ("<start>", "sleeping")
    st.input("X", np.array([[1.0, 2.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]), tok, ("d0", "d1", "d2", "d3"))
    st.rec("M", np.array([[0.0, -INF], [0.0, 0.0]]), tok, tok, MASK)
    st.weight(
        "W_Q", np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, -1.0]]), ("d0", "d1", "d2", "d3"), D,
        head=1, param="W_QKV",
    )  # fmt: skip
    st.rec("Q", np.array([[1.0, 2.0], [0.0, 1.0]]), tok, D, head=1)
    st.rec("K", np.array([[3.0, 4.0], [0.5, 0.5]]), tok, D, head=1)
    st.rec("V", np.array([[2.0, 0.0], [4.0, 8.0]]), tok, D, head=1)
    st.rec("S", np.array([[11 / math.sqrt(2), 1.5 / math.sqrt(2)], [0.0, math.log(3)]]), tok, tok, head=1)
    st.rec("S+M", np.array([[11 / math.sqrt(2), -INF], [0.0, math.log(3)]]), tok, tok, head=1)
    st.rec("A", np.array([[1.0, 0.0], [0.25, 0.75]]), tok, tok, head=1)
    st.rec("O", np.array([[2.0, 0.0], [3.5, 6.0]]), tok, D, head=1)
    st.rec("O", np.array([[7.0, 8.0], [9.0, 10.0]]), tok, D, head=2)
    st.rec("concat", np.array([[2.0, 0.0, 7.0, 8.0], [3.5, 6.0, 9.0, 10.0]]), tok, ("d0", "d1", "d2", "d3"))
    st.weight("W_O", np.eye(4) * 0.5, ("d0", "d1", "d2", "d3"), ("d0", "d1", "d2", "d3"))
    st.rec("output", np.array([[1.0, 0.0, 3.5, 4.0], [1.75, 3.0, 4.5, 5.0]]), tok, ("d0", "d1", "d2", "d3"))
    norm = t.stage("decoder.0.add-norm-1", "add-norm")
    norm.input("X", np.array([[0.5, 1.0, 1.5, 2.0]]), ("<start>",), ("d0", "d1", "d2", "d3"))
    norm.input("sublayer", np.array([[0.5, 1.0, 1.5, 2.0]]), ("<start>",), ("d0", "d1", "d2", "d3"))
    norm.rec("sum", np.array([[1.0, 2.0, 3.0, 4.0]]), ("<start>",), ("d0", "d1", "d2", "d3"))
    norm.weight("gamma", np.array([2.0, 1.0, 1.0, 1.0]), ("gamma",), ("d0", "d1", "d2", "d3"))
    norm.weight("beta", np.array([0.5, 0.0, 0.0, 0.0]), ("beta",), ("d0", "d1", "d2", "d3"))
    out = (1.0 - 2.5) / math.sqrt(1.25 + 1e-5) * 2.0 + 0.5
    norm.rec("output", np.array([[out, 0.0, 0.0, 0.0]]), ("<start>",), ("d0", "d1", "d2", "d3"))
    cross = t.stage("decoder.0.cross-attention", "cross-attention")
    cross.input("X", np.zeros((2, 4)), tok, ("d0", "d1", "d2", "d3"))
    cross.input("memory", np.ones((2, 4)), ("the", "cat"), ("d0", "d1", "d2", "d3"))
    ffn = t.stage("decoder.0.feed-forward", "feed-forward")
    ffn.input("X", np.array([[1.0, -1.0]]), ("<start>",), D)
    ffn.weight("W_1", np.array([[2.0], [3.0]]), D, ("d0",))
    ffn.weight("b_1", np.array([0.5]), ("b_1",), ("d0",))
    ffn.rec("pre", np.array([[-0.5]]), ("<start>",), ("d0",))
    ffn.rec("hidden", np.array([[0.0]]), ("<start>",), ("d0",))
    ffn.weight("W_2", np.array([[4.0, 1.0]]), ("d0",), D)
    ffn.weight("b_2", np.array([0.25, -0.5]), ("b_2",), D)
    ffn.rec("output", np.array([[0.25, -0.5]]), ("<start>",), D)
    head = t.stage("output.logits", "logits")
    head.input("X", np.array([[1.0, 2.0], [3.0, 4.0]]), tok, D)
    head.rec(
        "flattened", np.array([[1.0, 2.0, 3.0, 4.0]]), ("flattened",), ("p0.d0", "p0.d1", "p1.d0", "p1.d1")
    )
    head.weight(
        "W",
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]),
        ("p0.d0", "p0.d1", "p1.d0", "p1.d1"),
        ("<start>", "<end>"),
    )
    head.weight("b", np.array([0.5, -1.0]), ("b",), ("<start>", "<end>"))
    head.rec("logits", np.array([[4.5, 5.0]]), ("flattened",), ("<start>", "<end>"))
    probs = t.stage("output.probabilities", "probabilities")
    probs.input("logits", np.array([[0.0, math.log(3.0)]]), ("<start>",), ("<start>", "<end>"))
    probs.rec("probabilities", np.array([[0.25, 0.75]]), ("<start>",), ("<start>", "<end>"))
    # Where each input came from, as the model would have recorded it.
    st.sources["X"] = pe.id
    norm.sources |= {"X": pe.id, "sublayer": st.id}
    cross.sources |= {"X": norm.id, "memory": pe.id}
    for stage in (emb, pe, st, norm, cross, ffn, head, probs):
        stage.output = "probabilities" if stage is probs else "logits" if stage is head else "output"
    return t


T = hand_trace()
EXPECTED = {
    ("decoder.0.masked-attention", "Q1", "0,1"): [
        "decoder.0.masked-attention · Q1[<start>, d1] = Q1[0, 1] = 2.00",
        "Q1 = X·W_Q1: row 0 of X (<start>) times column 1 of W_Q1",
        "  = 1.00·0.00 + 2.00·1.00 + 0.00·0.00 + 0.00·(−1.00) = 2.00",  # 0 + 2 + 0 + 0
    ],
    ("decoder.0.masked-attention", "S1", "0,0"): [
        "decoder.0.masked-attention · S1[<start>, <start>] = S1[0, 0] = 7.78",
        "S1 = Q1·K1ᵀ / √d_k: how well query 0 (<start>) matches key 0 (<start>)",
        "  Q1[0]·K1[0] = 1.00·3.00 + 2.00·4.00 = 11.00",  # 3 + 8
        "  divided by √d_k = √2 = 1.41: 11.00 / 1.4142 = 7.78",  # 11 / 1.41421 = 7.7782; √2 an operand, two decimals more
        "  (were q's and k's entries independent with variance 1, q·k would have variance d_k:",
        "  dividing by √d_k brings it back to 1 whatever d_k is, so softmax does not saturate)",
    ],
    ("decoder.0.masked-attention", "M", "0,1"): [
        "decoder.0.masked-attention · M[<start>, sleeping] = M[0, 1] = −∞",
        "M[0, 1] = −∞: column 1 (sleeping) comes after row 0 (<start>), a word the decoder must not see yet. "
        "Added to the score it makes −∞, and softmax turns e^−∞ into a weight of exactly 0.",
    ],
    ("decoder.0.masked-attention", "M", "1,0"): [
        "decoder.0.masked-attention · M[sleeping, <start>] = M[1, 0] = 0.00",
        "M[1, 0] = 0: column 0 (<start>) is not after row 1 (sleeping), so it may be seen; "
        "adding 0 leaves the score as it is.",
    ],
    ("decoder.0.masked-attention", "S1+M", "0,1"): [
        "decoder.0.masked-attention · S1+M[<start>, sleeping] = S1+M[0, 1] = −∞",
        "S1+M[0, 1] = S1[0, 1] + M[0, 1] = 1.0607 + (−∞) = −∞",  # 1.5 / √2 = 1.0607
    ],
    ("decoder.0.masked-attention", "A1", "1,1"): [
        "decoder.0.masked-attention · A1[sleeping, sleeping] = A1[1, 1] = 0.75",
        "A1 = softmax(S1+M), row by row: A1[i, j] = e^(S1+M)[i, j] / Σ_k e^(S1+M)[i, k]",
        "  row 1 of S1+M (sleeping): <start> 0.00, sleeping 1.0986",  # ln 3 = 1.0986
        "  subtract the row's largest value m = 1.10 first: e^(x − m) / Σ e^(x − m) is the same quotient, "
        "and no exp can overflow",
        "  each exp: e^(−1.0986) = 0.33, e^0.00 = 1.00",  # e^-ln 3 = 1/3
        "  sum = 0.3333 + 1.00 = 1.33",  # operands two decimals finer than the results: 1/3, 4/3
        "  A1[1, 1] = 1.00 / 1.3333 = 0.75",
    ],
    ("decoder.0.masked-attention", "O1", "1,0"): [
        "decoder.0.masked-attention · O1[sleeping, d0] = O1[1, 0] = 3.50",
        "O1 = A1·V1: position 1 (sleeping) takes its weights A1[1] over the value rows",
        "  weights: <start> 0.25, sleeping 0.75",
        "  O1[1, 0] = Σ_k A1[1, k]·V1[k, 0] = 0.25·2.00 + 0.75·4.00 = 3.50",  # 0.5 + 3
    ],
    ("decoder.0.masked-attention", "concat", "1,3"): [
        "decoder.0.masked-attention · concat[sleeping, d3] = concat[1, 3] = 10.00",
        "concat puts the heads side by side, d_k = 2 columns each: column 3 is column 1 of head 2",
        "  concat[1, 3] = O2[1, 1] = 10.00",
    ],
    ("decoder.0.add-norm-1", "output", "0,0"): [
        "decoder.0.add-norm-1 · output[<start>, d0] = output[0, 0] = −2.18",  # (1−2.5)/1.1180·2 + 0.5
        "output = gamma ⊙ (sum − mean) / √(var + eps) + beta, over row 0 (<start>) of sum",
        "  mean = (1.00 + 2.00 + 3.00 + 4.00) / 4 = 2.50",
        "  var = Σ (v − mean)² / 4 = 1.25   (divided by d, not d − 1, as torch.nn.LayerNorm)",  # (2.25+.25+.25+2.25)/4
        "  (sum[0, 0] − mean) / √(var + eps) = (1.00 − 2.50) / √(1.25 + 1e-05) = −1.34",
        "  × gamma[0] 2.00 + beta[0] 0.50 = −2.18",
    ],
    ("decoder.0.feed-forward", "pre", "0,0"): [
        "decoder.0.feed-forward · pre[<start>, d0] = pre[0, 0] = −0.50",
        "pre = X·W_1 + b_1: row 0 of X (<start>) times column 0 of W_1",
        "  = 1.00·2.00 + (−1.00)·3.00 = −1.00",  # 2 − 3
        "  + b_1[0] 0.50 = −0.50",
    ],
    ("decoder.0.feed-forward", "hidden", "0,0"): [
        "decoder.0.feed-forward · hidden[<start>, d0] = hidden[0, 0] = 0.00",
        "hidden = ReLU(pre) = max(0, pre): max(0, −0.50) = 0.00   (negative: this unit is off here)",
    ],
    ("encoder.positional-encoding", "PE", "1,2"): [
        # sin(0.01) = 0.0099998: two significant digits are 0.0100, not the 0.01 of two decimals
        "encoder.positional-encoding · PE[cat, d2] = PE[1, 2] = 0.0100",
        "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)) with pos = 1 (cat), 2i = 2, d_model = 4",
        "  angle = 1 / 10000^(2/4) = 1 / 100.0000 = 0.0100",  # the operand at the decimals of its result
        "  sin(0.0100) = 0.0100",
        "  (even columns are sines, odd ones cosines; low columns turn fast with the position, high ones slowly)",
    ],
    ("encoder.embedding", "output", "1,3"): [
        "encoder.embedding · output[cat, d3] = output[1, 3] = 1.50",
        "The token 'cat' looks up its row of the embedding table E.",
        "output[1, 3] = E[cat (row 3 of E), 3] = 1.50",  # E[3, 3] = 15 / 10
    ],
    ("encoder.embedding", "E", "0,0"): [
        "encoder.embedding · E[<start>, d0] = E[0, 0] = 0.00",
        "E is a learned weight, not computed from anything: it was drawn uniform in [0, 1), as the article draws it "
        "(the paper does not say),",
        "row 0 of E from a stream of its own, seeded with 42, the table's name and the word '<start>' (a word keeps "
        "its vector whatever the vocabulary around it; dtype float64); only training changes it.",
    ],
    ("output.probabilities", "probabilities", "0,1"): [
        "output.probabilities · probabilities[<start>, <end>] = probabilities[0, 1] = 0.75",
        "probabilities = softmax(logits), row by row: probabilities[i, j] = e^logits[i, j] / Σ_k e^logits[i, k]",
        "  row 0 of logits (<start>): <start> 0.00, <end> 1.0986",  # ln 3
        "  subtract the row's largest value m = 1.10 first: e^(x − m) / Σ e^(x − m) is the same quotient, "
        "and no exp can overflow",
        "  each exp: e^(−1.0986) = 0.33, e^0.00 = 1.00",  # e^-ln 3 = 1/3
        "  sum = 0.3333 + 1.00 = 1.33",
        "  probabilities[0, 1] = 1.00 / 1.3333 = 0.75",
    ],
    ("decoder.0.masked-attention", "X", "1,1"): [
        "decoder.0.masked-attention · X[sleeping, d1] = X[1, 1] = 1.00",
        "X is this stage's input: the output of encoder.positional-encoding, row 1 (sleeping), column 1.",
    ],
    ("decoder.0.cross-attention", "memory", "1,0"): [
        "decoder.0.cross-attention · memory[cat, d0] = memory[1, 0] = 1.00",
        "memory is the encoder's output (from encoder.positional-encoding), the same for every decoder layer: it gives the keys and values.",
    ],
    ("decoder.0.masked-attention", "W_Q1", "2,0"): [
        "decoder.0.masked-attention · W_Q1[d2, d0] = W_Q1[2, 0] = 0.50",
        "W_Q1 is head 1's block of d_k = 2 columns of the parameter decoder.0.masked-attention/W_QKV.",
        # √(6/8) = 0.866; PyTorch's one 12 × 4 draw: √(6/16) = 0.612
        "W_Q1 is a learned weight, not computed from anything: it was drawn Glorot/Xavier uniform in ±√(6 / (fan_in + fan_out)) = ±√(6 / (4 + 4)) = ±0.87, W_Q, W_K and W_V each drawn as its own 4 × 4 matrix (PyTorch draws the three as one 12 × 4 matrix, so its bound is ±√(6 / (4 + 12)) = ±0.61),",
        "from a stream seeded with 42 and the parameter's name (dtype float64); only training changes it.",
    ],
    ("decoder.0.masked-attention", "output", "1,0"): [
        "decoder.0.masked-attention · output[sleeping, d0] = output[1, 0] = 1.75",
        "output = concat·W_O: the heads mixed back into d_model dimensions; row 1 of concat times column 0 of W_O",
        "  = 3.50·0.50 + 6.00·0.00 + 9.00·0.00 + 10.00·0.00 = 1.75",  # 3.5 / 2
    ],
    ("decoder.0.add-norm-1", "sum", "0,3"): [
        "decoder.0.add-norm-1 · sum[<start>, d3] = sum[0, 3] = 4.00",
        "sum = X + sublayer (the residual connection): 2.00 + 2.00 = 4.00",
    ],
    ("decoder.0.add-norm-1", "sublayer", "0,0"): [
        "decoder.0.add-norm-1 · sublayer[<start>, d0] = sublayer[0, 0] = 0.50",
        "sublayer is the output of decoder.0.masked-attention, row 0, column 0.",
    ],
    ("encoder.positional-encoding", "output", "0,1"): [
        "encoder.positional-encoding · output[the, d1] = output[0, 1] = 1.90",
        "output = X + PE: 0.90 + 1.00 = 1.90 (the token's vector, shifted by its position's pattern)",
    ],
    ("decoder.0.feed-forward", "output", "0,1"): [
        "decoder.0.feed-forward · output[<start>, d1] = output[0, 1] = −0.50",
        "output = hidden·W_2 + b_2: row 0 of hidden times column 1 of W_2",
        "  = 0.00·1.00 = 0.00",  # the ReLU'd-off unit contributes nothing
        "  + b_2[1] (−0.50) = −0.50",
    ],
    ("output.logits", "flattened", "0,2"): [
        "output.logits · flattened[p1.d0] = flattened[2] = 3.00",
        "flattened lays the rows of X end to end: column 2 is row 1, column 0 of X",
        "  = X[1, 0] = 3.00",
    ],
    ("output.logits", "logits", "0,0"): [
        "output.logits · logits[flattened, <start>] = logits[0, 0] = 4.50",
        "logits = X·W + b: how much position 0 (flattened) speaks for the word '<start>'",
        "  = 1.00·1.00 + 2.00·0.00 + 3.00·1.00 + 4.00·0.00 = 4.00",  # 1 + 3
        "  + b[0] 0.50 = 4.50",
    ],
    ("output.probabilities", "logits", "0,1"): [
        "output.probabilities · logits[<start>, <end>] = logits[0, 1] = 1.10",
        "logits are output.logits, brought here to be turned into probabilities: 1.10.",
    ],
}


@pytest.mark.parametrize("key", list(EXPECTED), ids=lambda k: f"{k[1]}[{k[2]}]")
def test_explain_by_hand(key: tuple[str, str, str]) -> None:
    assert explain(T, *key, digits=2) == EXPECTED[key]


def test_every_matrix_of_every_stage_is_explainable() -> None:
    trace = run_forward(Config())
    for stage_id, name in explainable(trace):
        m = trace[stage_id].matrices[name]
        lines = explain(trace, stage_id, name, f"{m.shape[0] - 1},{m.shape[1] - 1}")
        assert lines[0].startswith(f"{stage_id} · {name}[") and len(lines) >= 2


def test_cells_by_label_and_clean_errors() -> None:
    assert (
        explain(T, "decoder.0.masked-attention", "A1", "sleeping,sleeping", 2)
        == EXPECTED[("decoder.0.masked-attention", "A1", "1,1")]
    )
    for cell, message in [
        ("2,0", "row 2 is out of range: A1 has rows 0 to 1 (<start>, sleeping)"),
        ("0,dog", "column 'dog' is not a column of A1; its columns are <start>, sleeping (or 0 to 1)"),
        ("0", "--cell '0': give a row and a column, as 1,0 or sleeping,<start>"),
    ]:
        with pytest.raises(StageError) as err:
            explain(T, "decoder.0.masked-attention", "A1", cell)
        assert str(err.value) == message
    with pytest.raises(StageError, match="has no matrix 'A3'; it has X, M, W_Q1"):
        explain(T, "decoder.0.masked-attention", "A3", "0,0")


def test_a_label_may_hold_the_comma() -> None:
    stage = Trace(Config(), (), ()).stage("decoder.0.logits", "logits")
    stage.rec("A", np.arange(4.0).reshape(2, 2), ("a", ","), (",", "b"))
    assert parse_cell(",,b", stage, "A") == (1, 1) and parse_cell(",,,", stage, "A") == (1, 0)
    assert parse_cell("a,,", stage, "A") == (0, 0) and parse_cell("1, 0", stage, "A") == (1, 0)
    for cell, message in [
        ("x,,y", "--cell 'x,,y': give a row and a column"),  # no split names a row or a column
        (",,xyz", "column 'xyz' is not a column of A; its columns are ,, b (or 0 to 1)"),  # a typo
        ("a,,,", "column ',,' is not a column of A"),  # the row is named: the column is not
    ]:
        with pytest.raises(StageError) as err:
            parse_cell(cell, stage, "A")
        assert str(err.value).startswith(message)
    # Two readings: said, not guessed.
    stage.rec("B", np.zeros((2, 2)), ("a", "a,"), (",b", "b"))
    with pytest.raises(StageError, match=r"can be read as row 'a', column ',b' or row 'a,', column 'b'"):
        parse_cell("a,,b", stage, "B")
    # A comma that repeats is labelled by its position: the message asks which.
    stage.rec("C", np.zeros((3, 1)), (",@0", "x", ",@2"), ("y",))
    with pytest.raises(StageError, match=r"row ',' of C is ambiguous: give one of ,@0, ,@2"):
        parse_cell(",,y", stage, "C")
    assert parse_cell(",@2,y", stage, "C") == (2, 0)


def test_cli_explain(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["explain", "--stage", "masked-attention", "--matrix", "A1", "--cell", "sleeping,<start>"]
    )
    assert result.exit_code == 0, result.stderr
    trace = run_forward(Config())
    a = trace["decoder.0.masked-attention"]["A1"][1, 0]
    assert (
        result.stdout.splitlines()[0]
        == f"decoder.0.masked-attention · A1[sleeping, <start>] = A1[1, 0] = {a:.4f}"
    )
    bad = runner.invoke(app, ["explain", "-s", "add-norm", "-m", "output", "--cell", "0,0"])
    assert bad.exit_code == 2 and bad.stderr.startswith(
        "error: --stage add-norm names 5 stages; give one id:"
    )


def test_a_softmax_over_a_200k_vocabulary_shows_the_ends_of_its_row() -> None:
    """A softmax cell's row is elided as a dot product is: the first and last terms, the cell's own
    and the largest, and the sum of all of them; fast and small whatever the vocabulary."""
    n, j = 200_000, 123_456
    logits = np.random.default_rng(0).normal(size=(1, n))
    logits[0, 150_000] = 9.0  # the largest, in the elided middle
    exps = np.exp(logits - 9.0)
    probabilities = exps / exps.sum()
    trace = Trace(Config(), (), ())
    stage = trace.stage("output.probabilities", "probabilities")
    words = tuple(f"w{k}" for k in range(n))
    stage.rec("logits", logits, ("x",), words)
    stage.rec("probabilities", probabilities, ("x",), words)
    start = time.perf_counter()
    lines = explain(trace, "output.probabilities", "probabilities", f"0,{j}")
    assert time.perf_counter() - start < 2.0
    text = "\n".join(lines)
    assert len(text) < 3_000
    assert "w0 " in text and f"w{n - 1} " in text and f"w{j} " in text and "w150000 9.0000" in text
    assert "w100000 " not in text and "more) …" in text
    *_, total = _numbers(lines[-2])
    assert total == pytest.approx(exps.sum(), rel=1e-4)
    own, divisor, quotient = _numbers(lines[-1].split("=", 1)[1])
    assert own == pytest.approx(exps[0, j], rel=1e-4) and divisor == pytest.approx(total, rel=1e-6)
    assert quotient == pytest.approx(own / divisor, rel=1e-3) == pytest.approx(probabilities[0, j], rel=1e-3)
    every = explain(trace, "output.probabilities", "probabilities", f"0,{j}", all_terms=True)
    assert "w100000 " in "\n".join(every)


def _numbers(text: str) -> list[float]:
    """The numbers of a line of arithmetic, in order ("−" is a minus)."""
    return [float(n) for n in re.findall(r"-?\d+\.\d+(?:e[+-]\d+)?", text.replace("−", "-"))]
