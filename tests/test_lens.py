"""The logit lens: equal to projecting the recorded stage outputs by hand, its last layer equal to the
model's own logits (and, for GPT-2 and the BERT family, every layer equal to transformers' hidden
states through ln_f and lm_head, or the masked-language-model head), its table, its --position view,
explain on a cell, the report's section, and bad input."""

from __future__ import annotations

import html
import math
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
from transformer_walkthrough.views.documents.report import to_html
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
    "bert-style.yaml": ["encoder.0.add-norm-2", "encoder.1.add-norm-2"],  # the encoder: no decoder
}
ERF = np.frompyfunc(math.erf, 1, 1)


def _norm_by_hand(x: np.ndarray, stage, m) -> np.ndarray:
    """LayerNorm (mean and population variance) or RMSNorm (mean square), with the stage's gamma
    (and beta)."""
    gamma = stage["gamma"][0]
    if m.norm == "layernorm":
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return (x - mean) / np.sqrt(var + m.layer_norm_eps) * gamma + stage["beta"][0]
    return x / np.sqrt((x**2).mean(axis=1, keepdims=True) + m.layer_norm_eps) * gamma


def _by_hand(trace: Trace, stages: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's logits and probabilities, recomputed from the trace with plain NumPy: the final
    norm written out, BERT's transform (x·W_dense + b_dense, GELU as x·(1 + erf(x/√2))/2 with
    ``math.erf``, LayerNorm), x·W + b, and the softmax as exp(z − max) / Σ."""
    m = trace.config.model
    side = "encoder" if m.encoder_only else "decoder"
    out = trace["output.logits"]
    W, b = out["W"], out["b"][0] if "b" in out else 0.0
    logits, probabilities = [], []
    for sid in stages:
        x = trace[sid]["output"].astype(np.float64)
        if m.has_final_norm:
            x = _norm_by_hand(x, trace[f"{side}.final-norm"], m)
        if m.output_transform:
            top = trace["output.transform"]
            dense = np.einsum("id,de->ie", x, top["W_dense"]) + top["b_dense"][0]
            x = _norm_by_hand(dense * (1 + ERF(dense / np.sqrt(2)).astype(np.float64)) / 2, top, m)
        z = np.einsum("id,dv->iv", x, W) + b
        e = np.exp(z - z.max(axis=1, keepdims=True))
        logits.append(z)
        probabilities.append(e / e.sum(axis=1, keepdims=True))
    return np.array(logits), np.array(probabilities)


@pytest.mark.parametrize("name", sorted(LAYER_OUTPUTS))
def test_the_lens_equals_projecting_the_recorded_outputs_by_hand(name: str) -> None:
    trace = run_forward(load_config(ROOT / "configs" / name))
    lens = logit_lens(trace)
    m = trace.config.model
    assert list(lens.stages) == LAYER_OUTPUTS[name]
    assert lens.side == ("encoder" if m.encoder_only else "decoder")
    assert lens.norm == (f"{lens.side}.final-norm" if m.has_final_norm else None)
    assert lens.transform == ("output.transform" if m.output_transform else None)
    logits, probabilities = _by_hand(trace, LAYER_OUTPUTS[name])
    assert np.abs(lens.logits - logits).max() <= 1e-12
    assert np.abs(lens.probabilities - probabilities).max() <= 1e-12
    # the residual is the recorded output, untouched by the norm
    for layer, sid in enumerate(lens.stages):
        assert np.array_equal(lens.residual[layer], trace[sid]["output"])
    # its last layer is the model's own prediction
    assert np.abs(lens.logits[-1] - trace["output.logits"]["logits"]).max() <= 1e-12
    assert np.abs(lens.probabilities[-1] - trace["output.probabilities"]["probabilities"]).max() <= 1e-12
    if m.encoder_only:  # the word at each position: the one read there, and at the blank the hidden one
        config = trace.config
        words = [config.index[w] for w in ("[CLS]", "the", "cat", "is", "sleeping", "comfortably", "[SEP]")]
        assert lens.expected == tuple(words) and lens.tokens == trace.source_tokens
        assert trace.source_ids[4] == config.mask_id and lens.ids == trace.source_ids
    else:  # the next token at each position: the sentence's
        assert lens.expected == (*trace.target_ids[1:], None) and lens.ids == trace.target_ids


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


def _mlm_head(reference, name: str):
    """transformers' masked-language-model head of each family: hidden states -> logits."""
    if name == "bert":
        return reference.cls  # BertOnlyMLMHead: transform (dense, GELU, LayerNorm), then the decoder
    if name == "roberta":
        return reference.lm_head  # dense, GELU, LayerNorm, decoder
    import torch.nn.functional as functional  # DistilBERT's head is four modules of the model itself

    return lambda h: reference.vocab_projector(
        reference.vocab_layer_norm(functional.gelu(reference.vocab_transform(h)))
    )


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert"])
def test_bert_family_every_layer_equals_transformers_hidden_states_through_the_mlm_head(
    bert_family, name: str
) -> None:
    import torch
    import transformers

    from transformer_walkthrough.checkpoints.run import walk_prompt

    folder = bert_family[name]
    mask = transformers.AutoTokenizer.from_pretrained(folder).mask_token
    trace = walk_prompt(str(folder), f"The cat is {mask} comfortably.", "float64").trace
    lens = logit_lens(trace)
    reference = transformers.AutoModelForMaskedLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    assert lens.side == "encoder" and lens.transform == "output.transform" and lens.norm is None
    layers = reference.config.n_layers if name == "distilbert" else reference.config.num_hidden_layers
    assert lens.layers == layers
    with torch.no_grad():
        out = reference(torch.tensor([list(trace.source_ids)]), output_hidden_states=True)
        head = _mlm_head(reference, name)
        expected = [head(h)[0].numpy() for h in out.hidden_states[1:]]  # [n + 1]: layer n's output
    for layer in range(lens.layers):
        assert np.abs(lens.logits[layer] - expected[layer]).max() <= 1e-9, (name, layer)
    assert np.abs(lens.logits[-1] - out.logits[0].numpy()).max() <= 1e-9
    blank = trace.source_ids.index(trace.config.mask_id)
    assert lens.expected[blank] is None  # a prompt's blank: the hidden word is not known
    assert all(lens.expected[i] == t for i, t in enumerate(trace.source_ids) if i != blank)


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
    assert "LayerNorm(X), X = x, with the gamma and beta of decoder.final-norm" in text
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


