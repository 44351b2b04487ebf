"""``explain``'s arithmetic gives back its printed result at the printed precision: each line whose
left side is numbers and operators is evaluated from the numbers as printed, and must land within
one unit of the last printed digit of its result; and a result shows its significant digits
(a gradient of 0.000479 is not 0.0005)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.backprop import backward
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.explain import explain
from transformer_walkthrough.views.gradients import explain_gradient

CONFIGS = Path(__file__).parent.parent / "configs"
NUMBER = re.compile(r"−?\d+\.(\d+)")


def _evaluate(expression: str) -> float | None:
    """A printed expression of numbers, + − · / ( ) and √, evaluated; None for anything else (a name,
    a "…", a lone number)."""
    e = expression.strip()
    if not re.fullmatch(r"[\d.\s+−·/()√e-]+", e) or not re.search(r"[+−·/√]", e.lstrip("−")):
        return None
    py = re.sub(
        r"√(\d+(?:\.\d+)?)", r"sqrt(\1)", e.replace("−", "-").replace("·", "*").replace("√(", "sqrt(")
    )
    try:
        return eval(py, {"sqrt": math.sqrt, "__builtins__": {}})  # numbers and operators only, checked above
    except (SyntaxError, ZeroDivisionError, TypeError, NameError):
        return None


def misses(line: str) -> list[tuple[float, str]]:
    """The expressions of ``line`` ("a·b + c = r", "x: (a − b) / √(c + d) = r") whose value, computed
    from the numbers as printed, is more than one unit of r's last digit from r: (value, r)."""
    out: list[tuple[float, str]] = []
    pending: list[float] = []
    for k, segment in enumerate(line.split(" = ")):
        for n, part in enumerate(segment.split(": ")):
            if n:
                pending = []  # after a colon, a new computation
            head = part.strip().split(" (")[0].split(";")[0].rstrip(",.")
            printed = NUMBER.fullmatch(head)
            if printed and k:
                unit = 10.0 ** -len(printed.group(1))
                r = float(head.replace("−", "-"))
                out.extend((v, head) for v in pending if abs(v - r) > unit * (1 + 1e-9))
                pending = []
                continue
            value = _evaluate(part)
            if value is not None:
                pending.append(value)
    return out


def test_the_checker_catches_the_issue_s_lines() -> None:
    """The two lines the issue found, as the explanations printed them before."""
    assert misses("  dL/dS1[0, 1] = 0.4212·(0.0117 − 0.0106) = 0.0005") == []  # within a unit: see below
    assert misses("  (X[0, 3] − mean) / √(var + eps) = (−0.0045 − (−0.0012)) / √(0.0007 + 1e-05) = −0.1219")
    assert misses("  = 1.5·2.0 + 1.0 = 4.0") == [] and misses("  = 1.5·2.0 + 1.0 = 4.2")


def _lines(trace, grads, per_matrix: int = 3) -> list[str]:
    """The explanations of a few cells of every matrix, and of their gradients."""
    lines = []
    for stage in trace:
        for name, m in stage.matrices.items():
            r, c = m.shape
            for i in range(min(r, per_matrix)):
                for j in range(min(c, per_matrix)):
                    lines += explain(trace, stage.id, name, f"{i},{j}")
                    if grads is not None and name in grads.stages.get(stage.id, {}) and not m.is_constant:
                        lines += explain_gradient(trace, grads, stage.id, f"dL/d{name}", f"{i},{j}")
    return lines


@pytest.mark.parametrize(
    "name", ["article", "bert-style", "llama-style", "gpt-style", "marian-style", "gemma-style"]
)
def test_every_line_of_arithmetic_gives_its_printed_result(name: str) -> None:
    config = load_config(CONFIGS / f"{name}.yaml")
    w = init_weights(config)
    trace = run_forward(config, w)
    lines = _lines(trace, backward(trace, w))
    checked = [line for line in lines if _evaluable(line)]
    assert len(checked) > 500  # the check reads most of the arithmetic, not a few lines
    wrong = [(line, miss) for line in lines for miss in misses(line)]
    assert not wrong, wrong[:5]


def _evaluable(line: str) -> bool:
    return any(_evaluate(part) is not None for s in line.split(" = ") for part in s.split(": "))


def test_a_wide_layernorm_and_a_small_gradient_show_their_digits() -> None:
    """The issue's cases: a LayerNorm of a 768-wide model (a variance of 0.0007), and gradients of
    the toy (dL/dS1 of 0.000479): each result shows 4 significant digits, and its line gives it back."""
    base = Config()
    wide = dataclasses.replace(
        base, model=dataclasses.replace(base.model, d_model=768, num_heads=12, d_ff=64)
    )
    w = init_weights(wide)
    trace = run_forward(wide, w)
    norm = trace["encoder.0.add-norm-1"]
    for j in (0, 1, 767):
        lines = explain(trace, norm.id, "output", f"0,{j}")
        assert not [m for line in lines for m in misses(line)], lines
    grads = backward(trace, w)
    small = 0
    toy = run_forward(base)
    g = backward(toy, init_weights(base))
    for stage_id, matrices in g.stages.items():
        for name, values in matrices.items():
            if toy[stage_id].matrices[name].is_constant:
                continue
            for (i, j), v in zip(_indices(values.shape), values.ravel().tolist(), strict=True):
                if 0 < abs(v) < 0.001:
                    head = explain_gradient(toy, g, stage_id, f"dL/d{name}", f"{i},{j}")[0]
                    shown = head.rsplit(" = ", 1)[1]
                    assert len(shown.replace("−", "").lstrip("0.")) >= 4, head  # 4 significant digits
                    assert float(shown.replace("−", "-")) == pytest.approx(v, rel=1e-3)
                    small += 1
    assert small > 10 and grads is not None


def _indices(shape: tuple[int, int]) -> list[tuple[int, int]]:
    return [(i, j) for i in range(shape[0]) for j in range(shape[1])]


def test_precision_is_the_option_on_every_command_and_digits_still_works() -> None:
    runner = CliRunner()
    args = ["explain", "-s", "masked-attention", "-m", "A1", "--cell", "1,0"]
    a, b = (runner.invoke(app, [*args, option, "6"]) for option in ("--precision", "--digits"))
    assert a.exit_code == 0 and a.stdout == b.stdout, a.output
    assert re.search(r" = \d\.\d{6}$", a.stdout.splitlines()[0])  # A1[1, 0] at 6 decimals
    lens = ["lens", "--explain", "0,1"]
    c, d = runner.invoke(app, [*lens, "--precision", "6"]), runner.invoke(app, [*lens, "--digits", "6"])
    assert c.exit_code == 0 and c.stdout == d.stdout, c.output
    assert re.search(r"= \d\.\d{6}", c.stdout)
    bad = runner.invoke(app, [*args, "--precision", "40"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --precision: must be 0 to 17")
