"""Training a mixture of experts (configs/moe-style.yaml) shows its load-balancing loss: beside the
cross-entropy in the progress bar and in the loss plot, before and after training (and times its
coefficient, as it enters the loss), and each layer's expert load before and after; every number
read from the output and checked against what this file computes from the traces' recorded router
probabilities and choices."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import load_config
from transformer_walkthrough.files.weights import load_weights
from transformer_walkthrough.model.training import train
from transformer_walkthrough.model.transformer import init_weights, run_forward
from transformer_walkthrough.views.tables import loss_curve
from transformer_walkthrough.views.terminal import Terminal

MOE_PATH = Path(__file__).resolve().parents[1] / "configs" / "moe-style.yaml"
MOE = load_config(MOE_PATH)
STEPS = 12


def _switch_loss(trace) -> float:
    """E · Σᵢ fᵢ·Pᵢ over every sparse layer's rows, as transformers' ``load_balancing_loss_func``
    counts it: fᵢ the routing slots expert i got per row (k at most), Pᵢ its mean router
    probability, both counted here from the stages' recorded matrices (k when balanced)."""
    stages = [s for s in trace if s.kind == "experts"]
    rows = sum(len(s["router_probs"]) for s in stages)
    E = MOE.model.experts
    f = [sum(int(np.sum(np.rint(s["chosen"]) == e)) for s in stages) / rows for e in range(E)]
    P = [sum(float(np.sum(s["router_probs"][:, e])) for s in stages) / rows for e in range(E)]
    return E * sum(a * b for a, b in zip(f, P, strict=True))


def _close(text: str, value: float) -> bool:
    """``text``, a printed number, shows ``value`` to its last digit."""
    mantissa = text.split("e")[0]
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(text.split("e")[1]) if "e" in text else 0
    return abs(float(text) - value) <= 0.5 * 10.0 ** (exponent - digits) + 1e-15


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("moe-train")
    before, after = folder / "before.npz", folder / "after.npz"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "-c",
            str(MOE_PATH),
            "--steps",
            str(STEPS),
            "-o",
            str(after),
            "--save-initial",
            str(before),
        ],
    )
    assert result.exit_code == 0, result.output
    traces = [run_forward(MOE, load_weights(MOE, path)) for path in (before, after)]
    return result.stdout, traces


def test_the_load_balancing_loss_printed_is_switch_transformers_from_the_recorded_routing(trained) -> None:
    out, (before, after) = trained
    said = " ".join(out.split())  # the sentence as one line, however the terminal wrapped it
    coef = MOE.model.router_aux_loss_coef
    found = re.search(r"\): (\S+) before, (\S+) after; in the loss, (\S+) and (\S+)\.", said)
    assert found, said
    aux = [_switch_loss(before), _switch_loss(after)]
    assert aux[0] != pytest.approx(aux[1])  # training moved the routing: the two numbers are each read
    for text, value in zip(found.groups(), [*aux, coef * aux[0], coef * aux[1]], strict=True):
        assert _close(text, value), (text, value)


def test_the_expert_load_before_and_after_is_each_experts_tokens_and_weight(trained) -> None:
    out, (before, after) = trained
    lines = out.splitlines()
    for layer in range(MOE.model.num_decoder_layers):
        start = lines.index(f"  layer {layer}:")
        old, new = before[f"decoder.{layer}.experts"], after[f"decoder.{layer}.experts"]
        for e in range(MOE.model.experts):
            line = lines[start + 1 + e]
            found = re.fullmatch(rf"    expert {e}: (\d+) tokens?, (\S+) → (\d+) tokens?, (\S+)", line)
            assert found, line
            for (tokens, weight), stage in zip(
                [found.groups()[:2], found.groups()[2:]], [old, new], strict=True
            ):
                mine = np.rint(stage["chosen"]) == e
                assert int(tokens) == int(np.sum(mine))
                assert _close(weight, float(np.sum(stage["routing_weights"][mine])))


def test_the_loss_plot_draws_both_curves_and_names_them(trained) -> None:
    out, _ = trained
    assert "cross-entropy and load-balancing loss, log scale, over 12 steps" in out
    assert "• cross-entropy   × load-balancing loss E·Σ fᵢ·Pᵢ" in out
    plot = out[: out.index("step 0")]
    assert plot.count("×") >= 1 and plot.count("•") >= 1


def test_the_plot_puts_each_curve_at_its_height_on_one_log_axis() -> None:
    """Cross-entropy 3 → 0.03 and an aux loss of 2.5 → 2.1 on 8 rows: the top label is the largest
    of both (3), the bottom the smallest (0.03); each mark's row is its log10 on that scale."""
    ce, aux = [3.0, 0.3, 0.03], [2.5, 2.3, 2.1]
    text = loss_curve(ce, width=16, height=8, aux=aux).plain.splitlines()
    rows = text[1:9]
    assert rows[0].split("│")[0].strip() == "3" and rows[7].split("│")[0].strip() == "0.03"
    top, span = math.log10(3.0), math.log10(3.0) - math.log10(0.03)
    for column, (a, b) in zip([0, 8, 15], zip(ce, aux, strict=True), strict=True):
        cells = [row.split("│")[1][column] for row in rows]
        assert cells.index("•") == round((top - math.log10(a)) / span * 7)
        if round((top - math.log10(b)) / span * 7) != cells.index("•"):  # the cross-entropy on top
            assert cells.index("×") == round((top - math.log10(b)) / span * 7)
    assert "× load-balancing loss" in text[-1]
    assert "×" not in loss_curve(ce).plain  # a dense model: one curve, no legend


def test_the_progress_bar_shows_the_cross_entropy_beside_the_load_balancing_loss() -> None:
    """Each step's two terms, as ``train`` computes them (total = cross-entropy + coef · aux), on a
    terminal's progress bar; the first step's aux equals the seed's routing counted by hand."""
    w = init_weights(MOE)
    aux0 = _switch_loss(run_forward(MOE, w))
    terminal = Terminal()
    terminal.console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    with terminal.training_progress(3) as on_step:
        losses = train(MOE, w, steps=3, on_step=on_step)
    screen = terminal.console.file.getvalue()
    first = losses.terms[0]
    assert first.aux == pytest.approx(aux0, abs=1e-12)
    assert first.total == pytest.approx(
        first.cross_entropy + MOE.model.router_aux_loss_coef * first.aux, abs=1e-15
    )
    found = re.findall(r"cross-entropy (\S+)  load-balancing (\S+)", screen)
    assert found
    ce, aux = found[-1]
    last = losses.terms[2]
    assert _close(ce, last.cross_entropy) and _close(aux, last.aux)