def test_explain_a_bert_lens_cell_goes_through_the_transform_with_its_own_numbers() -> None:
    trace = run_forward(load_config(ROOT / "configs" / "bert-style.yaml"))
    lens = logit_lens(trace)
    layer, position = 0, 4  # the blank
    token = trace.config.index["sleeping"]
    lines = explain_lens(trace, lens, layer, position, token=token, digits=6)
    text = "\n".join(lines)
    assert lines[0].startswith(
        f"logit lens · layer 0, position 4 ([MASK]) · p(sleeping) = {lens.probabilities[0, 4, token]:.6f}"
    )
    assert "What the model would predict at position 4 ([MASK]) if it stopped after encoder layer 0" in text
    assert "the output of encoder.0.add-norm-2, row 4 ([MASK])" in text
    assert "BERT's transform (output.transform) of X = x: dense layer, activation, norm" in text
    # the transform's column j, by hand: the dense sum, GELU's Φ, the norm: the values it prints are these
    top = trace["output.transform"]
    x = lens.residual[layer][position]
    j = int(re.search(r"y\[(\d+)\], the largest term", text)[1])
    dense = float(x @ top["W_dense"][:, j] + top["b_dense"][0, j])
    assert f"+ b_dense[{j}] " in text and text.count(f"= {dense:.6f}".replace("-", "−")) >= 1
    y = lens.read[layer, position]
    assert f"= {y[j]:.6f}".replace("-", "−") in text
    z = float(lens.logits[layer, position, token])
    assert any(line.rstrip().endswith(f"= {z:.6f}".replace("-", "−")) for line in lines)
    assert "encoder.embedding/E" in text and "+ b[" in text  # tied W = Eᵀ, and BERT's output bias
    assert "The word hidden here: sleeping" in text
    assert "The word here: is" in "\n".join(explain_lens(trace, lens, 1, 3))


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


