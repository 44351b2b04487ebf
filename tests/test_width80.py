"""At 80 columns, the width of a pipe, nothing wraps inside an entry: a word keeps its number, a
matrix its shape, a check its sentence. Snapshots written by hand (the numbers are the default
config's: seed 42, untrained)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transformer_walkthrough.cli import app
from transformer_walkthrough.views.widgets import pack, wrap_explanation

RULE = "─" * 80
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# A difference of two computations of numbers near 1 that is only rounding: its digits (0.0e+00,
# 2.2e-16, 4.4e-16, …) change with the CPU, the BLAS kernel and its threads, so a snapshot masks
# them and bounds them instead. Measured: at most ~2e-15 whatever kernel OpenBLAS or NumPy picks.
ROUNDING_BOUND = 1e-12
FIGURE = re.compile(r"(?<= )\d\.\de[+-]\d\d(?=   [✓✗]$)")  # a check's max |diff|, before its mark
COPY = re.compile(r"( equals? the \w+ of [\w.-]+|rows of E) +\S+   [✓✗]$")  # a check of a copy


def masked(line: str) -> str:
    """A verify check's line with its figure bounded by ROUNDING_BOUND and replaced by ROUNDED,
    which has the figure's width (the column stays where it is)."""
    figure = FIGURE.search(line)
    if figure is None:
        return line
    assert float(figure[0]) < ROUNDING_BOUND, line
    return line[: figure.start()] + "ROUNDED" + line[figure.end() :]


