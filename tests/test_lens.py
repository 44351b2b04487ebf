"""The logit lens: equal to projecting the recorded stage outputs by hand, its last layer equal to the
model's own logits (and, for GPT-2, every layer equal to transformers' hidden states through ln_f and
lm_head), its table, its --position view, explain on a cell, the report's section, and bad input."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.config import Config, load_config
from transformer_walkthrough.model.lens import logit_lens, top_tokens
from transformer_walkthrough.model.trace import Trace, top_k
from transformer_walkthrough.model.transformer import run_forward
from transformer_walkthrough.views.documents import to_html
from transformer_walkthrough.views.lens import explain_lens

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[")

# The stage read after each decoder layer, written out for each config: post-norm's add & norm of the
# feed-forward (the third sublayer with cross-attention), pre-norm's residual of the last sublayer.
LAYER_OUTPUTS = {
    "article.yaml": ["decoder.0.add-norm-3"],
    "standard.yaml": ["decoder.0.add-norm-3", "decoder.1.add-norm-3"],
    "pre-norm.yaml": ["decoder.0.residual-3"],
    "gpt-style.yaml": ["decoder.0.residual-2", "decoder.1.residual-2"],
    "llama-style.yaml": ["decoder.0.residual-2", "decoder.1.residual-2"],
    "marian-style.yaml": ["decoder.0.add-norm-3"],
    "longer-sentence.yaml": ["decoder.0.add-norm-3"],
}


def _by_hand(trace: Trace, stages: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's logits and probabilities, recomputed from the trace with plain NumPy: the final
    norm written out (LayerNorm's mean and population variance, or RMSNorm's mean square), x·W + b,
    and the softmax as exp(z − max) / Σ."""
    m = trace.config.model
    out = trace["output.logits"]
    W, b = out["W"], out["b"][0] if "b" in out else 0.0
    logits, probabilities = [], []
    for sid in stages:
        x = trace[sid]["output"].astype(np.float64)
        if m.has_final_norm:
            top = trace["decoder.final-norm"]
            gamma = top["gamma"][0]
            if m.norm == "layernorm":
                mean = x.mean(axis=1, keepdims=True)
                var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
                x = (x - mean) / np.sqrt(var + m.layer_norm_eps) * gamma + top["beta"][0]
            else:
                x = x / np.sqrt((x**2).mean(axis=1, keepdims=True) + m.layer_norm_eps) * gamma
        z = np.einsum("id,dv->iv", x, W) + b
        e = np.exp(z - z.max(axis=1, keepdims=True))
        logits.append(z)
        probabilities.append(e / e.sum(axis=1, keepdims=True))
    return np.array(logits), np.array(probabilities)


@pytest.mark.parametrize("name", sorted(LAYER_OUTPUTS))
def test_the_lens_equals_projecting_the_recorded_outputs_by_hand(name: str) -> None:
    trace = run_forward(load_config(ROOT / "configs" / name))
    lens = logit_lens(trace)
    assert list(lens.stages) == LAYER_OUTPUTS[name]
    assert lens.norm == ("decoder.final-norm" if trace.config.model.has_final_norm else None)
    logits, probabilities = _by_hand(trace, LAYER_OUTPUTS[name])
    assert np.abs(lens.logits - logits).max() <= 1e-12
    assert np.abs(lens.probabilities - probabilities).max() <= 1e-12
    # the residual is the recorded output, untouched by the norm
    for layer, sid in enumerate(lens.stages):
        assert np.array_equal(lens.residual[layer], trace[sid]["output"])
    # its last layer is the model's own prediction
    assert np.abs(lens.logits[-1] - trace["output.logits"]["logits"]).max() <= 1e-12
    assert np.abs(lens.probabilities[-1] - trace["output.probabilities"]["probabilities"]).max() <= 1e-12
    # the next token at each position: the sentence's
    assert lens.expected == (*trace.target_ids[1:], None)