def test_lens_on_every_checkpoint_family(runner: CliRunner, gpt2, marian, llama_family, bert_family) -> None:
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
    from transformer_walkthrough.checkpoints.run import walk_prompt

    folder = bert_family["bert"]
    trace = walk_prompt(str(folder), "The cat is [MASK] comfortably.").trace
    lens = logit_lens(trace)
    bert = _ok(runner, "lens", "--model", str(folder), "--prompt", "The cat is [MASK] comfortably.", "--full")
    lines = bert.splitlines()
    assert "Logit lens: the most likely word at each position, after each layer" in bert
    flat = " ".join(bert.split())  # the sentence under the table wraps at the width
    assert "encoder.0.add-norm-2" in flat and "BERT's transform (output.transform)" in flat
    header = next(line for line in lines if line.lstrip().startswith("after"))
    assert header.split() == ["after", *trace.source_tokens]
    last = next(k for k, line in enumerate(lines) if line.lstrip().startswith(f"layer {lens.layers - 1} "))
    best = lens.top(1)[-1, :, 0]
    assert lines[last].split()[2:] == [trace.vocabulary[t] for t in best]
    words = next(line for line in lines if line.lstrip().startswith("true word")).split()[2:]
    blank = trace.source_ids.index(trace.config.mask_id)
    assert words[blank] == "—" and words[:blank] == [trace.vocabulary[t] for t in trace.source_ids[:blank]]
    # a BertModel with no head has nothing to turn its layers into words
    encoder = runner.invoke(app, ["lens", "--model", str(bert_family["bert-encoder"]), "--prompt", "The cat"])
    assert encoder.exit_code == 2 and encoder.stdout == ""
    assert (
        encoder.stderr.count("\n") == 1 and "this model has no output layer (task: encode)" in encoder.stderr
    )


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
        (
            ["-c", str(ROOT / "configs" / "bert-style.yaml"), "--position", "7"],
            "--position: the encoder has positions 0 to 6, got 7",
        ),
        (
            ["-c", str(ROOT / "configs" / "bert-style.yaml"), "--explain", "2,0"],
            "--explain: the encoder has layers 0 to 1, got 2",
        ),
        (
            ["-c", str(ROOT / "configs" / "bert-style.yaml"), "--explain", "0,dog"],
            "--explain: 'dog' is not a position (0 to 6) nor a token of the encoder's input",
        ),
    ],
)
def test_lens_bad_input_is_one_line_and_exit_code_2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["lens", *args])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_report_has_the_lens_section_shaded_by_probability() -> None:
    from transformer_walkthrough.views.documents.shades import STEPS

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
        assert int(shade) == round(q * STEPS)  # the report's fixed 0–1 scale
        assert bool(right) == (lens.expected[i] == best[layer, i])
        assert title.endswith(f"walkthrough lens --explain {layer},{i}")
    # a selection of stages, or a worksheet, has neither the lens nor the attention overview
    part = to_html(trace, trace.select(["masked-attention"]))
    assert 'id="lens"' not in part and 'id="attention"' not in part


# ---------------------------------------------------------------------------------------------
# The Markdown and LaTeX documents end on the lens too.
# ---------------------------------------------------------------------------------------------


def _md_lens_rows(md: str) -> list[list[str]]:
    """The cells of the "Logit lens" section's table, row by row (the header first, no rule)."""
    section = md[md.index("\n## Logit lens\n") :]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