def output(runner: CliRunner, *args: str) -> list[str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line in lines:
        assert len(line) <= 80 and line == line.rstrip(), repr(line)
    return lines


def test_the_prediction_wraps_between_entries(runner: CliRunner) -> None:
    lines = output(runner, "run")
    assert lines[-11:] == [
        "Prediction: the most likely next word after each decoder position",
        " after         predicted        p   expected          top 3",
        RULE,
        " <start>       comfortably   0.30   sleeping      ✗   comfortably 0.30,",
        "                                                      <end> 0.25, sleeping 0.12",
        " sleeping      comfortably   0.30   comfortably   ✓   comfortably 0.30,",
        "                                                      <end> 0.24, sleeping 0.13",
        " comfortably   comfortably   0.29   <end>         ✗   comfortably 0.29,",
        "                                                      <end> 0.22, sleeping 0.13",
        " <end>         comfortably   0.29   —                 comfortably 0.29,",
        "                                                      <end> 0.23, sleeping 0.12",
    ]


def test_generate_wraps_between_entries(runner: CliRunner) -> None:
    lines = output(runner, "generate", "--max-len", "3")
    # the two computations differ by rounding only, whose digits are the BLAS's business, not this test's
    gap = re.fullmatch(r"\(max \|diff\| (\S+)\): the causal mask .*", lines[12])
    assert gap and float(gap[1]) < ROUNDING_BOUND, lines[12]
    lines[12] = lines[12].replace(gap[1], "ROUNDING")
    assert lines[1:] == [
        "Greedy decoding: the decoder's own output fed back, one token at a time",
        " step   decoder input                 top 3 of the last row         chosen",
        RULE,
        "    0   <start>                       comfortably 0.30,             comfortably",
        "                                      <end> 0.25, sleeping 0.12",
        "    1   <start> comfortably           comfortably 0.30,             comfortably",
        "                                      <end> 0.23, sleeping 0.13",
        "    2   <start> comfortably           comfortably 0.29,             comfortably",
        "        comfortably                   <end> 0.21, sleeping 0.13",
        "the cat is → comfortably comfortably comfortably",
        "Step i equals row i of one teacher-forced pass over the final input",
        "(max |diff| ROUNDING): the causal mask keeps row i from seeing anything after",
        "position i.",
    ]


def test_stages_wraps_between_matrices(runner: CliRunner) -> None:
    lines = output(runner, "stages")
    assert lines[4:12] == [
        "encoder.0.self-attention      self-attention        X 3×4, W_Q1 4×2, W_K1 4×2,",
        "                                                    W_V1 4×2, Q1 3×2, K1 3×2,",
        "                                                    V1 3×2, S1 3×3, A1 3×3,",
        "                                                    O1 3×2, W_Q2 4×2, W_K2 4×2,",
        "                                                    W_V2 4×2, Q2 3×2, K2 3×2,",
        "                                                    V2 3×2, S2 3×3, A2 3×3,",
        "                                                    O2 3×2, concat 3×4, W_O 4×4,",
        "                                                    output 3×4",
    ]


def test_verify_reads_as_sentences_one_line_each(runner: CliRunner) -> None:
    lines = output(runner, "verify")
    # What is copied, not computed, is the same bit for bit on any machine: a stage's input and the
    # output it came from, the tokens' rows of E. Every other check's figure is rounding only.
    copies = [line for line in lines if COPY.search(line)]
    assert len(copies) == 22 and all(FIGURE.search(line)[0] == "0.0e+00" for line in copies), copies
    assert [masked(line) for line in lines[:12]] == [
        "stage · what was checked                                     max |diff|",
        "─" * 75,
        "encoder.embedding",
        "  output equals the tokens' rows of E                           ROUNDED   ✓",
        "encoder.positional-encoding",
        "  PE recomputed by sin and cos; output equals X + PE            ROUNDED   ✓",
        "  X equals the output of encoder.embedding                      ROUNDED   ✓",
        "encoder.0.self-attention",
        "  head 1: Q, K, V, S, A and O recomputed                        ROUNDED   ✓",
        "  head 2: Q, K, V, S, A and O recomputed                        ROUNDED   ✓",
        "  concat sets the heads side by side; output = concat·W_O       ROUNDED   ✓",
        "  X equals the output of encoder.positional-encoding            ROUNDED   ✓",
    ]
    for line in lines:
        masked(line)  # every figure below the bound, not just the first few
    assert "  memory equals the output of encoder.0.add-norm-2" in "\n".join(lines)
    assert "  logits equal the logits of output.logits" in "\n".join(lines)


@pytest.mark.parametrize("config", ["gpt-style", "marian-style", "pre-norm", "standard"])
def test_verify_never_wraps_a_check(runner: CliRunner, config: str) -> None:
    lines = output(runner, "verify", "-c", str(CONFIGS / f"{config}.yaml"))
    for line in lines[2:-1]:  # a stage id alone, or a check that ends in its mark
        assert (line.startswith("  ") and line.endswith(("✓", "✗"))) or re.fullmatch(r"[\w.-]+", line), line


def test_explain_breaks_between_terms(runner: CliRunner) -> None:
    lines = output(runner, "explain", "-s", "decoder.0.masked-attention", "-m", "A1", "--cell", "1,0")
    assert lines == [
        "decoder.0.masked-attention · A1[sleeping, <start>] = A1[1, 0] = 0.4212",
        "A1 = softmax(S1+M), row by row: A1[i, j] = e^(S1+M)[i, j] / Σ_k e^(S1+M)[i, k]",
        "  row 1 of S1+M (sleeping): <start> −1.077374, sleeping −0.759369,",  # operands: 2 more decimals
        "      comfortably −∞, <end> −∞",
        "  subtract the row's largest value m = −0.7594 first: e^(x − m) / Σ e^(x − m) is",
        "      the same quotient, and no exp can overflow",
        "  each exp: e^(−0.318005) = 0.7276, e^0.0000 = 1.0000, e^(−∞) = 0.0000,",
        "      e^(−∞) = 0.0000",
        "  sum = 0.727599 + 1.0000 + 0.0000 + 0.0000 = 1.7276",
        "  A1[1, 0] = 0.727599 / 1.727599 = 0.4212",
    ]


def test_wrapping_rules_by_hand() -> None:
    assert pack(["a 1", "bb 2", "c 3"], ", ", 9) == ["a 1,", "bb 2, c 3"]
    assert pack(["a 1", "bb 2"], ", ", 80) == ["a 1, bb 2"]
    assert wrap_explanation("  x = 1 + 2 + 3", 9) == ["  x = 1", "      + 2", "      + 3"]
    assert wrap_explanation("  see A1[i, j] now", 14) == ["  see A1[i, j]", "      now"]


def test_explain_of_the_mask_breaks_between_words(runner: CliRunner) -> None:
    lines = output(runner, "explain", "-s", "decoder.0.masked-attention", "-m", "M", "--cell", "0,2")
    assert lines == [
        "decoder.0.masked-attention · M[<start>, comfortably] = M[0, 2] = −∞",
        "M[0, 2] = −∞: column 2 (comfortably) comes after row 0 (<start>), a word the",
        "    decoder must not see yet. Added to the score it makes −∞, and softmax turns",
        "    e^−∞ into a weight of exactly 0.",
    ]


def _after(lines: list[str], first: str, n: int) -> list[str]:
    """The ``n`` lines from the first that starts with ``first``."""
    k = next(k for k, line in enumerate(lines) if line.startswith(first))
    return lines[k : k + n]


def test_a_formula_wraps_under_a_hanging_indent_never_inside_an_aside(runner: CliRunner) -> None:
    gpt = output(runner, "run", "-c", str(CONFIGS / "gpt-style.yaml"))
    assert _after(gpt, "  Q_h = X·W_Qh + b_Qh", 2) == [
        "  Q_h = X·W_Qh + b_Qh,  K_h = X·W_Kh + b_Kh,  V_h = X·W_Vh + b_Vh",
        "      (h = 1 … num_heads)",
    ]
    halves = output(runner, "run", "-c", str(CONFIGS / "marian-style.yaml"))
    assert _after(halves, "  PE[pos, i]", 3) == [
        "  PE[pos, i]             = sin(pos / 10000^(2i/d_model))",
        "      (i < d_model/2: the sines first)",
        "  PE[pos, d_model/2 + i] = cos(pos / 10000^(2i/d_model))   (then the cosines)",
    ]
    flatten = output(runner, "run", "-c", str(CONFIGS / "article-flatten.yaml"))
    assert _after(flatten, "      (the article's leak", 3) == [  # an aside longer than a line: between words
        "      (the article's leak: one row of all positions, so the prediction sees the",
        "          future tokens, the very words it should predict; the paper's head",
        "          reads each position alone)",
    ]


def test_the_flatten_heads_prediction_keeps_every_probability(runner: CliRunner) -> None:
    from transformer_walkthrough.config import load_config
    from transformer_walkthrough.model.transformer import run_forward

    (pred,) = run_forward(load_config(CONFIGS / "article-flatten.yaml")).prediction
    lines = output(runner, "run", "-c", str(CONFIGS / "article-flatten.yaml"))
    (w1, p1), (w2, p2), (w3, p3) = pred.top
    # the one row comes after all four tokens: they wrap between words, and the top 3 keep their numbers
    assert lines[-5:] == [
        " after                   predicted      p   expected      top 3",
        RULE,
        f" <start> sleeping        {pred.word:<10}  {pred.probability:.2f}   —             {w1} {p1:.2f},",
        f" comfortably <end>                                        {w2} {p2:.2f},",
        f"                                                          {w3} {p3:.2f}",
    ]


def test_a_title_wider_than_its_table_stays_on_one_line(runner: CliRunner, gpt2) -> None:
    lines = output(runner, "generate", "--model", str(gpt2[0]["saved"]), "--prompt", "The cat is",
                   "--max-len", "3", "--compare", "--dtype", "float64")  # fmt: skip
    assert lines[0].startswith("weights: from the checkpoint")  # as `run` says it
    title = lines.index("Cached steps vs one full pass")
    assert lines[title + 1].split() == ["quantity", "max", "|diff|"]
    said = " ".join(lines[title + 8 :])
    assert re.search(r"\(max \|diff\| \d\.\de-\d\d\): the causal mask", said), said
    assert not any(line.endswith(("(max |diff|", "(max")) for line in lines)  # a figure stays by its label


@pytest.mark.parametrize("width", ["80", "60"])
@pytest.mark.parametrize("config", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_no_line_of_a_shipped_config_passes_the_width(runner: CliRunner, config: str, width: str) -> None:
    result = runner.invoke(app, ["run", "-c", str(CONFIGS / f"{config}.yaml")], env={"COLUMNS": width})
    assert result.exit_code == 0, result.output
    for line in result.stdout.splitlines():
        assert len(line) <= int(width), line


def test_untrained_generate_stops_after_three_repeats_and_says_why(runner: CliRunner) -> None:
    from transformer_walkthrough.config import Config
    from transformer_walkthrough.model.training import generate
    from transformer_walkthrough.model.transformer import init_weights

    config = Config()
    words = config.vocabulary
    steps, _ = generate(config, init_weights(config), 20)  # the rule off: what the weights would say
    chosen = [words[s.chosen] for s in steps]
    k = next(k for k in range(2, len(chosen)) if chosen[k - 2] == chosen[k - 1] == chosen[k])
    assert k + 1 < len(chosen) and "<end>" not in chosen[: k + 1]  # so the rule is what stops it
    lines = output(runner, "generate")
    said = "the cat is → " + " ".join(chosen[: k + 1])
    start = lines.index(said) if said in lines else None
    assert start is not None, lines
    assert " ".join(lines[start + 1 : start + 4]) == (
        f"(stopped after {k + 1} tokens: {chosen[k]} was chosen 3 times in a row, and untrained "
        "weights repeat themselves: random ones stop there, trained ones (--weights) run to <end> "
        "or --max-len)"
    )
    assert lines[start + 1].startswith("(stopped after") and not lines[start + 4].startswith(" ")