def test_top_tokens_and_rank_by_hand() -> None:
    p = np.array([[[0.1, 0.4, 0.4, 0.1], [0.7, np.nan, 0.2, 0.1]]])
    assert top_tokens(p, 1).tolist() == [[[1], [0]]]  # ties: the lower id, as argmax; NaN is the smallest
    assert top_tokens(p, 3).tolist() == [[[1, 2, 0], [0, 2, 3]]]
    for row in p[0]:
        assert top_tokens(row[None, None], 2)[0, 0].tolist() == top_k(row, 2).tolist()
    lens = logit_lens(run_forward(Config()))
    row = lens.probabilities[0, 1]
    order = sorted(range(len(row)), key=lambda j: (-row[j], j))
    assert [lens.rank(0, 1, j) for j in order] == list(range(1, len(row) + 1))


def test_gpt2_every_layer_equals_transformers_hidden_states_through_ln_f_and_lm_head(gpt2) -> None:
    import torch

    from tests.tiny_gpt2 import LAYERS
    from transformer_walkthrough.checkpoints.run import walk_prompt

    folder, reference = gpt2[0]["saved"], gpt2[1]
    trace = walk_prompt(str(folder), "The cat is sleeping comfortably.", "float64").trace
    lens = logit_lens(trace)
    assert lens.layers == LAYERS and lens.norm == "decoder.final-norm"
    with torch.no_grad():
        out = reference(torch.tensor([list(trace.target_ids)]), output_hidden_states=True)
        # hidden_states[n + 1] is block n's output; transformers applies ln_f to the last one itself
        expected = [
            reference.lm_head(reference.transformer.ln_f(h))[0].numpy() for h in out.hidden_states[1:-1]
        ]
        expected.append(out.logits[0].numpy())
    for layer in range(LAYERS):
        assert np.abs(lens.logits[layer] - expected[layer]).max() <= 1e-9, layer
    softmax = torch.softmax(out.logits[0], dim=-1).numpy()
    assert np.abs(lens.probabilities[-1] - softmax).max() <= 1e-12
    assert np.abs(lens.probabilities[-1] - trace["output.probabilities"]["probabilities"]).max() <= 1e-12


def test_gpt2_float32_last_layer_equals_the_models_logits(gpt2) -> None:
    from transformer_walkthrough.checkpoints.run import walk_prompt

    trace = walk_prompt(str(gpt2[0]["saved"]), "the quick brown fox").trace  # float32, the default
    lens = logit_lens(trace)
    logits = trace["output.logits"]["logits"]
    assert lens.logits.dtype == np.float32
    assert np.abs(lens.logits[-1] - logits).max() <= 1e-5 * max(1.0, float(np.abs(logits).max()))


def test_explain_a_lens_cell_names_the_stage_the_norm_and_the_column_and_adds_up() -> None:
    trace = run_forward(load_config(ROOT / "configs" / "gpt-style.yaml"))
    lens = logit_lens(trace)
    layer, position = 0, 2
    token = int(np.argmax(lens.probabilities[layer, position]))
    word = trace.vocabulary[token]
    lines = explain_lens(trace, lens, layer, position, digits=6)
    text = "\n".join(lines)
    assert lines[0].startswith(f"logit lens · layer 0, position 2 ({trace.target_tokens[2]}) · p({word}) = ")
    assert "the output of decoder.0.residual-2, row 2" in text
    assert "LayerNorm(x), with the gamma and beta of decoder.final-norm" in text
    assert f"column {token} ({word}) of output.logits's W" in text and "W = Eᵀ, tied" in text
    # the numbers it shows are the lens's own: the logit's sum, the softmax's quotient
    z = float(lens.logits[layer, position, token])
    assert any(line.strip().startswith("= ") and line.rstrip().endswith(f"= {z:.6f}") for line in lines)
    p = float(lens.probabilities[layer, position, token])
    quotients = [re.fullmatch(r"\s*p\[.*\] = ([\d.]+) / ([\d.]+) = ([\d.]+)", line) for line in lines]
    quotient = next(q for q in quotients if q is not None)
    assert abs(float(quotient[1]) / float(quotient[2]) - p) <= 1e-5 and abs(float(quotient[3]) - p) <= 5e-7
    # another token of the same cell, and a post-norm model: no norm, x itself projected
    other = explain_lens(trace, lens, 1, 0, token=5)
    assert f"p({trace.vocabulary[5]}) = {lens.probabilities[1, 0, 5]:.4f}" in other[0]
    assert "The last layer's lens is the model's own prediction" in "\n".join(other)
    plain = "\n".join(explain_lens(run_forward(Config()), logit_lens(run_forward(Config())), 0, 1))
    assert "no final norm" in plain and "the output of decoder.0.add-norm-3, row 1 (sleeping)" in plain