@pytest.mark.parametrize("name", ["standard.yaml", "bert-style.yaml", "gpt-style.yaml"])
def test_markdown_ends_on_the_lens_with_its_numbers(name: str) -> None:
    from transformer_walkthrough.views.documents.markdown import to_markdown
    from transformer_walkthrough.views.documents.worksheet import worksheet

    trace = run_forward(load_config(ROOT / "configs" / name))
    _, probabilities = _by_hand(trace, LAYER_OUTPUTS[name])
    md = to_markdown(trace, list(trace))
    assert md.index("\n## Prediction\n") < md.index("\n## Logit lens\n")
    header, *layers, expected = _md_lens_rows(md)
    tokens = trace.source_tokens if trace.config.model.encoder_only else trace.target_tokens
    assert header == ["after", *(f"`{t}`" for t in tokens)]
    assert len(layers) == len(LAYER_OUTPUTS[name])
    truth = logit_lens(trace).expected
    for layer, row in enumerate(layers):
        assert row[0] == f"layer {layer}"
        for i, cell in enumerate(row[1:]):
            t = int(np.argmax(probabilities[layer, i]))
            mark = " ✓" if truth[i] == t else ""
            assert cell == f"**`{trace.vocabulary[t]}`** {probabilities[layer, i, t]:.2f}{mark}", (layer, i)
    assert expected[1:] == ["—" if t is None else f"`{trace.vocabulary[t]}`" for t in truth]
    assert expected[0] == ("true word" if trace.config.model.encoder_only else "next token")
    # a selection of stages, or a worksheet, does not end on it: its last row is the prediction
    attention = next(s.kind for s in trace if "attention" in s.kind)
    assert "## Logit lens" not in to_markdown(trace, trace.select([attention]))
    sheet = to_markdown(trace, list(trace), worksheet=worksheet(trace, list(trace), exercise=2))
    assert "?1" in sheet and "## Logit lens" not in sheet


def test_documents_summarise_a_long_lens_and_full_keeps_it() -> None:
    from transformer_walkthrough.views.documents.latex import to_latex
    from transformer_walkthrough.views.documents.markdown import to_markdown

    config = load_config(ROOT / "configs" / "standard.yaml")
    trace = run_forward(config, target_ids=[k % 7 for k in range(20)])
    header, *_ = _md_lens_rows(to_markdown(trace, list(trace)))
    assert header[1:] == [*(f"`{t}`" for t in trace.target_tokens[:8]), "…",
                          *(f"`{t}`" for t in trace.target_tokens[12:])]  # fmt: skip
    md = to_markdown(trace, list(trace))
    assert "Positions 8 to 11 are left out of 20 (…); export with --full to keep them." in md
    assert len(_md_lens_rows(to_markdown(trace, list(trace), full=True))[0]) == 21
    latex = to_latex(trace, list(trace))
    assert "Positions 8 to 11 are left out of 20 (\\ldots{}); export with -{}-full" in latex
    assert "\\begin{tabular}{l" + "l" * 17 + "}" in latex
    assert "\\begin{tabular}{l" + "l" * 20 + "}" in to_latex(trace, list(trace), full=True)


def test_latex_lens_compiles_and_reads_back(tmp_path: Path) -> None:
    import subprocess

    from tests.test_documents import compile_latex, need, overfull
    from transformer_walkthrough.views.documents.latex import to_latex

    trace = run_forward(load_config(ROOT / "configs" / "bert-style.yaml"))
    lens = logit_lens(trace)
    log, pdf = compile_latex(to_latex(trace, list(trace)), tmp_path)
    assert not overfull(log)
    text = subprocess.run(
        [need("pdftotext"), "-layout", str(pdf), "-"], capture_output=True, text=True
    ).stdout
    section = text[text.index("Logit lens") :]
    best = lens.top(1)[..., 0]
    for layer in range(lens.layers):
        row = next(line for line in section.splitlines() if line.strip().startswith(f"layer {layer} "))
        shown = [
            f"{trace.vocabulary[t]} {lens.probabilities[layer, i, t]:.2f}" for i, t in enumerate(best[layer])
        ]
        assert " ".join(row.split()[2:]).replace(" ✓", "") == " ".join(shown), row
    assert "true word" in section and "[MASK]" in section


