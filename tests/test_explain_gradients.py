"""Issue 22, point 10: `explain -m dL/dNAME` shows a gradient's cell by the chain rule, micrograd's
way — which gradients flow in, which local derivative multiplies them — and every number it shows is
the recorded backward pass's (``model.backprop``), checked here against the rule computed anew."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.transformer import init_weights, run_forward

DIGITS = 6
PRE = Path(__file__).resolve().parents[1] / "configs" / "pre-norm.yaml"
HALF = 0.5 * 10**-DIGITS  # a number shown to DIGITS places is within this of the true one


@pytest.fixture(scope="module")
def grads():
    config = Config()
    w = init_weights(config)
    trace = run_forward(config, w)
    return trace, backward(trace, w).stages


def _explain(runner: CliRunner, stage: str, name: str, cell: str) -> list[str]:
    args = ["explain", "-s", stage, "-m", name, "--cell", cell, "--digits", str(DIGITS)]
    result = runner.invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    return lines


def _number(text: str) -> float:
    return float(text.replace("−", "-").strip("()"))


def _last(lines: list[str]) -> float:
    """The number after the last "=" of the explanation: the cell's value, as computed."""
    return _number(" ".join(lines).rsplit("= ", 1)[1])


def test_softmax_backward_from_dA(runner: CliRunner, grads) -> None:
    trace, g = grads
    sid = "decoder.0.masked-attention"
    A, dA, dS = trace[sid]["A1"][1], g[sid]["A1"][1], g[sid]["S1+M"][1, 0]
    dot = float(A @ dA)
    assert abs(A[0] * (dA[0] - dot) - dS) < 1e-15  # the rule, against the recorded gradient
    lines = _explain(runner, sid, "dL/dS1+M", "1,0")
    text = " ".join(" ".join(lines).split())
    assert "dL/dS1+M[i, j] = A1[i, j]·(dL/dA1[i, j] − Σ_k A1[i, k]·dL/dA1[i, k])" in text
    shown = re.search(r"Σ_k A1\[1, k\]·dL/dA1\[1, k\] = (.*) = (\S+) dL/dS1\+M\[1, 0\]", text)
    terms = [t.split("·") for t in shown[1].split(" + ")]
    assert len(terms) == 4  # one per key: the masked ones (A = 0) too
    for (a, d), want_a, want_d in zip(terms, A, dA, strict=True):
        assert abs(_number(a) - want_a) <= HALF and abs(_number(d) - want_d) <= HALF
    assert abs(_number(shown[2]) - dot) <= HALF
    assert abs(_last(lines) - dS) <= HALF


def test_a_linear_layers_input_gradient_is_dY_times_W_transposed(runner: CliRunner, grads) -> None:
    trace, g = grads
    stage = trace["output.logits"]
    want = float(g["output.logits"]["logits"][1] @ stage["W"][2])  # dX[1, 2] = Σ_k dY[1, k]·W[2, k]
    assert abs(want - g["output.logits"]["X"][1, 2]) < 1e-15
    lines = _explain(runner, "output.logits", "dL/dX", "1,2")
    text = " ".join(" ".join(lines).split())
    assert "logits = X·W + b, so dL/dX = dL/dlogits·Wᵀ: dL/dX[i, j] = Σ_k dL/dlogits[i, k]·W[j, k]" in text
    terms = text.split("dL/dX[1, 2] = ")[-1].rsplit(" = ", 1)[0].split(" + ")
    assert len(terms) == len(trace.vocabulary)
    assert abs(_last(lines) - want) <= HALF