# ---------------------------------------------------------------------------------------------
# The command.
# ---------------------------------------------------------------------------------------------


def _ok(runner: CliRunner, *args: str, columns: str = "100") -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": columns})
    assert result.exit_code == 0, result.stderr or result.stdout
    assert not ANSI.search(result.stdout)  # a pipe: plain
    return result.stdout


def test_lens_table_shows_every_layer_and_position_with_the_top_token(runner: CliRunner) -> None:
    config = ROOT / "configs" / "standard.yaml"
    trace = run_forward(load_config(config))
    _, probabilities = _by_hand(trace, LAYER_OUTPUTS["standard.yaml"])
    out = _ok(runner, "lens", "-c", str(config))
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("after"))
    assert header.split() == ["after", *trace.target_tokens]
    for layer in range(2):
        at = next(k for k, line in enumerate(lines) if line.lstrip().startswith(f"layer {layer} "))
        words, numbers = lines[at].split()[2:], lines[at + 1].split()
        best = probabilities[layer].argmax(axis=1)
        assert words == [trace.vocabulary[t] for t in best]
        assert [n for n in numbers if n != "✓"] == [
            f"{probabilities[layer, i, t]:.2f}" for i, t in enumerate(best)
        ]
        marks = [
            i for i, t in enumerate(best) if i + 1 < len(trace.target_ids) and t == trace.target_ids[i + 1]
        ]
        assert numbers.count("✓") == len(marks)
    nexts = next(line for line in lines if line.lstrip().startswith("next token")).split()[2:]
    assert nexts == [*trace.target_tokens[1:], "—"]
    assert "decoder's layers" in out and "the output of decoder.0.add-norm-3 and decoder.1.add-norm-3" in out


def test_lens_summarises_positions_that_do_not_fit_and_full_shows_them(runner: CliRunner) -> None:
    config = str(ROOT / "configs" / "gpt-style.yaml")
    narrow = _ok(runner, "lens", "-c", config, columns="60")
    assert "…" in narrow and "left out of 7" in narrow
    wide = _ok(runner, "lens", "-c", config, "--full", columns="60")
    header = next(line for line in wide.splitlines() if line.lstrip().startswith("after"))
    assert "…" not in header and len(header.split()) == 8


def test_lens_position_lists_the_top_k_and_the_next_tokens_rank(runner: CliRunner) -> None:
    config = ROOT / "configs" / "standard.yaml"
    trace = run_forward(load_config(config))
    _, probabilities = _by_hand(trace, LAYER_OUTPUTS["standard.yaml"])
    out = _ok(runner, "lens", "-c", str(config), "--position", "1", "--top-k", "3")
    assert "Logit lens at position 1 (sleeping): the next token is comfortably" in out
    nxt = trace.vocabulary.index("comfortably")
    for layer in range(2):
        row = probabilities[layer, 1]
        best = sorted(range(len(row)), key=lambda j: (-row[j], j))
        line = next(line for line in out.splitlines() if line.lstrip().startswith(f"layer {layer} "))
        for t in best[:3]:
            assert f"{trace.vocabulary[t]} {row[t]:.2f}" in line
        assert line.split()[-2:] == [f"{row[nxt]:.2f}", str(best.index(nxt) + 1)]
    last = _ok(runner, "lens", "--position", "3")  # the last position: nothing comes next
    assert "no next token is known" in last and "rank" not in last