def test_a_checkpoint_reports_lens_cell_names_the_command_that_explains_it(
    runner: CliRunner, gpt2, tmp_path: Path
) -> None:
    import shlex

    folder = str(gpt2[0]["saved"])
    page = tmp_path / "report.html"
    result = runner.invoke(app, ["export", str(page), "--model", folder, "--prompt", "The cat is"])
    assert result.exit_code == 0, result.stderr
    section = page.read_text(encoding="utf-8").split('<section id="lens">')[1].split("</section>")[0]
    tips = [html.unescape(t) for t in re.findall(r'title="([^"]*)"', section)]
    command = tips[1].split(" · ")[-1]  # layer 0, position 1
    assert command == f"walkthrough lens --explain 0,1 --model {shlex.quote(folder)} --prompt 'The cat is'"
    shown = runner.invoke(app, shlex.split(command)[1:])
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.startswith("logit lens · layer 0, position 1 (")


def test_explain_names_a_repeated_token_by_its_position(runner: CliRunner, tmp_path: Path) -> None:
    # two blanks: both rows read [MASK], labelled [MASK]@2 and [MASK]@4 (trace.token_labels)
    config = tmp_path / "two-blanks.yaml"
    text = (ROOT / "configs" / "bert-style.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace("blanks: [3]", "blanks: [1, 3]"), encoding="utf-8")
    result = runner.invoke(app, ["lens", "-c", str(config), "--explain", "0,[MASK]"])
    assert result.exit_code == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert "'[MASK]' is at 2 positions: give one of [MASK]@2, [MASK]@4, or its position" in result.stderr
    shown = _ok(runner, "lens", "-c", str(config), "--explain", "0,[MASK]@4")
    assert shown.startswith("logit lens · layer 0, position 4 ([MASK]@4) · p(")
    assert "The word hidden here: sleeping" in shown


def test_explain_with_a_final_norm_and_the_transform_writes_out_every_row_it_reads(tmp_path: Path) -> None:
    # a pre-norm BERT: the encoder ends on a final norm, then BERT's transform reads that norm's row
    config = tmp_path / "pre-norm-bert.yaml"
    text = (ROOT / "configs" / "bert-style.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace("model:\n", "model:\n  norm_first: true\n"), encoding="utf-8")
    trace = run_forward(load_config(config))
    lens = logit_lens(trace)
    assert lens.norm == "encoder.final-norm" and lens.transform == "output.transform"
    _, probabilities = _by_hand(trace, ["encoder.0.residual-2", "encoder.1.residual-2"])
    assert np.abs(lens.probabilities - probabilities).max() <= 1e-12
    lines = explain_lens(trace, lens, 0, 2, digits=6)
    text = "\n".join(lines)
    assert "LayerNorm(X), X = x, with the gamma and beta of encoder.final-norm" in text
    assert "BERT's transform (output.transform) of X = the final norm's output" in text
    m = trace.config.model
    normed = _norm_by_hand(lens.residual[0][2:3].astype(np.float64), trace["encoder.final-norm"], m)
    # every number the transform's dense layer then reads, each to 6 decimals or more
    shown = next(line for line in lines if re.fullmatch(r"    output = [−\d., ]+", line))
    printed = [float(n) for n in re.findall(r"-?\d+\.\d+", shown.replace("−", "-"))]
    assert len(printed) == len(normed[0]) and np.abs(np.array(printed) - normed[0]).max() <= 1e-6