def test_the_loss_gradient_is_p_minus_onehot_over_the_positions(runner: CliRunner, grads) -> None:
    trace, g = grads
    p = trace["output.probabilities"]["probabilities"]
    words = trace.vocabulary
    # after "sleeping" (row 1) comes "comfortably": its column has onehot 1; three rows have a next token
    j = words.index("comfortably")
    lines = _explain(runner, "output.logits", "dL/dlogits", f"1,{j}")
    assert lines[1:5] == [
        "L = mean over the 3 positions with a next token of −log p[next]:",
        "    dL/dlogits = (p − onehot) / 3",
        f"the next token after row 1 (sleeping) is comfortably; column {j} (comfortably) is",
        "    it: onehot = 1",
    ]
    assert abs(_last(lines) - (p[1, j] - 1) / 3) <= HALF
    assert abs(_last(lines) - g["output.logits"]["logits"][1, j]) <= HALF
    last_row = _explain(runner, "output.probabilities", "dL/dlogits", "3,0")
    assert last_row[-1] == "row 3 (<end>) has no next token: it adds nothing to L, so the gradient is 0"


def test_the_residual_passes_its_gradient_unchanged_and_a_read_output_sums_its_readers(
    runner: CliRunner,
) -> None:
    rid = "decoder.0.residual-1"
    residual = _explain_with(runner, str(PRE), rid, "dL/dsublayer", "1,1")
    text = " ".join(" ".join(residual).split())
    assert "output = X + sublayer, so ∂output/∂sublayer = 1" in text
    from transformer_walkthrough.config import load_config

    pre = load_config(str(PRE))
    wp = init_weights(pre)
    tp = run_forward(pre, wp)
    gp = backward(tp, wp).stages
    assert abs(_last(residual) - gp[rid]["output"][1, 1]) <= HALF
    # the residual stream before it is read twice: by the norm and by this sum
    source = tp[rid].sources["X"]
    lines = _explain_with(runner, str(PRE), source, "dL/doutput", "1,1")
    readers = [(s.id, n) for s in tp for n, src in s.sources.items() if src == source]
    assert len(readers) == 2 and any(line.startswith("2 stages read this output") for line in lines)
    total = sum(gp[sid][n][1, 1] for sid, n in readers)
    assert abs(total - gp[source]["output"][1, 1]) < 1e-15
    assert abs(_last(lines) - total) <= HALF


def _explain_with(runner: CliRunner, config: str, stage: str, name: str, cell: str) -> list[str]:
    args = ["explain", "-c", config, "-s", stage, "-m", name, "--cell", cell, "--digits", str(DIGITS)]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_other_gradients_name_their_rule_in_one_line_and_constants_have_none(
    runner: CliRunner, grads
) -> None:
    g = grads[1]
    lines = _explain(runner, "decoder.0.add-norm-1", "dL/dX", "1,1")
    assert abs(_number(lines[0].rsplit("= ", 1)[1]) - g["decoder.0.add-norm-1"]["X"][1, 1]) <= HALF
    assert "chain rule through the add-norm stage's backward" in " ".join(" ".join(lines).split())
    result = runner.invoke(
        app, ["explain", "-s", "decoder.0.masked-attention", "-m", "dL/dM", "--cell", "1,1"]
    )
    assert result.exit_code == 2 and "constant" in result.stderr


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_an_attention_weight_gradient_reads_its_shared_value_head(
    runner: CliRunner, tmp_path: Path, kv_heads: int
) -> None:
    """O_h = A_h·V_g: dL/dA_h = dL/dO_h·V_gᵀ, with g the key/value head that query head h reads."""
    from transformer_walkthrough.config import load_config

    llama = Path(__file__).resolve().parents[1] / "configs" / "llama-style.yaml"  # 4 query heads
    path = tmp_path / "gqa.yaml"
    path.write_text(llama.read_text().replace("num_kv_heads: 2", f"num_kv_heads: {kv_heads}"))
    config = load_config(path)
    w = init_weights(config)
    trace = run_forward(config, w)
    g = backward(trace, w).stages
    sid = "decoder.0.masked-attention"
    group = (4 - 1) // (4 // kv_heads) + 1  # the key/value head query head 4 reads
    want = float(g[sid]["O4"][1] @ trace[sid][f"V{group}"][2])  # dA4[1, 2] = Σ_k dO4[1, k]·V_g[2, k]
    assert abs(want - g[sid]["A4"][1, 2]) < 1e-15
    lines = _explain_with(runner, str(path), sid, "dL/dA4", "1,2")
    assert f"V{group}" in " ".join(lines)
    assert abs(_last(lines) - want) <= HALF