def test_lens_explain_through_the_cli(runner: CliRunner) -> None:
    trace = run_forward(Config())
    lens = logit_lens(trace)
    out = _ok(runner, "lens", "--explain", "0,sleeping", "--token", "<end>")
    p = lens.probabilities[0, 1, trace.vocabulary.index("<end>")]
    assert out.startswith(f"logit lens · layer 0, position 1 (sleeping) · p(<end>) = {p:.4f}")
    assert "column 1 (<end>) of output.logits's W" in out


def test_lens_on_every_checkpoint_family(runner: CliRunner, gpt2, marian, llama_family) -> None:
    gpt = _ok(runner, "lens", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat is", "--full")
    assert "decoder.final-norm" in gpt and "layer 1 " in gpt
    translated = runner.invoke(
        app, ["lens", "--model", str(marian[0]), "--source", "the cat", "--target", "die Katze"]
    )
    assert translated.exit_code == 0, translated.stderr
    assert "decoder.0.add-norm-3" in translated.stdout and "no final norm" in translated.stdout
    llama = _ok(
        runner, "lens", "--model", str(llama_family["llama"]), "--prompt", "The cat", "--position", "1"
    )
    assert "Logit lens at position 1" in llama and "decoder.final-norm" in llama


@pytest.mark.parametrize(
    "args, message",
    [
        (["--position", "4"], "--position: the decoder has positions 0 to 3, got 4"),
        (["--position", "-1"], "--position: must be 0 or more, got -1"),
        (["--top-k", "0"], "--top-k: must be 1 or more, got 0"),
        (["--top-k", "8"], "--top-k: the vocabulary has 7 tokens, got 8"),
        (["--explain", "1,0"], "--explain: the decoder has layers 0 to 0, got 1"),
        (["--explain", "0,9"], "--explain: the decoder has positions 0 to 3, got 9"),
        (["--explain", "0"], "give a layer and a position"),
        (["--explain", "0,1", "--token", "dog"], "--token 'dog' is not in the vocabulary"),
        (["--token", "cat"], "--token says which token --explain explains"),
        (["-c", str(ROOT / "configs" / "article-flatten.yaml")], "the flatten head's W reads every position"),
    ],
)
def test_lens_bad_input_is_one_line_and_exit_code_2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["lens", *args])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_report_has_the_lens_section_shaded_by_probability() -> None:
    from transformer_walkthrough.views.documents import _STEPS

    trace = run_forward(load_config(ROOT / "configs" / "standard.yaml"))
    lens = logit_lens(trace)
    page = to_html(trace, list(trace))
    section = page[page.index('<section id="lens">') : page.index('<section id="attention">')]
    assert '<a href="#lens">Logit lens</a>' in page
    cells = re.findall(r'<td class="g(\d+)( right)?" title="([^"]*)"><b>([^<]*)</b> ([\d.]+)', section)
    assert len(cells) == lens.layers * len(trace.target_tokens)
    best = lens.top(1)[..., 0]
    for (shade, right, title, word, shown), (layer, i) in zip(
        cells, [(n, i) for n in range(lens.layers) for i in range(len(trace.target_tokens))], strict=True
    ):
        q = lens.probabilities[layer, i, best[layer, i]]
        assert html.unescape(word) == trace.vocabulary[best[layer, i]] and shown == f"{q:.2f}"
        assert int(shade) == round(q * _STEPS)  # the report's fixed 0–1 scale
        assert bool(right) == (lens.expected[i] == best[layer, i])
        assert title.endswith(f"walkthrough lens --explain {layer},{i}")
    # a selection of stages, or a worksheet, has neither the lens nor the attention overview
    part = to_html(trace, trace.select(["masked-attention"]))
    assert 'id="lens"' not in part and 'id="attention"' not in part
